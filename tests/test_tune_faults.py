"""Fault injection: knob k of n fails (EINVAL, EBUSY, EPERM, vanished) for every k.

After each failed apply the tree must be byte-identical to before (the vanished
file excepted: cxlctl never creates a knob file), and the journal must say
``rolled-back`` with the failing knob marked.  Faults come from the write
primitive's test hook (``CXLCTL_TEST_FAULT=k:ERRNO``), raised where the kernel
raises them: at ``write()`` after a successful ``open()`` (O_TRUNC has emptied the
fixture file by then, so the failing knob itself really needs restoring); for
``vanished`` the file is unlinked and the real ``open()`` fails.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Set, Tuple

import pytest

from cxlctl.errors import EXIT_FAILURE
from cxlctl.hostio.host import Host
from cxlctl.tuning import engine
from cxlctl.tuning import journal as jn
from tests.kit import cli
from tests.tune_support import diff, journal, representative, snapshot, sources, uncovered, work_copy

SOURCES = sources()
FAULTS = ("EINVAL", "EBUSY", "EPERM", "vanished")
KIND = {"EINVAL": "rejected", "EBUSY": "busy", "EPERM": "denied", "vanished": "gone"}


def _put_back(root: str, path: str, content: bytes) -> None:
    """Re-create a file the 'vanished' fault removed (the test's job, never cxlctl's)."""
    with open(root + path, "wb") as f:
        f.write(content)


def _knob_view(root: str) -> Dict[str, Any]:
    """Snapshot of what cxlctl may write (/proc, /sys/kernel, /sys/devices/system/memory, /etc, /var).

    Per-case checks use this cheaper view; every test also compares the *whole* tree
    at its end, which catches a stray write anywhere (nothing would undo it).
    """
    return snapshot(root, ("proc", "sys/kernel", "sys/devices/system/memory/auto_online_blocks", "etc", "var"))


def _one_fault(
    root: str,
    source: str,
    profile: str,
    writes: Tuple[Any, ...],
    k: int,
    fault: str,
    expect: Dict[str, Any],
    monkeypatch: Any,
) -> None:
    failing = writes[k - 1]
    monkeypatch.setenv("CXLCTL_TEST_FAULT", f"{k}:{fault}")
    try:
        res = engine.apply(Host(root), profile)
    finally:
        monkeypatch.delenv("CXLCTL_TEST_FAULT")
    where = f"{source} {profile} write {k}/{len(writes)} ({failing.setting}) {fault}"
    assert res.prepared.plan.writes == writes, where
    assert not res.ok, where
    assert res.error is not None and failing.setting in res.error and KIND[fault] in res.error, (where, res.error)
    assert res.rollback_errors == (), where
    got = _knob_view(root)
    vanished = os.path.relpath(root + failing.path, root)
    if fault == "vanished":
        assert vanished not in got, where
        got[vanished] = expect[vanished]
    assert diff(expect, got) == [], where
    status = {r.path: r.status for r in res.results}
    assert status[failing.path] == ("gone" if fault == "vanished" else "restored"), (where, status)
    for earlier in writes[: k - 1]:
        assert status[earlier.path] == "restored", (where, earlier.setting, status)
    for later in writes[k:]:
        assert status[later.path] == "pending", (where, later.setting, status)
    if fault == "vanished":
        _put_back(root, failing.path, expect[vanished][1])


#: profiles whose writes cover every knob (t-everything: all scalars + weights over all
#: nodes; t-ratio: tiering + DRAM:CXL weights).  The built-ins write subsets of these.
FAULT_PROFILES = ("t-everything", "t-ratio")


@pytest.mark.parametrize("source", SOURCES)
def test_every_write_fails_every_way_fresh_apply(source: str, tmp_path: Any, monkeypatch: Any) -> None:
    root = work_copy(source, str(tmp_path / "root"))
    before = snapshot(root)
    view = _knob_view(root)
    n_cases, n_writes = 0, 0
    reached: Set[str] = set()
    for profile in FAULT_PROFILES:
        writes = engine.prepare(Host(root), profile).plan.writes
        if profile == "t-ratio" and not any(w.knob == "weighted_interleave" for w in writes):
            continue  # no CXL node: its writes are a subset of t-everything's, already covered
        n_writes += len(writes)
        for k in range(1, len(writes) + 1):
            for fault in FAULTS:
                _one_fault(root, source, profile, writes, k, fault, view, monkeypatch)
                j = journal(root)
                assert j.state == jn.ROLLED_BACK and j.profile == profile and j.error
                reached.add(writes[k - 1].knob)
                n_cases += 1
    # every knob this tree has was made to fail every way, once per write of each profile
    assert not uncovered(root, "t-everything", reached), (source, uncovered(root, "t-everything", reached))
    assert n_cases == len(FAULTS) * n_writes > 0, (source, n_cases, n_writes)
    print(f"fault cases: {source} fresh: {n_cases}")
    assert diff(before, snapshot(root)) == []
    # the host is usable afterwards: a clean apply and revert still work
    assert engine.apply(Host(root), "t-everything").ok
    assert engine.revert(Host(root)).ok
    assert diff(before, snapshot(root)) == []


SWITCHES = (("t-everything", "latency-strict"), ("inference-capacity", "t-ratio"))


@pytest.mark.parametrize("source", representative())
def test_every_write_fails_while_switching_profiles(source: str, tmp_path: Any, monkeypatch: Any) -> None:
    """A failed switch A→B rolls back to A (not to boot values) and A stays the active profile."""
    root = work_copy(source, str(tmp_path / "root"))
    boot = snapshot(root)
    n_cases = 0
    for a, b in SWITCHES:
        assert engine.apply(Host(root), a).ok
        applied_a = _knob_view(root)
        journal_a = journal(root)
        writes = engine.prepare(Host(root), b).plan.writes
        for k in range(1, len(writes) + 1):
            for fault in FAULTS:
                _one_fault(root, source, b, writes, k, fault, applied_a, monkeypatch)
                j = journal(root)
                assert j.state == jn.APPLIED and j.profile == a, (a, b, k, fault)
                assert j.entries == journal_a.entries
                assert j.error and f"switching to {b} failed and was rolled back" in j.error
                n_cases += 1
        assert engine.revert(Host(root)).ok
        assert diff(boot, snapshot(root)) == [], (a, b)
    # t-ratio adds only weights, which a host without CXL has not: then only the first switch writes
    assert n_cases > 0, f"no switch between {SWITCHES} writes anything on {source}: no case ran"
    print(f"fault cases: {source} switch: {n_cases}")


def test_failed_apply_through_the_command_line(tmp_path: Any) -> None:
    """Exit 1, a one-line error saying it was rolled back, the per-knob table, no traceback."""
    source = SOURCES[0]
    root = work_copy(source, str(tmp_path / "root"))
    before = snapshot(root)
    n = len(engine.prepare(Host(root), "t-everything").plan.writes)
    p = cli("--root", root, "tune", "apply", "t-everything", env={"CXLCTL_TEST_FAULT": f"{n}:EINVAL"})
    assert p.returncode == EXIT_FAILURE
    assert "failed" in p.stderr and "every change was rolled back" in p.stderr
    assert "restored" in p.stdout and "Traceback" not in p.stderr
    assert diff(before, snapshot(root)) == []
    p = cli("--root", root, "tune", "status")
    assert "rolled-back" in p.stdout
    p = cli("--root", root, "tune", "revert")
    assert p.returncode == 0 and "nothing to revert: the last apply was rolled back" in p.stderr


def test_transient_busy_is_retried(tmp_path: Any, monkeypatch: Any) -> None:
    """EBUSY that clears is not a failure: the write primitive retries (bounded)."""
    from cxlctl.hostio import write as w

    root = work_copy(SOURCES[0], str(tmp_path / "root"))
    calls: List[int] = []
    real = w.write_knob

    def flaky(root: str, path: str, text: str, *, index: Any = None) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise w.KnobBusy(root + path, 16, "busy")
        real(root, path, text, index=index)

    monkeypatch.setattr(w, "write_knob", flaky)
    assert w.write_with_retry(root, "/proc/sys/vm/swappiness", "42\n") == 2
    with open(root + "/proc/sys/vm/swappiness") as f:
        assert f.read() == "42\n"


def test_raced_to_the_same_value_counts_as_written(tmp_path: Any, monkeypatch: Any) -> None:
    """daxctl's rule: a failed write whose target now holds the wanted value is a success."""
    from cxlctl.hostio import write as w

    root = work_copy(SOURCES[0], str(tmp_path / "root"))
    real = w.write_knob

    def other_agent_wins(root: str, path: str, text: str, *, index: Any = None) -> None:
        if path.endswith("/swappiness"):
            with open(root + path, "w") as f:  # another agent writes the same value first
                f.write(text)
            raise w.KnobBusy(root + path, 16, "busy")
        real(root, path, text, index=index)

    monkeypatch.setattr(w, "write_knob", other_agent_wins)
    res = engine.apply(Host(root), "t-everything")
    assert res.ok, res.error
    sw = [r for r in res.results if r.setting == "vm.swappiness"][0]
    assert sw.status == "written" and sw.error and "now holds the wanted value" in sw.error


def test_ctrl_c_between_writes_rolls_back(tmp_path: Any, monkeypatch: Any) -> None:
    from cxlctl.errors import CxlctlError
    from cxlctl.hostio import write as w

    root = work_copy(SOURCES[0], str(tmp_path / "root"))
    before = snapshot(root)
    real = w.write_knob
    calls: List[int] = []

    def interrupted(root: str, path: str, text: str, *, index: Any = None) -> None:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        real(root, path, text, index=index)

    monkeypatch.setattr(w, "write_knob", interrupted)
    with pytest.raises(CxlctlError, match="interrupted; every change was rolled back"):
        engine.apply(Host(root), "t-everything")
    assert diff(before, snapshot(root)) == []
    assert journal(root).state == jn.ROLLED_BACK
