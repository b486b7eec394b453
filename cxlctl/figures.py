"""The performance figures the kernel holds for a node, and the memory tier they give.

Apart from :mod:`cxlctl.derive` (which reads nothing but imports the host readers) so that the
status document, the renderer, the telemetry sampler and the tuning engine can all share this
one rule without import cycles; it needs the records only.
"""

from __future__ import annotations

from .model import Coordinates, Figures, Node

# typing costs ~5 ms of start-up: only mypy needs it here
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional, Sequence

    from .model import Region


#: mm/memory-tiers.c: a tier spans 2**7 of abstract distance; DRAM sits at 4.5 chunks
#: (``MEMTIER_CHUNK_BITS``, ``MEMTIER_ADISTANCE_DRAM`` in include/linux/memory-tiers.h)
MEMTIER_CHUNK_BITS = 7
MEMTIER_ADISTANCE_DRAM = 4 * (1 << MEMTIER_CHUNK_BITS) + (1 << MEMTIER_CHUNK_BITS >> 1)


def dram_reference(nodes: Sequence[Node]) -> Optional[Coordinates]:
    """The DRAM figures the kernel ranks other memory against (``mt_set_default_dram_perf``, fed
    by ``hmat_set_default_dram_perf`` with each CPU+memory node's ``ACCESS_COORDINATE_CPU``): the
    lowest such node's ``access1``; None when there is none or another DRAM node differs from it
    by more than 10 % in any figure (the kernel then reports a mismatch and ranks nothing by figures)."""
    dram = [n.access1 for n in sorted(nodes, key=lambda n: n.id) if n.has_cpu and n.has_memory and n.access1]
    if not dram:
        return None
    ref = dram[0]
    for c in dram[1:]:
        for a, b in zip(c, ref):
            if a is None or b is None or abs(a - b) * 10 > b:
                return None
    return ref


def memory_tier(c: Coordinates, dram: Coordinates) -> Optional[int]:
    """The ``memory_tierN`` id a node with CPU-class figures ``c`` gets, as ``mt_perf_to_adistance``
    computes its abstract distance (integer arithmetic, in the kernel's order) and
    ``find_create_memory_tier`` rounds it down to a chunk; None when a sum is 0 (the kernel refuses)."""
    lat = (c.read_latency or 0) + (c.write_latency or 0)
    bw = (c.read_bandwidth or 0) + (c.write_bandwidth or 0)
    dlat = (dram.read_latency or 0) + (dram.write_latency or 0)
    dbw = (dram.read_bandwidth or 0) + (dram.write_bandwidth or 0)
    if not lat or not bw or not dlat or not dbw:
        return None
    return (MEMTIER_ADISTANCE_DRAM * lat // dlat * dbw // bw) >> MEMTIER_CHUNK_BITS


def node_figures(node: Node, regions: Sequence[Region] = (), nodes: Sequence[Node] = ()) -> Figures:
    """The figures the kernel holds for ``node``: what it weights, tiers and rate-limits by.

    The kernel ranks and weights memory by the CPU access class only (``access1``):
    ``node_set_perf_attrs`` and ``node_update_perf_attrs`` (drivers/base/node.c) hand
    ``ACCESS_COORDINATE_CPU`` to ``mempolicy_set_node_perf``, and ``hmat_calculate_adistance``
    and ``cxl_region_calculate_adistance`` read ``coord[ACCESS_COORDINATE_CPU]``.  ``access0``
    (nearest initiator, possibly a GPU) is carried only to be shown where it differs.

    Where they come from:

    * the node's own ``accessN/initiators`` when it has them: HMAT's figures, or on 6.12 the
      ones ``cxl_region_perf_attrs_callback`` wrote with ``node_set_perf_attrs`` (every region
      of the node in turn, each time the node gets its first memory: the last one stays);
    * else its CXL regions' ``accessN``: on 7.x ``node_update_perf_attrs`` updates only files
      that exist, so a CXL node has none, and the callback takes *one* region's figures — the
      first region probed whose window maps to the node, when the node gets its first memory
      (``NODE_ADDED_FIRST_MEMORY``; ``nodemask_region_seen`` then keeps any later region out).
      A second region changes nothing, so the figures are never a sum.  One region, or several
      that agree, give the figures.  Several that differ: the node's memory tier tells which,
      when exactly one region's figures give it (``cxl_region_calculate_adistance`` answers for
      the first region probed too; ``nodes`` give the DRAM reference); else they are
      undetermined, since sysfs does not show the order the regions were probed in.
    """
    if node.access1 is not None or node.access0 is not None:
        return Figures(node.access1, node.access0, "node")
    by_name = {r.name: r for r in regions}
    regs = [by_name[n] for n in node.regions if n in by_name]
    if not regs:
        return Figures()
    kinds = {(r.access1, r.access0) for r in regs}
    if len(kinds) == 1:
        cpu, nearest = kinds.pop()
        if cpu is None and nearest is None:
            return Figures()
        return Figures(cpu, nearest, "regions", tuple(r.name for r in regs))

    def said(r: Region) -> str:
        c = r.access1
        if c is None:
            return f"{r.name} none"
        return f"{r.name} {c.read_bandwidth or '?'}/{c.write_bandwidth or '?'} MB/s"

    differ = f"node {node.id}'s regions differ ({', '.join(said(r) for r in regs)})"
    ref = dram_reference(nodes)
    # a region without CPU-class figures would be skipped by the tier's chain but not by the
    # figures' callback (7.x marks the node seen first): the tier then says nothing about them
    if ref is not None and node.tier is not None and all(r.access1 is not None for r in regs):
        hit = [r for r in regs if r.access1 is not None and memory_tier(r.access1, ref) == node.tier]
        if hit and len({r.access1 for r in hit}) == 1:
            names = ", ".join(r.name for r in hit)
            near = {r.access0 for r in hit}
            how = (
                f"{differ}; its memory_tier{node.tier} is the one {names}'s figures give (mt_perf_to_adistance), "
                "so the kernel took those: it tiers and weights by the same region, the first one probed "
                "(cxl_region_calculate_adistance, cxl_region_perf_attrs_callback)"
            )
            return Figures(
                hit[0].access1,
                near.pop() if len(near) == 1 else None,
                "regions",
                tuple(r.name for r in hit),
                chosen_by=how,
            )
    why = (
        f"{differ}: the kernel took the figures of the first one probed (cxl_region_perf_attrs_callback), "
        "and sysfs does not show which that was"
    )
    return Figures(source="regions", regions=tuple(r.name for r in regs), undetermined=why)
