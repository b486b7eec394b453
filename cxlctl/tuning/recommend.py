"""``tune recommend``: which built-in profile fits this host, and why, from the inventory alone.

The rules follow docs/tuning.md ("Which profile"): tiering needs the CXL nodes
in a lower memory tier than DRAM (HMAT/CDAT performance data); weighted
interleave needs Linux 6.9; with neither, only explicit placement is left.
"""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Tuple

from cxlctl.figures import node_figures
from cxlctl.model import Inventory, Node

from .knobs import Current
from .weights import bandwidth_gaps, node_bandwidth


class Recommendation(NamedTuple):
    profile: Optional[str]
    reasons: Tuple[str, ...]
    alternatives: Tuple[Tuple[str, str], ...]  # (profile, when to prefer it)


def _tier_names(nodes: List[Node]) -> str:
    """``memory_tier33, memory_tier146``: each tier once, in the kernel's numeric order (abstract
    distance), not as text (``memory_tier146`` before ``memory_tier33``)."""
    return ", ".join(f"memory_tier{t}" for t in sorted({n.tier for n in nodes if n.tier is not None}))


def recommend(inv: Inventory, cur: Current) -> Recommendation:
    cxl = [n for n in inv.nodes if n.kind == "cxl" and n.has_memory]
    dram = [n for n in inv.nodes if n.kind == "dram" and n.has_memory]
    if not cxl:
        if not inv.has_cxl:
            return Recommendation(
                profile=None,
                reasons=("no CXL devices found: there is no CXL memory to tune for; the kernel's defaults are fine",),
                alternatives=(),
            )
        return Recommendation(
            profile=None,
            reasons=(
                f"{len(inv.memdevs)} CXL memory device(s) found, but none of their capacity is online as a NUMA node "
                "(no region, or the region's DAX device is not in system-ram mode)",
                "create a region and online it as system RAM first; then run `cxlctl tune recommend` again",
            ),
            alternatives=(("inference-bandwidth", "once CXL memory is online as a NUMA node"),),
        )
    reasons: List[str] = []
    ids = ", ".join(str(n.id) for n in cxl)
    dram_tiers = {n.tier for n in dram if n.tier is not None}
    shared = [n for n in cxl if n.tier is not None and n.tier in dram_tiers]
    separate = [n for n in cxl if n.tier is not None and n.tier not in dram_tiers]
    wi = cur.wi_files is not None
    missing_bw = [n for n in dram + cxl if node_bandwidth(inv, n) is None]
    if shared:
        tiers = _tier_names(shared)
        reasons.append(
            f"CXL node(s) {', '.join(str(n.id) for n in shared)} share {tiers} with DRAM (boot-time System RAM, or "
            "HMAT/CDAT figures as good as DRAM's: `cxlctl status` says which), so demotion and NUMA-balancing "
            "promotion cannot move pages between DRAM and CXL — tiering (inference-capacity) cannot work here"
        )
        reasons.append("explicit placement still works: weighted interleave over DRAM and CXL")
        if not wi:
            reasons.append(
                "this kernel has no weighted interleave (Linux 6.9+): the launcher can only use plain interleave or "
                "binding"
            )
        profile = "inference-bandwidth"
        alts: List[Tuple[str, str]] = [("latency-strict", "if the workload must stay in DRAM")]
    elif not wi:
        reasons.append(f"CXL node(s) {ids} sit in a lower memory tier than DRAM, so kernel tiering works")
        reasons.append("this kernel has no weighted interleave (Linux 6.9+), so bandwidth expansion is not available")
        profile = "inference-capacity"
        alts = [("latency-strict", "if the workload must stay in DRAM")]
    else:
        tier_txt = _tier_names(separate) or "a lower tier"
        reasons.append(
            f"CXL node(s) {ids} are in {tier_txt}, below DRAM: both weighted interleave and tiering are possible"
        )
        reasons.append(
            "an inference server placed explicitly gets the most from interleaving DRAM and CXL by bandwidth"
        )
        profile = "inference-bandwidth"
        alts = [
            ("inference-capacity", "if the working set exceeds DRAM and processes run with the default policy"),
            ("latency-strict", "if the workload must stay in DRAM"),
        ]
    profile, alts = _tiering_engine(cur, profile, alts, reasons, bool(shared))
    if missing_bw and profile == "inference-bandwidth":
        # a node whose regions differ has a figure in the kernel (the region it took): its auto mode weights it
        kernel_knows = cur.wi_auto_path is not None and all(
            node_figures(n, inv.regions, inv.nodes).undetermined for n in missing_bw
        )
        then = (
            "the profile turns the kernel's auto mode on, which weights by the figures the kernel took"
            if kernel_knows
            else "the profile will leave the weights alone"
        )
        reasons.append(
            f"{bandwidth_gaps(inv, missing_bw)}: {then}; "
            'a user profile with weights = "3:1" (DRAM:CXL) sets them by ratio'
        )
    return Recommendation(profile=profile, reasons=tuple(reasons), alternatives=tuple(alts))


def _tiering_engine(
    cur: Current, profile: str, alts: List[Tuple[str, str]], reasons: List[str], shared_tier: bool
) -> Tuple[str, List[Tuple[str, str]]]:
    """DAMON tiering (inference-damon) where the kernel has migrate_hot/migrate_cold, else NUMA balancing.

    DAMON's migrate actions name their destination node, so unlike demotion and
    NUMA-balancing promotion they work even where CXL shares DRAM's memory tier.
    """
    caps = cur.damon_caps
    if caps is None or not caps.tiering:
        why = caps.why_not if caps is not None else "DAMON was not probed"
        if profile == "inference-capacity" or any(a[0] == "inference-capacity" for a in alts):
            reasons.append(f"tiering engine: NUMA balancing (inference-capacity), since DAMON tiering is {why}")
        return profile, alts
    how = "; ".join(caps.evidence[-1:])
    if profile == "inference-capacity":
        reasons.append(
            f"this kernel has DAMON's migrate_hot/migrate_cold ({how}): DAMON tiering (inference-damon) moves pages "
            "without NUMA balancing's hint faults (in tiering mode those fall on the scanned pages that sit on CXL: "
            "change_pte_range skips pages on top-tier nodes), and demotes before reclaim has to"
        )
        return "inference-damon", [("inference-capacity", "NUMA-balancing tiering instead of DAMON")] + alts
    when = (
        "to tier DRAM and CXL anyway: DAMON's migrations name the destination node, so they work without tiers"
        if shared_tier
        else "if the working set exceeds DRAM and processes run with the default policy (DAMON tiering; "
        f"this kernel has migrate_hot/migrate_cold: {how})"
    )
    alts = [a for a in alts if a[0] != "inference-capacity"]
    reasons.append(
        "tiering engine, where tiering is wanted: DAMON (inference-damon) rather than NUMA balancing, since this "
        f"kernel has migrate_hot/migrate_cold ({how}): no hint faults on the CXL pages it samples, and cold pages "
        "leave DRAM before reclaim"
    )
    return profile, [("inference-damon", when)] + alts
