"""The harness's stall watch on a real QEMU: a guest stopped dead is caught, reported and booted again.

CI's run of stop 32 lost 45 minutes to a 6.12 guest that froze in the launch check (no console
line, no output, its own 180 s waits never ended) while the harness waited out a 2,700 s
timeout.  The runner now rewrites ``harness/heartbeat`` every 5 s and the harness retries a
guest whose heartbeat is silent for ``CXLCTL_VM_STALL`` seconds (tests/vm/harness.py,
docs/testing.md "Boot retries").  tests/vm/test_harness.py checks the logic with a stand-in
for vng; this boots a real guest and freezes it the way the emulator froze: QMP ``stop`` halts
every vCPU, so the guest's own timers, script and heartbeat stop with it.  The first attempt is
stopped once its script runs; the second runs to the end.

The second attempt also checks what a run that times out reports: a script that hangs while the
guest runs on (CI's 6.12 launch check on 2026-12-07) leaves no trace of where it waits, so the
harness presses alt-sysrq-w through the monitor before it kills such a guest
(:func:`tests.vm.harness.blocked_tasks`).  Here a writer sits in uninterruptible sleep on a frozen
file system (``fsfreeze``: ``sb_start_write`` waits) while the host asks for the dump, then the
file system thaws and the script ends.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.vm import harness
from tests.vm.harness import run_guest
from tests.vm.qmp import QmpSession

pytestmark = pytest.mark.vm


def test_a_guest_stopped_dead_is_caught_reported_and_booted_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setenv("CXLCTL_VM_STALL", "25")
    monkeypatch.setattr(harness, "RETRIES", [])  # this test's retry is not the run's
    stopped = tmp_path / "stopped-once"  # outside the work folder, which a retry tidies
    work = tmp_path / "work"

    dumps = []

    def freeze_the_first_attempt(session: QmpSession) -> None:
        if stopped.exists():  # the second attempt: the blocked-task dump of a writer held by the kernel
            session.wait_file("blocked", timeout=300)
            dumps.append(harness.blocked_tasks(work / "harness" / "hmp.sock", work / "harness" / "console.log"))
            (session.out / "dumped").write_text("1\n")
            return
        session.wait_file("running", timeout=300)
        session.execute("stop")  # every vCPU halts: the guest's clock, script and heartbeat with it
        stopped.write_text("1\n")

    script = f"""
if [ -e {stopped} ]; then
  echo second > "$OUT/which"
  # a writer in uninterruptible sleep: a frozen file system holds it in sb_start_write
  F=/run/cxlvm-frozen
  modprobe -q loop; modprobe -q ext4
  mkdir -p $F/mnt && truncate -s 8M $F/img && mkfs.ext4 -q $F/img && mount -o loop $F/img $F/mnt || exit 3
  fsfreeze -f $F/mnt || exit 4
  dd if=/dev/zero of=$F/mnt/held bs=4k count=1 2>/dev/null &
  held=$!
  sleep 1; touch "$OUT/blocked"
  i=0; while [ ! -e "$OUT/dumped" ] && [ $i -lt 600 ]; do sleep 0.2; i=$((i + 1)); done
  fsfreeze -u $F/mnt; wait $held; echo $? > "$OUT/held-rc"; umount $F/mnt
  exit 0
fi
echo first > "$OUT/which"
touch "$OUT/running"
sleep 600
"""
    res = run_guest("single", script, kernel="6.12", workdir=work, timeout=900, qmp=freeze_the_first_attempt)
    err = capsys.readouterr().err
    assert res.returncode == 0 and res.attempts == 2, err
    # the dump names the held writer, in uninterruptible sleep, with its kernel stack
    assert dumps and "sysrq: Show Blocked State" in dumps[0], dumps
    assert re.search(r"task:dd\s+state:D", dumps[0]), dumps[0]
    assert (work / "out" / "held-rc").read_text() == "0\n"  # and it went on once the file system thawed
    print(f"\n[vm stall] blocked tasks:\n{dumps[0][:2000]}")
    assert (work / "out" / "which").read_text() == "second\n"
    assert (work / "attempt1" / "out" / "which").read_text() == "first\n"  # set aside, not mixed in
    assert "attempt 1/3: the guest stopped: no heartbeat for" in err, err
    report = (work / "stall-attempt1.txt").read_text()
    print(f"\n[vm stall] {err.strip()}\n[vm stall] report:\n{report[:3000]}")
    # what the monitor said of the stopped vCPU, and QEMU's threads
    assert "--- monitor: info cpus ---" in report and "CPU #0" in report, report
    assert "RIP=" in report, report
    assert "QEMU pid" in report and "CPU use of each thread" in report and "(vCPU)" in report, report
