"""Guest side of tests/vm/test_vm_tune.py: run inside the VM as ``$PY tune_guest_driver.py SYSCTLS PROFILES``.

Every cxlctl command runs in this one process through ``cxlctl.cli.run`` (a cold
``python -m cxlctl`` costs 30-50 s under TCG).  Knobs are read back with the real
``sysctl`` and ``cat`` between commands.  Results go to ``$OUT`` as
``LABEL.json`` / ``LABEL.err`` / ``LABEL.rc`` and ``LABEL-readback.txt``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from cxlctl.hostio.host import Host
from cxlctl.tuning import journal as jn
from tests.vm.guest import OUT, cx, sh

SYSCTLS = sys.argv[1].split()
PROFILES = sys.argv[2].split()
WI = "/sys/kernel/mm/mempolicy/weighted_interleave"


def readback(label: str) -> None:
    lines = [f"sysctl {k} {sh(f'sysctl -n {k}') or 'ABSENT'}" for k in SYSCTLS]
    files = ["/sys/kernel/mm/numa/demotion_enabled", "/sys/devices/system/memory/auto_online_blocks"]
    if os.path.isdir(WI):
        files += [f"{WI}/{n}" for n in sorted(os.listdir(WI))]
    lines += [f"cat {f} {sh(f'cat {f}')}" for f in files if os.path.exists(f)]
    with open(f"{OUT}/{label}-readback.txt", "w") as f:
        f.write("\n".join(lines) + "\n")


def main() -> None:
    cx("status", "status", "--json")
    readback("boot")
    cx("recommend", "tune", "recommend", "--json")
    for p in PROFILES:
        cx(f"{p}-plan", "tune", "plan", p, "--json")
        cx(f"{p}-apply", "tune", "apply", p, "--json")
        readback(p)
        cx(f"{p}-verify", "tune", "verify", "--json")
    # drift: an admin changes a knob behind cxlctl's back
    sh("sysctl -w vm.swappiness=77")
    cx("drift-verify", "tune", "verify", "--json")
    cx("drift-status", "tune", "status", "--json")
    cx("revert", "tune", "revert", "--json")
    readback("reverted")
    cx("after-revert-status", "tune", "status", "--json")
    # crash on the real kernel: SIGKILL a real apply process after 2 writes, then revert
    # the hook acts on the live (guest) host only with the flag and the root-owned mark
    # (cxlctl.hostio.testhooks): this guest is a test machine
    open("/run/cxlctl-test-hooks", "a").close()
    env = dict(os.environ, CXLCTL_TEST_HOOKS="1", CXLCTL_TEST_PAUSE_AFTER_WRITES="2", CXLCTL_TEST_PAUSE_SECONDS="900")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cxlctl", "tune", "apply", "vm-ratio"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if "paused after 2 writes" in line:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    readback("crashed")
    cx("crash-status", "tune", "status", "--json")
    cx("crash-revert", "tune", "revert", "--json")
    readback("crash-reverted")
    tries()


def start_try(label: str, timeout: int) -> subprocess.Popen[str]:
    """A real `cxlctl tune try` process whose stdin stays open (no EOF); waits until it waits."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "cxlctl", "tune", "try", "vm-ratio", "--timeout", str(timeout), "--json"],
        stdin=subprocess.PIPE,
        stdout=open(f"{OUT}/{label}.json", "w"),
        stderr=open(f"{OUT}/{label}.err", "w"),
        text=True,
    )
    t0 = time.monotonic()
    while time.monotonic() - t0 < 600:
        j = jn.load(Host("/"))
        if j is not None and j.trial is not None and j.trial.pending and j.trial.pid == proc.pid:
            readback(f"{label}-waiting")
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    raise SystemExit(f"{label}: the try never started waiting (rc {proc.poll()})")


def finish(label: str, proc: subprocess.Popen[str]) -> None:
    rc = proc.wait(timeout=900)
    with open(f"{OUT}/{label}.rc", "w") as f:
        f.write(f"{rc}\n")
    readback(label)


def tries() -> None:
    """`tune try`: a timeout reverts, a confirmation from another process keeps, a SIGKILLed
    waiter is reverted by the next tune command once the deadline has passed."""
    # 1. nobody confirms: reverted at the deadline.  The deadlines are cxlctl's own timers, not the
    # kernel's: short ones (15 s, 30 s below) leave room for a slow guest's readback and cost the
    # shared boot less idle time (they were 30 s and 60 s: 45 s of each boot asleep)
    p = start_try("try-timeout", 15)
    finish("try-timeout", p)
    # 2. confirmed from a second process (a cold start costs 30-50 s under TCG: long timeout)
    p = start_try("try-confirm", 600)
    c = subprocess.run([sys.executable, "-m", "cxlctl", "tune", "confirm", "--json"], capture_output=True, text=True)
    for ext, text in (("json", c.stdout), ("err", c.stderr), ("rc", f"{c.returncode}\n")):
        with open(f"{OUT}/confirm.{ext}", "w") as f:
            f.write(text)
    finish("try-confirm", p)
    cx("try-confirm-verify", "tune", "verify", "--json")
    cx("try-confirm-revert", "tune", "revert", "--json")
    readback("try-confirm-reverted")
    # 3. the waiting process is SIGKILLed: left alone before the deadline, reverted after it
    p = start_try("try-kill", 30)
    j = jn.load(Host("/"))
    assert j is not None and j.trial is not None
    p.send_signal(signal.SIGKILL)
    p.wait()
    cx("try-kill-early-status", "tune", "status", "--json")
    readback("try-kill-early")
    time.sleep(max(0.0, j.trial.deadline - time.time()) + 1)
    cx("try-kill-status", "tune", "status", "--json")
    readback("try-kill-reverted")
    with open(f"{OUT}/try-kill-deadline.json", "w") as f:
        json.dump({"deadline": j.trial.deadline, "status_at": time.time()}, f)


if __name__ == "__main__":
    main()
