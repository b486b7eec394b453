"""``tune verify`` never reports a transaction that is still running as drift.

Found by the 1,000-round concurrency bench (bench/concurrency.py, round 514): a ``tune verify``
beside a ``tune revert`` read the journal (still "applied") and then the knobs the revert had
already restored, and exited 3 (drift) although nothing but cxlctl had touched them.  verify now
takes the tuning lock's shared side: it waits for the writer, or exits 4 (locked) when told not to
wait, and it never creates the lock file.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from cxlctl.errors import EXIT_LOCKED
from cxlctl.hostio.lock import TuneLock
from tests.kit import cli
from tests.tune_support import work_copy

TREE = "linux-6.12/single-region"
KNOB = "proc/sys/vm/swappiness"


def _applied(tmp_path: Any) -> str:
    root = work_copy(TREE, str(tmp_path / "t"))
    cli("--root", root, "tune", "apply", "latency-strict", check=True)
    return root


def _set(root: str, rel: str, value: str) -> None:
    with open(os.path.join(root, rel), "w") as f:
        f.write(value)


def test_verify_waits_out_a_writer_instead_of_reporting_its_half_done_work(tmp_path: Any) -> None:
    root = _applied(tmp_path)
    with open(os.path.join(root, KNOB)) as f:
        applied = f.read()
    lock = TuneLock(root, wait=0)
    lock.acquire()  # a revert in flight: one knob already back at another value, the journal still "applied"
    _set(root, KNOB, "77\n")
    # told not to wait: locked (exit 4), naming the lock -- not drift (exit 3)
    p = cli("--root", root, "tune", "verify", env={"CXLCTL_LOCK_WAIT": "0"})
    assert p.returncode == EXIT_LOCKED, (p.returncode, p.stdout, p.stderr)
    assert "lock" in p.stderr

    def finish() -> None:  # the writer completes its transaction (here: puts the value back) and unlocks
        time.sleep(0.8)
        _set(root, KNOB, applied)
        lock.release()

    t = threading.Thread(target=finish)
    t.start()
    try:
        p = cli("--root", root, "tune", "verify", env={"CXLCTL_LOCK_WAIT": "10"})
    finally:
        t.join()
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)


def test_verify_still_reports_real_drift(tmp_path: Any) -> None:
    root = _applied(tmp_path)
    _set(root, KNOB, "77\n")  # changed behind cxlctl's back, no transaction running
    p = cli("--root", root, "tune", "verify")
    assert p.returncode == 3 and "swappiness" in p.stdout + p.stderr, (p.returncode, p.stdout, p.stderr)


def test_verify_creates_no_lock_file(tmp_path: Any) -> None:
    root = work_copy(TREE, str(tmp_path / "t"))
    lock = os.path.join(root, "run/cxlctl/lock")
    assert not os.path.lexists(lock)
    p = cli("--root", root, "tune", "verify", "latency-strict")
    assert p.returncode in (0, 3), (p.returncode, p.stdout, p.stderr)
    assert not os.path.lexists(lock)
