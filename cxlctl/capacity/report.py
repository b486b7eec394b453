"""``cxlctl capacity``: per memdev and per node, what is in use, what could be given back now, and what blocks it.

Why whole memdevs: a fabric manager binds and unbinds *logical devices*, and
the host sees each as a Type-3 device arriving or leaving (PCIe hot-add and
hot-remove); until DCD extents reach the kernel, a memdev is the unit that can
go back to the pool.  A memdev in an interleaved region goes with the region's
other memdevs (``release_with``).

The kernel's rules this follows (docs/capacity.md names the functions):

* a block goes offline only through ``offline_pages()`` (mm/memory_hotplug.c),
  which isolates the range and migrates what is there; a page it cannot move
  ends it with EBUSY ("unmovable page").  ZONE_MOVABLE holds only movable
  allocations, so its blocks can be emptied; ZONE_NORMAL takes kernel
  allocations (slab, page tables) that never move, so a block there is a
  blocker the report names, never a promise;
* ``removable`` (``removable_show()``, drivers/base/memory.c) is a legacy file
  that says only whether the kernel was built with ``CONFIG_MEMORY_HOTREMOVE``:
  ``0`` means no memory can ever be removed, ``1`` promises nothing more;
* an online block in more than one zone shows ``none`` in ``valid_zones``
  (``valid_zones_show()``) and cannot be offlined (``offline_pages()``:
  "multizone range");
* ``dev_dax_kmem_remove()`` (drivers/dax/kmem.c) removes the memory of a kmem
  device only when every block is offline; otherwise it keeps the resources
  busy until reboot.  So blocks are offlined first, always.

Pure: :func:`assess` takes an inventory and the processes' facts, so recorded
trees test it; :func:`gather` reads them from a host.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Literal, NamedTuple, Optional, Sequence, Set, Tuple

from cxlctl.hostio import paths
from cxlctl.hostio.host import Host
from cxlctl.hostio.objects import blocks_of, is_online
from cxlctl.hostio.reader import natural_key
from cxlctl.model import DaxDevice, Inventory, Memdev, MemoryBlock, Node
from cxlctl.parse import format_nodelist, format_size

from . import pinnable
from .maygo import Blocker, Hole, foreign_ram, hole_text, must_go_first, port_holes, region_blockers, region_memdevs
from .procs import Proc
from .zones import zone_normal_fix

__all__ = ["Blocker", "MemdevCapacity", "NodeCapacity", "Report", "STATES", "assess", "gather", "to_json"]

#: the memdev states, for scripts: ``free`` (no region: unbind now), ``releasable`` (``capacity release``
#: would give it back), ``blocked`` (a blocker says what to fix first)
STATES = ("free", "releasable", "blocked")
State = Literal["free", "releasable", "blocked"]


class MemdevCapacity(NamedTuple):
    memdev: str
    serial: Optional[int]
    host: Optional[str]  # PCI BDF: what the fabric manager's bind shows up as
    capacity: int  # ram + pmem bytes
    regions: Tuple[str, ...]
    dax_devices: Tuple[str, ...]
    nodes: Tuple[int, ...]  # where its system-ram memory lands
    online: int  # its share (region's bytes / the region's memdevs) of its regions' memory online as System RAM
    movable: int  # of which in ZONE_MOVABLE
    devdax: int  # its share of its regions' devdax devices
    state: State
    releasable: int  # bytes that would go back to the pool now (the whole device, or 0)
    release_with: Tuple[str, ...]  # memdevs that go with it (same interleaved region)
    blockers: Tuple[Blocker, ...]
    #: memdevs whose regions must be released before (or together with) this one's: they hold later
    #: decoders on a port its regions use (blocker ``decoder-order``)
    depends_on: Tuple[str, ...] = ()


class NodeCapacity(NamedTuple):
    node: int
    memdevs: Tuple[str, ...]
    total: Optional[int]
    used: Optional[int]  # MemTotal - MemFree
    online: int
    movable: int
    normal: int
    releasable: int  # bytes online here whose memdevs are all releasable
    blockers: Tuple[Blocker, ...]


class Report(NamedTuple):
    memdevs: Tuple[MemdevCapacity, ...]
    nodes: Tuple[NodeCapacity, ...]
    block_size: Optional[int]
    #: what the report could not see (not root: processes' descriptors, DAX addresses), and each port hole
    notes: Tuple[str, ...]
    #: ports with a free decoder below one in use: the next region through them fails (maygo.port_holes)
    holes: Tuple[Hole, ...] = ()
    #: the host as a whole (.surprise): "ready", or "drain-and-reboot" after a surprise removal, with why
    host_state: str = "ready"
    host_reason: Optional[str] = None
    #: the host's split (capacity/pinnable.py): [capacity] pinnable against its kernel-zone/movable CXL memory
    share: Optional[pinnable.Share] = None

    def memdev(self, name: str) -> Optional[MemdevCapacity]:
        for m in self.memdevs:
            if m.memdev == name:
                return m
        return None


class _Dax(NamedTuple):
    dev: DaxDevice
    blocks: Optional[List[MemoryBlock]]  # None: cannot tell which blocks (not root)


def _dax_of(inv: Inventory, names: Iterable[str]) -> List[_Dax]:
    by_name = {d.name: d for d in inv.dax_devices}
    bs = inv.memory_block_size
    out = []
    for n in names:
        dx = by_name.get(n)
        if dx is None:
            continue
        node = inv.node(dx.target_node) if dx.target_node is not None else None
        blocks: Optional[List[MemoryBlock]] = []
        if dx.mode == "system-ram":
            alone = node is not None and not node.has_cpu and list(node.dax_devices) == [n]
            blocks = blocks_of(dx, node.memory_blocks, bs, alone=alone) if node is not None else None
        out.append(_Dax(dx, blocks))
    return out


def _group(inv: Inventory, m: Memdev) -> Tuple[Set[str], Set[str]]:
    """(regions, memdevs) that go together with ``m``: its regions and every memdev they interleave."""
    regions: Set[str] = set(m.regions)
    devs: Set[str] = {m.name}
    todo = list(regions)
    while todo:
        r = inv.region(todo.pop())
        if r is None:
            continue
        for t in r.targets:
            if t.memdev and t.memdev not in devs:
                devs.add(t.memdev)
                other = inv.memdev(t.memdev)
                for r2 in other.regions if other else ():
                    if r2 not in regions:
                        regions.add(r2)
                        todo.append(r2)
    return regions, devs


def _used(node: Optional[Node]) -> Optional[int]:
    if node is None or node.mem_total is None or node.mem_free is None:
        return None
    return max(0, node.mem_total - node.mem_free)


def _block_blockers(
    dx: _Dax, bs: int, removable: Dict[int, Optional[str]], who: str, split: Optional[pinnable.Share]
) -> List[Blocker]:
    """The blockers of a system-ram DAX device's memory blocks; ``who`` names the memdevs in the fix
    (the group's first: the members of an interleaved region share one paragraph, and release together)."""
    d = dx.dev
    if dx.blocks is None:
        return [
            Blocker(
                "blocks-unknown",
                d.name,
                f"{d.name}: which memory blocks are its cannot be told (its resource is readable by root only)",
                "run `cxlctl capacity` as root",
            )
        ]
    out = []
    online = [b for b in dx.blocks if is_online(b)]
    normal = [b for b in online if b.zone != "Movable"]
    if normal:
        zones = sorted({b.zone or "unknown" for b in normal})
        ids = ", ".join(f"memory{b.id}" for b in normal[:4]) + (" …" if len(normal) > 4 else "")
        out.append(
            Blocker(
                "zone-normal",
                d.name,
                f"{d.name}: {len(normal)} block(s) ({format_size(len(normal) * bs)}) online in "
                f"{'/'.join('ZONE_' + z.upper() for z in zones)} on node {d.target_node} ({ids}): the kernel puts "
                "unmovable pages there (slab, page tables) and offline_pages() fails with EBUSY on one",
                zone_normal_fix(who, split),
            )
        )
    if any(removable.get(b.id) == "0" for b in dx.blocks):
        out.append(
            Blocker(
                "no-hotremove",
                d.name,
                f"{d.name}: the kernel reports its memory blocks not removable (removable=0: built without "
                "CONFIG_MEMORY_HOTREMOVE)",
                "a kernel with CONFIG_MEMORY_HOTREMOVE=y; until then the memory stays until reboot",
            )
        )
    return out


def _proc_blockers(procs: Sequence[Proc], nodes: Set[int], dax: Set[str]) -> List[Blocker]:
    """Processes that would lose their memory: devdax users, binds and cpusets over only ``nodes``,
    and what ``cxlctl launch`` started with these nodes."""
    out = []
    nl = format_nodelist(sorted(nodes))
    for p in procs:
        who = f"PID {p.pid} ({p.name})" if p.name else f"PID {p.pid}"
        for d in sorted(set(p.dax) & dax):
            out.append(
                Blocker(
                    "devdax-open",
                    d,
                    f"{d} is open by {who}: its mappings would lose their memory",
                    f"stop {who} or have it close /dev/{d}",
                )
            )
        if not nodes:
            continue
        bound = [b for b in p.binds if set(b) <= nodes]
        if bound:
            out.append(
                Blocker(
                    "bind-only",
                    f"pid:{p.pid}",
                    f"{who} has a bind policy over node(s) {format_nodelist(bound[0])} only: offlining migrates its "
                    "pages anyway (do_migrate_range() takes any other node with memory and ignores mempolicy), so "
                    "it silently loses the placement it asked for",
                    f"ask its owner: relaunch {who} with other nodes (or move it, `migratepages {p.pid} {nl} 0`), "
                    "or stop it",
                )
            )
        if p.mems_allowed is not None and p.mems_allowed and set(p.mems_allowed) <= nodes:
            out.append(
                Blocker(
                    "cpuset-only",
                    f"pid:{p.pid}",
                    f"{who} may allocate only on node(s) {format_nodelist(p.mems_allowed)} (its cpuset's "
                    "Mems_allowed_list): offlining migrates its pages anyway (do_migrate_range() ignores cpusets), "
                    "so it silently loses the placement its cgroup gave it",
                    f"ask its owner: add another node to its cgroup's cpuset.mems and move it there, or stop {who}",
                )
            )
        if p.launched is not None and set(p.launched) & nodes:
            out.append(
                Blocker(
                    "cxlctl-launch",
                    f"pid:{p.pid}",
                    f"{who} was started by `cxlctl launch` with node(s) {format_nodelist(p.launched)} "
                    f"(CXLCTL_POLICY), node {nl} among them: its KV cache or offload lives there",
                    f"stop {who}, or relaunch it with --mem-nodes leaving out node {nl}",
                )
            )
    return out


def _room_blocker(inv: Inventory, nodes: Set[int], bs: int, online: int) -> List[Blocker]:
    """The pages on ``nodes`` must fit into the free memory of the other nodes."""
    used = 0
    for n in nodes:
        u = _used(inv.node(n))
        if u is None:
            return []
        used += u
    free_elsewhere = sum(n.mem_free or 0 for n in inv.nodes if n.id not in nodes and n.has_memory)
    if used <= free_elsewhere:
        return []
    nl = format_nodelist(sorted(nodes))
    return [
        Blocker(
            "no-room",
            f"node:{nl}",
            f"node {nl} holds {format_size(used)} in use and the other nodes have {format_size(free_elsewhere)} free: "
            "the kernel could not migrate it all",
            "free memory elsewhere (or stop what uses the node) first",
        )
    ]


def _share(inv: Inventory, region: str, bs: int) -> Tuple[int, int, int]:
    """(online, movable, devdax) bytes of one member of ``region``: the region's divided by its memdevs."""
    r = inv.region(region)
    if r is None:
        return 0, 0, 0
    online = movable = devdax = 0
    for dx in _dax_of(inv, r.dax_devices):
        if dx.dev.mode == "system-ram":
            on = [b for b in dx.blocks or () if is_online(b)]
            online += len(on) * bs
            movable += sum(bs for b in on if b.zone == "Movable")
        elif dx.dev.mode == "devdax":
            devdax += dx.dev.size or 0
    foreign, _ = foreign_ram(inv, region)  # System RAM no DAX device owns (firmware-onlined): online all the same
    online += len(foreign or ()) * bs
    movable += sum(bs for b in foreign or () if b.zone == "Movable")
    ways = max(1, len({t.memdev for t in r.targets if t.memdev}))
    return online // ways, movable // ways, devdax // ways


def _memdev_report(
    inv: Inventory,
    m: Memdev,
    procs: Sequence[Proc],
    removable: Dict[int, Optional[str]],
    split: Optional[pinnable.Share] = None,
) -> MemdevCapacity:
    bs = inv.memory_block_size or 0
    cap = (m.ram_size or 0) + (m.pmem_size or 0)
    regions, devs = _group(inv, m)
    dax_names = [d for r in (inv.region(x) for x in sorted(regions)) if r is not None for d in r.dax_devices]
    daxes = _dax_of(inv, dax_names)
    blockers: List[Blocker] = []
    # what stops the regions whatever lives in them (maygo: locked, System RAM not theirs, decoder order)
    depends: Set[str] = set()
    for r in sorted(regions):
        blockers += region_blockers(inv, r, together=regions)
        for other in must_go_first(inv, r):
            if other not in regions:
                depends.update(region_memdevs(inv, other))
    nodes: Set[int] = set()
    online = 0
    devdax_names: Set[str] = set()
    for dx in daxes:
        if dx.dev.mode == "system-ram":
            if dx.dev.target_node is not None:
                nodes.add(dx.dev.target_node)
            online += len([b for b in dx.blocks or () if is_online(b)]) * bs
            blockers += _block_blockers(dx, bs, removable, min(devs, key=natural_key), split)
        elif dx.dev.mode == "devdax":
            devdax_names.add(dx.dev.name)
    for r in sorted(regions):
        foreign, _ = foreign_ram(inv, r)
        nodes.update(b.node for b in foreign or ())
        online += len(foreign or ()) * bs
    shares = [_share(inv, r, bs) for r in m.regions]
    if not regions and m.dpa_allocated:
        blockers.append(
            Blocker(
                "dpa-allocated",
                m.name,
                f"{m.name}: {format_size(m.dpa_allocated)} of DPA is allocated in an endpoint decoder without a region",
                f"free it: write 0 to the decoder's dpa_size (`cxl free-dpa {m.name}`)",
            )
        )
    if online:
        blockers += _proc_blockers(procs, nodes, devdax_names)
        blockers += _room_blocker(inv, nodes, bs, online)
    else:
        blockers += _proc_blockers(procs, set(), devdax_names)
    state: State = "blocked" if blockers else ("free" if not regions else "releasable")
    return MemdevCapacity(
        m.name,
        m.serial,
        m.host,
        cap,
        tuple(sorted(regions)),
        tuple(d.dev.name for d in daxes),
        tuple(sorted(nodes)),
        sum(x[0] for x in shares),
        sum(x[1] for x in shares),
        sum(x[2] for x in shares),
        state,
        0 if blockers else cap,
        tuple(sorted(devs - {m.name})),
        tuple(blockers),
        tuple(sorted(depends - devs)),
    )


def _node_report(inv: Inventory, n: Node, mds: Sequence[MemdevCapacity]) -> NodeCapacity:
    bs = inv.memory_block_size or 0
    on = [b for b in n.memory_blocks if is_online(b)]
    mine = [m for m in mds if n.id in m.nodes]
    blockers: List[Blocker] = []
    for m in mine:
        for b in m.blockers:
            if b not in blockers:
                blockers.append(b)
    # the online memory of the node's DAX devices whose memdevs can all go
    ok = {m.memdev for m in mine if m.state != "blocked"}
    releasable = 0
    for dx in _dax_of(inv, n.dax_devices):
        reg = inv.region(dx.dev.region) if dx.dev.region else None
        members = {t.memdev for t in reg.targets if t.memdev} if reg else set()
        if members and members <= ok:
            releasable += len([b for b in dx.blocks or () if is_online(b)]) * bs
    z = pinnable.node_zones(inv, n)  # the one host model: lendable (ZONE_MOVABLE) and pinnable (kernel zone)
    return NodeCapacity(
        n.id,
        tuple(m.memdev for m in mine),
        n.mem_total,
        _used(n),
        len(on) * bs,
        z.lendable,
        z.pinnable,
        releasable,
        tuple(blockers),
    )


def assess(
    inv: Inventory,
    procs: Sequence[Proc],
    removable: Dict[int, Optional[str]],
    notes: Sequence[str] = (),
    split: Optional[pinnable.Share] = None,
) -> Report:
    """The report for ``inv``: each memdev, then each CXL node (a node with CXL memory), under the host's
    ``split`` when given (its target changes a ``zone-normal`` blocker's fix: :func:`.zones.zone_normal_fix`)."""
    mds = tuple(_memdev_report(inv, m, procs, removable, split) for m in inv.memdevs)
    nodes = tuple(_node_report(inv, n, mds) for n in inv.nodes if n.kind == "cxl")
    holes = tuple(port_holes(inv))
    text = tuple(hole_text(h) for h in holes) + tuple(notes)
    return Report(mds, nodes, inv.memory_block_size, text, holes, share=split)


def _removable(host: Host, inv: Inventory) -> Dict[int, Optional[str]]:
    """``removable`` of each block of a CXL node (``removable_show()``: 1 iff CONFIG_MEMORY_HOTREMOVE)."""
    out: Dict[int, Optional[str]] = {}
    for n in inv.nodes:
        if n.kind != "cxl":
            continue
        for b in n.memory_blocks:
            out[b.id] = host.reader.text(paths.memory_block(b.id) + "/removable")
    return out


def gather(host: Host) -> Report:
    """Scan the host and its processes, then :func:`assess`."""
    from cxlctl.inventory import scan

    return gather_for(host, scan(host))


def gather_for(host: Host, inv: Inventory) -> Report:
    """:func:`assess` of ``inv`` (a scan of ``host`` just made) with the host's processes."""
    import os

    from .procs import read_procs

    has_cxl = any(n.kind == "cxl" for n in inv.nodes) or any(d.mode == "devdax" for d in inv.dax_devices)
    procs = read_procs(host.reader, look_for_fds=has_cxl) if has_cxl else []
    notes = []
    if has_cxl and host.live and os.geteuid() != 0:
        notes.append("not root: other users' processes (their policies and open devdax devices) were not all read")
    share = pinnable.load_share(host, inv, strict=False)
    if share.note:
        notes.append(share.note)
    return assess(inv, procs, _removable(host, inv), notes, share)


def _blocker_json(b: Blocker) -> Dict[str, Any]:
    return {"code": b.code, "subject": b.subject, "message": b.message, "fix": b.fix}


def to_json(rep: Report) -> Dict[str, Any]:
    """The document an orchestrator reads (docs/capacity.md: the contract)."""
    return {
        "block_size": rep.block_size,
        "memdevs": [
            {
                "memdev": m.memdev,
                "serial": m.serial,
                "host": m.host,
                "capacity": m.capacity,
                "regions": list(m.regions),
                "dax_devices": list(m.dax_devices),
                "nodes": list(m.nodes),
                "online": m.online,
                "movable": m.movable,
                "devdax": m.devdax,
                "state": m.state,
                "releasable": m.releasable,
                "release_with": list(m.release_with),
                "depends_on": list(m.depends_on),
                "blockers": [_blocker_json(b) for b in m.blockers],
            }
            for m in rep.memdevs
        ],
        "nodes": [
            {
                "node": n.node,
                "memdevs": list(n.memdevs),
                "total": n.total,
                "used": n.used,
                "online": n.online,
                "movable": n.movable,
                "normal": n.normal,
                # capacity/pinnable.py: what a long-term pin (pinned KV) may keep, what lending may take
                "pinnable": n.normal,
                "lendable": n.movable,
                "releasable": n.releasable,
                "blockers": [_blocker_json(b) for b in n.blockers],
            }
            for n in rep.nodes
        ],
        "totals": {
            "capacity": sum(m.capacity for m in rep.memdevs),
            "releasable": sum(m.releasable for m in rep.memdevs),
            "blocked": sum(m.capacity for m in rep.memdevs if m.state == "blocked"),
        },
        "port_holes": [
            {
                "code": "port-hole",
                "port": h.port,
                "free": list(h.free),
                "regions": sorted({r for _, r in h.held}),
                "message": hole_text(h),
            }
            for h in rep.holes
        ],
        "notes": list(rep.notes),
        "host_state": {"state": rep.host_state, "reason": rep.host_reason},
        "pinnable_share": share_json(rep.share),
    }


def share_json(sh: Optional[pinnable.Share]) -> Optional[Dict[str, Any]]:
    """The host's split: ``[capacity] pinnable`` (``target``, null when not set) against the CXL memory online in
    a kernel zone (``pinnable``: a pinned KV offload stays there; never lendable) and in ZONE_MOVABLE
    (``lendable``), and the zone the next region or adoption gets by default (``next_zone``, ``next_adopt_zone``)."""
    if sh is None:
        return None
    create, why = pinnable.zone_for(sh, pinnable.CREATE)
    adopt, why_adopt = pinnable.zone_for(sh, pinnable.ADOPT)
    return {
        "target": sh.target,
        "source": sh.source,
        "pinnable": sh.pinnable,
        "lendable": sh.lendable,
        "shortfall": sh.shortfall,
        "next_zone": create,
        "next_zone_why": why,
        "next_adopt_zone": adopt,
        "next_adopt_zone_why": why_adopt,
    }
