"""Firmware figures against ``cxlctl probe``'s measurement (docs/probe.md).

The firmware's figures (HMAT, CDAT: ``nodeN/access1``, or a CXL node's one region's; CPU class,
:func:`cxlctl.figures.node_figures`)
decide the memory tiers (mm/memory-tiers.c ``mt_perf_to_adistance``: an abstract
distance in proportion to read+write latency and in inverse proportion to read+write
bandwidth, both against the DRAM nodes'; the tier is the distance's chunk, a lower
``memory_tierN`` being faster) and the kernel's auto weights (mm/mempolicy.c
``reduce_interleave_weights``).  When they are wrong, both
are.  These checks compare them with what the probe measured from each memory
node's nearest CPU node, and only while the measurement still describes the
host (same boot, kernel and memdevs); a stale one is named, not used.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

from cxlctl.figures import node_figures
from cxlctl.hostio import paths
from cxlctl.parse import format_nodelist
from cxlctl.probe.store import DISAGREE

from .model import NOTE, OK, WARN, Check, Evidence, Facts

F = "Firmware"
#: a faster tier's node is "slower" only past this latency margin (the probe repeats within a few %)
ORDER_MARGIN = 1.2
#: CXL nodes in one tier differ in speed when bandwidth or latency differ by more than this factor
COLLAPSE = 1.5


def _ratio(a: float, b: float) -> float:
    return max(a, b) / min(a, b)


def _ev(f: Facts) -> Evidence:
    doc = f.probe.record if f.probe is not None else {}
    return Evidence(paths.PROBE_RESULTS, f"measured {doc.get('measured_at', '?')}")


def _disagreements(f: Facts) -> Tuple[List[str], List[Evidence], int]:
    """(what disagrees, evidence, how many nodes had firmware figures to compare)."""
    assert f.probe is not None
    out: List[str] = []
    compared = 0
    ev: List[Evidence] = [_ev(f)]
    for nid, m in sorted(f.probe.usable.items()):
        node = f.inv.node(nid)
        # the figures the kernel weights and tiers by: the CPU class, one region's on 7.x
        figs = node_figures(node, f.inv.regions, f.inv.nodes) if node is not None else None
        c = figs.cpu if figs is not None else None
        if c is None or figs is None:
            continue
        fw_bw, fw_lat = c.read_bandwidth, c.read_latency
        compared += 1 if fw_bw or fw_lat else 0
        if figs.source == "regions" and figs.regions:
            src = f"{paths.cxl_device(figs.regions[0])}/access1"
        else:
            src = f"{paths.node_dir(nid)}/access1/initiators"
        if fw_bw and _ratio(fw_bw, m.read_mbps) > DISAGREE:
            out.append(f"node {nid} read bandwidth: firmware {fw_bw} MB/s, measured {m.read_mbps} MB/s")
            ev.append(Evidence(f"{src}/read_bandwidth", str(fw_bw)))
        if fw_lat and _ratio(fw_lat, m.latency_ns) > DISAGREE:
            out.append(f"node {nid} read latency: firmware {fw_lat} ns, measured {m.latency_ns:g} ns")
            ev.append(Evidence(f"{src}/read_latency", str(fw_lat)))
    return out, ev, compared


def _tier_order(f: Facts) -> List[str]:
    """Pairs whose memory tiers (lower id: faster) contradict the measured latency."""
    assert f.probe is not None
    meas = f.probe.usable
    tiered = [(n.tier, n.id) for n in f.inv.nodes if n.tier is not None and n.id in meas]
    out = []
    for ta, a in tiered:
        for tb, b in tiered:
            if ta < tb and meas[a].latency_ns > ORDER_MARGIN * meas[b].latency_ns:
                out.append(
                    f"node {a} (memory_tier{ta}) measures {meas[a].latency_ns:g} ns, "
                    f"slower than node {b} (memory_tier{tb}) at {meas[b].latency_ns:g} ns"
                )
    return out


def _collapsed(f: Facts) -> List[str]:
    """CXL nodes in one tier whose measured speeds differ by more than :data:`COLLAPSE`."""
    assert f.probe is not None
    meas = f.probe.usable
    by_tier: Dict[int, List[int]] = {}
    for n in f.inv.nodes:
        if n.kind == "cxl" and n.tier is not None and n.id in meas:
            by_tier.setdefault(n.tier, []).append(n.id)
    out = []
    for t, ids in sorted(by_tier.items()):
        if len(ids) < 2:
            continue
        bws = [meas[i].bandwidth for i in ids]
        lats = [meas[i].latency_ns for i in ids]
        if max(bws) / min(bws) > COLLAPSE or max(lats) / min(lats) > COLLAPSE:
            figs = ", ".join(f"node {i} {meas[i].bandwidth} MB/s {meas[i].latency_ns:g} ns" for i in ids)
            out.append(f"memory_tier{t} holds CXL node(s) {format_nodelist(ids)} of different measured speed ({figs})")
    return out


def checks(f: Facts) -> List[Check]:
    """Nothing without a stored probe; a note when it is stale; else the three comparisons."""
    st = f.probe
    if st is None:
        return []
    if st.stale:
        return [Check(F, "firmware.measured", NOTE, st.why_not(), (_ev(f),), "cxlctl probe")]
    out: List[Check] = []
    bad, ev, compared = _disagreements(f)
    fix = 'update the BIOS (HMAT) or device firmware (CDAT); meanwhile set weights = "measured" in the profile'
    if bad:
        msg = f"firmware figures disagree with the measurement by more than {DISAGREE:g}x: " + "; ".join(bad)
        out.append(Check(F, "firmware.measured", WARN, msg, tuple(ev), fix))
    elif compared:
        msg = f"firmware figures of {compared} node(s) agree with the measurement within {DISAGREE:g}x"
        out.append(Check(F, "firmware.measured", OK, msg, (_ev(f),)))
    else:
        msg = "the firmware describes no node's performance; the measured figures stand in (weights, status)"
        out.append(Check(F, "firmware.measured", NOTE, msg, (_ev(f),)))
    order = _tier_order(f)
    if order:
        tev = (_ev(f), Evidence(paths.TIER_DIR, "memory_tierN: a lower N is a faster tier"))
        out.append(
            Check(
                F,
                "firmware.tier-order",
                WARN,
                "tiers ordered against the measured latency: " + "; ".join(order),
                tev,
                fix,
            )
        )
    coll = _collapsed(f)
    if coll:
        cev = (_ev(f), Evidence(paths.TIER_DIR, "memory_tierN/nodelist"))
        why = "; ".join(coll) + ": demotion treats them as one"
        out.append(
            Check(
                F,
                "firmware.tier-collapsed",
                WARN,
                why,
                cev,
                "give the slower devices correct CDAT/HMAT figures (firmware update)",
            )
        )
    return out
