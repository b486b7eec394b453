"""The counters 6.13-7.3 added, in ``stat``, ``top``, the daemon's metrics and the verdicts (issue 20 section 3).

* ``pgpromote_candidate_nrl``: promotions that skipped the rate limit are successes without being
  candidates; ``promotion-throttled`` takes them out of the successes, or it under-counts;
* DAMON's own migrations are ``pgmigrate_*`` (reason MR_DAMON), not promotion or demotion:
  ``tiering-off`` must not call a host that DAMON tiers "no tiering", and the report shows them;
* ``nodeN/memory_failure/*``: read per node, reported, exported and judged.

DAMON samples come from the tree recorded in a real 6.12 guest with cxlctl's DAMON tiering running;
the memory_failure files are a tiny tree added to a recorded one (the kernel writes one ``%lu`` each).
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict

from cxlctl.hostio.host import Host
from cxlctl.hostio.reader import Reader
from cxlctl.telemetry import verdicts as V
from cxlctl.telemetry.counters import NODE_COUNTERS, SYSTEM_COUNTERS
from cxlctl.telemetry.rates import damon_migrated, rates
from cxlctl.telemetry.report import render_text, to_dict
from cxlctl.telemetry.sample import node_kinds, read_memory_failure, read_sample
from tests.kit import FIXTURES, cli, copy_fixture
from tests.test_telemetry_verdicts import node, rate, sample

TIERING = os.path.join(FIXTURES, "linux-6.12", "single-region-damon-tiering")
T612 = os.path.join(FIXTURES, "linux-6.12", "single-region-telemetry")


def test_nrl_is_a_wanted_counter_listed_missing_on_6_12() -> None:
    assert "pgpromote_candidate_nrl" in NODE_COUNTERS and "pgpromote_candidate_nrl" in SYSTEM_COUNTERS
    rep = json.loads(cli("--root", T612, "stat", "--json", check=True).stdout)
    assert "pgpromote_candidate_nrl" in rep["system"]["missing"]
    assert rep["system"]["counters"]["pgpromote_candidate_nrl"] is None


def test_promotion_throttled_counts_only_rate_limited_successes() -> None:
    """900 pages/s promoted, 850 of them past the limit (DRAM had room): of 1000 candidates under
    the limit only 50 were promoted -- throttled.  Counting all 900 as the candidates' successes
    (the kernel before nrl, or cxlctl without it) sees 1000 vs 900 and says nothing."""
    s = sample(nb=2)
    busy = rate({"pgpromote_candidate": 1000.0, "pgpromote_success": 900.0, "pgpromote_candidate_nrl": 850.0})
    v = V.promotion_throttled(s, busy)
    assert v is not None and "only 50 pages/s" in v.message and "850 pages/s promoted without the limit" in v.message
    # the same successes all under the limit: not throttled
    assert V.promotion_throttled(s, rate({"pgpromote_candidate": 1000.0, "pgpromote_success": 900.0})) is None
    assert (
        V.promotion_throttled(
            s, rate({"pgpromote_candidate": 1000.0, "pgpromote_success": 900.0, "pgpromote_candidate_nrl": 0.0})
        )
        is None
    )


def _damon_sample(demotion: bool = False) -> Any:
    r = Reader(TIERING)
    s = read_sample(r, node_kinds(Host(TIERING)), now=(100.0, 0.0))
    return s._replace(settings=s.settings._replace(demotion_enabled=demotion, numa_balancing=0))


def test_damon_tiering_is_not_called_tiering_off() -> None:
    s = _damon_sample()
    assert any(sc.action == "migrate_cold" and sc.state == "on" for sc in s.damon), "recorded DAMON tiering"
    assert V.tiering_off(s, None) is None
    stopped = s._replace(damon=tuple(sc._replace(state="off") for sc in s.damon))
    assert V.tiering_off(stopped, None) is not None  # no DAMON migrating, no demotion: really off


def test_report_shows_damon_migrations_apart_from_promotion() -> None:
    s = _damon_sample()
    moved = damon_migrated(s, None)
    by_action: Dict[str, int] = {}
    for sc in s.damon:
        by_action[sc.action or "?"] = by_action.get(sc.action or "?", 0) + (sc.stats["sz_applied"] or 0)
    assert moved == {k: float(v) for k, v in by_action.items()} and moved["migrate_cold"] > 0
    doc = to_dict(s, None, [], 0)
    assert doc["damon_migrated"]["migrate_cold"] == by_action["migrate_cold"]
    assert doc["damon_migrated"]["counted_in"] == ["pgmigrate_success", "pgmigrate_fail"]
    text = render_text(s, None, [], 0, width=200)
    assert "DAMON migrated:" in text and "not in promoted/demoted" in text
    # over an interval: bytes per second, and top's / stat's traffic line carries it
    later = s._replace(
        time=110.0,
        damon=tuple(
            sc._replace(stats={**sc.stats, "sz_applied": (sc.stats["sz_applied"] or 0) + (10 << 20)}) for sc in s.damon
        ),
    )
    r = rates(s, later)
    tr = to_dict(later, r, [], 1)["cxl_traffic"]
    assert tr["damon_migrate_mbps"] == round(len(s.damon) * 1.0, 3)  # 10 MiB per scheme over 10 s
    assert to_dict(later, r, [], 1)["damon_migrated"]["unit"] == "bytes_per_second"


def _with_memory_failure(tmp_path: Any, values: Dict[str, int]) -> str:
    root = copy_fixture(T612, tmp_path / "t")
    d = os.path.join(root, "sys/devices/system/node/node1/memory_failure")
    os.makedirs(d)
    for k, v in values.items():
        with open(os.path.join(d, k), "w") as f:
            f.write(f"{v}\n")
    return root


def test_memory_failure_is_read_reported_exported_and_judged(tmp_path: Any) -> None:
    root = _with_memory_failure(tmp_path, {"total": 5, "ignored": 0, "failed": 2, "delayed": 0, "recovered": 3})
    mf = read_memory_failure(Reader(root), 1)
    assert mf is not None and mf.values == {"total": 5, "ignored": 0, "failed": 2, "delayed": 0, "recovered": 3}
    assert read_memory_failure(Reader(root), 0) is None  # no directory: None, not zeros
    rep = json.loads(cli("--root", root, "stat", "--json", check=True).stdout)
    n1 = next(n for n in rep["nodes"] if n["id"] == 1)
    assert n1["memory_failure"]["counters"]["failed"] == 2
    assert next(n for n in rep["nodes"] if n["id"] == 0)["memory_failure"] is None
    v = next(v for v in rep["verdicts"] if v["id"] == "memory-failure")
    assert "node 1 (cxl): 5 page(s) since boot (3 recovered, 2 failed)" in v["message"]
    text = cli("--root", root, "stat", check=True).stdout
    assert "node 1 memory failures: total 5, recovered 3, failed 2" in text


def test_memory_failure_rate_and_metric() -> None:
    from cxlctl.daemon.metrics import Builder, _telemetry
    from cxlctl.telemetry.counters import MEMORY_FAILURE, pick

    def mf(total: int) -> Any:
        return pick({k: 0 for k in MEMORY_FAILURE} | {"total": total, "recovered": total}, MEMORY_FAILURE, ())

    a = sample([node(0, "dram"), node(1, "cxl")._replace(memory_failure=mf(4))], t=100.0)
    b = sample([node(0, "dram"), node(1, "cxl")._replace(memory_failure=mf(4))], t=110.0)
    assert V.memory_failure(b, rates(a, b)) is None  # nothing new in the interval
    c = sample([node(0, "dram"), node(1, "cxl")._replace(memory_failure=mf(24))], t=110.0)
    v = V.memory_failure(c, rates(a, c))
    assert v is not None and "2 pages/s" in v.message

    class T:
        sample = c
        verdicts = [v]

    bld = Builder()
    _telemetry(bld, T())  # type: ignore[arg-type]
    out = bld.render()
    assert 'node_memory_failure_pages_total{node="1",kind="cxl",result="total"} 24' in out
    assert 'verdict{verdict="memory-failure"} 1' in out
