"""Weighted-interleave weights: from firmware bandwidth, or from a ``DRAM:CXL`` ratio.

A node's bandwidth is the one the kernel itself weights by: the CPU access class
(``access1``) of :func:`cxlctl.figures.node_figures` — HMAT's ``nodeN/access1/initiators``,
or for a CXL node without them the one region's figures the kernel took (never a sum of
its regions), computed from CDAT along the whole path (v6.9+).  ``access0`` (the nearest
initiator, which may be a GPU) is not used: ``node_set_perf_attrs`` passes only
``ACCESS_COORDINATE_CPU`` to ``mempolicy_set_node_perf``, which takes min(read, write)
bandwidth; a node missing either has no usable figure (the kernel's ``auto`` weight for it
is then 1).

The reduction to integers follows HMSDK (``tools/iw_ratio.py``): the largest
weight at most a cap (32 by default, the scale of the kernel's own ``auto``
weights), then divide by the gcd; see :func:`reduce_weights` for how the
rounding is kept honest.  The smallest largest weight that is within 5 % wins,
so the interleave round stays as short as the ratio allows and a short-lived
allocation still sees the ratio.
"""

from __future__ import annotations

import math
from typing import Dict, Iterable, List, Optional, Sequence

from cxlctl.figures import node_figures
from cxlctl.model import Coordinates, Inventory, Node

from .knobs import DEFAULT_MAX_WEIGHT, WEIGHT_MAX, WEIGHT_MIN


def _bw(c: Optional[Coordinates], which: str = "min") -> Optional[int]:
    if c is None:
        return None
    if which == "write":
        return c.write_bandwidth or None
    if not c.read_bandwidth or not c.write_bandwidth:
        return None  # mempolicy_set_node_perf's min(read, write) is 0: no figure to weight by
    return min(c.read_bandwidth, c.write_bandwidth)


def node_bandwidth(inv: Inventory, node: Node, which: str = "min") -> Optional[int]:
    """MB/s of ``node`` (``which``: "min" of read/write, or "write") in the CPU access class,
    as the kernel took it; None when unknown or undetermined (:func:`bandwidth_gaps` says why)."""
    return _bw(node_figures(node, inv.regions, inv.nodes).cpu, which)


def bandwidth_gaps(inv: Inventory, nodes: Sequence[Node]) -> str:
    """Why ``nodes`` have no bandwidth for cxlctl, grouped: nothing describes them, only their
    nearest initiator is described, or their regions differ (:func:`node_figures`)."""
    bare: List[int] = []
    nearest: List[int] = []
    said: List[str] = []
    for node in nodes:
        f = node_figures(node, inv.regions, inv.nodes)
        if f.undetermined:
            said.append(f.undetermined)
        elif f.nearest is not None and f.cpu is None:
            nearest.append(node.id)
        else:
            bare.append(node.id)
    if nearest:
        said.insert(
            0,
            f"node(s) {', '.join(map(str, nearest))} have figures for their nearest initiator only (access0), "
            "none for CPUs (access1), the class the kernel weights by",
        )
    if bare:
        said.insert(0, f"no bandwidth data (HMAT/CDAT) for node(s) {', '.join(map(str, bare))}")
    return "; ".join(said)


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


def kernel_weights(bandwidth: Dict[int, int], memory_nodes: Iterable[int] = ()) -> Dict[int, int]:
    """The weights the kernel's auto mode gives these bandwidths: mm/mempolicy.c
    ``reduce_interleave_weights`` (fed by ``mempolicy_set_node_perf`` with min(read, write)).
    Like the kernel it works over every node with memory (``for_each_node_state(nid, N_MEMORY)``:
    ``bandwidth``'s nodes and ``memory_nodes``), not only the ones a policy will use: the total is
    the sum over all of them, each gets ``32 * bw / total`` rounded down, 1 where that is below 1
    or the node has no bandwidth (0 or absent), and the gcd taken over all of them divides every
    weight.  For figures the kernel cannot see (``cxlctl probe``'s)."""
    table = {n: 0 for n in memory_nodes}
    table.update(bandwidth)
    total = sum(table.values())
    out: Dict[int, int] = {}
    for n, b in table.items():
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


def cxl_bandwidth_gap(inv: Inventory) -> str:
    """Why :func:`cxl_write_bandwidth` is None: the CXL nodes without a write bandwidth."""
    lacking = [n for n in inv.nodes if n.kind == "cxl" and n.has_memory and node_bandwidth(inv, n, "write") is None]
    return bandwidth_gaps(inv, lacking) if lacking else "no CXL memory node"


def cxl_write_bandwidth(inv: Inventory) -> Optional[int]:
    """Smallest write bandwidth among CXL nodes (MB/s, CPU access class as the kernel took it):
    the conservative base for a rate limit."""
    bws = []
    for n in inv.nodes:
        if n.kind == "cxl" and n.has_memory:
            b = node_bandwidth(inv, n, "write")
            if b is None:
                return None
            bws.append(b)
    return min(bws) if bws else None
