"""Storage faults under cxlctl's state and settings files (issue 22): a full, a read-only and a
failing (EIO) file system under ``run/cxlctl``, ``etc`` or ``var/lib/cxlctl`` of a copy of a
recorded tree.

Full and read-only are real: the command runs in a private mount namespace (``unshare -m``, as
root) with a 64 KiB tmpfs filled to the last block, or a read-only bind mount, over the
directory.  What the command left in a faulted tmpfs is copied out afterwards (``OUT``) and put
back, as when the administrator frees space.  EIO cannot be made real here (no device-mapper in
a container), so it goes through the atomic writer's test hook ``CXLCTL_TEST_FAULT_ATOMIC``
(fails the Nth write of a named file at its fsync) — the knob writes' own EIO is covered by
tests/test_tune_faults.py.

In every case: a clear refusal (exit 1, the file and the file system's condition named, no
"internal error", no "run it as root"), no knob changed without its boot value in the journal,
and no boot value already recorded lost (a later ``tune revert`` restores the boot values).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any, Dict, List, Optional

import pytest

from cxlctl.tuning import journal as jn
from tests.kit import cli
from tests.tune_support import diff, snapshot, work_copy

TREE = "linux-6.12/single-region"
PROFILE = "inference-capacity"
KNOBS = (
    "/proc/sys/vm/swappiness",
    "/proc/sys/kernel/numa_balancing",
    "/sys/kernel/mm/numa/demotion_enabled",
    "/proc/sys/kernel/numa_balancing_promote_rate_limit_MBps",
)

FAULT_SH = r"""
set -e
kind=$1 d=$2 out=$3; shift 3
mkdir -p "$d"
if [ "$kind" = full ]; then
  t=$(mktemp -d); cp -a "$d/." "$t/"
  mount -t tmpfs -o size=64k,mode=755 tmpfs "$d"; cp -a "$t/." "$d/"; rm -rf "$t"
  dd if=/dev/zero of="$d/.fill" bs=4096 2>/dev/null || true
else
  mount --bind "$d" "$d"; mount -o remount,bind,ro "$d"
fi
set +e
"$@"; rc=$?
rm -f "$d/.fill"; rm -rf "$out"; mkdir -p "$out"; cp -a "$d/." "$out/"
exit $rc
"""


def _mount_ns_works() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    p = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /mnt"], capture_output=True)
    return p.returncode == 0


needs_mount_ns = pytest.mark.skipif(
    not _mount_ns_works(), reason="needs root and mount namespaces (unshare -m) for a real full/read-only fs"
)


def _faulted(tmp: Any, root: str, kind: str, rel: str, *args: str, env: Optional[Dict[str, str]] = None) -> Any:
    """Run cxlctl ARGS with ``ROOT/rel`` full or read-only; then put back what it left there."""
    sh = os.path.join(str(tmp), "fault.sh")
    with open(sh, "w") as f:
        f.write(FAULT_SH)
    out = os.path.join(str(tmp), "out")
    d = os.path.join(root, rel)
    p = cli("--root", root, *args, env=env, wrap=["unshare", "-m", "sh", sh, kind, d, out])
    if kind == "full":  # the tmpfs is gone with the namespace: keep what the command wrote there
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(out, d, symlinks=True)
    return p


def _knobs(root: str) -> Dict[str, str]:
    out = {}
    for p in KNOBS:
        with open(root + p) as f:
            out[p] = f.read()
    return out


def _clear_refusal(p: Any, *needles: str) -> None:
    err = p.stderr
    assert p.returncode == 1, (p.returncode, p.stdout, err)
    assert "Traceback" not in err and "internal error" not in err, err
    assert "run it as root" not in err, err
    for n in needles:
        assert n in err, (n, err)


def _boot_values_survive(root: str, boot: Dict[str, str]) -> None:
    """Whatever the fault left, the journal (if any) holds the boot values: revert restores them."""
    p = cli("--root", root, "tune", "revert")
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert _knobs(root) == boot


FULL_OR_RO: List[Any] = [
    pytest.param(kind, rel, persist, id=f"{kind}-{rel.replace('/', '_')}{'-persist' if persist else ''}")
    for kind in ("full", "ro")
    for rel, persist in (("run/cxlctl", False), ("run/cxlctl", True), ("etc", True), ("var/lib/cxlctl", True))
]


@needs_mount_ns
@pytest.mark.parametrize("kind,rel,persist", FULL_OR_RO)
def test_apply_on_a_full_or_read_only_fs(kind: str, rel: str, persist: bool, tmp_path: Any) -> None:
    root = work_copy(TREE, str(tmp_path / "t"))
    boot = _knobs(root)
    before = snapshot(root)
    args = ["tune", "apply", *(["--persist"] if persist else []), PROFILE]
    p = _faulted(tmp_path, root, kind, rel, *args)
    why = "no space left" if kind == "full" else "read-only"
    if rel == "run/cxlctl" or kind == "ro":
        _clear_refusal(p, why, "nothing was changed")
    else:  # a full /etc is met at the persist step, after the knob writes: rolled back
        _clear_refusal(p, "No space left", "every change was rolled back")
    assert _knobs(root) == boot
    assert [d for d in diff(before, snapshot(root)) if not d.startswith("etc/cxlctl/profiles")] == []
    _boot_values_survive(root, boot)


@needs_mount_ns
@pytest.mark.parametrize("kind", ("full", "ro"))
@pytest.mark.parametrize("rel", ("run/cxlctl", "etc", "var/lib/cxlctl"))
def test_revert_on_a_full_or_read_only_fs(kind: str, rel: str, tmp_path: Any) -> None:
    """After `apply --persist`: a read-only fs refuses before any knob moves; a full /run restores
    the knobs but cannot record it, and says so (exit 1) — the journal still holds the boot
    values, so revert, repeated once there is space, finishes."""
    root = work_copy(TREE, str(tmp_path / "t"))
    boot = _knobs(root)
    cli("--root", root, "tune", "apply", "--persist", PROFILE, check=True)
    applied = _knobs(root)
    p = _faulted(tmp_path, root, kind, rel, "tune", "revert")
    if kind == "ro":
        _clear_refusal(p, "read-only", "nothing was changed")
        assert _knobs(root) == applied
    elif rel == "run/cxlctl":
        _clear_refusal(p, "no space left", "the knobs were restored", "safe to repeat")
        assert _knobs(root) == boot and jn.load(root).state == jn.APPLIED  # type: ignore[union-attr]
    else:  # removing files needs no space
        assert p.returncode == 0, p.stderr
    _boot_values_survive(root, boot)
    assert not os.path.exists(root + "/etc/sysctl.d/90-cxlctl.conf")


@needs_mount_ns
@pytest.mark.parametrize("kind", ("full", "ro"))
def test_try_and_confirm_on_a_full_or_read_only_run(kind: str, tmp_path: Any) -> None:
    root = work_copy(TREE, str(tmp_path / "t"))
    boot = _knobs(root)
    p = _faulted(tmp_path, root, kind, "run/cxlctl", "tune", "try", "--timeout", "30", PROFILE)
    _clear_refusal(p, "no space left" if kind == "full" else "read-only", "nothing was changed")
    assert _knobs(root) == boot


@needs_mount_ns
@pytest.mark.parametrize("kind", ("full", "ro"))
def test_region_commands_on_a_full_or_read_only_run(kind: str, tmp_path: Any) -> None:
    """region create/destroy take the tuning lock in run/cxlctl: read-only refuses before anything;
    a full one still locks (the holder's pid is best-effort) and fails only as the static tree makes
    it fail without the fault (no kernel to create region1)."""
    root = work_copy("linux-6.12/hb2x2-noregion", str(tmp_path / "t"))
    args = ("region", "create", "--ways", "1", "--size", "256M")
    before = snapshot(root)
    p = _faulted(tmp_path, root, kind, "run/cxlctl", *args)
    if kind == "ro":
        _clear_refusal(p, "read-only", "nothing was changed", "lock")
        assert diff(before, snapshot(root)) == []
    else:
        assert "Traceback" not in p.stderr and "internal error" not in p.stderr
        assert "No space" not in p.stderr and "no space" not in p.stderr
    root = work_copy(TREE, str(tmp_path / "r"))
    before = snapshot(root)
    p = _faulted(tmp_path, root, kind, "run/cxlctl", "region", "destroy", "region0", "--force")
    if kind == "ro":
        _clear_refusal(p, "read-only", "nothing was changed")
        assert diff(before, snapshot(root)) == []
    else:
        assert "Traceback" not in p.stderr and "internal error" not in p.stderr and "no space" not in p.stderr


def _reboot(root: str, pristine_knobs: Dict[str, str]) -> None:
    """As after a reboot: /run is empty, the kernel back to its boot values, /etc and /var kept."""
    shutil.rmtree(root + "/run/cxlctl", ignore_errors=True)
    for p, v in pristine_knobs.items():
        with open(root + p, "w") as f:
            f.write(v)


@needs_mount_ns
@pytest.mark.parametrize("kind", ("full", "ro"))
def test_daemon_once_on_a_full_or_read_only_run(kind: str, tmp_path: Any) -> None:
    """The daemon re-applying a persisted profile at boot, /run full or read-only: it logs a clear
    error, writes no knob (the journal could not be written first), and exits normally."""
    root = work_copy(TREE, str(tmp_path / "t"))
    boot = _knobs(root)
    cli("--root", root, "tune", "apply", "--persist", PROFILE, check=True)
    _reboot(root, boot)
    os.makedirs(root + "/run/cxlctl")
    p = _faulted(tmp_path, root, kind, "run/cxlctl", "daemon", "run", "--once")
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr
    assert ("no space left" if kind == "full" else "read-only") in p.stderr, p.stderr
    assert _knobs(root) == boot
    p = cli("--root", root, "daemon", "run", "--once")  # storage fixed: it applies
    assert _knobs(root) != boot, p.stderr
    _boot_values_survive(root, boot)


# ---------------------------------------------------------------------------- EIO (test hook)


def test_eio_on_the_write_ahead_journal(tmp_path: Any) -> None:
    root = work_copy(TREE, str(tmp_path / "t"))
    boot = _knobs(root)
    for persist in ([], ["--persist"]):
        p = cli(
            "--root", root, "tune", "apply", *persist, PROFILE, env={"CXLCTL_TEST_FAULT_ATOMIC": "journal.json:1:EIO"}
        )
        _clear_refusal(p, "I/O error", "nothing was changed", "dmesg")
        assert _knobs(root) == boot and not os.path.exists(root + jn.JOURNAL)


def test_eio_recording_the_outcome_rolls_back(tmp_path: Any) -> None:
    """The write-ahead journal is on disk, the knobs are written, then recording "applied" fails:
    every knob goes back (nothing left changed that the user was told failed), and the journal
    on disk — "applying", with the boot values — lets revert settle it."""
    root = work_copy(TREE, str(tmp_path / "t"))
    boot = _knobs(root)
    p = cli("--root", root, "tune", "apply", PROFILE, env={"CXLCTL_TEST_FAULT_ATOMIC": "journal.json:2:EIO"})
    _clear_refusal(p, "I/O error", "every change was rolled back", "tune revert")
    assert _knobs(root) == boot
    j = jn.load(root)
    assert (
        j is not None
        and j.state == jn.APPLYING
        and {e.path: e.original for e in j.entries}["/proc/sys/vm/swappiness"] == boot["/proc/sys/vm/swappiness"]
    )
    _boot_values_survive(root, boot)


def test_eio_on_a_persisted_file_rolls_back(tmp_path: Any) -> None:
    root = work_copy(TREE, str(tmp_path / "t"))
    boot = _knobs(root)
    for name in ("90-cxlctl.conf", "active-profile"):
        p = cli(
            "--root", root, "tune", "apply", "--persist", PROFILE, env={"CXLCTL_TEST_FAULT_ATOMIC": f"{name}:1:EIO"}
        )
        _clear_refusal(p, "Input/output error", "every change was rolled back")
        assert _knobs(root) == boot
        assert not os.path.exists(root + "/etc/sysctl.d/90-cxlctl.conf")
        assert not os.path.exists(root + "/var/lib/cxlctl/active-profile")


def test_eio_recording_a_revert(tmp_path: Any) -> None:
    root = work_copy(TREE, str(tmp_path / "t"))
    boot = _knobs(root)
    cli("--root", root, "tune", "apply", PROFILE, check=True)
    p = cli("--root", root, "tune", "revert", env={"CXLCTL_TEST_FAULT_ATOMIC": "journal.json:1:EIO"})
    _clear_refusal(p, "I/O error", "the knobs were restored", "safe to repeat")
    assert _knobs(root) == boot
    _boot_values_survive(root, boot)


def test_eio_confirming_a_try(tmp_path: Any) -> None:
    root = work_copy(TREE, str(tmp_path / "t"))
    from cxlctl.tuning.transaction import Transaction

    assert Transaction(root, PROFILE).commit(trial_timeout=3600).ok
    p = cli("--root", root, "tune", "confirm", env={"CXLCTL_TEST_FAULT_ATOMIC": "journal.json:1:EIO"})
    _clear_refusal(p, "I/O error", "NOT confirmed")
    j = jn.load(root)
    assert j is not None and j.trial is not None and j.trial.pending
