"""Which online memory of a node may hold a long-term pinned page (pinnable), which may be lent (movable).

The one host model read by ``launch`` (where a pinned KV offload ends), ``capacity`` (both figures per
CXL node) and doctor (an engine that pins KV on a host whose CXL memory is all movable).

The kernel's rule (mm/gup.c): a ``FOLL_LONGTERM`` pin -- NVIDIA's driver for ``cudaHostRegister`` on x86,
io_uring's fixed buffers -- goes through ``check_and_migrate_movable_folios()`` /
``check_and_migrate_movable_pages_or_folios()``: ``collect_longterm_unpinnable_folios()`` lists every folio
``folio_is_longterm_pinnable()`` (include/linux/mm.h) rejects -- ZONE_MOVABLE, CMA -- and
``migrate_longterm_unpinnable_folios()`` migrates them with ``alloc_migration_target()`` (mm/migrate.c),
``nid = NUMA_NO_NODE`` (so the source folio's own node) and ``GFP_USER`` without ``__GFP_MOVABLE``: the new
page comes from a kernel zone, on the source node's zonelist -- the CXL node's own ZONE_NORMAL first, then
the next node of its zonelist with a kernel zone (``build_zonelists()``/``find_next_best_node()``: nearest
first, and at equal distance a node without CPUs before one with them, :func:`zonelist_order`).  The file's memory policy (a tmpfs ``mpol=``) is
not consulted.  So:

* **pinnable**: bytes of a node's online memory blocks in a kernel zone (Normal, DMA32, DMA): a pinned
  page stays there;
* **lendable**: bytes in ZONE_MOVABLE: what ``capacity release``/lending can take back (offline_pages()
  migrates it away), and what a long-term pin empties.

**The host's split** -- one setting, ``[capacity] pinnable`` in the daemon's configuration (a size: the CXL
memory to keep in a kernel zone for pinned KV offloads), read by :func:`share` and decided by
:func:`zone_for` for everyone: ``region create``'s default zone, ``capacity adopt`` and the daemon's
adoption, ``capacity`` (target against the host), ``launch`` (a pinned offload larger than the share)
and doctor (a shortfall; a kernel-zone CXL device that is part of the share is not a lending mistake).
While the host's pinnable CXL memory is below the target the next region is onlined in ZONE_NORMAL
(``online_kernel``), else in ZONE_MOVABLE (``online_movable``): ``zone_for_pfn_range()``
(mm/memory_hotplug.c) puts each block where its online type says.  Without the setting, a region built
by hand is ZONE_NORMAL (``region create``'s default since before the split) and adopted capacity takes
``[capacity] zone`` (ZONE_MOVABLE by default): memory that arrives from a pool is lent.

Figures are whole memory blocks (``/sys/devices/system/memory/memoryN/state`` and ``valid_zones``); how
much of a zone is free is not in the node's meminfo, so the free pinnable memory of a node is taken as
``min(pinnable, MemFree)``, an upper bound.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Dict, Iterable, List, Optional, Tuple

from cxlctl.hostio.objects import is_online
from cxlctl.model import Inventory, Node
from cxlctl.namedrecord import NamedTuple
from cxlctl.parse import format_size

if TYPE_CHECKING:
    from cxlctl.config import Config
    from cxlctl.hostio.host import Host

#: how to give CXL memory a kernel zone, for a pinned KV offload
NORMAL_FIX = (
    "online some CXL memory in ZONE_NORMAL for the pinned KV (a region or DAX device onlined "
    "`--zone normal`: `cxlctl region create --zone normal`, `cxlctl dax reconfigure daxX.Y --mode system-ram "
    "--zone normal`, `daxctl reconfigure-device --mode=system-ram --no-movable`), or map a devdax device "
    "(`--devdax`)"
)


class NodeZones(NamedTuple):
    node: int
    pinnable: int  # bytes online in a kernel zone (a long-term pin keeps the page)
    lendable: int  # bytes online in ZONE_MOVABLE (a long-term pin migrates the page away)
    known: bool  # the node's memory blocks were readable (else both are 0 and nothing is claimed)


def node_zones(inv: Inventory, node: Node) -> NodeZones:
    """Pinnable and lendable bytes of ``node``'s online memory blocks."""
    bs = inv.memory_block_size or 0
    online = [b for b in node.memory_blocks if is_online(b)]
    if not online or not bs:
        return NodeZones(node.id, 0, 0, False)
    movable = sum(1 for b in online if (b.zone or "").lower() == "movable")
    return NodeZones(node.id, (len(online) - movable) * bs, movable * bs, True)


def zones(inv: Inventory, nodes: Optional[Iterable[int]] = None) -> Dict[int, NodeZones]:
    """:func:`node_zones` of ``nodes`` (default: every node with memory)."""
    want = set(nodes) if nodes is not None else None
    return {n.id: node_zones(inv, n) for n in inv.nodes if n.has_memory and (want is None or n.id in want)}


def cxl_zones(inv: Inventory) -> Dict[int, NodeZones]:
    """:func:`node_zones` of every CXL node with memory."""
    return zones(inv, [n.id for n in inv.nodes if n.kind == "cxl"])


def pinnable_free(inv: Inventory, node: Node) -> int:
    """Free memory a pinned page may take on ``node``: ``min(pinnable, MemFree)``; a node whose blocks
    are unknown counts as all kernel zone (its MemFree)."""
    z = node_zones(inv, node)
    free = node.mem_free or 0
    return min(z.pinnable, free) if z.known else free


def all_movable(inv: Inventory, nodes: Iterable[int]) -> List[int]:
    """The nodes among ``nodes`` whose known online memory is all ZONE_MOVABLE."""
    out = []
    for nid, z in zones(inv, nodes).items():
        if z.known and z.pinnable == 0 and z.lendable > 0:
            out.append(nid)
    return sorted(out)


def zonelist_order(
    inv: Inventory, src: int, nodes: Iterable[int], dist: Callable[[Inventory, int, int], int]
) -> List[int]:
    """``nodes`` in the order of ``src``'s zonelist, where an allocation for a page of node ``src`` falls back
    (``alloc_migration_target()`` with ``NUMA_NO_NODE`` asks the source node's zonelist): mm/page_alloc.c
    ``build_zonelists()`` takes the nodes by ``find_next_best_node()``, whose value is the SLIT distance, plus 1
    for a node below ``src`` ("prefer the next node"), plus ``PENALTY_FOR_NODE_WITH_CPUS`` (1) for a node with
    CPUs ("give preference to headless and unused nodes"); ties go by ``node_load`` (here: the id).  So at
    equal distances a CPU-less CXL node's pages fall back to another CPU-less node before DRAM."""
    cpus = {n.id for n in inv.nodes if n.has_cpu}
    return sorted(nodes, key=lambda m: (dist(inv, src, m) + (m < src) + (m in cpus), m))


def after_pin(
    inv: Inventory, placed: Dict[int, int], dist: Callable[[Inventory, int, int], int]
) -> Tuple[Dict[int, int], Dict[int, int], int]:
    """(bytes per node after a long-term pin, bytes moved off each node, bytes no kernel zone has room for)
    of an offload whose pages sit at ``placed`` before the pin (module docstring: each node keeps up to
    its free pinnable memory, the rest goes to the first node of its zonelist with free kernel-zone memory,
    :func:`zonelist_order`)."""
    by_id = {n.id: n for n in inv.nodes if n.has_memory}
    room = {nid: pinnable_free(inv, n) for nid, n in by_id.items()}
    after: Dict[int, int] = {}
    moved: Dict[int, int] = {}
    lost = 0
    for nid, b in sorted(placed.items()):
        keep = min(b, room.get(nid, 0))
        room[nid] = room.get(nid, 0) - keep
        if keep:
            after[nid] = after.get(nid, 0) + keep
        rest = b - keep
        if rest:
            moved[nid] = rest
        for m in zonelist_order(inv, nid, [m for m in room if m != nid and room[m] > 0], dist):
            if not rest:
                break
            take = min(rest, room[m])
            after[m] = after.get(m, 0) + take
            room[m] -= take
            rest -= take
        lost += rest
    return dict(sorted(after.items())), moved, lost


# ------------------------------------------------------------------ the host's split (one setting)

#: who asks for a zone: a region built by hand (``region create``) or capacity that arrived (adoption)
CREATE, ADOPT = "create", "adopt"


class Share(NamedTuple):
    """``[capacity] pinnable`` against the host's CXL memory now (module docstring, "The host's split")."""

    target: Optional[int]  # bytes; None: the setting is not there
    pinnable: int  # CXL bytes online in a kernel zone
    lendable: int  # CXL bytes online in ZONE_MOVABLE
    adopt_zone: str = "movable"  # [capacity] zone: adoption's zone without a target
    source: Optional[str] = None  # the configuration file read (None: defaults)
    note: Optional[str] = None  # why the configuration could not be read (the defaults were used)

    @property
    def shortfall(self) -> int:
        """Bytes of kernel-zone CXL memory the host lacks for the target (0: met, or no target)."""
        return max(0, self.target - self.pinnable) if self.target is not None else 0

    @property
    def setting(self) -> str:
        """``[capacity] pinnable = 16 GiB`` (or that it is not set), naming the file."""
        where = f" ({self.source})" if self.source else ""
        if self.target is None:
            return f"[capacity] pinnable is not set{where}"
        return f"[capacity] pinnable = {format_size(self.target)}{where}"


def share(inv: Inventory, cfg: Optional[Config] = None, note: Optional[str] = None) -> Share:
    """The host's split: the configuration's target (``cfg``; defaults when None) and the CXL nodes' zones."""
    z = cxl_zones(inv)
    target = cfg.pinnable_target if cfg is not None else None
    return Share(
        target,
        sum(v.pinnable for v in z.values()),
        sum(v.lendable for v in z.values()),
        cfg.adopt_zone if cfg is not None else "movable",
        cfg.source if cfg is not None else None,
        note,
    )


def load_share(host: Host, inv: Inventory, *, strict: bool = True) -> Share:
    """:func:`share` with the daemon's configuration (``<root>/etc/cxlctl/cxlctl.toml``).  A bad file is the
    configuration's error (exit 2) when ``strict`` (a command about to write); else the defaults, with a note
    (a report)."""
    from cxlctl import config

    try:
        cfg = config.load(host, profile=False)  # only [capacity] is read here
    except config.ConfigError as e:
        if strict:
            raise
        return share(inv, None, f"the configuration was not read ({e}); the split is judged without a target")
    return share(inv, cfg)


def zone_for(sh: Share, origin: str) -> Tuple[str, str]:
    """THE decision: (zone, why) for the next CXL memory onlined as System RAM -- ``region create`` without
    ``--zone`` (``origin`` CREATE), ``capacity adopt`` without ``--zone`` and the daemon's adoption (ADOPT).
    Kernel zone while the host's pinnable CXL memory is below the target, movable otherwise."""
    if sh.target is None:
        if origin == ADOPT:
            return sh.adopt_zone, f"{sh.setting}: adopted capacity takes [capacity] zone = {sh.adopt_zone!r}"
        return "normal", f"{sh.setting}: a region built by hand is onlined in the kernel zone"
    have = f"the host's pinnable CXL memory ({format_size(sh.pinnable)})"
    if sh.pinnable < sh.target:
        return "normal", f"{have} is below {sh.setting}: this one serves pinned KV (kernel zone)"
    return "movable", f"{have} meets {sh.setting}: this one is lendable (ZONE_MOVABLE)"


def pinnable_nodes(inv: Inventory, nodes: Iterable[int]) -> List[int]:
    """The nodes among ``nodes`` with online memory in a kernel zone (where a pinned page stays)."""
    return sorted(nid for nid, z in zones(inv, nodes).items() if z.known and z.pinnable > 0)
