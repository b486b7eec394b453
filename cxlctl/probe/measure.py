"""Which (CPU node, memory node) pairs to measure, with what buffers, and the measuring.

For every CPU node and every memory node this process may allocate from
(``Mems_allowed_list``), four runs of the helper (:mod:`.native`): sequential
read and non-temporal write with every allowed CPU of the CPU node, the idle
latency of one of them, and (with two CPUs or more) that latency while the
others read (a loaded-latency point).  A pair whose memory node has less free
memory than the buffer needs is skipped with the reason; so is a CPU node none
of whose CPUs this process may run on.  DAX devices are never touched: a devdax
region is not a NUMA node with memory, and the helper only ever maps anonymous
memory.

Buffers are sized past the caches the measuring CPUs have between them: the sum
of the *distinct* last-level cache instances of those CPUs (``cpuN/cache/indexK``,
one instance per ``shared_cpu_list``), so a node whose CPUs sit in several L3
domains (AMD: one L3 per CCX) is not measured out of its caches.
"""

from __future__ import annotations

import statistics
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from cxlctl.hostio import paths
from cxlctl.hostio.host import Host
from cxlctl.hostio.proc import status_field
from cxlctl.hostio.reader import Reader
from cxlctl.model import Inventory
from cxlctl.parse import is_decimal, parse_nodelist, selected_word
from cxlctl.progress import ProgressFn, tick

MiB = 1 << 20
#: what a node keeps free beyond the buffer (the kernel's watermarks, the helper itself)
MARGIN = 64 * MiB
#: the helper's modes, in the order a pair runs them ("loaded" only with two CPUs or more)
MODES = ("read", "write", "latency", "loaded")
#: timed windows of each measurement (probe.c WINDOWS): the samples behind each median
WINDOWS = 5


class Sizes(NamedTuple):
    """Buffer bytes and seconds of each measurement (five timed windows each)."""

    bandwidth: int
    latency: int
    seconds: float
    llc: Optional[int]  # the last-level cache the bandwidth buffer was sized against (bytes)


class Pair(NamedTuple):
    cpu_node: int
    mem_node: int
    cpus: Tuple[int, ...]
    sizes: Sizes


class Result(NamedTuple):
    """One measured pair: MB/s (10^6 B/s) and ns, each the median of its windows."""

    cpu_node: int
    mem_node: int
    cpus: Tuple[int, ...]
    read_mbps: int
    write_mbps: int
    latency_ns: float
    samples: Dict[str, List[float]]
    #: the loaded-latency point: ``{"latency_ns", "load_mbps", "load_cpus"}`` (None with one CPU)
    loaded: Optional[Dict[str, float]] = None
    #: per mode: how the helper ran it (``huge_pct`` of the buffer in huge pages, ``store`` kind)
    how: Optional[Dict[str, Dict[str, object]]] = None
    sizes: Optional[Sizes] = None


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


def last_level(reader: Reader, cpu: int) -> Optional[Tuple[int, str, int]]:
    """``cpu``'s last-level cache: (level, shared_cpu_list, bytes) of its highest ``indexK``;
    None when unreadable.  The shared list names the instance: CPUs that list the same one share it."""
    d = paths.CPU_CACHE_DIR.format(cpu=cpu)
    best: Optional[Tuple[int, str, int]] = None
    for idx in reader.listdir(d, lambda n: n.startswith("index")):
        level = (reader.text(f"{d}/{idx}/level") or "").strip()
        size = _size_bytes(reader.text(f"{d}/{idx}/size") or "")
        shared = (reader.text(f"{d}/{idx}/shared_cpu_list") or str(cpu)).strip()
        if is_decimal(level) and size and (best is None or (int(level), size) > (best[0], best[2])):
            best = (int(level), shared, size)
    return best


def llc_bytes(reader: Reader, cpus: Sequence[int]) -> Optional[int]:
    """The last-level cache ``cpus`` have between them: the sum over its distinct instances
    (one per ``shared_cpu_list``); None when no CPU's caches are readable."""
    seen: Dict[Tuple[int, str], int] = {}
    for c in cpus:
        got = last_level(reader, c)
        if got is not None:
            seen[(got[0], got[1])] = got[2]
    return sum(seen.values()) or None


def sizes(llc: Optional[int], lat_llc: Optional[int], *, quick: bool, buffer_mib: Optional[int]) -> Sizes:
    """Bandwidth buffers 8x ``llc`` (the measuring CPUs' last-level caches, summed; at least
    512 MiB; quick: 4x, 128 MiB), the chase 4x ``lat_llc`` (the chasing CPU's own; 256 MiB;
    quick: 2x, 64 MiB); ``buffer_mib`` sets both (a guest's emulated CXL is ~300x slower)."""
    cache = llc or 32 * MiB
    own = lat_llc or 32 * MiB
    if buffer_mib is not None:
        b = buffer_mib * MiB
        return Sizes(b, b, 0.3 if quick else 1.0, llc)
    if quick:
        return Sizes(max(4 * cache, 128 * MiB), max(2 * own, 64 * MiB), 0.4, llc)
    return Sizes(max(8 * cache, 512 * MiB), max(4 * own, 256 * MiB), 1.5, llc)


def sizes_for(reader: Reader, cpus: Sequence[int], *, quick: bool, buffer_mib: Optional[int]) -> Sizes:
    """The buffers of a pair measured with ``cpus`` (the first one chases)."""
    return sizes(llc_bytes(reader, cpus), llc_bytes(reader, cpus[:1]), quick=quick, buffer_mib=buffer_mib)


def read_inputs(reader: Reader, inv: Inventory) -> None:
    """Read what ``probe`` sizes and records by (every CPU's caches, the THP mode) through
    ``reader``: ``cxlctl record`` keeps them, so a recorded tree replays the sizing rule."""
    for n in inv.nodes:
        if n.cpus:
            llc_bytes(reader, n.cpus)
    thp_mode(reader)


def thp_mode(reader: Reader) -> Dict[str, Optional[str]]:
    """The host's transparent-huge-page mode and defrag setting (None: not built in / unreadable)."""
    out: Dict[str, Optional[str]] = {}
    for key, path in (("enabled", paths.THP_ENABLED), ("defrag", paths.THP_DEFRAG)):
        text = reader.text(path)
        out[key] = selected_word(text) if text is not None else None
    return out


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
    sized: Dict[int, Sizes],
    *,
    mem_nodes: Optional[Sequence[int]],
    mems_allowed: Optional[Sequence[int]],
    cpus_allowed: Optional[Sequence[int]],
) -> List[Union[Pair, Skipped]]:
    """The pairs to measure and those skipped (with why), CPU node by CPU node; ``sized``: the
    buffers of each CPU node (:func:`sizes_for` of its allowed CPUs)."""
    out: List[Union[Pair, Skipped]] = []
    for c in inv.nodes:
        if not c.cpus:
            continue
        cpus = allowed_cpus(c.cpus, cpus_allowed)
        for m in inv.nodes:
            if not m.has_memory or (mem_nodes is not None and m.id not in mem_nodes):
                continue
            sz = sized.get(c.id)
            need = max(sz.bandwidth, sz.latency) + MARGIN if sz is not None else 0
            if not cpus or sz is None:
                out.append(Skipped(c.id, m.id, f"none of node {c.id}'s CPUs is in this process' Cpus_allowed_list"))
            elif mems_allowed is not None and m.id not in mems_allowed:
                out.append(Skipped(c.id, m.id, f"node {m.id} is not in this process' Mems_allowed_list (cpuset)"))
            elif m.mem_free is None or m.mem_free < need:
                free = "unknown" if m.mem_free is None else f"{m.mem_free // MiB} MiB"
                why = f"node {m.id} has {free} free; the measurement needs {need // MiB} MiB"
                out.append(Skipped(c.id, m.id, why))
            else:
                out.append(Pair(c.id, m.id, cpus, sz))
    return out


def allowed_cpus(cpus: Sequence[int], cpus_allowed: Optional[Sequence[int]]) -> Tuple[int, ...]:
    """The CPUs of a node this process may run on."""
    return tuple(x for x in cpus if cpus_allowed is None or x in cpus_allowed)


def steps(pair: Pair) -> int:
    """How many helper runs ``pair`` takes (the loaded point needs a second CPU)."""
    return len(MODES) if len(pair.cpus) > 1 else len(MODES) - 1


def _floats(text: str) -> List[float]:
    try:
        return [float(x) for x in text.split(",") if x]
    except ValueError:
        return []


def spread(samples: Sequence[float]) -> Dict[str, float]:
    """min, median and max of one figure's windows (what ``probe`` shows beside each figure)."""
    if not samples:
        return {}
    return {"min": min(samples), "median": statistics.median(samples), "max": max(samples)}


def _how(got: Dict[str, str]) -> Dict[str, object]:
    """How the helper ran one mode: the pages it asked for (``huge`` for the chase, ``base`` for
    the streams), whether the kernel took the advice, the share of the buffer that ended up in
    huge pages, the store kind."""
    out: Dict[str, object] = {"pages": got.get("advice"), "advised": got.get("advised") == "1"}
    kb, size = got.get("huge_kb", ""), got.get("bytes", "")
    if is_decimal(kb) and is_decimal(size) and int(size):
        out["huge_pct"] = round(min(100.0, 100.0 * int(kb) * 1024 / int(size)), 1)
    if "store" in got:
        out["store"] = got["store"]
    return out


def measure(exe: str, pair: Pair, progress: Optional[ProgressFn], done: int, total: int) -> Result:
    """The measurements of one pair (``done``/``total``: where the progress bar stands)."""
    from . import native

    sz = pair.sizes
    what = "measuring memory"
    got: Dict[str, Dict[str, str]] = {}
    runs = (
        ("read", sz.bandwidth, pair.cpus),
        ("write", sz.bandwidth, pair.cpus),
        ("latency", sz.latency, pair.cpus[:1]),
        ("loaded", sz.bandwidth, pair.cpus),
    )
    for i, (mode, size, cpus) in enumerate(runs[: steps(pair)]):
        got[mode] = native.run(exe, mode, pair.mem_node, size, sz.seconds, cpus)
        tick(progress, done + i + 1, total, what)
    loaded = None
    if "loaded" in got:
        g = got["loaded"]
        loaded = {
            "latency_ns": round(float(g["median"]), 1),
            "load_mbps": float(g.get("load_mbps", "0")),
            "load_cpus": float(g.get("load_cpus", "0")),
        }
    return Result(
        pair.cpu_node,
        pair.mem_node,
        pair.cpus,
        int(float(got["read"]["median"])),
        int(float(got["write"]["median"])),
        round(float(got["latency"]["median"]), 1),
        {m: _floats(g.get("samples", "")) for m, g in got.items()},
        loaded,
        {m: _how(g) for m, g in got.items()},
        sz,
    )
