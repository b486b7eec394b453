"""Smoke tests of the VM harness itself: a guest boots, drivers enumerate the
topology, and guest-lib.sh can build an interleaved RAM region.  If these fail,
every other VM test's failure is about the harness, not cxlctl."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import List, Tuple

import pytest

from tests.vm.harness import (
    TOPOLOGIES,
    GuestBootError,
    HarnessError,
    Kernel,
    KernelNotFound,
    guest_slots,
    kernel,
    run_guest,
)


def test_topologies_are_well_formed() -> None:
    """Cheap (no boot): device counts and distinct non-zero serials, which tests rely on."""
    want = {"single": 1, "hb2": 2, "switch2": 2, "hb2x2": 4}
    serials: list[int] = []
    for name, n in want.items():
        t = TOPOLOGIES[name]
        assert t.devices == n, name
        assert all(s != 0 for s in t.serials.values()), name
        serials += t.serials.values()
        for r in t.regions:
            assert set(r.devices) <= set(t.device_ids), (name, r)
    assert len(serials) == len(set(serials))


def test_missing_kernel_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CI must not silently skip the VM tier: a missing kernel is an error."""
    monkeypatch.setenv("CXLCTL_VM_CACHE", str(tmp_path))
    with pytest.raises(KernelNotFound, match="install-vm-deps"):
        kernel("6.12")


# Booting each topology (and a 2-way region on hb2) is covered by test_vm_status.py,
# which compares the guest with cxl/daxctl/numactl; no separate smoke boots here.


# ---------------------------------------------------------------- boot retries
# A stand-in for vng that plays one scripted outcome per boot, so the retry
# logic is tested without QEMU.  It finds the runner folder from --exec.
FAKE_VNG = r"""#!PYTHON
import os, sys, time
from pathlib import Path
runner = Path(sys.argv[sys.argv.index("--exec") + 1].split()[-1].strip("'"))
hdir = runner.parent
state = hdir.parent.parent  # outside the work folder, which the harness tidies
count = state / "boots"
n = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(n))
plan = os.environ["FAKE_VNG_PLAN"].split(",")
what = plan[min(n, len(plan)) - 1]
(state / f"path-{n}").write_text(os.environ.get("PATH", ""))
qemu = sys.argv[sys.argv.index("--qemu") + 1] if "--qemu" in sys.argv else None
if what == "segv":
    # the guest starts its script, writes part of its results, then QEMU crashes
    (hdir / "uptime-start").write_text("1.0 1.0\n")
    (hdir / "prelude-rc").write_text("0\n")
    (hdir.parent / "out" / "partial").write_text("from the crashed boot")
    (hdir.parent / "cache").mkdir()
    import subprocess
    subprocess.call([qemu, "-M", "cxl=on"])
    sys.exit(255)
if what == "stall":
    # the runner starts and beats once, then the whole guest stops (QEMU alive, guest frozen)
    (hdir / "uptime-start").write_text("1.0 1.0\n")
    (hdir / "prelude-rc").write_text("0\n")
    (hdir / "heartbeat").write_text("1\n")
    (hdir.parent / "out" / "partial").write_text("from the stopped boot")
    import subprocess
    q = subprocess.Popen([str(Path(sys.argv[0]).parent / "qemu-system-x86_64"), "600"])
    (state / "qemu-pid").write_text(str(q.pid))
    time.sleep(600)
if what == "slow":
    # the guest runs on (its heartbeat stays fresh) but the script never ends
    (hdir / "uptime-start").write_text("1.0 1.0\n")
    (hdir / "prelude-rc").write_text("0\n")
    while True:
        (hdir / "heartbeat").write_text("1\n")
        time.sleep(0.2)
if what == "slowcheck":
    # a shared boot: its first check ends, its second starts and never ends (the guest runs on)
    (hdir / "uptime-start").write_text("1.0 1.0\n")
    (hdir / "prelude-rc").write_text("0\n")
    for name in ("first", "second"):
        (hdir.parent / "checks" / name).mkdir(parents=True, exist_ok=True)
        (hdir.parent / "checks" / name / "uptime-start").write_text("1.0 1.0\n")
    (hdir.parent / "checks" / "first" / "rc").write_text("0\n")
    while True:
        (hdir / "heartbeat").write_text("1\n")
        time.sleep(0.2)
if what == "die":
    print("qemu: iotlb_to_section: Assertion failed")
    sys.exit(255)
if what == "hang":
    time.sleep(600)
(hdir / "uptime-start").write_text("1.0 1.0\n")
(hdir / "prelude-rc").write_text("0\n")
if what != "deaf":
    (hdir / "heartbeat").write_text("1\n")
(hdir / "stdout.txt").write_text(f"boot {n}\n")
(hdir / "stderr.txt").write_text("")
(hdir / "rc").write_text("0\n" if what == "ok" else "7\n")
(hdir / "uptime-end").write_text("2.0 2.0\n")
"""


FAKE_QEMU = """#!/bin/bash
[ "$1" = --version ] && { echo "QEMU emulator version 10.0.2"; exit 0; }
kill -SEGV $$
"""


def _fake_guest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plan: str) -> Tuple[Kernel, Path]:
    vng = tmp_path / "bin" / "vng"
    vng.parent.mkdir()
    qemu = tmp_path / "bin" / "fake-qemu"
    qemu.write_text(FAKE_QEMU)
    qemu.chmod(0o755)
    monkeypatch.setenv("CXLCTL_QEMU", str(qemu))
    vng.write_text(FAKE_VNG.replace("PYTHON", sys.executable))
    vng.chmod(0o755)
    from tests.vm import harness

    monkeypatch.setattr(harness, "RETRIES", [])  # the fakes' retries are not the run's
    # a stand-in QEMU process for the stall report to find in vng's session
    shutil.copy("/bin/sleep", tmp_path / "bin" / "qemu-system-x86_64")  # a copy: its exe is named like QEMU's
    monkeypatch.setenv("CXLCTL_VNG", str(vng))
    monkeypatch.setenv("CXLCTL_VM_LOCK", str(tmp_path / "lock"))
    monkeypatch.delenv("CXLCTL_VM_CPU_LOG", raising=False)  # CI's account of real guests, not the fakes'
    monkeypatch.setenv("CXLCTL_VM_BOOT_DEADLINE", "3")
    monkeypatch.setenv("FAKE_VNG_PLAN", plan)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    k = Kernel(series="6.12", release="fake", vmlinuz=tmp_path / "vmlinuz")
    work = tmp_path / "work"
    return k, work


def test_guest_dying_before_init_is_booted_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    k, work = _fake_guest(tmp_path, monkeypatch, "die,hang,ok")
    res = run_guest("single", "true", kernel=k, workdir=work, timeout=60)
    assert res.returncode == 0 and res.attempts == 3 and res.stdout == "boot 3\n"
    err = capsys.readouterr().err
    assert "attempt 1/3: vng exited 255 before the guest ran its script" in err
    assert "attempt 2/3: no sign of the guest's script after 3 s (hung in boot)" in err
    assert (work / "console-attempt1.log").read_text().startswith("qemu: iotlb_to_section")


def test_script_failure_is_never_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    k, work = _fake_guest(tmp_path, monkeypatch, "fail,ok")
    res = run_guest("single", "false", kernel=k, workdir=work, timeout=60)
    assert res.returncode == 7 and res.attempts == 1
    assert (tmp_path / "boots").read_text() == "1"


def test_boot_retries_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    k, work = _fake_guest(tmp_path, monkeypatch, "die")
    monkeypatch.setenv("CXLCTL_VM_BOOT_TRIES", "2")
    with pytest.raises(GuestBootError, match=r"attempt 2/2: vng exited 255"):
        run_guest("single", "true", kernel=k, workdir=work, timeout=60)
    assert (tmp_path / "boots").read_text() == "2"


def test_vng_runs_with_its_own_folder_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 9: vng calls virtme-run by name, so its folder must be on PATH
    even when the caller's PATH is CI's minimal one."""
    k, work = _fake_guest(tmp_path, monkeypatch, "ok")
    run_guest("single", "true", kernel=k, workdir=work, timeout=60)
    path = (tmp_path / "path-1").read_text().split(":")
    assert path[0] == str(tmp_path / "bin")
    assert str(Path(sys.executable).parent) in path
    assert {"/usr/sbin", "/sbin"} <= set(path)


def test_retries_are_listed_for_the_run_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest hides a passing test's stderr: the retry also goes to RETRIES, which
    tests/vm/conftest.py prints at the end of the run."""
    from tests.vm import harness

    k, work = _fake_guest(tmp_path, monkeypatch, "die,ok")
    run_guest("single", "true", kernel=k, workdir=work, timeout=60)
    assert len(harness.RETRIES) == 1 and "attempt 1/3: vng exited 255" in harness.RETRIES[0]


def test_qemu_crash_while_the_script_runs_is_booted_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """CI, stop 16: QEMU 10's TCG segfaulted while the launch test's guest touched
    CXL memory; vng reported only "exit 255".  The wrapper around QEMU records
    the signal, the attempt is retried, and what it wrote is set aside."""
    k, work = _fake_guest(tmp_path, monkeypatch, "segv,ok")
    res = run_guest("single", "true", kernel=k, workdir=work, timeout=60)
    assert res.returncode == 0 and res.attempts == 2 and res.stdout == "boot 2\n"
    err = capsys.readouterr().err
    assert "attempt 1/3: QEMU died of SIGSEGV while the guest ran its script" in err
    assert not (work / "out" / "partial").exists() and not (work / "cache").exists()
    assert (work / "attempt1" / "out" / "partial").read_text() == "from the crashed boot"
    assert (work / "attempt1" / "cache").is_dir()


def test_a_guest_whose_heartbeat_stops_is_booted_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """CI, stop 32: a 6.12 guest stopped dead in the launch check and the run
    waited out the file's 2,700 s timeout.  A silent heartbeat is caught in
    CXLCTL_VM_STALL seconds, what QEMU's threads were doing is kept, and the
    boot is retried with the stopped attempt's results set aside."""
    from tests.vm import harness

    monkeypatch.setenv("CXLCTL_VM_STALL", "2")
    monkeypatch.setattr(harness, "_gdb", lambda: None)  # no backtraces: the report stays quick
    k, work = _fake_guest(tmp_path, monkeypatch, "stall,ok")
    res = run_guest("single", "true", kernel=k, workdir=work, timeout=60)
    assert res.returncode == 0 and res.attempts == 2 and res.stdout == "boot 2\n"
    err = capsys.readouterr().err
    assert "attempt 1/3: the guest stopped: no heartbeat for" in err
    report = (work / "stall-attempt1.txt").read_text()
    assert "QEMU pid" in report and "qemu-system-x8" in report and "%" in report, report
    assert (work / "attempt1" / "out" / "partial").read_text() == "from the stopped boot"
    assert not (work / "out" / "partial").exists()
    stopped = int((tmp_path / "qemu-pid").read_text())
    for _ in range(50):  # killed with its session (a zombie until its new parent reaps it)
        stat = Path(f"/proc/{stopped}/stat")
        if not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the stopped attempt's QEMU {stopped} still runs")


def test_a_script_that_hangs_while_the_guest_runs_is_the_tests_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The heartbeat goes on while a check hangs: that is a timeout, never retried, and its
    message carries the guest's blocked tasks (asked for before the guest is killed)."""
    from tests.vm import harness

    monkeypatch.setenv("CXLCTL_VM_STALL", "2")
    asked = []

    def blocked(hmp: Path, console: Path) -> str:
        asked.append(hmp.name)
        return "sysrq: Show Blocked State\ntask:touch state:D"

    monkeypatch.setattr(harness, "blocked_tasks", blocked)
    k, work = _fake_guest(tmp_path, monkeypatch, "slow,ok")
    with pytest.raises(GuestBootError, match=r"timed out after 6 s") as e:
        run_guest("single", "true", kernel=k, workdir=work, timeout=6)
    assert (tmp_path / "boots").read_text() == "1"
    assert asked == ["hmp.sock"]
    assert "--- blocked tasks (sysrq-w) ---\nsysrq: Show Blocked State\ntask:touch state:D" in str(e.value)


def test_a_check_past_its_own_deadline_ends_the_shared_boot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hung check of a shared boot fails after its own deadline, not the boot's whole timeout,
    with the blocked tasks; the check that ended in time is not the one named."""
    from tests.vm import harness

    monkeypatch.setattr(harness, "blocked_tasks", lambda hmp, console: "sysrq: Show Blocked State\ntask:touch")
    k, work = _fake_guest(tmp_path, monkeypatch, "slowcheck")
    t0 = time.monotonic()
    with pytest.raises(GuestBootError, match=r"check second still ran after \d+ s, over its 2 s") as e:
        harness.run_checks(
            "single", [("first", "true"), ("second", "true")], kernel=k, workdir=work, timeout=120, check_timeout=2
        )
    assert time.monotonic() - t0 < 60
    assert "--- blocked tasks (sysrq-w) ---\nsysrq: Show Blocked State" in str(e.value)
    assert (tmp_path / "boots").read_text() == "1"  # never retried


def test_a_runner_without_a_heartbeat_is_a_harness_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every real boot proves the stall watch can see: no heartbeat file, no pass."""
    k, work = _fake_guest(tmp_path, monkeypatch, "deaf")
    with pytest.raises(GuestBootError, match="heartbeat never beat"):
        run_guest("single", "true", kernel=k, workdir=work, timeout=60)


def test_qemu_stopped_by_a_signal_that_is_no_crash_is_not_retried(tmp_path: Path) -> None:
    """SIGTERM/SIGKILL come from the harness's own timeout or a person: no retry."""
    from tests.vm.harness import qemu_crash

    for code, want in (("139", "SIGSEGV"), ("134", "SIGABRT"), ("143", None), ("137", None), ("0", None), ("x", None)):
        (tmp_path / "qemu-status").write_text(code + "\n")
        assert qemu_crash(tmp_path) == want, code
    (tmp_path / "qemu-status").unlink()
    assert qemu_crash(tmp_path) is None


def test_real_qemu_is_wrapped_and_version_passes_through(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """vng asks the binary for --version before booting: the wrapper must answer
    as QEMU, and record nothing for it."""
    import subprocess

    k, work = _fake_guest(tmp_path, monkeypatch, "ok")
    run_guest("single", "true", kernel=k, workdir=work, timeout=60)
    wrapper = work / "harness" / "bin" / "qemu-system-x86_64"
    out = subprocess.run([str(wrapper), "--version"], capture_output=True, text=True, check=True).stdout
    assert out.startswith("QEMU emulator version")
    assert not (work / "harness" / "qemu-status").exists()


def test_guest_slots_let_a_second_guest_in_and_queue_a_third(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CXLCTL_VM_SLOTS=2: with slot 0 held elsewhere a guest takes slot 1; with both held it waits."""
    import fcntl
    import threading

    from tests.vm import harness

    base = tmp_path / "lock"
    monkeypatch.setenv("CXLCTL_VM_LOCK", str(base))
    monkeypatch.setenv("CXLCTL_VM_SLOTS", "2")
    other = open(base, "a")
    fcntl.flock(other, fcntl.LOCK_EX)
    (mine,) = harness._take_guest_slots(1)
    assert mine.name == f"{base}.1"
    got: List[str] = []
    waiter = threading.Thread(target=lambda: got.append(harness._take_guest_slots(1)[0].name), daemon=True)
    waiter.start()
    waiter.join(1.5)
    assert got == [], "a third guest got in while both slots were held"
    other.close()  # slot 0 is free again: the waiter takes it
    waiter.join(5)
    assert got == [str(base)]
    mine.close()


@pytest.mark.parametrize("value", ["0", "two", "\u00b2", "-1"])
def test_guest_slots_refuses_what_is_not_a_count(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CXLCTL_VM_SLOTS", value)
    with pytest.raises(HarnessError, match="CXLCTL_VM_SLOTS"):
        guest_slots()


def test_a_two_cpu_guest_takes_both_slots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2-vCPU guest waits until both slots are free and then holds both: it runs alone."""
    import threading

    from tests.vm import harness

    base = tmp_path / "lock"
    monkeypatch.setenv("CXLCTL_VM_LOCK", str(base))
    monkeypatch.setenv("CXLCTL_VM_SLOTS", "2")
    (one,) = harness._take_guest_slots(1)
    got: List[List[str]] = []
    waiter = threading.Thread(target=lambda: got.append([f.name for f in harness._take_guest_slots(2)]), daemon=True)
    waiter.start()
    waiter.join(1.5)
    assert got == [], "a 2-vCPU guest started beside another guest"
    one.close()
    waiter.join(5)
    assert got == [[str(base), f"{base}.1"]]


def test_guest_cpus_env_beats_the_check_and_the_topology(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.vm.harness import guest_cpus

    monkeypatch.delenv("CXLCTL_VM_CPUS", raising=False)
    assert guest_cpus(TOPOLOGIES["single"]) == 1 and guest_cpus(TOPOLOGIES["hmat2"]) == 1
    assert guest_cpus(TOPOLOGIES["single"], 2) == 2
    monkeypatch.setenv("CXLCTL_VM_CPUS", "3")
    assert guest_cpus(TOPOLOGIES["single"], 2) == 3


def test_each_boot_is_accounted_with_qemus_cpu_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CI's recap sums QEMU's CPU time per test file (what a machine short of CPU waits for):
    one line per boot attempt, from the wrapper's ``times``."""
    from tests.vm.harness import qemu_cpu_seconds

    (tmp_path / "qemu-times").write_text("0m0.010s 0m0.020s\n1m2.345s 0m5.655s\n")
    assert qemu_cpu_seconds(tmp_path) == 68.0
    (tmp_path / "qemu-times").write_text("0m0.010s 0m0.020s\n1m2.3s oops\n")
    assert qemu_cpu_seconds(tmp_path) is None
    log = tmp_path / "cpu.log"
    k, work = _fake_guest(tmp_path, monkeypatch, "die,ok")
    monkeypatch.setenv("CXLCTL_VM_CPU_LOG", str(log))
    run_guest("single", "true", kernel=k, workdir=work, timeout=60)
    lines = [line.split() for line in log.read_text().splitlines()]
    assert [(f[0], f[1], f[2], f[3], f[5]) for f in lines] == [
        ("tests/vm/test_harness.py", "single", "6.12", "1", "?"),  # the fakes run no QEMU wrapper
        ("tests/vm/test_harness.py", "single", "6.12", "2", "?"),
    ]
    wrapper = (work / "harness" / "bin" / "qemu-system-x86_64").read_text()
    assert "times > " in wrapper and "qemu-times" in wrapper
