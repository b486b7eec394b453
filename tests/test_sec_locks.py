"""Issue 43 item 5: no local user can hold ``/run/cxlctl/lock`` or ``daemon.lock``.

``flock`` works on a read-only descriptor, so the old 0644 lock let uid 65534 stall every
``tune apply``/``revert``, the daemon's reconcile and a ``tune try``'s auto-revert.  Now the
files are 0600 in a 0700 directory, root replaces an old lock others could open (a holder of
the old file holds nothing anyone waits for), and a reader that is not root takes only a lock
of its own.  The lock paths go through ``hostio.root.under``, so a ``--root`` copy of a
recorded tree is the host here.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from typing import Any, Iterator

import pytest

from cxlctl.hostio import lock as lockmod
from cxlctl.hostio.lock import DaemonLock, TuneLock
from tests.kit import FIXTURES, NOBODY, cli, copy_fixture

TREE = os.path.join(FIXTURES, "linux-6.12", "single-region")
#: the interpreter itself, not the checkout's venv: uid 65534 may not enter the checkout (a private CI
#: clone); the holder imports nothing of cxlctl
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)
#: uid 65534 opens the lock read-only, holds LOCK_SH and says so, until its stdin closes
HOLD = (
    "import fcntl, sys\n"
    "f = open(sys.argv[1])\n"
    "fcntl.flock(f, fcntl.LOCK_SH)\n"
    "print('held', flush=True)\n"
    "sys.stdin.read()\n"
)


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def open_tree() -> Iterator[str]:
    """A copy of a recorded tree that uid 65534 can walk into (pytest's tmp_path is private to root)."""
    d = tempfile.mkdtemp(prefix="cxlctl-sec-locks-")
    os.chmod(d, 0o755)
    try:
        yield copy_fixture(TREE, os.path.join(d, "root"))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_lock_files_are_private_to_their_owner(tmp_path: Any) -> None:
    root = copy_fixture(TREE, tmp_path / "root")
    for held in (TuneLock(root, 0), DaemonLock(root)):
        with held:
            assert _mode(held.path) == 0o600, held.path
    assert _mode(f"{root}/run/cxlctl") == 0o700


def test_root_replaces_an_old_lock_others_could_open(tmp_path: Any) -> None:
    """A 0644 lock (an older cxlctl's) that nobody holds: root takes it, then puts a fresh 0600 file in
    its place, so a descriptor a user opened on the old one is worth nothing."""
    if os.geteuid() != 0:
        pytest.skip("root's rule")
    root = copy_fixture(TREE, tmp_path / "root")
    path = f"{root}/run/cxlctl/lock"
    os.makedirs(os.path.dirname(path))
    with open(path, "w"):
        pass
    os.chmod(path, 0o644)
    old = os.stat(path).st_ino
    with TuneLock(root, 0) as held:
        st = os.stat(path)
        assert st.st_ino != old and _mode(path) == 0o600
        assert held.fd is not None and os.fstat(held.fd).st_ino == st.st_ino
    assert sorted(os.listdir(os.path.dirname(path))) == ["lock"]  # no temporary file left


def test_a_reader_does_not_take_a_lock_that_is_not_its_own(tmp_path: Any, monkeypatch: Any) -> None:
    """The rule in-process (any uid): a reader that is not root, on a lock another uid owns, neither
    waits for it nor holds it -- it cannot stall root, and root's writers cannot stall it."""
    root = copy_fixture(TREE, tmp_path / "root")
    writer = TuneLock(root, 0)
    writer.acquire()
    try:
        other = 65534 if os.geteuid() == 0 else os.geteuid() + 1
        monkeypatch.setattr(os, "geteuid", lambda: other)
        reader = TuneLock(root, 0, shared=True)
        reader.acquire()  # would raise Locked (exit 4) if it tried to take it
        assert reader.fd is None
        assert not lockmod.is_held(root)  # a user's probe does not take it either
    finally:
        writer.release()


def test_uid_65534_cannot_hold_the_lock_that_root_writes_under(open_tree: str) -> None:
    """The attack: an old 0644 lock, held read-only by uid 65534.  Root's ``tune apply`` still runs
    (root replaces the file), and afterwards uid 65534 cannot even open the lock."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv (the rule is tested in-process above)")
    root = open_tree
    run = f"{root}/run/cxlctl"
    os.makedirs(run, mode=0o755)
    os.chmod(run, 0o755)
    path = f"{run}/lock"
    with open(path, "w"):
        pass
    os.chmod(path, 0o644)  # what cxlctl made before issue 43
    holder = subprocess.Popen(
        [*NOBODY, BASE_PYTHON, "-I", "-c", HOLD, path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held", holder.stderr
        p = cli("--root", root, "tune", "apply", "cxl-common", env={"CXLCTL_LOCK_WAIT": "1"})
        assert p.returncode == 0, (p.stdout, p.stderr)
        assert "held by" not in p.stderr
    finally:
        holder.communicate("", timeout=30)
    assert _mode(path) == 0o600 and os.stat(path).st_uid == 0
    assert _mode(run) == 0o700
    again = subprocess.run(
        [*NOBODY, BASE_PYTHON, "-I", "-c", HOLD, path], input="", capture_output=True, text=True, cwd="/"
    )
    assert again.returncode != 0 and "Permission denied" in again.stderr, again.stderr
    # and the daemon's lock: made private the same way (0600 under the 0700 directory)
    with DaemonLock(root) as d:
        assert _mode(d.path) == 0o600
