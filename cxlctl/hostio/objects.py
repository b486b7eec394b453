"""Reads of one kernel object at a time, returning the model's own types.

The inventory scan reads DAX devices, memory blocks and knobs with these same
functions, so a fresh read (region and DAX commands re-reading a device after
each step, the daemon onlining new memory) parses exactly as ``status`` does,
goes through :class:`~cxlctl.hostio.reader.Reader` (bounded reads, ``Vanished``,
notes), and is what ``cxlctl record`` captures.  Which memory blocks belong to
a DAX device is decided here once (:func:`block_range`, :func:`blocks_of`), and
onlining a block is written once (:func:`set_block_state`).
"""

from __future__ import annotations

import os

from cxlctl.model import DaxDevice, Knob, MemoryBlock, Warning_
from cxlctl.parse import U64_MAX, is_decimal, parse_hex, parse_int, parse_nodelist

from . import paths
from .reader import Reader

# typing costs ~5 ms of start-up: only mypy needs it here
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, List, Optional, Sequence, Tuple


#: DAX driver -> daxctl's mode name
DRIVER_MODE: Dict[str, str] = {"kmem": "system-ram", "device_dax": "devdax", "fsdev_dax": "famfs"}


#: attributes where a negative number is a real value (-1 = NUMA_NO_NODE / no class)
_SIGNED = ("/numa_node", "/target_node", "qos_class")
_HEX = b"0123456789abcdefABCDEF"


def text_of(b: Optional[bytes]) -> Optional[str]:
    """:meth:`Reader.text` of content already read (:meth:`Reader.attrs`)."""
    return None if b is None else b.decode("utf-8", "replace").strip()


class Attrs:
    """Typed attribute reads over a :class:`Reader`; odd values become None plus a warning."""

    def __init__(self, reader: Reader) -> None:
        self.r = reader
        self.warnings: List[Warning_] = []

    def _bad(self, path: str, value: str, what: str) -> None:
        self.warnings.append(
            Warning_("unparsable", "warning", f"{path}: cannot parse {value!r} as {what}; treated as unknown", path)
        )

    def num(self, path: str, *, hexa: bool = False, unset_is_none: bool = False) -> Optional[int]:
        return self._num(path, self.r.text(path), hexa, unset_is_none)

    def _num(self, path: str, t: Optional[str], hexa: bool, unset_is_none: bool) -> Optional[int]:
        if t is None or t == "":
            return None
        try:
            v = parse_hex(t) if hexa else parse_int(t)
        except ValueError:
            self._bad(path, t, "a hex number" if hexa else "a number")
            return None
        if unset_is_none and v == U64_MAX:
            return None
        if v < 0 and not path.endswith(_SIGNED):
            self._bad(path, t, "a non-negative number")
            return None
        return v

    def num_of(self, d: str, name: str, b: Optional[bytes], *, unset_is_none: bool = False) -> Optional[int]:
        """:meth:`num` of attribute ``d/name`` whose content ``b`` was already read (:meth:`Reader.attrs`).

        The kernel's usual spellings -- ASCII decimal digits, ``0x`` and up to
        sixteen hex digits -- are parsed from the bytes directly (``bytes.isdigit``
        is ASCII-only); anything else takes :meth:`num`'s checks and warnings.
        """
        if b is None:
            return None
        t = b.strip()
        if t.isdigit() and len(t) < 20:  # below 10**19: inside 64 bits, never U64_MAX
            return int(t)
        if t[:2] == b"0x" and 2 < len(t) <= 18 and not t[2:].lstrip(_HEX):
            v = int(t, 16)
            return None if unset_is_none and v == U64_MAX else v
        path = f"{d}/{name}"
        if t[:1] == b"-" and t[1:].isdigit() and len(t) < 20 and path.endswith(_SIGNED):
            return -int(t[1:])  # numa_node -1 (NUMA_NO_NODE), a qos_class of -1
        return self._num(path, b.decode("utf-8", "replace").strip(), False, unset_is_none)

    def flag_of(self, d: str, name: str, b: Optional[bytes]) -> Optional[bool]:
        """:meth:`flag` of content already read."""
        if b is None:
            return None
        t = b.strip()
        if t == b"0":
            return False
        if t == b"1":
            return True
        return self._flag(f"{d}/{name}", b.decode("utf-8", "replace").strip())

    def flag(self, path: str) -> Optional[bool]:
        return self._flag(path, self.r.text(path))

    def _flag(self, path: str, t: Optional[str]) -> Optional[bool]:
        if t is None or t == "":
            return None
        low = t.lower()
        if low in ("1", "y", "yes", "true", "on"):
            return True
        if low in ("0", "n", "no", "false", "off"):
            return False
        self._bad(path, t, "a boolean")
        return None

    def nodelist(self, path: str) -> Optional[Tuple[int, ...]]:
        t = self.r.text(path)
        if t is None:
            return None
        try:
            return parse_nodelist(t, limit=1 << 16)
        except ValueError:
            self._bad(path, t, "a list")
            return None


def _is_region(name: str) -> bool:
    return name.startswith("region") and is_decimal(name[6:])


def dax_device(a: Attrs, name: str) -> DaxDevice:
    """One DAX device as the model describes it (block counts are filled in by :func:`with_blocks`)."""
    r = a.r
    dev = f"{paths.DAX_DEVICES}/{name}"
    real = r.devpath(dev)
    parent = os.path.dirname(real)
    pbase = os.path.basename(parent)
    gbase = os.path.basename(os.path.dirname(parent))
    region = gbase if _is_region(gbase) else None
    provider = "cxl" if region else ("hmem" if pbase.startswith("hmem") else "other")
    driver = r.link(f"{dev}/driver")
    target = a.num(f"{dev}/target_node")
    numa = a.num(f"{dev}/numa_node")
    prefix = paths.SYS_DEVICES + "/"
    path = parent[len(paths.SYS_DEVICES) :] if parent.startswith(prefix) else parent
    return DaxDevice(
        name=name,
        size=a.num(f"{dev}/size"),
        target_node=target if target is not None and target >= 0 else None,
        numa_node=numa if numa is not None and numa >= 0 else None,
        align=a.num(f"{dev}/align"),
        resource=a.num(f"{dev}/resource"),
        memmap_on_memory=a.flag(f"{dev}/memmap_on_memory"),
        driver=driver,
        mode=DRIVER_MODE.get(driver or "", driver),
        region=region,
        provider=provider,
        dax_region_path=path,
    )


_BLOCK_ATTRS = ("state", "valid_zones")


def memory_block(r: Reader, path: str, bid: int, nid: int) -> MemoryBlock:
    """Memory block ``bid`` whose directory is ``path`` (under a node or the memory bus)."""
    state, zones = (text_of(b) for b in r.attrs(path, _BLOCK_ATTRS))
    zone = zones.split()[0] if zones else None
    return MemoryBlock(bid, nid, state, zone)


def block_size(a: Attrs) -> Optional[int]:
    """``block_size_bytes`` (hex); None when absent, unparsable or not positive."""
    v = a.num(paths.BLOCK_SIZE, hexa=True)
    return v if v is not None and v > 0 else None


def block_range(start: int, size: int, bs: int) -> range:
    """Ids of the memory blocks covering ``[start, start + size)``: the one rule for
    "which blocks belong to this DAX device (or region)"."""
    return range(start // bs, (start + size - 1) // bs + 1)


def blocks_of(
    dx: DaxDevice, node_blocks: Sequence[MemoryBlock], bs: Optional[int], *, alone: bool
) -> Optional[List[MemoryBlock]]:
    """The blocks of ``dx`` among its target node's blocks; None when that cannot be told.

    By address when the device's resource is readable (root only); otherwise,
    when ``alone`` (a CPU-less node holding only this device), all of the node's.
    """
    if dx.resource is not None and dx.size and bs:
        ids = block_range(dx.resource, dx.size, bs)
        return [b for b in node_blocks if b.id in ids]
    if alone:
        return list(node_blocks)
    return None


def is_online(b: MemoryBlock) -> bool:
    return (b.state or "").startswith("online")


def with_blocks(dx: DaxDevice, blocks: Sequence[MemoryBlock], bs: Optional[int]) -> DaxDevice:
    """``dx`` with its online/total block counts and zones filled in from ``blocks``."""
    online = [b for b in blocks if is_online(b)]
    total = dx.size // bs if dx.size and bs else len(blocks)
    zones = tuple(sorted({b.zone for b in online if b.zone}))
    return dx._replace(online_memblocks=len(online), total_memblocks=total, zones=zones)


def dax_blocks(a: Attrs, dx: DaxDevice, bs: Optional[int]) -> Tuple[MemoryBlock, ...]:
    """Fresh state of the memory blocks of ``dx`` (by address; needs its resource and the block size)."""
    if dx.resource is None or not dx.size or not bs:
        return ()
    out = []
    node = dx.target_node if dx.target_node is not None else -1
    for bid in block_range(dx.resource, dx.size, bs):
        d = paths.memory_block(bid)
        if a.r.isdir(d):
            out.append(memory_block(a.r, d, bid, node))
    return tuple(out)


def read_block(root: str, bid: int) -> MemoryBlock:
    """Fresh state of one memory block (node -1: not looked up)."""
    return memory_block(Reader(root), paths.memory_block(bid), bid, -1)


def knob(r: Reader, name: str, path: str) -> Knob:
    """A knob's current text; ``supported`` False when the kernel has no such file."""
    v = r.text(path)
    return Knob(name, path, v, v is not None)


def knobs(r: Reader) -> Tuple[Knob, ...]:
    """The registry's single-file knobs, as ``status`` lists them."""
    return tuple(knob(r, n, paths.knob_path(n)) for n in paths.STATUS_KNOBS)


def set_block_state(root: str, bid: int, state: str) -> int:
    """Write ``state`` (``online_movable``, ``online_kernel``, ``online``, ``offline``) to
    memory block ``bid``: the one place blocks are onlined and offlined.  Busy errors
    are retried; raises :class:`~cxlctl.hostio.write.KnobError`; returns attempts used."""
    from .write import write_with_retry  # scans never write: kept off status --json's imports

    return write_with_retry(root, paths.memory_block(bid) + "/state", state)
