"""May this memory go?  The one answer ``capacity``, ``capacity release``, ``region destroy``, adoption and
doctor share: what stops a region from being torn down, from the kernel's rules (docs/capacity.md, "May
it go?").

Per region, three rules that do not depend on what lives in the memory:

* **locked** — a decoder the firmware committed and locked (``decoderX.Y/locked`` = 1,
  ``CXL_DECODER_F_LOCK``, set by ``init_hdm_decoder()`` in drivers/cxl/core/hdm.c) makes the region
  locked (``CXL_REGION_F_LOCK``) and ``commit_store()`` in drivers/cxl/core/region.c refuses its decommit
  with EPERM.  Offlining and unbinding first would only take the memory away for nothing;
* **System RAM without a DAX device of the region** — ``cxl_region_probe()`` (region.c) gives a RAM
  region no DAX region when any part of its range is already online as System RAM (the firmware onlined
  it at boot).  That memory is the page allocator's: decommitting the decoders under it is a machine
  check.  Default deny: every online memory block in the region's address range that is not a block of
  one of the region's own kmem DAX devices blocks; when the range cannot be read (root only) and the
  region has no DAX device, that blocks too;
* **decoder order** — a port's decoders are allocated and committed in instance order and must be freed
  from the highest down: ``cxl_dpa_free()`` (hdm.c) frees only the endpoint's ``hdm_end`` decoder; before
  6.12 ``cxl_decoder_reset()`` refused an out-of-order reset (EBUSY), from 6.12 it allows it but
  ``cxl_decoder_commit()`` wants ``commit_end + 1`` and ``match_free_decoder()``/``check_commit_order()``
  (region.c) refuse every new decoder on that port while a lower one is disabled: the next region
  through the port fails until the hole is closed.  So a region whose decoder on some port lies below
  another region's must not go first, whatever the kernel version.

Pure functions of an :class:`~cxlctl.model.Inventory`, so recorded trees test them.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Set, Tuple

from cxlctl.hostio import paths
from cxlctl.hostio.objects import block_range, blocks_of, is_online
from cxlctl.model import Inventory, MemoryBlock
from cxlctl.parse import format_size
from cxlctl.regions.topo import decoder_index


class Blocker(NamedTuple):
    """Why capacity cannot be given back now.  ``code`` is stable for scripts; ``fix`` says what to do."""

    code: str
    subject: str
    message: str
    fix: str


#: every blocker code, for scripts and the JSON contract (docs/capacity.md lists the kernel's reason of each)
CODES = (
    "decoder-locked",
    "system-ram-no-dax",
    "system-ram-unknown",
    "decoder-order",
    "zone-normal",
    "no-hotremove",
    "hugetlb",
    "devdax-open",
    "bind-only",
    "cpuset-only",
    "cxlctl-launch",
    "no-room",
    "dpa-allocated",
    "blocks-unknown",
)


#: why a region cannot go before one holding a later decoder on its ports (the kernel's rule)
ORDER_REASON = (
    "the kernel frees a port's decoders from the highest down (cxl_dpa_free(), cxl_decoder_reset()); out of "
    "order, kernels before 6.12 refuse the decommit and later ones leave a hole that refuses every new region "
    "through the port (match_free_decoder())"
)


def locked_by_region(inv: Inventory) -> Dict[str, List[str]]:
    """Region → its decoders the firmware locked (``locked`` = 1), in name order."""
    out: Dict[str, List[str]] = {}
    for d in inv.decoders:
        if d.locked and d.region:
            out.setdefault(d.region, []).append(d.name)
    return {r: sorted(ds) for r, ds in sorted(out.items())}


def _ids(blocks: Sequence[MemoryBlock]) -> str:
    return ", ".join(f"memory{b.id}" for b in blocks[:4]) + (" …" if len(blocks) > 4 else "")


def foreign_ram(inv: Inventory, region: str) -> Tuple[Optional[List[MemoryBlock]], bool]:
    """(online blocks in ``region``'s address range that none of its kmem DAX devices owns, known).

    ``known`` is False when it cannot be told: the region's range is unreadable (not root) and it has no
    DAX device (with a DAX device the kernel's ``cxl_region_probe()`` found no System RAM there, and the
    device's blocks are the only way memory got online in the range)."""
    r = inv.region(region)
    if r is None:
        return [], True
    bs = inv.memory_block_size
    if r.resource is None or not r.size or not bs:
        return [], bool(r.dax_devices) or r.mode == "pmem" or not r.committed
    ids = set(block_range(r.resource, r.size, bs))
    owned: Set[int] = set()
    by_name = {d.name: d for d in inv.dax_devices}
    for name in r.dax_devices:
        dx = by_name.get(name)
        if dx is None or dx.mode != "system-ram":
            continue
        node = inv.node(dx.target_node) if dx.target_node is not None else None
        mine = blocks_of(dx, node.memory_blocks, bs, alone=False) if node is not None else None
        if mine is None:  # its address unreadable: trust cxl_region_probe() (no System RAM at probe)
            return [], True
        owned.update(b.id for b in mine)
    online = sorted(
        (b for n in inv.nodes for b in n.memory_blocks if b.id in ids and b.id not in owned and is_online(b)),
        key=lambda b: b.id,
    )
    return online, True


def must_go_first(inv: Inventory, region: str) -> Dict[str, List[str]]:
    """Other region → why it must be torn down before ``region``: it holds a higher decoder on a port (or
    endpoint) where ``region`` holds one."""
    mine: Dict[str, str] = {}
    for d in inv.decoders:
        if d.kind != "root" and d.region == region:
            mine[d.port] = d.name
    out: Dict[str, List[str]] = {}
    for d in inv.decoders:
        if d.kind == "root" or not d.region or d.region == region or d.port not in mine:
            continue
        if decoder_index(d.name) > decoder_index(mine[d.port]):
            out.setdefault(d.region, []).append(f"{d.name} on {d.port}, after {mine[d.port]}")
    return {r: sorted(v) for r, v in sorted(out.items())}


def region_memdevs(inv: Inventory, region: str) -> List[str]:
    r = inv.region(region)
    return sorted({t.memdev for t in r.targets if t.memdev}) if r is not None else []


def region_blockers(inv: Inventory, region: str, together: Iterable[str] = ()) -> List[Blocker]:
    """What stops ``region`` from being torn down, whatever lives in its memory: firmware-locked decoders,
    System RAM that is not its DAX devices', and later regions on its ports not in ``together`` (the
    regions torn down with it)."""
    out: List[Blocker] = []
    locked = locked_by_region(inv).get(region)
    if locked:
        out.append(
            Blocker(
                "decoder-locked",
                region,
                f"{region} was committed and locked by the firmware ({', '.join(paths.decoder_locked(d) for d in locked[:2])}"
                f"{' …' if len(locked) > 2 else ''} = 1): the kernel refuses its decommit (commit_store(): EPERM)",
                "none from Linux: the region stays until the firmware setup leaves CXL memory to the OS",
            )
        )
    foreign, known = foreign_ram(inv, region)
    bs = inv.memory_block_size or 0
    if not known:
        out.append(
            Blocker(
                "system-ram-unknown",
                region,
                f"{region} has no DAX device and its address range is readable by root only: whether its memory "
                "is online as System RAM cannot be told",
                "run as root",
            )
        )
    elif foreign:
        nodes = sorted({b.node for b in foreign})
        out.append(
            Blocker(
                "system-ram-no-dax",
                region,
                f"{region}: {len(foreign)} block(s) ({format_size(len(foreign) * bs)}) of its range are online as "
                f"System RAM on node {', '.join(map(str, nodes))} ({_ids(foreign)}) without a DAX device of the "
                "region (onlined by the firmware: cxl_region_probe() then gives the region none); the page "
                "allocator uses that memory, and decommitting the decoders under it would be a machine check",
                "none while it is online: keep it, or have the firmware leave the range to the OS (Soft Reserved) "
                "so the kernel builds a DAX device for it",
            )
        )
    skip = set(together) | {region}
    for other, why in must_go_first(inv, region).items():
        if other in skip:
            continue
        devs = region_memdevs(inv, other)
        both = sorted(set(region_memdevs(inv, region)) | set(devs))
        out.append(
            Blocker(
                "decoder-order",
                other,
                f"{region} cannot go before {other} ({'; '.join(why)}): {ORDER_REASON}",
                (
                    f"release {other} ({', '.join(devs)}) first, or both together: "
                    f"`cxlctl capacity release {' '.join(both)}`"
                    if devs
                    else f"{other} has no memdev: destroy it first (`cxlctl region destroy {other} --force`)"
                ),
            )
        )
    return out


def teardown_order(inv: Inventory, regions: Iterable[str]) -> List[str]:
    """``regions`` in an order the kernel accepts: each after every region of the set that holds a
    higher decoder on one of its ports (ties by name).  Regions outside the set are not considered
    (:func:`region_blockers` refuses those)."""
    todo = sorted(set(regions))
    after: Dict[str, Set[str]] = {r: {o for o in must_go_first(inv, r) if o in todo} for r in todo}
    out: List[str] = []
    while todo:
        ready = [r for r in todo if not (after[r] - set(out))]
        if not ready:  # a cycle cannot come from in-order commits; keep the rest by name
            ready = todo[:1]
        out.append(ready[0])
        todo.remove(ready[0])
    return out


class Hole(NamedTuple):
    port: str
    free: Tuple[str, ...]  # decoders without a region below a decoder in use
    held: Tuple[Tuple[str, str], ...]  # (decoder, region) above them


def port_holes(inv: Inventory) -> List[Hole]:
    """Ports (not endpoints) with a decoder free below one in use: a region torn down out of order on
    6.12+ (``cxl_decoder_reset()`` allowed it); ``match_free_decoder()``/``check_commit_order()`` give no
    new decoder there until the regions above are gone too."""
    by_port: Dict[str, List[Tuple[int, str, Optional[str]]]] = {}
    for d in inv.decoders:
        if d.kind == "switch":
            by_port.setdefault(d.port, []).append((decoder_index(d.name), d.name, d.region))
    out = []
    for port, decs in sorted(by_port.items()):
        decs.sort()
        used = [i for i, _, r in decs if r]
        if not used:
            continue
        top = max(used)
        free = tuple(n for i, n, r in decs if not r and i < top)
        if free:
            out.append(Hole(port, free, tuple((n, r) for i, n, r in decs if r and i > decoder_index(free[0]))))
    return out


def hole_text(h: Hole) -> str:
    regions = sorted({r for _, r in h.held})
    return (
        f"{h.port} has {', '.join(h.free)} free below {', '.join(n for n, _ in h.held)} "
        f"({', '.join(regions)}): a region was torn down out of order, and the kernel gives no new decoder "
        f"on {h.port} (match_free_decoder(): out of order shutdown) until {', '.join(regions)} "
        f"{'goes' if len(regions) == 1 else 'go'} too"
    )
