"""Which (CPU node, memory node) pairs to measure, with what buffers, and the measuring.

For every CPU node and every memory node this process may allocate from
(``Mems_allowed_list``), three runs of the helper (:mod:`.native`): sequential
read with every allowed CPU of the CPU node, the 2:1 read/write mix with the
same CPUs, and the idle latency of one of them.  A pair whose memory node has
less free memory than the buffer needs is skipped with the reason; so is a CPU
node none of whose CPUs this process may run on.  DAX devices are never
touched: a devdax region is not a NUMA node with memory, and the helper only
ever maps anonymous memory.
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from cxlctl.hostio import paths
from cxlctl.hostio.host import Host
from cxlctl.hostio.proc import status_field
from cxlctl.model import Inventory
from cxlctl.parse import is_decimal, parse_nodelist
from cxlctl.progress import ProgressFn, tick

MiB = 1 << 20
#: what a node keeps free beyond the buffer (the kernel's watermarks, the helper itself)
MARGIN = 64 * MiB


class Sizes(NamedTuple):
    """Buffer bytes and seconds of each measurement (three timed windows each)."""

    bandwidth: int
    latency: int
    seconds: float
    llc: Optional[int]  # the last-level cache the sizes were chosen against (bytes)


class Pair(NamedTuple):
    cpu_node: int
    mem_node: int
    cpus: Tuple[int, ...]


class Result(NamedTuple):
    """One measured pair: MB/s (10^6 B/s) and ns, each the median of three windows."""

    cpu_node: int
    mem_node: int
    cpus: Tuple[int, ...]
    read_mbps: int
    mix_mbps: int
    latency_ns: float
    samples: Dict[str, List[float]]


class Skipped(NamedTuple):
    cpu_node: int
    mem_node: int
    reason: str


Outcome = Union[Result, Skipped]


def _size_bytes(text: str) -> Optional[int]:
    """``32768K`` (sysfs cache size) → bytes."""
    t = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    num = t[:-1] if t[-1:] in "KMG" else t
    return int(num) * mult if is_decimal(num) else None


def llc_bytes(host: Host, cpu: int) -> Optional[int]:
    """The largest cache level's size seen by ``cpu`` (``cpuN/cache/indexM``), None if unreadable."""
    d = paths.CPU_CACHE_DIR.format(cpu=cpu)
    best: Tuple[int, int] = (0, 0)
    for idx in host.reader.listdir(d, lambda n: n.startswith("index")):
        level = host.reader.text(f"{d}/{idx}/level") or ""
        size = _size_bytes(host.reader.text(f"{d}/{idx}/size") or "")
        if is_decimal(level) and size:
            best = max(best, (int(level), size))
    return best[1] or None


def sizes(llc: Optional[int], *, quick: bool, buffer_mib: Optional[int]) -> Sizes:
    """Bandwidth buffers 8x the LLC (at least 512 MiB; quick: 4x, 128 MiB), the chase 4x (256 MiB;
    quick: 2x, 64 MiB); ``buffer_mib`` sets both (a guest's emulated CXL is ~300x slower)."""
    cache = llc or 32 * MiB
    if buffer_mib is not None:
        b = buffer_mib * MiB
        return Sizes(b, b, 0.3 if quick else 1.0, llc)
    if quick:
        return Sizes(max(4 * cache, 128 * MiB), max(2 * cache, 64 * MiB), 0.4, llc)
    return Sizes(max(8 * cache, 512 * MiB), max(4 * cache, 256 * MiB), 1.5, llc)


def allowed(host: Host) -> Tuple[Optional[Tuple[int, ...]], Optional[Tuple[int, ...]]]:
    """(memory nodes, CPUs) this process may use (``/proc/self/status``); None when unreadable."""
    text = host.reader.body(paths.SELF_STATUS)

    def field(key: str) -> Optional[Tuple[int, ...]]:
        v = status_field(text, key)
        try:
            return parse_nodelist(v, limit=1 << 16) if v is not None else None
        except ValueError:
            return None

    return field("Mems_allowed_list"), field("Cpus_allowed_list")


def plan(
    inv: Inventory,
    sz: Sizes,
    *,
    mem_nodes: Optional[Sequence[int]],
    mems_allowed: Optional[Sequence[int]],
    cpus_allowed: Optional[Sequence[int]],
) -> List[Union[Pair, Skipped]]:
    """The pairs to measure and those skipped (with why), CPU node by CPU node."""
    need = max(sz.bandwidth, sz.latency) + MARGIN
    out: List[Union[Pair, Skipped]] = []
    for c in inv.nodes:
        if not c.cpus:
            continue
        cpus = tuple(x for x in c.cpus if cpus_allowed is None or x in cpus_allowed)
        for m in inv.nodes:
            if not m.has_memory or (mem_nodes is not None and m.id not in mem_nodes):
                continue
            if not cpus:
                out.append(Skipped(c.id, m.id, f"none of node {c.id}'s CPUs is in this process' Cpus_allowed_list"))
            elif mems_allowed is not None and m.id not in mems_allowed:
                out.append(Skipped(c.id, m.id, f"node {m.id} is not in this process' Mems_allowed_list (cpuset)"))
            elif m.mem_free is None or m.mem_free < need:
                free = "unknown" if m.mem_free is None else f"{m.mem_free // MiB} MiB"
                why = f"node {m.id} has {free} free; the measurement needs {need // MiB} MiB"
                out.append(Skipped(c.id, m.id, why))
            else:
                out.append(Pair(c.id, m.id, cpus))
    return out


def _floats(text: str) -> List[float]:
    try:
        return [float(x) for x in text.split(",") if x]
    except ValueError:
        return []


def measure(exe: str, pair: Pair, sz: Sizes, progress: Optional[ProgressFn], done: int, total: int) -> Result:
    """The three measurements of one pair (``done``/``total``: where the progress bar stands)."""
    from . import native

    what = "measuring memory"
    got: Dict[str, Dict[str, str]] = {}
    for i, (mode, size, cpus) in enumerate(
        (("read", sz.bandwidth, pair.cpus), ("mix", sz.bandwidth, pair.cpus), ("latency", sz.latency, pair.cpus[:1]))
    ):
        got[mode] = native.run(exe, mode, pair.mem_node, size, sz.seconds, cpus)
        tick(progress, done + i + 1, total, what)
    return Result(
        pair.cpu_node,
        pair.mem_node,
        pair.cpus,
        int(float(got["read"]["median"])),
        int(float(got["mix"]["median"])),
        round(float(got["latency"]["median"]), 1),
        {m: _floats(g.get("samples", "")) for m, g in got.items()},
    )
