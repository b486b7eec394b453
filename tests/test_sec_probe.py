"""Issue 43 item 2 (and issue 44 item 6b): the probe's cached helper is never another user's program.

The helper's name (``probe-<hash>``) is computable by anyone, and it used to be run from
``$CXLCTL_CACHE_DIR``, ``$XDG_CACHE_HOME`` or ``~/.cache`` once executable, compiled with
``$CC`` or the first ``cc`` on ``PATH``.  These tests plant programs where root used to look
and check that none of them runs.  ``cxlctl probe`` itself is root's only (it stores to
/var/lib/cxlctl: tests/test_probe.py shows uid 65534 refused before anything is built), so the
rules are tested in-process; the cases that need root skip without it.
"""

from __future__ import annotations

import os
from typing import Any, List

import pytest

from cxlctl.hostio import paths
from cxlctl.probe import native
from tests.kit import environ


def _planted(path: str, marker: str) -> None:
    """A program that leaves ``marker`` when run and answers like the helper would."""
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\ntouch {marker}\necho median=1 pages_on_node=1 pages_checked=1\n")
    os.chmod(path, 0o755)


def _measures(exe: str) -> None:
    got = native.run(exe, "read", 0, 8 << 20, 0.1, sorted(os.sched_getaffinity(0))[:1])
    assert float(got["median"]) > 100  # the real loops, not a planted echo


def test_root_runs_no_planted_helper_or_compiler(tmp_path: Any, monkeypatch: Any) -> None:
    """A user's cache directory (given as $CXLCTL_CACHE_DIR, $XDG_CACHE_HOME and $HOME, as ``sudo -E``
    keeps them) holds ``probe-<hash>``, and $CC and $PATH name the user's ``cc``: root builds its own
    helper in its own cache, with the system's compiler, and runs nothing of the user's."""
    if os.geteuid() != 0:
        pytest.skip("root's rules (a user's own cache is the user's business)")
    user = tmp_path / "alice"
    (user / "cxlctl").mkdir(parents=True)
    marker = str(tmp_path / "ran")
    cc = native._compiler()  # root's: /usr/bin/cc (the planted one is not on root's path yet)
    name = native.helper_name(cc)
    for d in (user, user / "cxlctl"):
        _planted(str(d / name), marker)
    _planted(str(user / "cc"), marker)
    for p in (user, user / "cxlctl", *user.iterdir(), *(user / "cxlctl").iterdir()):
        os.chown(p, 65534, 65534)
    monkeypatch.setattr(paths, "ROOT_CACHE_DIR", str(tmp_path / "root-cache"))
    env = {
        "CXLCTL_CACHE_DIR": str(user / "cxlctl"),
        "XDG_CACHE_HOME": str(user),
        "HOME": str(user),
        "CC": str(user / "cc"),
        "PATH": f"{user}:{os.environ.get('PATH', '/usr/bin:/bin')}",
    }
    with environ(env):
        exe = native.helper_path()
        assert exe == str(tmp_path / "root-cache" / name)
        _measures(exe)
    assert not os.path.exists(marker)


def test_a_cached_helper_runs_only_with_the_hash_recorded_at_build(tmp_path: Any) -> None:
    """In the right directory, a ``probe-<hash>`` cxlctl did not build (no recorded hash) is rebuilt,
    not run; a helper changed after its build is refused before every run (any uid: its own cache)."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    marker = str(tmp_path / "ran")
    name = native.helper_name(native._compiler())
    _planted(str(cache / name), marker)
    os.chmod(cache / name, 0o700)
    with environ({"CXLCTL_CACHE_DIR": str(cache)}):
        exe = native.helper_path()
    assert exe == str(cache / name) and os.path.exists(exe + ".sha256")
    _measures(exe)
    assert not os.path.exists(marker)
    os.unlink(exe)
    _planted(exe, marker)  # changed after the build (as its owner could)
    os.chmod(exe, 0o700)
    with pytest.raises(native.HelperError, match="bytes changed since it was built"):
        _measures(exe)
    assert not os.path.exists(marker)


def test_a_cache_directory_others_can_write_is_not_used(tmp_path: Any, monkeypatch: Any) -> None:
    """A cache directory writable by others (mode 0777): root takes its own instead; a user gets a
    fresh private directory and a note; nothing planted there runs."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    marker = str(tmp_path / "ran")
    name = native.helper_name(native._compiler())
    _planted(str(shared / name), marker)
    monkeypatch.setattr(paths, "ROOT_CACHE_DIR", str(tmp_path / "root-cache"))
    notes: List[str] = []
    with environ({"CXLCTL_CACHE_DIR": str(shared)}):
        exe = native.helper_path(notes.append)
    assert os.path.dirname(exe) != str(shared)
    if os.geteuid() != 0:
        assert notes and f"the cache directory {shared} is writable by others" in notes[0], notes
    _measures(exe)
    assert not os.path.exists(marker)


def test_a_read_only_cache_directory_is_named_and_a_private_one_used(tmp_path: Any, monkeypatch: Any) -> None:
    """Issue 44 item 6b: a read-only cache directory made the probe fail with the linker's
    "collect2: error: ld returned 1 exit status" and "check the compiler"; now the note names the
    directory and why, and the helper is built in a fresh private directory that works."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    real = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode, **kw: False if mode & os.W_OK and str(p) == str(cache) else real(p, mode, **kw)
    )
    notes: List[str] = []
    with environ({"CXLCTL_CACHE_DIR": str(cache)}):
        exe = native.helper_path(notes.append)
    assert len(notes) == 1 and f"the cache directory {cache} is not writable (permission denied)" in notes[0], notes
    assert os.path.dirname(exe) in notes[0] and os.path.dirname(exe) != str(cache)
    _measures(exe)
