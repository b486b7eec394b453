"""Crash: SIGKILL a real ``python -m cxlctl tune apply`` in the middle, then ``tune revert``.

The apply runs as a separate process with ``CXLCTL_TEST_PAUSE_AFTER_WRITES=k``:
after k knob writes (0 = right after the write-ahead journal) it prints a
marker to stderr and sleeps; the test kills it with SIGKILL at that point — no
cleanup handler can run — and checks that ``tune revert`` finds the journal
and restores the tree byte for byte.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any, List

import pytest

from cxlctl.cli import run
from cxlctl.hostio.host import Host
from cxlctl.tuning import engine
from cxlctl.tuning import journal as jn
from tests.kit import REPO
from tests.tune_support import LIVE, diff, journal, kill_at_pause, representative, snapshot, uncovered, work_copy


def _kill_apply_at(root: str, profile: str, k: int) -> None:
    kill_at_pause([sys.executable, "-m", "cxlctl", "--root", root, "tune", "apply", profile], k)


def _crash_sources() -> List[str]:
    """The live host plus, if recorded, one real-kernel tree with a CXL region (weights get written)."""
    regions = [s for s in representative() if s.endswith("-region")]
    return [LIVE] + regions[:1]


@pytest.mark.parametrize("source", _crash_sources())
def test_sigkill_after_every_write_then_revert(source: str, tmp_path: Any, capsys: Any) -> None:
    root = work_copy(source, str(tmp_path / "root"))
    before = snapshot(root)
    profile = "t-everything" if source == LIVE else "t-ratio"
    writes = engine.prepare(Host(root), profile).plan.writes
    assert writes, "the crash test needs a plan with writes"
    # t-everything is killed at every knob the tree has; t-ratio is here for the weights
    missed = uncovered(root, profile, {w.knob for w in writes})
    assert not missed if profile == "t-everything" else "weighted_interleave" not in missed, (source, missed)
    for k in range(0, len(writes) + 1):
        _kill_apply_at(root, profile, k)
        j = journal(root)
        assert j.state == jn.APPLYING and j.profile == profile, k
        changed = diff(before, snapshot(root))
        assert len(changed) == k, (k, changed)  # exactly the first k knobs were written
        assert run(["--root", root, "tune", "revert"]) == 0
        err = capsys.readouterr().err
        assert "interrupted apply" in err, err
        assert diff(before, snapshot(root)) == [], k
        assert journal(root).state == jn.REVERTED
    print(f"crash cases: {source} fresh: {len(writes) + 1}")


def test_sigkill_while_switching_profiles_then_revert_restores_boot_values(tmp_path: Any, capsys: Any) -> None:
    source = _crash_sources()[-1]
    root = work_copy(source, str(tmp_path / "root"))
    boot = snapshot(root)
    a, b = "t-everything", "latency-strict"
    n = 0
    assert engine.apply(Host(root), a).ok
    writes = engine.prepare(Host(root), b).plan.writes
    assert len(writes) >= 2, f"{a} -> {b} must write at least two knobs for the cases below to differ"
    # every k is covered by the fresh-apply test above; here the ends and the middle
    for k in sorted({0, 1, len(writes) // 2, len(writes)}):
        if k:
            assert engine.apply(Host(root), a).ok
        _kill_apply_at(root, b, k)
        j = journal(root)
        assert j.state == jn.APPLYING and j.previous_profile == a
        # the interrupted journal still blocks a new apply...
        assert run(["--root", root, "tune", "apply", a]) == 1
        # ...and revert takes every knob back to its boot value, not to profile a's
        assert run(["--root", root, "tune", "revert"]) == 0
        capsys.readouterr()
        assert diff(boot, snapshot(root)) == [], k
        n += 1
    print(f"crash cases: {source} switch: {n}")


def test_sigkill_with_persist_then_revert_removes_files(tmp_path: Any) -> None:
    root = work_copy(LIVE, str(tmp_path / "root"))
    before = snapshot(root)
    n = len(engine.prepare(Host(root), "t-everything").plan.writes)
    env = dict(os.environ, CXLCTL_TEST_PAUSE_AFTER_WRITES=str(n), CXLCTL_TEST_PAUSE_SECONDS="30")
    p = subprocess.Popen(
        [sys.executable, "-m", "cxlctl", "--root", root, "tune", "apply", "t-everything", "--persist"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
    )
    assert p.stderr is not None
    for line in p.stderr:
        if "paused" in line:
            break
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert journal(root).persist == {
        "/etc/sysctl.d/90-cxlctl.conf": None,
        "/etc/tmpfiles.d/90-cxlctl.conf": None,
        "/var/lib/cxlctl/active-profile": None,
    }
    assert run(["--root", root, "tune", "revert"]) == 0
    assert diff(before, snapshot(root)) == []
