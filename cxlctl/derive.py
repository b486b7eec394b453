"""Pure post-processing of a raw scan: links, node classification, totals, warnings.

Kept apart from the reads so it can be tested on hand-made inventories and so the
rules that decide what a node *is* live in one place.
"""

from __future__ import annotations

from .hostio.objects import block_range, blocks_of, with_blocks
from .model import Coordinates, DaxDevice, Inventory, Memdev, Node, Totals, Warning_
from .parse import format_size, is_decimal

# typing costs ~5 ms of start-up: only mypy needs it here
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, List, Optional, Sequence, Set, Tuple

    from .model import NodeKind, Region


def _blocks_in(node: Node, start: int, size: int, bs: int) -> List[int]:
    ids = block_range(start, size, bs)
    return [b.id for b in node.memory_blocks if b.id in ids]


def _memdev_allocation(inv: Inventory) -> Tuple[Memdev, ...]:
    """Each memdev with its allocated DPA and its regions, from its endpoint decoders."""
    alloc: Dict[str, int] = {}
    mregions: Dict[str, Set[str]] = {}
    for d in inv.decoders:
        if d.kind == "endpoint" and d.memdev:
            alloc[d.memdev] = alloc.get(d.memdev, 0) + (d.dpa_size or 0)
            if d.region:
                mregions.setdefault(d.memdev, set()).add(d.region)
    return tuple(
        m._replace(dpa_allocated=alloc.get(m.name, 0), regions=tuple(sorted(mregions.get(m.name, ()))))
        for m in inv.memdevs
    )


def _cxl_nodes(inv: Inventory) -> Tuple[Dict[int, Set[str]], Dict[int, List[str]]]:
    """(CXL node → its regions, node → its DAX devices): by DAX provider, or by address in a CXL window."""
    bs = inv.memory_block_size
    # CXL windows (root decoders' HPA ranges; readable as root only)
    windows = [(d.resource, d.size) for d in inv.decoders if d.kind == "root" and d.resource is not None and d.size]

    def in_cxl_window(addr: Optional[int]) -> bool:
        return addr is not None and any(s <= addr < s + z for s, z in windows)

    region_of_dax = {dv: r.name for r in inv.regions for dv in r.dax_devices}
    cxl_nodes: Dict[int, Set[str]] = {}  # node → regions
    dax_of_node: Dict[int, List[str]] = {}
    for dx in inv.dax_devices:
        if dx.target_node is None:
            continue
        dax_of_node.setdefault(dx.target_node, []).append(dx.name)
        region = dx.region or region_of_dax.get(dx.name)
        if dx.provider == "cxl" or in_cxl_window(dx.resource):
            cxl_nodes.setdefault(dx.target_node, set())
            if region:
                cxl_nodes[dx.target_node].add(region)
    # Memory onlined by firmware ("legacy" mode) has no dax device: find it by address.
    if bs:
        for n in inv.nodes:
            for r in inv.regions:
                if r.resource is not None and r.size and _blocks_in(n, r.resource, r.size, bs):
                    cxl_nodes.setdefault(n.id, set()).add(r.name)
            if not n.has_cpu and n.id not in cxl_nodes and any(in_cxl_window(b.id * bs) for b in n.memory_blocks):
                cxl_nodes.setdefault(n.id, set())
    return cxl_nodes, dax_of_node


def _dax_blocks(inv: Inventory, dax_of_node: Dict[int, List[str]]) -> Tuple[DaxDevice, ...]:
    """DAX devices with their memory block counts and zones."""
    bs = inv.memory_block_size
    nodes_by_id = {n.id: n for n in inv.nodes}
    dax_out: List[DaxDevice] = []
    for dx in inv.dax_devices:
        node = nodes_by_id.get(dx.target_node) if dx.target_node is not None else None
        if dx.mode == "system-ram" and node is not None and bs:
            alone = not node.has_cpu and len(dax_of_node.get(node.id, [])) == 1
            blocks = blocks_of(dx, node.memory_blocks, bs, alone=alone)
            if blocks is not None:
                dx = with_blocks(dx, blocks, bs)
        elif dx.mode == "devdax":
            dx = dx._replace(online_memblocks=0)
        dax_out.append(dx)
    return tuple(dax_out)


def _classify_nodes(
    inv: Inventory, cxl_nodes: Dict[int, Set[str]], dax_of_node: Dict[int, List[str]]
) -> Tuple[Node, ...]:
    """Nodes with their kind, tier and what lies behind them (regions, memdevs, DAX devices)."""
    tier_of: Dict[int, int] = {}
    for t in inv.tiers:
        for nid in t.nodes:
            tier_of[nid] = t.id
    region_by_name = {r.name: r for r in inv.regions}
    nodes_out = []
    for n in inv.nodes:
        regs = tuple(sorted(cxl_nodes.get(n.id, ())))
        mds: Set[str] = set()
        for rn in regs:
            reg = region_by_name.get(rn)
            if reg:
                mds.update(t.memdev for t in reg.targets if t.memdev)
        kind: NodeKind = "dram" if n.has_cpu else ("cxl" if n.id in cxl_nodes else "other")
        nodes_out.append(
            n._replace(
                kind=kind,
                tier=tier_of.get(n.id),
                regions=regs,
                memdevs=tuple(sorted(mds)),
                dax_devices=tuple(dax_of_node.get(n.id, ())),
            )
        )
    return tuple(nodes_out)


def _totals(inv: Inventory, memdevs: Sequence[Memdev], cxl: Sequence[Node]) -> Totals:
    bs = inv.memory_block_size

    def online_bytes(n: Node) -> int:
        if bs:
            return bs * sum(1 for b in n.memory_blocks if (b.state or "").startswith("online"))
        return n.mem_total or 0

    cap = sum((m.ram_size or 0) + (m.pmem_size or 0) for m in memdevs)
    return Totals(
        cxl_capacity=cap,
        cxl_in_regions=sum(r.size or 0 for r in inv.regions),
        cxl_online=sum(online_bytes(n) for n in cxl),
        cxl_free=sum(n.mem_free or 0 for n in cxl),
        cxl_unassigned=sum(max(0, (m.ram_size or 0) + (m.pmem_size or 0) - m.dpa_allocated) for m in memdevs),
    )


def totals(inv: Inventory) -> Totals:
    """The totals of an already derived inventory, e.g. one ``status --memdev`` cut down (status_filter)."""
    return _totals(inv, inv.memdevs, [n for n in inv.nodes if n.kind == "cxl"])


def _not_root(notes: Sequence[Tuple[str, str]]) -> List[Warning_]:
    """One warning for all root-only attributes that could not be read."""
    if not any(p for p, why in notes if "permission denied" in why):
        return []
    n_denied = sum(1 for _, why in notes if "permission denied" in why)
    return [
        Warning_(
            "not-root",
            "info",
            f"{n_denied} root-only attributes were unreadable (decoder start, dax resource): "
            "addresses and some block counts are unknown; run as root for the full picture",
        )
    ]


def derive(
    inv: Inventory,
    warnings: Sequence[Warning_],
    notes: Sequence[Tuple[str, str]],
    vanished: Sequence[str],
) -> Inventory:
    memdevs = _memdev_allocation(inv)
    cxl_nodes, dax_of_node = _cxl_nodes(inv)
    dax_out = _dax_blocks(inv, dax_of_node)
    nodes = _classify_nodes(inv, cxl_nodes, dax_of_node)
    cxl = [n for n in nodes if n.kind == "cxl"]
    dram = [n for n in nodes if n.kind == "dram"]
    w: List[Warning_] = list(warnings)
    w.extend(_explain(inv, memdevs, nodes, cxl, dram, dax_out))
    w.extend(_not_root(notes))
    return inv._replace(
        memdevs=memdevs,
        dax_devices=dax_out,
        nodes=nodes,
        totals=_totals(inv, memdevs, cxl),
        warnings=tuple(w),
        notes=tuple(notes),
    )


def _explain(
    inv: Inventory,
    memdevs: Sequence[Memdev],
    nodes: Sequence[Node],
    cxl: Sequence[Node],
    dram: Sequence[Node],
    dax: Sequence[DaxDevice],
) -> List[Warning_]:
    """The operator-facing explanations status prints (stable ``code`` values)."""
    return (
        _cxl_warnings(inv, cxl, dram)
        + _dax_warnings(dax)
        + _knob_warnings(inv, cxl)
        + _memdev_warnings(inv, memdevs)
        + _region_warnings(inv)
    )


def _cxl_warnings(inv: Inventory, cxl: Sequence[Node], dram: Sequence[Node]) -> List[Warning_]:
    """No CXL at all, or CXL nodes the kernel cannot tell from DRAM."""
    out: List[Warning_] = []
    if not inv.buses and not inv.memdevs:
        out.append(
            Warning_(
                "no-cxl",
                "info",
                "no CXL bus found (/sys/bus/cxl is empty or absent): this host has no CXL memory, "
                "or the cxl_acpi/cxl_pci/cxl_mem drivers are not loaded",
            )
        )
    dram_tiers = {n.tier for n in dram if n.tier is not None}
    for n in cxl:
        if n.tier is not None and n.tier in dram_tiers:
            out.append(
                Warning_(
                    "cxl-in-dram-tier",
                    "warning",
                    f"CXL node {n.id} shares memory_tier{n.tier} with DRAM: the kernel got no HMAT/CDAT "
                    "performance data that sets it apart, so demotion and NUMA-balancing promotion "
                    "cannot move pages between them; place memory explicitly (weighted interleave or "
                    "binding, `cxlctl tune recommend`)",
                    f"node{n.id}",
                )
            )
    return out


def _dax_warnings(dax: Sequence[DaxDevice]) -> List[Warning_]:
    """CXL DAX devices in a zone, mode or driver state that keeps their memory from serving."""
    out: List[Warning_] = []
    for d in dax:
        if d.provider == "cxl" and "Movable" in d.zones:
            out.append(
                Warning_(
                    "cxl-movable",
                    "warning",
                    f"{d.name} (node {d.target_node}) is online in ZONE_MOVABLE: long-term pinned buffers "
                    "(CUDA pinned host memory, RDMA, KV-offload buffers) are migrated out of movable "
                    "memory, so they will not stay on CXL; online it in ZONE_NORMAL if the engine pins "
                    "host memory (keep movable only if you need hot-unplug)",
                    d.name,
                )
            )
        if d.provider == "cxl" and d.mode == "devdax":
            out.append(
                Warning_(
                    "cxl-devdax",
                    "info",
                    f"{d.name} is in devdax mode: its memory is a character device, not a NUMA node; "
                    "switch it to system-ram to use it as memory",
                    d.name,
                )
            )
        if d.provider == "cxl" and d.driver is None:
            out.append(Warning_("dax-unbound", "warning", f"{d.name} is bound to no driver", d.name))
    return out


def _knob_warnings(inv: Inventory, cxl: Sequence[Node]) -> List[Warning_]:
    """Kernel knobs that keep allocations off CXL or pages from moving between tiers."""
    out: List[Warning_] = []
    zr = inv.knob_value("vm.zone_reclaim_mode")
    if cxl and zr not in (None, "0"):
        out.append(
            Warning_(
                "zone-reclaim",
                "warning",
                f"vm.zone_reclaim_mode={zr} on a host with CXL nodes: allocations reclaim local DRAM "
                "instead of spilling to CXL; set it to 0",
                "vm.zone_reclaim_mode",
            )
        )
    nb = inv.knob_value("kernel.numa_balancing")
    dem = inv.knob_value("demotion_enabled")
    if cxl and nb is not None and is_decimal(nb) and int(nb) & 2 and dem == "false":
        out.append(
            Warning_(
                "tiering-without-demotion",
                "warning",
                "kernel.numa_balancing has memory tiering on but demotion_enabled is false: hot pages "
                "are promoted to DRAM but cold ones are never demoted to CXL",
                "demotion_enabled",
            )
        )
    return out


def _memdev_warnings(inv: Inventory, memdevs: Sequence[Memdev]) -> List[Warning_]:
    """Memdevs whose capacity is unused, and kernels that cannot create RAM regions for it."""
    out: List[Warning_] = []
    for m in memdevs:
        total = (m.ram_size or 0) + (m.pmem_size or 0)
        free = total - m.dpa_allocated
        if m.driver is None:
            out.append(
                Warning_(
                    "memdev-unbound",
                    "warning",
                    f"{m.name} is not bound to cxl_mem (no endpoint): its capacity cannot be used; "
                    "check `modprobe cxl_mem` and dmesg",
                    m.name,
                )
            )
        elif free > 0:
            out.append(
                Warning_(
                    "memdev-unassigned",
                    "info",
                    f"{m.name} has {format_size(free)} of {format_size(total)} in no region",
                    m.name,
                )
            )
    roots = [d for d in inv.decoders if d.kind == "root"]
    unassigned = any((m.ram_size or 0) > m.dpa_allocated for m in memdevs)
    if roots and unassigned and all(d.can_create_ram is False for d in roots):
        out.append(
            Warning_(
                "no-ram-regions",
                "warning",
                f"this kernel ({inv.kernel or '?'}) cannot create CXL RAM regions: its root decoders have no "
                "create_ram_region (added in Linux 6.3), so volatile capacity not set up by firmware stays "
                "unusable; boot a 6.3+ kernel (6.9+ for weighted interleave)",
            )
        )
    return out


def _region_warnings(inv: Inventory) -> List[Warning_]:
    """Regions that provide no memory or that daxctl cannot manage."""
    out: List[Warning_] = []
    for r in inv.regions:
        if r.committed is False:
            out.append(
                Warning_(
                    "region-uncommitted",
                    "warning",
                    f"{r.name} is not committed (decoders not programmed): it provides no memory; finish or delete it",
                    r.name,
                )
            )
        elif r.committed and r.mode == "ram" and not r.dax_region:
            out.append(
                Warning_(
                    "region-no-dax",
                    "info",
                    f"{r.name} has no dax region: its range is already System RAM (onlined by firmware) "
                    "or the region driver is not bound; daxctl cannot manage it",
                    r.name,
                )
            )
    return out


def expected_access(node: Node, regions: Sequence[Region] = ()) -> Tuple[Optional[Coordinates], Optional[str]]:
    """What a node is expected to deliver, as the inventory read it: (coordinates, source).

    The node's own ``access0`` (HMAT: bandwidth and latency from its nearest
    initiators) when the firmware describes it; else, for a CXL node, the sum of
    its regions' ``access0`` bandwidths (the kernel computes those from the
    devices' CDAT and the path to them) and the largest latency, when every region
    of the node is described; else (None, None).  A node read only through
    ``kinds_of(nodes)`` without regions gets the first source only.
    """
    if node.access0 is not None:
        return node.access0, "node"
    by_name = {r.name: r for r in regions}
    coords = [by_name[n].access0 if n in by_name else None for n in node.regions]
    if not coords or any(c is None for c in coords):
        return None, None

    def total(vals: List[Optional[int]]) -> Optional[int]:
        return None if any(v is None for v in vals) else sum(v for v in vals if v is not None)

    def worst(vals: List[Optional[int]]) -> Optional[int]:
        return None if any(v is None for v in vals) else max(v for v in vals if v is not None)

    cs = [c for c in coords if c is not None]
    c = Coordinates(
        read_bandwidth=total([x.read_bandwidth for x in cs]),
        write_bandwidth=total([x.write_bandwidth for x in cs]),
        read_latency=worst([x.read_latency for x in cs]),
        write_latency=worst([x.write_latency for x in cs]),
    )
    return c, "regions"
