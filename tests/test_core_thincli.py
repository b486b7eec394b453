"""The engine functions the thin CLI calls (issue 19: the CLI parses, calls one function, emits).

* :mod:`cxlctl.telemetry.sampler` -- the one sampling loop ``stat``, ``top`` and the daemon use;
* :func:`cxlctl.tuning.trial.run` -- ``tune try``'s apply, wait and undo with its signal handling;
* :func:`cxlctl.ras.collect.stored_events` -- ``events``' stored events cut to ``--since``;
* :func:`cxlctl.telemetry.sample.check_pid`, :func:`~cxlctl.telemetry.sample.check_nodes` -- ``stat``'s checks;
* :func:`cxlctl.tuning.profile.for_command` -- which profile ``tune plan/apply/try`` work on.
"""

from __future__ import annotations

import os
import signal
from typing import Any, List

import pytest

from cxlctl.cli import run
from cxlctl.errors import UsageError
from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from cxlctl.ras import collect
from cxlctl.telemetry.sample import check_nodes, check_pid, kinds_of, read_sample
from cxlctl.telemetry.sampler import Sampler, readings
from cxlctl.tuning import profile, trial
from tests.kit import REPO
from tests.tune_support import LIVE, diff, journal, plan_writes, pristine, representative, snapshot, work_copy


def _bump(path: str, name: str, by: int) -> int:
    """Add ``by`` to counter ``name`` of a kernel ``name value`` file; the old value."""
    with open(path) as f:
        lines = f.read().splitlines()
    old = 0
    for i, line in enumerate(lines):
        k, _, v = line.partition(" ")
        if k == name:
            old = int(v)
            lines[i] = f"{k} {old + by}"
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return old


def test_sampler_rates_over_two_recorded_samples() -> None:
    """First tick: no rates; second: the counter's growth over the samples' time apart."""
    root = pristine(LIVE)
    kinds = kinds_of(scan(Host(root)).nodes)
    times = iter([(10.0, 0.0), (12.0, 2.0)])
    s = Sampler(Host(root), read=lambda r, k: read_sample(r, k, now=next(times)))
    first = s.tick(kinds)
    assert first.rates is None
    _bump(os.path.join(root, "proc/vmstat"), "numa_hint_faults", 300)
    second = s.tick(kinds)
    assert second.rates is not None and second.rates.seconds == 2.0
    assert second.rates.system["numa_hint_faults"] == 150.0
    assert s.prev is second.sample


def test_readings_wait_to_the_previous_sample_time_plus_interval(monkeypatch: Any) -> None:
    """The first reading at once; each next one sleeps to prev.time + every, so the time the
    caller spends emitting a report does not make the reports drift apart."""
    root = pristine(LIVE)
    clock = [100.0]
    slept: List[float] = []

    def sleep(t: float) -> None:
        slept.append(round(t, 6))
        clock[0] += t

    monkeypatch.setattr("cxlctl.telemetry.sampler.time.monotonic", lambda: clock[0])
    monkeypatch.setattr("cxlctl.telemetry.sampler.time.sleep", sleep)
    s = Sampler(Host(root), read=lambda r, k: read_sample(r, k, now=(clock[0], clock[0])))
    got = []
    for t in readings(s, {}, 1.0, 3):
        got.append(t)
        clock[0] += 0.4  # rendering and writing the report
    assert [t.sample.time for t in got] == [100.0, 101.0, 102.0]
    assert slept == [0.6, 0.6]
    assert got[0].rates is None and got[2].rates is not None and got[2].rates.seconds == 1.0


# ---------------------------------------------------------------------------- tune try


def _try_root(tmp_path: Any) -> str:
    """A recorded kernel tree with ``latency-strict`` applied and a profile that changes knobs."""
    source = [s for s in representative() if s != LIVE][0]
    root = work_copy(source, str(tmp_path / "root"))
    assert run(["--root", root, "tune", "apply", "latency-strict"]) == 0
    assert plan_writes(root, "t-everything") > 0
    return root


def test_try_run_undoes_the_try_when_stdin_closes_and_restores_sigterm(tmp_path: Any) -> None:
    root = _try_root(tmp_path)
    before = snapshot(root)
    seen: List[List[str]] = []
    rd, wr = os.pipe()
    os.close(wr)  # EOF: no confirmation will come
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        t = trial.run(
            root, "t-everything", 30.0, stdin_fd=rd, on_applied=lambda res: seen.append(diff(before, snapshot(root)))
        )
    finally:
        os.close(rd)
    assert len(seen) == 1 and seen[0] != [], "on_applied runs once, after the try changed knobs"
    assert t.outcome == trial.EOF_ and t.reverted is not None and t.reverted.ok
    assert diff(before, snapshot(root)) == []
    assert signal.getsignal(signal.SIGTERM) is sigterm


def test_try_run_an_interrupt_while_waiting_reverts(tmp_path: Any) -> None:
    """Ctrl-C (or SIGTERM, turned into one) after the apply: the try is undone, not left to expire."""
    root = _try_root(tmp_path)
    before = snapshot(root)

    def interrupt(res: Any) -> None:
        raise KeyboardInterrupt

    t = trial.run(root, "t-everything", 30.0, on_applied=interrupt)
    assert t.outcome == trial.INTERRUPTED and t.reverted is not None and t.reverted.ok
    assert diff(before, snapshot(root)) == []
    tr = journal(root).trial
    assert tr is None or not tr.pending


# ---------------------------------------------------------------------------- events --since

RAS = os.path.join(REPO, "fixtures", "linux-6.12")


def _recorded_lines() -> List[str]:
    """Every event stream a 6.12 kernel wrote in the VM (tests/vm/record_ras_events.py)."""
    d = os.path.join(RAS, "events")
    lines: List[str] = []
    for name in sorted(os.listdir(d)):
        if name.endswith(".txt") and name != "facts.txt":
            with open(os.path.join(d, name)) as f:
                lines += f.read().splitlines()
    return lines


def test_stored_events_since_counts_back_from_the_newest_event_of_a_saved_file() -> None:
    tree = os.path.join(RAS, "hb2x2-region-ras")
    every = collect.stored_events(Host(tree), lines=_recorded_lines(), where="saved.txt")
    newest = max(e.timestamp for e in every.events)
    got = collect.stored_events(Host(tree), lines=_recorded_lines(), where="saved.txt", since=10.0)
    assert got.where == "saved.txt"
    assert 0 < len(got.events) < len(every.events)
    assert got.events == [e for e in every.events if e.timestamp >= newest - 10.0]
    doc = got.summary_json()
    assert (doc["type"], doc["source"], doc["events"]) == ("summary", "saved.txt", len(got.events))
    assert doc["parsed"] == len(every.events) > doc["events"], "the parse counts cover every line read"


def test_since_window_counts_back_from_the_host_clock_when_there_is_one() -> None:
    tree = os.path.join(RAS, "hb2x2-region-ras")
    evs = collect.stored_events(Host(tree), lines=_recorded_lines()).events
    newest = max(e.timestamp for e in evs)
    assert collect.since_window(evs, 5.0, newest + 100.0) == []  # uptime well past the events
    assert collect.since_window(evs, None, newest + 100.0) == evs
    assert collect.since_window([], 5.0, None) == []


# ---------------------------------------------------------------------------- stat's checks


def test_stat_checks_refuse_a_missing_process_and_node_naming_what_exists() -> None:
    root = pristine(LIVE)
    kinds = kinds_of(scan(Host(root)).nodes)
    with pytest.raises(UsageError, match=r"no node 99 on this host \(nodes: 0"):
        check_nodes(kinds, sorted(kinds) + [99])
    check_nodes(kinds, sorted(kinds))
    for bad, said in ((0, "is not a process id"), (4194305, "no process with PID 4194305")):
        with pytest.raises(UsageError, match=said):
            check_pid(Host(root), bad)
    pids = [int(n) for n in os.listdir(os.path.join(root, "proc")) if n.isdigit()]
    if pids:
        check_pid(Host(root), pids[0])


# ---------------------------------------------------------------------------- tune's profile


def test_for_command_is_the_named_profile_else_the_one_in_effect_else_the_default(tmp_path: Any) -> None:
    root = work_copy(LIVE, str(tmp_path / "root"))
    assert profile.for_command(root, None) == profile.DEFAULT_PROFILE == "inference-bandwidth"
    assert run(["--root", root, "tune", "apply", "t-everything"]) == 0
    assert profile.for_command(root, None) == "t-everything"
    assert profile.for_command(root, "latency-strict") == "latency-strict"
    assert profile.for_command(root, "") == "", "a name given, even empty, is not replaced"
