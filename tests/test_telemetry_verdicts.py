"""Verdicts and rates: pure functions, each verdict shown both firing and not firing.

The samples are built here field by field (the verdicts never read the host);
the thresholds come from :mod:`cxlctl.telemetry.verdicts` so the tests follow
them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Optional, Sequence

from cxlctl.numa_maps import NumaMaps
from cxlctl.telemetry import verdicts as V
from cxlctl.telemetry.counters import NODE_COUNTERS, SYSTEM_COUNTERS, Counters, pick
from cxlctl.telemetry.rates import Rates, counter_rates, rates
from cxlctl.telemetry.sample import CgroupSample, NodeSample, ProcessSample, Sample, Settings

if TYPE_CHECKING:
    from cxlctl.model import NodeKind

GiB = 1 << 30
MiB = 1 << 20


def node(
    nid: int,
    kind: NodeKind,
    total: int = 4 * GiB,
    used: int = GiB,
    counters: Optional[Dict[str, int]] = None,
    missing: Sequence[str] = (),
) -> NodeSample:
    found = {n: 0 for n in NODE_COUNTERS if n not in missing}
    found.update(counters or {})
    mem: Dict[str, Optional[int]] = {
        "total": total,
        "free": total - used,
        "used": used,
        "anon": 0,
        "file": 0,
        "shmem": 0,
    }
    return NodeSample(nid, kind, 4 if kind == "dram" else 5, mem, pick(found, NODE_COUNTERS), {})


def sample(
    nodes: Sequence[NodeSample] = (),
    *,
    demotion: Optional[bool] = True,
    nb: Optional[int] = 2,
    limit: Optional[int] = 65536,
    system: Optional[Dict[str, int]] = None,
    procs: Sequence[ProcessSample] = (),
    cgroups: Sequence[CgroupSample] = (),
    t: float = 100.0,
) -> Sample:
    found = {n: 0 for n in SYSTEM_COUNTERS}
    found.update(system or {})
    return Sample(
        t,
        0.0,
        "6.12",
        Settings(demotion, nb, limit),
        pick(found, SYSTEM_COUNTERS),
        tuple(nodes) or (node(0, "dram"), node(1, "cxl", used=GiB)),
        tuple(cgroups),
        tuple(procs),
        (),
    )


def rate(system: Optional[Dict[str, float]] = None, nodes: Optional[Dict[int, Dict[str, float]]] = None) -> Rates:
    s: Dict[str, Optional[float]] = {n: 0.0 for n in SYSTEM_COUNTERS}
    s.update(system or {})
    return Rates(1.0, s, {k: dict(v) for k, v in (nodes or {}).items()}, {})


def ids(s: Sample, r: Optional[Rates] = None) -> list[str]:
    return [v.id for v in V.judge(s, r)]


# -- tiering off ------------------------------------------------------------------------------


def test_tiering_off_fires_when_demotion_is_off_and_no_promotion_mode() -> None:
    v = V.tiering_off(sample(demotion=False, nb=1), None)
    assert v is not None and "demotion is disabled" in v.message and "cxlctl tune recommend" in v.fix
    assert V.tiering_off(sample(demotion=False, nb=0), None) is not None


def test_tiering_off_silent_with_demotion_or_tiering_mode_or_no_cxl() -> None:
    assert V.tiering_off(sample(demotion=True, nb=0), None) is None
    assert V.tiering_off(sample(demotion=False, nb=2), None) is None
    assert V.tiering_off(sample(demotion=False, nb=3), None) is None  # 3 = normal balancing + tiering
    assert V.tiering_off(sample([node(0, "dram")], demotion=False, nb=0), None) is None
    # a kernel without the knob (None) is not "disabled"
    assert V.tiering_off(sample(demotion=None, nb=0), None) is None


# -- DRAM too tight ---------------------------------------------------------------------------


def test_dram_too_tight_fires_on_direct_demotion_since_boot_and_in_an_interval() -> None:
    s = sample([node(0, "dram", counters={"pgdemote_direct": 1957}), node(1, "cxl")])
    v = V.dram_too_tight(s, None)
    assert v is not None and "1957 pages" in v.message and "since boot" in v.message
    v = V.dram_too_tight(s, rate(nodes={0: {"pgdemote_direct": 12.0}}))
    assert v is not None and "node 0: 12 pages/s" in v.message


def test_dram_too_tight_silent_without_direct_demotion() -> None:
    s = sample([node(0, "dram", counters={"pgdemote_kswapd": 5000}), node(1, "cxl")])
    assert V.dram_too_tight(s, None) is None
    # demoted directly since boot, but not in this interval: the interval decides
    s = sample([node(0, "dram", counters={"pgdemote_direct": 1957}), node(1, "cxl")])
    assert V.dram_too_tight(s, rate(nodes={0: {"pgdemote_direct": 0.0}})) is None
    # a CXL node's own direct demotion (to a lower tier still) is not DRAM pressure
    s = sample([node(0, "dram"), node(1, "cxl", counters={"pgdemote_direct": 10})])
    assert V.dram_too_tight(s, None) is None


def test_dram_too_tight_says_memory_reclaim_counts_where_pgdemote_proactive_is_missing() -> None:
    s = sample([node(0, "dram", counters={"pgdemote_direct": 1}, missing=["pgdemote_proactive"]), node(1, "cxl")])
    v = V.dram_too_tight(s, None)
    assert v is not None and "memory.reclaim" in v.message
    s = sample([node(0, "dram", counters={"pgdemote_direct": 1}), node(1, "cxl")])
    v = V.dram_too_tight(s, None)
    assert v is not None and "memory.reclaim" not in v.message


# -- promotion throttled ----------------------------------------------------------------------


def test_promotion_throttled_fires_when_candidates_dwarf_successes() -> None:
    cand = V.THROTTLE_MIN_CANDIDATES * 4
    r = rate({"pgpromote_candidate": cand, "pgpromote_success": cand / (V.THROTTLE_RATIO * 2)})
    v = V.promotion_throttled(sample(nb=2, limit=10), r)
    assert v is not None and "rate_limit_MBps=10" in v.message and "raise" in v.fix


def test_promotion_throttled_silent_otherwise() -> None:
    cand = V.THROTTLE_MIN_CANDIDATES * 4
    # successes keep up
    assert V.promotion_throttled(sample(), rate({"pgpromote_candidate": cand, "pgpromote_success": cand / 2})) is None
    # too few candidates to matter
    low = V.THROTTLE_MIN_CANDIDATES / 2
    assert V.promotion_throttled(sample(), rate({"pgpromote_candidate": low, "pgpromote_success": 0})) is None
    # not in tiering mode, or the first report (no rates)
    r = rate({"pgpromote_candidate": cand, "pgpromote_success": 0})
    assert V.promotion_throttled(sample(nb=1), r) is None
    assert V.promotion_throttled(sample(), None) is None
    # the kernel lacks the counter
    r2 = rate({"pgpromote_success": 0})
    r2.system["pgpromote_candidate"] = None
    assert V.promotion_throttled(sample(), r2) is None


# -- ping-pong --------------------------------------------------------------------------------


def test_ping_pong_fires_when_promotion_and_demotion_are_high_and_close() -> None:
    hi = V.PINGPONG_MIN_RATE * 4
    v = V.ping_pong(sample(), rate({"pgpromote_success": hi, "pgdemote_kswapd": hi * 0.6, "pgdemote_direct": hi * 0.3}))
    assert v is not None and "back and forth" in v.message


def test_ping_pong_silent_when_one_side_is_low_or_far_apart() -> None:
    hi = V.PINGPONG_MIN_RATE * 4
    assert V.ping_pong(sample(), rate({"pgpromote_success": hi, "pgdemote_kswapd": V.PINGPONG_MIN_RATE / 2})) is None
    assert V.ping_pong(sample(), rate({"pgpromote_success": hi * 10, "pgdemote_kswapd": hi})) is None
    assert V.ping_pong(sample(), None) is None


# -- CXL idle ---------------------------------------------------------------------------------


def test_cxl_idle_fires_on_nearly_unused_cxl_capacity() -> None:
    s = sample([node(0, "dram"), node(1, "cxl", total=512 * MiB, used=0)])
    v = V.cxl_idle(s, None)
    assert v is not None and "node 1 (0 of 512 MiB used)" in v.message
    assert V.cxl_idle(s, rate()) is not None


def test_cxl_idle_silent_when_used_or_filling_or_absent() -> None:
    assert V.cxl_idle(sample([node(0, "dram"), node(1, "cxl", total=512 * MiB, used=16 * MiB)]), None) is None
    s = sample([node(0, "dram"), node(1, "cxl", total=512 * MiB, used=0)])
    assert V.cxl_idle(s, rate({"pgdemote_kswapd": 10.0})) is None  # pages are on their way
    assert V.cxl_idle(sample([node(0, "dram", used=0)]), None) is None  # DRAM only
    assert V.cxl_idle(sample([node(0, "dram"), node(1, "cxl", total=0, used=0)]), None) is None  # offline


# -- KV offload not on CXL --------------------------------------------------------------------


def proc(shm: Dict[str, Dict[int, int]], pid: int = 42) -> ProcessSample:
    return ProcessSample(pid, "vllm", "/system.slice/vllm.service", MiB, NumaMaps({}, {}, shm))


def test_kv_offload_fires_when_the_offload_file_sits_on_dram() -> None:
    f = "/dev/shm/vllm_offload_abc.mmap"
    v = V.kv_offload_not_on_cxl(sample(procs=[proc({f: {0: 900, 1: 100}})]), None)
    assert v is not None and f in v.message and "90% of" in v.message and "--kv-size as root" in v.fix


def test_kv_offload_message_cleans_the_file_name() -> None:
    # a /dev/shm name is any bytes but '/' and NUL; numa_maps prints an ESC as it is
    v = V.kv_offload_not_on_cxl(sample(procs=[proc({"/dev/shm/kv\x1b[2J": {0: 900}})]), None)
    assert v is not None and "/dev/shm/kv\\x1b[2J (PID" in v.message and "\x1b" not in v.message


def test_kv_offload_silent_when_on_cxl_or_small_or_not_kv_or_no_cxl() -> None:
    f = "/dev/shm/vllm_offload_abc.mmap"
    assert V.kv_offload_not_on_cxl(sample(procs=[proc({f: {1: 1024}})]), None) is None
    assert V.kv_offload_not_on_cxl(sample(procs=[proc({f: {0: V.KV_MIN_PAGES - 1}})]), None) is None
    assert V.kv_offload_not_on_cxl(sample(procs=[proc({"/dev/shm/pulse-shm-1": {0: 4096}})]), None) is None
    assert V.kv_offload_not_on_cxl(sample([node(0, "dram")], procs=[proc({f: {0: 4096}})]), None) is None
    gone = ProcessSample(7, None, None, None, None)
    assert V.kv_offload_not_on_cxl(sample(procs=[gone]), None) is None


def test_judge_lists_what_holds_in_a_fixed_order() -> None:
    s = sample(
        [node(0, "dram", counters={"pgdemote_direct": 3}), node(1, "cxl", total=512 * MiB, used=0)],
        demotion=False,
        nb=0,
    )
    assert ids(s) == ["tiering-off", "dram-too-tight", "cxl-idle"]
    healthy = sample([node(0, "dram"), node(1, "cxl", total=512 * MiB, used=100 * MiB)])
    assert ids(healthy, rate()) == []


# -- rates ------------------------------------------------------------------------------------


def test_counter_rates_per_second_none_when_missing_or_going_backwards() -> None:
    before = Counters({"a": 100, "b": 50, "c": None, "d": 7}, ("c",))
    now = Counters({"a": 300, "b": 10, "c": None, "d": 7, "e": 1}, ("c",))
    assert counter_rates(before, now, 4.0) == {"a": 50.0, "b": None, "c": None, "d": 0.0, "e": None}
    assert counter_rates(before, now, 0.0)["a"] is None


def test_rates_of_two_samples_use_their_times_and_common_objects() -> None:
    cg = CgroupSample(
        "/x", "/sys/fs/cgroup/x", {}, {}, pick({"pgdemote_direct": 10, "anon": 4096}, ["pgdemote_direct", "anon"]), True
    )
    cg2 = cg._replace(stat=pick({"pgdemote_direct": 30, "anon": 8192}, ["pgdemote_direct", "anon"]))
    a = sample([node(0, "dram", counters={"pgdemote_direct": 100}), node(1, "cxl")], cgroups=[cg], t=10.0)
    b = sample(
        [node(0, "dram", counters={"pgdemote_direct": 160})], cgroups=[cg2], t=12.0, system={"pgpromote_success": 8}
    )
    r = rates(a, b)
    assert r.seconds == 2.0
    assert r.nodes[0]["pgdemote_direct"] == 30.0 and 1 not in r.nodes
    assert r.system["pgpromote_success"] == 4.0
    assert r.cgroups["/x"] == {"pgdemote_direct": 10.0}  # sizes are not rates


def launched(asked: tuple[str, tuple[int, ...]], anon: Dict[int, int], pid: int = 43) -> ProcessSample:
    return ProcessSample(pid, "engine", None, MiB, NumaMaps(dict(anon), {}, {}, dict(anon)), asked)


def test_kv_offload_fires_for_a_launched_process_bound_to_cxl_with_pages_on_dram() -> None:
    v = V.kv_offload_not_on_cxl(sample(procs=[launched(("bind", (1,)), {0: 3000, 1: 1000})]), None)
    assert v is not None and "PID 43 (launched with bind to CXL node(s) 1: 75% of" in v.message
    assert "cxlctl policy show PID" in v.fix


def test_kv_offload_silent_for_launched_processes_placed_as_asked_or_not_cxl_only() -> None:
    assert V.kv_offload_not_on_cxl(sample(procs=[launched(("bind", (1,)), {1: 4000, 0: 10})]), None) is None
    # interleaving DRAM and CXL puts pages on DRAM by design
    assert (
        V.kv_offload_not_on_cxl(sample(procs=[launched(("weighted-interleave", (0, 1)), {0: 3000, 1: 1000})]), None)
        is None
    )
    # bound to DRAM and CXL both: DRAM pages are allowed
    assert V.kv_offload_not_on_cxl(sample(procs=[launched(("bind", (0, 1)), {0: 4000})]), None) is None
    # too small to judge
    assert V.kv_offload_not_on_cxl(sample(procs=[launched(("bind", (1,)), {0: V.KV_MIN_PAGES - 1})]), None) is None
    # file pages are not the policy's: only anonymous memory counts
    p = ProcessSample(44, "engine", None, MiB, NumaMaps({0: 5000, 1: 1000}, {}, {}, {1: 1000}), ("bind", (1,)))
    assert V.kv_offload_not_on_cxl(sample(procs=[p]), None) is None


def test_dram_too_tight_falls_back_to_proc_vmstat_where_nodes_lack_the_counter() -> None:
    """6.1 (fixtures/linux-6.1/single-noregion-telemetry) has pgdemote_* in /proc/vmstat only."""
    lacks = ["pgdemote_kswapd", "pgdemote_direct", "pgdemote_khugepaged", "pgdemote_proactive"]
    nodes = [node(0, "dram", missing=lacks), node(1, "cxl", missing=lacks)]
    v = V.dram_too_tight(sample(nodes, system={"pgdemote_direct": 40}), None)
    assert v is not None and "system-wide: 40 pages" in v.message and "does not count it per node" in v.message
    v = V.dram_too_tight(sample(nodes), rate({"pgdemote_direct": 3.0}))
    assert v is not None and "system-wide: 3 pages/s" in v.message
    assert V.dram_too_tight(sample(nodes, system={"pgdemote_direct": 0}), None) is None
    assert V.dram_too_tight(sample(nodes, system={"pgdemote_direct": 40}), rate({"pgdemote_direct": 0.0})) is None
