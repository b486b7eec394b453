"""Weighted-interleave weights: from firmware bandwidth, or from a ``DRAM:CXL`` ratio.

Bandwidth per node comes from HMAT (``nodeN/access0/initiators``: the
bandwidth seen by the nearest CPU), else — for a CXL node HMAT does not
describe — from its CXL regions' ``access0`` coordinates, which the kernel
computes from CDAT along the whole path (v6.9+).  A node's bandwidth is
min(read, write) where both are known, as the kernel's own auto mode does.

The reduction to integers follows HMSDK (``tools/iw_ratio.py``): the largest
weight at most a cap (32 by default, the scale of the kernel's own ``auto``
weights), then divide by the gcd; see :func:`reduce_weights` for how the
rounding is kept honest.  The smallest largest weight that is within 5 % wins,
so the interleave round stays as short as the ratio allows and a short-lived
allocation still sees the ratio.
"""

from __future__ import annotations

import math
from typing import Dict, Iterable, Optional, Sequence

from cxlctl.model import Coordinates, Inventory, Node

from .knobs import DEFAULT_MAX_WEIGHT, WEIGHT_MAX, WEIGHT_MIN


def _bw(c: Optional[Coordinates], which: str = "min") -> Optional[int]:
    if c is None:
        return None
    vals = [v for v in (c.read_bandwidth, c.write_bandwidth) if v]
    if which == "write":
        return c.write_bandwidth or None
    return min(vals) if vals else None


def node_bandwidth(inv: Inventory, node: Node, which: str = "min") -> Optional[int]:
    """MB/s of ``node`` (``which``: "min" of read/write, or "write"); None when unknown."""
    bw = _bw(node.access0, which)
    if bw:
        return bw
    total = 0
    for rn in node.regions:
        r = inv.region(rn)
        rb = _bw(r.access0 if r else None, which)
        if not rb:
            return None  # one region of the node undescribed: the node's total is unknown
        total += rb
    return total or None


def _worst_error(cand: Dict[int, int], m: int, share: Dict[int, float]) -> float:
    """The largest relative distance of a node's weight share (w/m) from its bandwidth share."""
    return max(abs(cand[n] / m - f) / f for n, f in share.items())


def reduce_weights(bandwidth: Dict[int, int], cap: int = DEFAULT_MAX_WEIGHT, tolerance: float = 0.05) -> Dict[int, int]:
    """Bandwidths → integer weights: largest weight ≤ ``cap``, divided by the gcd.

    HMSDK halves every value until the largest is ≤ 10 and rounds, which can be
    far off (90000:60000 becomes 5:4).  Here the largest weight is the smallest
    m ≤ cap for which every node's share is within ``tolerance`` of its
    bandwidth share (90000:60000 → 3:2, 100000:30000 → 7:2); if no m is, the m
    whose worst node is closest (not simply m = cap, which can be worse than a
    smaller m).  Every weight is at least 1 (the kernel's minimum), so a very
    slow node still gets one page per round.  With the old cap of 10,
    38912:16000:6144 could only become 5:2:1, which gives the slow node 27 % more
    than its share; the default cap (:data:`DEFAULT_MAX_WEIGHT`) allows 19:8:3.
    """
    if not bandwidth:
        return {}
    top = max(bandwidth.values())
    share = {n: b / top for n, b in bandwidth.items()}
    best: Dict[int, int] = {}
    best_err = math.inf
    for m in range(1, max(1, min(cap, WEIGHT_MAX)) + 1):
        cand = {n: max(WEIGHT_MIN, int(round(f * m))) for n, f in share.items()}
        err = _worst_error(cand, m, share)
        if err <= tolerance:
            return divide_gcd(cand)
        if err < best_err:
            best, best_err = cand, err
    return divide_gcd(best)


#: the scale of the kernel's auto weights (``weightiness`` in mm/mempolicy.c)
KERNEL_WEIGHTINESS = 32


def kernel_weights(bandwidth: Dict[int, int]) -> Dict[int, int]:
    """The weights the kernel's auto mode gives these bandwidths: mm/mempolicy.c
    ``reduce_interleave_weights`` (fed by ``mempolicy_set_node_perf`` with min(read, write)):
    ``32 * bw / total`` rounded down, 1 where that is below 1 or the node has no bandwidth,
    then divided by the gcd.  For figures the kernel cannot see (``cxlctl probe``'s)."""
    total = sum(bandwidth.values())
    out: Dict[int, int] = {}
    for n, b in bandwidth.items():
        scaled = KERNEL_WEIGHTINESS * b
        out[n] = scaled // total if b and total < scaled else 1
    return divide_gcd(out)


def divide_gcd(ints: Dict[int, int]) -> Dict[int, int]:
    """``ints`` divided by the gcd of its values (weights are kept reduced, as the kernel's are)."""
    g = 0
    for v in ints.values():
        g = math.gcd(g, v)
    return {n: v // g for n, v in ints.items()} if g > 1 else dict(ints)


def ratio_weights(dram: Iterable[int], cxl: Iterable[int], ratio: Sequence[int]) -> Dict[int, int]:
    """Every DRAM node gets ratio[0], every CXL node ratio[1] (reduced by their gcd)."""
    d, c = ratio[0], ratio[1]
    g = math.gcd(d, c)
    d, c = d // g, c // g
    out = {n: d for n in dram}
    out.update({n: c for n in cxl})
    return out


def cxl_write_bandwidth(inv: Inventory) -> Optional[int]:
    """Smallest write bandwidth among CXL nodes (MB/s): the conservative base for a rate limit."""
    bws = []
    for n in inv.nodes:
        if n.kind == "cxl" and n.has_memory:
            b = node_bandwidth(inv, n, "write")
            if b is None:
                return None
            bws.append(b)
    return min(bws) if bws else None
