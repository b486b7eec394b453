"""Verdicts: what the counters mean for tiering, each in one sentence with the fix.

Every verdict is a pure function of a :class:`~.sample.Sample` and, from the
second report on, the :class:`~.rates.Rates` of the last interval; none reads
the host.  A verdict that needs rates (promotion throttled, ping-pong) stays
silent on the first report, which holds totals since boot only.

The verdicts, by id:

* ``tiering-off`` -- a CXL node is online, but demotion is disabled, NUMA
  balancing is not in tiering mode and no running DAMON scheme migrates pages:
  nothing will ever move pages between tiers (DAMON's migrations are counted as
  ``pgmigrate_*``, never as promotion or demotion, so the counters alone would
  call DAMON tiering "no tiering");
* ``dram-too-tight`` -- pages were demoted *directly* from a DRAM node:
  allocations stalled on reclaim (on kernels without ``pgdemote_proactive``,
  a write to ``memory.reclaim`` counts here too);
* ``promotion-throttled`` -- far more promotion candidates than promotions
  while NUMA balancing is in tiering mode: the rate limit holds hot pages on CXL.
  Promotions that skipped the rate limit (``pgpromote_candidate_nrl``, newer
  kernels) are taken out of the successes first: they are in
  ``pgpromote_success`` but not in ``pgpromote_candidate``, and left in they hide
  the throttling of the rest;
* ``ping-pong`` -- pages are promoted and demoted at high, similar rates: the
  same pages go back and forth;
* ``cxl-idle`` -- CXL capacity is online but almost none of it is used;
* ``memory-failure`` -- the kernel handled poisoned pages on a node
  (``nodeN/memory_failure/*``): since boot on the first report, in the interval
  after;
* ``kv-offload-not-on-cxl`` -- an engine's KV offload file in ``/dev/shm``
  sits mostly on DRAM while a CXL node is online.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Literal, NamedTuple, Optional

from cxlctl import tiering
from cxlctl.hostio.root import rooted
from cxlctl.numa_maps import is_kv_file
from cxlctl.parse import PAGE_SIZE, format_size
from cxlctl.term import clean

from .rates import Rates, damon_migrated, damon_migrates, demote_sum
from .sample import NodeSample, Sample

#: promotion throttled: candidates at least this many times the successes ...
THROTTLE_RATIO = 10.0
#: ... and at least this many candidate pages per second (1 MiB/s of 4 KiB pages)
THROTTLE_MIN_CANDIDATES = 256.0
#: ping-pong: both rates at least this many pages per second ...
PINGPONG_MIN_RATE = 256.0
#: ... and the smaller at least this share of the larger
PINGPONG_CLOSENESS = 0.5
#: CXL idle: used below this share of the node's memory
IDLE_SHARE = 0.01
#: KV offload: at least this many pages mapped, and more than this share of them off CXL
KV_MIN_PAGES = 256
KV_DRAM_SHARE = 0.5


class Verdict(NamedTuple):
    id: str
    severity: Literal["warning", "info"]
    message: str
    fix: str


def _mib(pages: float) -> str:
    """Pages (of the host's size) as a size, for a sentence."""
    return format_size(int(pages * PAGE_SIZE))


def _cxl_nodes(s: Sample) -> List[NodeSample]:
    return [n for n in s.nodes if n.kind == "cxl" and (n.memory.get("total") or 0) > 0]


def _dram_nodes(s: Sample) -> List[NodeSample]:
    return [n for n in s.nodes if n.kind == "dram"]


def tiering_off(s: Sample, r: Optional[Rates]) -> Optional[Verdict]:
    """:func:`cxlctl.tiering.tiering_off` on this sample: the words ``status`` and ``doctor`` use too."""
    st = s.settings
    cxl = (n.id for n in _cxl_nodes(s))
    found = tiering.tiering_off(cxl, st.demotion_enabled, st.numa_balancing, damon_migrates(s))
    return None if found is None else Verdict(tiering.ID, "warning", found[0] + ".", found[1])


def dram_too_tight(s: Sample, r: Optional[Rates]) -> Optional[Verdict]:
    hits: List[str] = []
    proactive_counted = True
    for n in _dram_nodes(s):
        if r is None:
            v = n.vmstat.get("pgdemote_direct")
            if v:
                hits.append(f"node {n.id}: {v} pages ({_mib(v)}) since boot")
        else:
            rate = r.nodes.get(n.id, {}).get("pgdemote_direct")
            if rate:
                hits.append(f"node {n.id}: {rate:.0f} pages/s")
        if "pgdemote_proactive" in n.vmstat.missing:
            proactive_counted = False
    dram = _dram_nodes(s)
    if dram and all("pgdemote_direct" in n.vmstat.missing for n in dram):
        # 6.1 counts demotion in /proc/vmstat only; only upper-tier (DRAM) nodes demote there
        total: Optional[float] = s.system.get("pgdemote_direct") if r is None else r.system.get("pgdemote_direct")
        if total:
            when = f"{total:.0f} pages ({_mib(total)}) since boot" if r is None else f"{total:.0f} pages/s"
            hits.append(f"system-wide: {when}; this kernel does not count it per node")
        proactive_counted = "pgdemote_proactive" not in s.system.missing
    if not hits:
        return None
    also = "" if proactive_counted else " (this kernel has no pgdemote_proactive: memory.reclaim writes count here too)"
    return Verdict(
        "dram-too-tight",
        "warning",
        f"pages were demoted directly from DRAM ({'; '.join(hits)}), so allocations stalled on reclaim{also}.",
        "keep DRAM headroom: raise vm.watermark_scale_factor so kswapd demotes earlier, demote cold memory "
        "ahead of time (memory.reclaim, DAMON migrate_cold), or place KV/offload memory on CXL (cxlctl launch)",
    )


def promotion_throttled(s: Sample, r: Optional[Rates]) -> Optional[Verdict]:
    if r is None or s.settings.numa_balancing is None or not s.settings.numa_balancing & 2:
        return None
    cand = r.system.get("pgpromote_candidate")
    ok = r.system.get("pgpromote_success")
    if cand is None or ok is None:
        return None
    # promotions past the rate limit (free DRAM) are successes without being candidates
    nrl = r.system.get("pgpromote_candidate_nrl")
    limited_ok = ok if nrl is None else max(ok - nrl, 0.0)
    if cand < THROTTLE_MIN_CANDIDATES or cand < THROTTLE_RATIO * max(limited_ok, 1.0):
        return None
    limit = s.settings.promote_rate_limit_mbps
    lim = f" at kernel.numa_balancing_promote_rate_limit_MBps={limit}" if limit is not None else ""
    besides = "" if not nrl else f" (besides {nrl:.0f} pages/s promoted without the limit while DRAM had room)"
    return Verdict(
        "promotion-throttled",
        "warning",
        f"{cand:.0f} pages/s were promotion candidates under the rate limit but only {limited_ok:.0f} pages/s "
        f"of them were promoted{lim}{besides}, so hot pages stay on CXL.",
        "raise kernel.numa_balancing_promote_rate_limit_MBps (cxlctl tune sets it per profile), "
        "or keep more DRAM free so promotion has room",
    )


def ping_pong(s: Sample, r: Optional[Rates]) -> Optional[Verdict]:
    if r is None:
        return None
    prom = r.system.get("pgpromote_success")
    dem = demote_sum(r.system)
    if prom is None or dem is None:
        return None
    lo, hi = min(prom, dem), max(prom, dem)
    if lo < PINGPONG_MIN_RATE or lo < PINGPONG_CLOSENESS * hi:
        return None
    return Verdict(
        "ping-pong",
        "warning",
        f"pages are promoted ({prom:.0f}/s) and demoted ({dem:.0f}/s) at similar high rates, "
        "so the same pages move back and forth and pay for two migrations each.",
        "lower kernel.numa_balancing_promote_rate_limit_MBps, keep more DRAM free (vm.watermark_scale_factor), "
        "or pin the hot set to DRAM (cxlctl launch --policy bind)",
    )


def cxl_idle(s: Sample, r: Optional[Rates]) -> Optional[Verdict]:
    idle = []
    for n in _cxl_nodes(s):
        total = n.memory.get("total") or 0
        used = n.memory.get("used")
        if used is None and n.memory.get("free") is not None:
            used = total - (n.memory.get("free") or 0)
        if used is not None and used < IDLE_SHARE * total:
            idle.append(f"node {n.id} ({used >> 20} of {total >> 20} MiB used)")
    if not idle:
        return None
    if r is not None:
        moving = demote_sum(r.system)
        if moving or damon_migrated(s, r).get("migrate_cold"):
            return None  # pages are on their way there
    return Verdict(
        "cxl-idle",
        "info",
        f"CXL capacity is online but nearly unused: {', '.join(idle)}.",
        _idle_fix(s),
    )


def _goal(metric: Optional[str], value: Optional[int], nid: Optional[int]) -> str:
    """A node-memory quota goal in words (basis points: 1/10,000 of the node); "" for other goals."""
    if value is None or metric not in ("node_mem_free_bp", "node_mem_used_bp"):
        return ""
    node = "DRAM" if nid is None else f"node {nid}"
    pct = f"{value / 100:g} %"
    return f"{node} is under {pct} free" if metric == "node_mem_free_bp" else f"{node} is over {pct} used"


def _idle_fix(s: Sample) -> str:
    """What fills idle CXL on this host: tiering where nothing tiers yet (never a second mover
    beside a running one: ``tune apply`` refuses NUMA-balancing tiering beside DAMON's
    migrations), else why the running one has not, and direct placement either way."""
    place = "place memory on it directly (cxlctl launch --ratio, or --kv-size as root: a CXL-bound /dev/shm)"
    cold = [sc for sc in s.damon if sc.state == "on" and sc.action == "migrate_cold"]
    if damon_migrates(s):
        held = [_goal(metric, value, nid) for sc in cold for metric, value, nid in sc.goals]
        held = [h for h in held if h]
        why = (
            f"its migrate_cold quota goal holds demotion back until {' and '.join(held)}"
            if held
            else (
                "it demotes cold pages only as its quotas allow" if cold else "no scheme of it demotes (migrate_cold)"
            )
        )
        return f"DAMON already tiers this host, so add no second mover; {why}. To use CXL now, {place}"
    st = s.settings
    if st.demotion_enabled or (st.numa_balancing is not None and st.numa_balancing & 2):
        return f"tiering is on: cold pages demote there once DRAM comes under reclaim. To use CXL now, {place}"
    return (
        f"enable tiering (cxlctl tune recommend names the profile for this host) so cold pages demote there, or {place}"
    )


def memory_failure(s: Sample, r: Optional[Rates]) -> Optional[Verdict]:
    hits = []
    for n in s.nodes:
        mf = n.memory_failure
        if mf is None:
            continue
        vals: Dict[str, Optional[float]]
        if r is None:
            vals = {k: None if v is None else float(v) for k, v in mf.values.items()}
        else:
            vals = r.memory_failure.get(n.id, {})
        total = vals.get("total")
        if not total:
            continue
        parts = ", ".join(f"{vals[k]:.0f} {k}" for k in ("recovered", "failed", "delayed", "ignored") if vals.get(k))
        when = "page(s) since boot" if r is None else "pages/s"
        hits.append(f"node {n.id} ({n.kind}): {total:.0f} {when}" + (f" ({parts})" if parts else ""))
    if not hits:
        return None
    return Verdict(
        "memory-failure",
        "warning",
        f"the kernel handled poisoned memory: {'; '.join(hits)}. Recovered pages are offlined; failed or "
        "delayed ones may still be in use.",
        "see which device reports media errors (cxlctl health), and replace or retire it; "
        "rasdaemon's page thresholds offline pages before they fail",
    )


#: policies that place every page on the named nodes (interleave modes share pages with DRAM by design)
PLACING_MODES = ("bind", "preferred", "preferred-many")


def kv_offload_not_on_cxl(s: Sample, r: Optional[Rates]) -> Optional[Verdict]:
    cxl = {n.id for n in _cxl_nodes(s)}
    if not cxl:
        return None
    hits = []
    seen = set()
    launched = False
    for p in s.processes:
        if p.maps is None:
            continue
        if p.asked is not None and p.asked[0] in PLACING_MODES and p.asked[1] and set(p.asked[1]) <= cxl:
            total = sum(p.maps.anon.values())
            off = sum(v for node, v in p.maps.anon.items() if node not in cxl)
            if total >= KV_MIN_PAGES and off > KV_DRAM_SHARE * total:
                launched = True
                hits.append(
                    f"PID {p.pid} (launched with {p.asked[0]} to CXL node(s) "
                    f"{','.join(map(str, p.asked[1]))}: {100 * off // total}% of {_mib(total)} anonymous memory off CXL)"
                )
        for f, per in sorted(p.maps.shm.items()):
            total = sum(per.values())
            off = sum(v for node, v in per.items() if node not in cxl)
            if f in seen or not is_kv_file(f) or total < KV_MIN_PAGES or off <= KV_DRAM_SHARE * total:
                continue
            seen.add(f)
            hits.append(f"{clean(f)} (PID {p.pid}: {100 * off // total}% of {_mib(total)} off CXL)")
    if not hits:
        return None
    return Verdict(
        "kv-offload-not-on-cxl",
        "warning",
        f"KV offload memory sits on DRAM although CXL node(s) {', '.join(map(str, sorted(cxl)))} are online: "
        + "; ".join(hits[:3])
        + (f" and {len(hits) - 3} more" if len(hits) > 3 else "")
        + ".",
        "start the engine with cxlctl launch ... --kv-size as root (its /dev/shm then binds to CXL), "
        "or mount the offload tmpfs with mpol=bind:<cxl node>"
        + ("; for a launched process, check its cpuset (cpuset.mems) and cxlctl policy show PID" if launched else ""),
    )


#: every verdict, in the order they are shown
VERDICTS: Dict[str, Callable[[Sample, Optional[Rates]], Optional[Verdict]]] = {
    "tiering-off": tiering_off,
    "dram-too-tight": dram_too_tight,
    "promotion-throttled": promotion_throttled,
    "ping-pong": ping_pong,
    "cxl-idle": cxl_idle,
    "memory-failure": memory_failure,
    "kv-offload-not-on-cxl": kv_offload_not_on_cxl,
}


def judge(s: Sample, r: Optional[Rates]) -> List[Verdict]:
    """All verdicts that hold for this sample (and interval), each fix runnable as printed."""
    out = []
    for fn in VERDICTS.values():
        v = fn(s, r)
        if v is not None:  # a fix naming a cxlctl command names the tree read (``--root``) too
            out.append(v._replace(fix=rooted(s.root, v.fix)))
    return out
