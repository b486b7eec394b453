"""Issue 19, writes: fenced like reads, messages under the root, refusals that write nothing.

Every test runs the real command line (or the real write primitive) on a
writable copy of a recorded tree.  A link leading out of a tree points at a
directory of the test's own (never at the host's /proc or /sys: the suite runs
as root, and an unfenced write would land there).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any, Dict, List

import pytest

from cxlctl.hostio import write as hw
from cxlctl.hostio.atomic import atomic_write, remove
from cxlctl.hostio.host import Host
from cxlctl.hostio.lock import TuneLock
from tests.kit import FIXTURES, REPO, cli, copy_fixture

REGION = os.path.join(FIXTURES, "linux-6.12", "single-region")
SWAPPINESS = "/proc/sys/vm/swappiness"


def _tree(tmp_path: Any, src: str = REGION) -> str:
    return copy_fixture(src, str(tmp_path / "root"))


def _outside(tmp_path: Any) -> str:
    d = str(tmp_path / "outside")
    os.makedirs(d)
    return d


def _files(d: str) -> List[str]:
    """Everything under ``d`` (relative), for "nothing was written there"."""
    out = []
    for top, dirs, files in os.walk(d):
        out += [os.path.relpath(os.path.join(top, n), d) for n in dirs + files]
    return sorted(out)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


# ---------------------------------------------------------------------------- the fence


def test_linked_run_writes_nothing_outside_the_root(tmp_path: Any) -> None:
    """The case of the issue: ROOT/run a link to a directory outside the tree.  The apply
    refuses (exit 2) naming the link; no journal or lock appears outside; no knob changes."""
    root, out = _tree(tmp_path), _outside(tmp_path)
    os.symlink(out, os.path.join(root, "run"))
    before = _read(root + SWAPPINESS)
    p = cli("--root", root, "tune", "apply", "cxl-common")
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"{root}/run is a link leading out of the root" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    assert _files(out) == []
    assert _read(root + SWAPPINESS) == before


def test_linked_knob_is_refused_before_any_write(tmp_path: Any) -> None:
    """A knob file that is a link out of the tree: the transaction's pre-flight refuses it
    (exit 2, names it) before the lock or any knob; an apply leaves the file it leads to alone
    (the reader does not follow such a link either, so the plan never targets it)."""
    from cxlctl.tuning.transaction import preflight

    root, out = _tree(tmp_path), _outside(tmp_path)
    target = os.path.join(out, "swappiness")
    with open(target, "w") as f:
        f.write("60\n")
    os.unlink(root + SWAPPINESS)
    os.symlink(target, root + SWAPPINESS)
    with pytest.raises(hw.OutsideRoot) as e:
        preflight(Host(root), ["/proc/sys/vm/zone_reclaim_mode", SWAPPINESS], {"vm.swappiness"}, "apply")
    assert str(e.value).startswith(f"{root}{SWAPPINESS} is a link leading out of the root (to {target})")
    assert e.value.code == 2 and not os.path.exists(os.path.join(root, "run"))
    p = cli("--root", root, "tune", "apply", "cxl-common")
    assert "Traceback" not in p.stderr
    assert _read(target) == "60\n" and _files(out) == ["swappiness"]


def test_write_knob_through_a_linked_directory_is_knob_outside(tmp_path: Any) -> None:
    """The primitive itself: a directory on the way that leads out is :class:`KnobOutside`
    (a KnobError, so transactions roll back as for any failed write), the file is untouched."""
    root, out = _tree(tmp_path), _outside(tmp_path)
    with open(os.path.join(out, "swappiness"), "w") as f:
        f.write("60\n")
    vm = root + "/proc/sys/vm"
    shutil.rmtree(vm)
    os.symlink(out, vm)
    with pytest.raises(hw.KnobOutside) as e:
        hw.write_knob(root, SWAPPINESS, "10\n")
    assert e.value.kind == "outside" and e.value.path == root + SWAPPINESS
    assert f"{vm} is a link leading out of the root" in str(e.value)
    assert _read(os.path.join(out, "swappiness")) == "60\n"


def test_a_link_inside_the_tree_is_written_through(tmp_path: Any) -> None:
    """Links that stay inside the tree (as sysfs is full of) are followed as before."""
    root = _tree(tmp_path)
    real = root + "/proc/sys/vm/swappiness.real"
    os.rename(root + SWAPPINESS, real)
    os.symlink("swappiness.real", root + SWAPPINESS)
    hw.write_knob(root, SWAPPINESS, "10\n")
    assert _read(real) == "10\n" and os.path.islink(root + SWAPPINESS)


def test_atomic_write_unlink_and_lock_stay_inside(tmp_path: Any) -> None:
    """The journal's writer, its unlink and the lock, each through ROOT/run linked out."""
    root, out = _tree(tmp_path), _outside(tmp_path)
    os.makedirs(os.path.join(out, "cxlctl"))
    with open(os.path.join(out, "cxlctl", "journal.json"), "w") as f:
        f.write("{}\n")
    os.symlink(out, os.path.join(root, "run"))
    with pytest.raises(hw.OutsideRoot) as e:
        atomic_write(root, "/run/cxlctl/journal.json", "{}")
    assert e.value.link == root + "/run" and e.value.code == 2
    with pytest.raises(hw.OutsideRoot):
        remove(root, "/run/cxlctl/journal.json")
    with pytest.raises(hw.OutsideRoot):
        TuneLock(root, 0).acquire()
    assert (
        _files(out) == ["cxlctl", "cxlctl/journal.json"] and _read(os.path.join(out, "cxlctl/journal.json")) == "{}\n"
    )


def test_linked_persist_directory_refuses_the_apply(tmp_path: Any) -> None:
    """``--persist`` with ROOT/etc/sysctl.d linked out: refused before the lock or any knob."""
    root, out = _tree(tmp_path), _outside(tmp_path)
    os.makedirs(root + "/etc", exist_ok=True)
    os.symlink(out, root + "/etc/sysctl.d")
    before = _read(root + SWAPPINESS)
    p = cli("--root", root, "tune", "apply", "--persist", "cxl-common")
    assert p.returncode == 2 and f"{root}/etc/sysctl.d is a link leading out of the root" in p.stderr, p.stderr
    assert _files(out) == [] and _read(root + SWAPPINESS) == before
    assert not os.path.exists(root + "/run")


# ---------------------------------------------------------------------------- messages under the root (#5)


def test_persist_and_revert_messages_name_the_files_under_the_root(tmp_path: Any) -> None:
    root = _tree(tmp_path)
    p = cli("--root", root, "tune", "apply", "--persist", "cxl-common", check=True)
    assert f"persisted: {root}/etc/sysctl.d/90-cxlctl.conf" in p.stdout, p.stdout
    assert "persisted: /etc/" not in p.stdout
    p = cli("--root", root, "tune", "revert", check=True)
    assert f"removed: {root}/etc/sysctl.d/90-cxlctl.conf" in p.stdout, p.stdout


def _can_unshare() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="needs root and `unshare -m` (a read-only bind mount)")
def test_needs_root_message_names_the_file_under_the_root(tmp_path: Any) -> None:
    root = _tree(tmp_path)
    script = (
        'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 99\n'
        f'cd {REPO} && {sys.executable} -m cxlctl --root "$1" tune apply cxl-common\n'
    )
    p = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", root], capture_output=True, text=True)
    assert p.returncode == 1, p.stderr
    assert f"tune apply cannot write {root}{SWAPPINESS}" in p.stderr, p.stderr
    assert "read-only file system" in p.stderr and "run it as root" not in p.stderr  # root is running it


def test_tracefs_message_names_the_directories_under_the_root(tmp_path: Any) -> None:
    from cxlctl.hostio.tracefs import TracefsError, find_tracefs

    root = _tree(tmp_path)
    with pytest.raises(TracefsError) as e:
        find_tracefs(root)
    # a tree has no live trace buffer: the message names the tree's directory, the hint --input (issue 35)
    assert f"{root}/sys/kernel/tracing holds no tracefs" in str(e.value)
    assert f"cxlctl --root {root} events --input FILE" in e.value.hint


# ---------------------------------------------------------------------------- refusals write nothing (#9)


@pytest.mark.parametrize(
    "args",
    [
        ("region", "destroy", "region0"),
        ("dax", "reconfigure", "dax0.0", "--mode", "devdax"),
        ("tune", "verify"),
        ("tune", "confirm"),
    ],
    ids=["region-destroy", "dax-reconfigure", "tune-verify", "tune-confirm"],
)
def test_refusals_exit_2_and_write_nothing(tmp_path: Any, args: Any) -> None:
    if args[0] in ("region", "dax") and os.geteuid() != 0:
        pytest.skip("as a user, the root check refuses first")
    root = _tree(tmp_path)
    p = cli("--root", root, *args)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and p.stderr.startswith("cxlctl: error: ")
    assert not os.path.exists(os.path.join(root, "run")), _files(os.path.join(root, "run"))


# ---------------------------------------------------------------------------- CXLCTL_LOCK_WAIT (#10)


@pytest.mark.parametrize("value", ["abc", "-1", "\u0661", "nan"])
def test_bad_lock_wait_is_a_usage_error(tmp_path: Any, value: str) -> None:
    root = _tree(tmp_path)
    before = _read(root + SWAPPINESS)
    p = cli("--root", root, "tune", "apply", "cxl-common", env={"CXLCTL_LOCK_WAIT": value})
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"CXLCTL_LOCK_WAIT={value!r} is not a number of seconds" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr
    assert _read(root + SWAPPINESS) == before and not os.path.exists(root + "/run")


def test_good_lock_wait_is_taken(tmp_path: Any) -> None:
    root = _tree(tmp_path)
    cli("--root", root, "tune", "apply", "cxl-common", env={"CXLCTL_LOCK_WAIT": "0.5"}, check=True)
    assert _read(root + SWAPPINESS) == "10\n"


# ---------------------------------------------------------------------------- empty profile (#13)


@pytest.mark.parametrize("text", ["", "# only a comment\n\n"], ids=["0-bytes", "comments-only"])
def test_empty_profile_file_is_an_error(tmp_path: Any, text: str) -> None:
    root = _tree(tmp_path)
    pdir = root + "/etc/cxlctl/profiles"
    os.makedirs(pdir)
    with open(pdir + "/empty.toml", "w") as f:
        f.write(text)
    before = _read(root + SWAPPINESS)
    for ref in ("empty", pdir + "/empty.toml"):
        p = cli("--root", root, "tune", "apply", ref)
        assert p.returncode == 2, p.stdout + p.stderr
        assert f"bad profile {pdir}/empty.toml: the file is empty" in p.stderr, p.stderr
    assert _read(root + SWAPPINESS) == before and not os.path.exists(root + "/run")


# ---------------------------------------------------------------------------- daemon config (#8, #19)


def _config(root: str, text: str) -> None:
    os.makedirs(root + "/etc/cxlctl", exist_ok=True)
    with open(root + "/etc/cxlctl/cxlctl.toml", "w") as f:
        f.write(text)


def test_daemon_config_naming_a_missing_profile_exits_2(tmp_path: Any) -> None:
    root = _tree(tmp_path)
    _config(root, 'profile = "no-such-profile"\n')
    for args in (("daemon", "config"), ("daemon", "run", "--once")):
        p = cli("--root", root, *args)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert "profile: cannot use profile 'no-such-profile'" in p.stderr, p.stderr
        assert "known profiles:" in p.stderr and "Traceback" not in p.stderr
    _config(root, 'profile = "cxl-common"\n')
    cli("--root", root, "daemon", "config", check=True)


def test_daemon_once_fails_when_its_profile_cannot_be_enforced(tmp_path: Any) -> None:
    """A persisted profile whose file is gone: ``run --once`` says so and exits 1, not 0."""
    root = _tree(tmp_path)
    _config(root, "[health]\nenabled = false\n[ras]\nenabled = false\n")
    os.makedirs(root + "/var/lib/cxlctl")
    with open(root + "/var/lib/cxlctl/active-profile", "w") as f:
        json.dump({"schema": 1, "profile": "gone", "source": "/etc/cxlctl/profiles/gone.toml"}, f)
    p = cli("--root", root, "daemon", "run", "--once")
    assert p.returncode == 1, p.stderr
    assert "profile gone could not be enforced" in p.stderr, p.stderr


FULL = """
profile = "inference-capacity"
[reconcile]
debounce_ms = 250
lock_wait = 2.5
[drift]
action = "reapply"
[metrics]
listen = "[::1]:9999"
textfile_dir = "/var/lib/node_exporter/textfile_collector"
cgroups = ["/system.slice/vllm.service"]
[nfd]
enabled = false
[log]
level = "debug"
"""


@pytest.mark.parametrize("text", ["", FULL], ids=["defaults", "full"])
def test_daemon_config_prints_toml_that_reads_back_the_same(tmp_path: Any, text: str) -> None:
    from cxlctl.config import load
    from cxlctl.hostio import toml
    from cxlctl.hostio.host import Host

    root = _tree(tmp_path)
    if text:
        _config(root, text)
    p = cli("--root", root, "daemon", "config", check=True)
    assert "None" not in p.stdout and "()" not in p.stdout and "True" not in p.stdout
    doc: Dict[str, Any] = toml.loads(p.stdout)
    assert "reconcile" in doc and "debounce_ms" in doc["reconcile"]
    saved = str(tmp_path / "saved.toml")
    with open(saved, "w") as f:
        f.write(p.stdout)
    assert load(Host(root), saved)._replace(source=None) == load(Host(root))._replace(source=None)


def test_a_journal_outside_the_root_is_never_acted_on(tmp_path: Any) -> None:
    """ROOT/run linked to another tree's run/: revert refuses (exit 2, names the link) instead of
    restoring knobs from a journal that is not this tree's."""
    root, out = _tree(tmp_path), _outside(tmp_path)
    cli("--root", root, "tune", "apply", "cxl-common", check=True)
    os.rename(os.path.join(root, "run", "cxlctl"), os.path.join(out, "cxlctl"))
    os.rmdir(os.path.join(root, "run"))
    os.symlink(out, os.path.join(root, "run"))
    p = cli("--root", root, "tune", "revert")
    assert p.returncode == 2 and f"{root}/run is a link leading out of the root" in p.stderr, p.stderr
    assert _read(root + SWAPPINESS) == "10\n" and _files(out) == ["cxlctl", "cxlctl/journal.json", "cxlctl/lock"]
