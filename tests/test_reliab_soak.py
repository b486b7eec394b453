"""A short slice of the daemon soak (bench/soak.py; figures of the full run in docs/reliability.md):
uevent bursts, regions added and removed (DAMON re-targeted each time), drift injected and
repaired, recorded RAS event streams through the trace pipe, scrapes over real HTTP — no event
lost or counted twice, one write pass per change, fds and threads flat, the metric series bounded.
And what keeps the daemon's memory flat: a reconcile leaves no reference cycles behind."""

from __future__ import annotations

import gc
import importlib.util
import os
from typing import Any, Callable, List

from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from cxlctl.tuning import engine
from tests.daemon_support import config, make_daemon, pairs, work_tree
from tests.kit import REPO


def test_a_short_soak() -> None:
    spec = importlib.util.spec_from_file_location("soak", os.path.join(REPO, "bench", "soak.py"))
    assert spec is not None and spec.loader is not None
    soak = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(soak)
    res = soak.soak(events=400, reconciles=40, scrapes=80)
    assert res["events_lost"] == 0 and res["events_received"] == 400, res
    assert res["drift_corrections"] == res["drift_injected"] == 8, res
    # the regions came and went 4 times: DAMON re-targeted each time (three kdamonds on, or none)
    assert res["region_swaps"] == res["damon_retargets"] == 4, res
    # one write pass per drift and per re-target, every other burst a no-op, nothing failed
    assert res["reconcile_results"] == {"ok": 12, "noop": 29}, res
    # every recorded RAS event counted once under its memdev, kind and severity; none lost
    assert res["ras_writes"] == 20 and res["ras_writes_cut"] > 0, res
    assert res["ras_events_sent"] == res["ras_events_received"] > 20 and res["ras_events_mismatched"] == 0, res
    assert res["ras_parse_errors"] == res["ras_lost"] == 0 and res["ras_up"], res
    assert res["end"]["fds"] == res["start"]["fds"] and res["end"]["threads"] == res["start"]["threads"], res
    assert res["series_last"] < 300 and res["journal_bytes"] < 16384, res
    assert res["state_bytes_end"] < 16384, res
    assert res["journal_state"] == "applied"


def _cycles(fn: Callable[[], Any]) -> List[str]:
    """Types of the objects only the cycle collector could free after ``fn()`` (run three times)."""
    fn()  # imports, caches
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(3):
            fn()
        gc.collect()
        return sorted({type(o).__name__ for o in gc.garbage})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def test_a_scan_and_a_noop_reconcile_leave_no_reference_cycles(tmp_path: Any) -> None:
    """The daemon scans after every burst of uevents: garbage that only the cycle collector frees
    piles up between its full collections (measured: each scan left the CXL ports behind in a
    cycle of a recursive closure, ``_fix_depths.<locals>.depth``)."""
    nor, reg = [p for p in pairs() if p[1].endswith("linux-6.12/hmat2-region")][0]
    assert _cycles(lambda: scan(Host(reg))) == []
    root = work_tree(reg, str(tmp_path / "t"))
    assert engine.apply(Host(root), "inference-capacity").ok
    d, _fac, _cap = make_daemon(root, config(metrics={"listen": "127.0.0.1:0", "telemetry_interval": 0}))
    d.startup()
    try:

        def noop() -> None:
            d._reconcile("event")
            d.rec.check_drift()
            d.publish()

        assert _cycles(noop) == []
        assert d.stats.reconciles.get("noop", 0) >= 4 and not d.stats.reconciles.get("ok"), d.stats.reconciles
    finally:
        d.close()
