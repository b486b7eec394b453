"""Concurrency (issue 22): CLI commands, `tune try` timers, a second daemon and the running one,
interleaved on a copy of a recorded tree — a seeded, CI-sized slice of bench/concurrency.py (which
runs the full 1,000 rounds).  The invariants are in tests/concurrency_support.py.
"""

from __future__ import annotations

import os
from typing import Any

from tests.concurrency_support import check_consistent, daemon_config, rounds, start
from tests.tune_support import work_copy

TREE = "linux-6.12/single-region"
ROUNDS = int(os.environ.get("CXLCTL_CONCURRENCY_ROUNDS", "8"))


def test_interleaved_rounds(tmp_path: Any) -> None:
    root = work_copy(TREE, str(tmp_path / "t"))
    res = rounds(root, ROUNDS, seed=22)
    print(f"concurrency: {res}")
    assert res["codes"].get("daemon2", {}).get(4, 0) == sum(res["codes"].get("daemon2", {}).values())


def test_a_second_daemon_refuses(tmp_path: Any) -> None:
    """The second `daemon run` exits 4 naming the first; the first keeps running."""
    root = work_copy(TREE, str(tmp_path / "t"))
    daemon_config(root)
    first = start(root, ["daemon", "run", "--no-udev"])
    try:
        import time

        time.sleep(1.5)
        second = start(root, ["daemon", "run", "--no-udev"])
        _, err = second.communicate(timeout=60)
        assert second.returncode == 4, err
        assert f"pid {first.pid}" in err and "another cxlctl daemon is running" in err and "Traceback" not in err
        assert first.poll() is None
        once = start(root, ["daemon", "run", "--once"])  # one reconcile beside it is fine
        _, err = once.communicate(timeout=60)
        assert once.returncode == 0, err
    finally:
        first.terminate()
        first.communicate(timeout=30)
    check_consistent(root, {})
