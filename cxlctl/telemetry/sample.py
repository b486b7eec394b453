"""One sample of the host's tiering counters, read through the host-I/O layer.

Everything is read through :class:`cxlctl.hostio.reader.Reader`, so a sample of
a ``--root`` tree is a sample of that tree, and a logging reader (``cxlctl
record``) copies exactly the files a sample used.  Reading never raises on odd
content: an unreadable file gives missing counters and a note.

What a sample holds and where it comes from:

* per node: ``nodeN/vmstat`` (promotion, demotion, NUMA counters), ``nodeN/meminfo``
  (used, anon, file, shmem), ``nodeN/numastat``;
* system: ``/proc/vmstat`` (hint faults, pages migrated, ...) and the settings
  that decide whether tiering happens at all (``demotion_enabled``,
  ``kernel.numa_balancing``, the promotion rate limit);
* per cgroup (v2, only those asked for or listed): ``memory.numa_stat`` and
  ``memory.stat``;
* per process (asked for by PID, or the top N by RSS): ``numa_maps``, ``statm``,
  ``comm`` and ``cgroup``.  The candidates for "top N" come from psutil on the
  live host and from the ``/proc`` listing of a ``--root`` tree.

Node kinds (DRAM, CXL) come from the inventory (:func:`node_kinds`), which the
callers run once, not per sample: which node is CXL does not change between
two reports of ``stat``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple

from cxlctl.errors import UsageError
from cxlctl.figures import node_figures
from cxlctl.hostio import paths
from cxlctl.hostio.host import Host
from cxlctl.hostio.proc import cgroup_of, cgroup_v1
from cxlctl.hostio.reader import Reader, Unreadable, Vanished
from cxlctl.model import Coordinates, Node, Region
from cxlctl.namedrecord import NamedTuple
from cxlctl.numa_maps import NumaMaps, parse_numa_maps
from cxlctl.parse import PAGE_SIZE, decimal_suffix, is_decimal, parse_meminfo, sysfs_int

from .counters import (
    CGROUP_COUNTERS,
    CGROUP_SIZES,
    MEMORY_FAILURE,
    NODE_COUNTERS,
    NUMA_STAT_RESIDENT,
    SYSTEM_COUNTERS,
    Counters,
    parse_keyvals,
    parse_numa_stat,
    pick,
    pick_text,
    resident_per_node,
)
from .damon_stats import Scheme, read_schemes

if TYPE_CHECKING:
    from cxlctl.model import NodeKind

#: a process' numa_maps larger than this is not read (a page-table walk per mapping)
NUMA_MAPS_LIMIT = 16 << 20
#: cgroups listed when none are asked for (``top``, ``record``)
CGROUP_LIST_LIMIT = 256
CGROUP_LIST_DEPTH = 3
#: ``top`` and ``record``: how long reading processes' numa_maps may take per sample
PROCESS_BUDGET_S = 0.5


class NodeInfo(NamedTuple):
    """What the inventory says about a node: its kind (dram | cxl | other), memory tier and
    expected access characteristics: the CPU-class figures the kernel took (:func:`node_figures`)."""

    kind: NodeKind
    tier: Optional[int]
    #: bandwidth (MB/s) and latency (ns) the firmware or the devices describe; None: not described
    hmat: Optional[Coordinates] = None
    #: where ``hmat`` comes from: "node" (its own nodeN/access1) or "regions" (its CXL region's access1)
    hmat_from: Optional[str] = None


class NodeSample(NamedTuple):
    id: int
    kind: NodeKind
    tier: Optional[int]
    #: bytes: total, free, used, anon, file, shmem (None when meminfo lacks the line)
    memory: Dict[str, Optional[int]]
    vmstat: Counters
    numastat: Dict[str, int]
    hmat: Optional[Coordinates] = None  # see NodeInfo
    hmat_from: Optional[str] = None
    #: ``nodeN/memory_failure/*`` (pages): poisoned pages the kernel offlined (``recovered``) or could
    #: not (``failed``, ``delayed``, ``ignored``); None when the node has no such directory
    #: (CONFIG_MEMORY_FAILURE off, or a kernel before it)
    memory_failure: Optional[Counters] = None


class Settings(NamedTuple):
    """The knobs that decide whether tiering happens (None: not on this kernel or unreadable)."""

    demotion_enabled: Optional[bool]
    numa_balancing: Optional[int]
    promote_rate_limit_mbps: Optional[int]


class CgroupSample(NamedTuple):
    name: str  # as /proc/PID/cgroup names it: /system.slice/x.service ("/" is the root)
    path: str  # host path of its directory
    numa_stat: Dict[str, Dict[int, int]]  # type -> node -> bytes ({} when unreadable)
    bytes_per_node: Dict[int, int]  # anon + file
    stat: Counters  # CGROUP_COUNTERS (pages) and CGROUP_SIZES (bytes)
    readable: bool  # memory.numa_stat was there (the memory controller is enabled)


class ProcessSample(NamedTuple):
    pid: int
    comm: Optional[str]
    cgroup: Optional[str]
    rss: Optional[int]  # bytes (statm's resident pages x page size)
    maps: Optional[NumaMaps]  # None: numa_maps unreadable (gone, permission, too large)
    #: the policy ``cxlctl launch`` asked for (``CXLCTL_POLICY``): (mode, nodes); only for --pid processes
    asked: Optional[Tuple[str, Tuple[int, ...]]] = None


class Sample(NamedTuple):
    """The host at one moment.  ``time`` is monotonic seconds (rates use it), ``wall`` is Unix time."""

    time: float
    wall: float
    kernel: Optional[str]
    settings: Settings
    system: Counters
    nodes: Tuple[NodeSample, ...]
    cgroups: Tuple[CgroupSample, ...]
    processes: Tuple[ProcessSample, ...]
    notes: Tuple[str, ...]
    #: DAMON schemes where kdamonds exist (read-only; see :mod:`.damon`)
    damon: Tuple[Scheme, ...] = ()
    #: bandwidth (MB/s) of all CXL nodes together, from :func:`node_figures`; None when there is
    #: no CXL node or one of them is not described (a partial sum would overstate the share used)
    cxl_read_mbps: Optional[int] = None
    cxl_write_mbps: Optional[int] = None
    #: why no cgroup is reported (:data:`CGROUP_V1`), None when cgroups are read
    cgroups_unavailable: Optional[str] = None
    #: the root the sample was read under (``/``: the live host); hints name it (``cxlctl --root ROOT …``)
    root: str = "/"


#: what ``top`` and ``stat`` say on a host whose memory controller is on cgroup v1: its
#: ``memory.numa_stat`` has another layout (``anon=374 N0=...`` in pages), not cgroup v2's
CGROUP_V1 = "cgroup v1: per-cgroup figures unavailable (they need cgroup v2)"


def node_kinds(host: Host) -> Dict[int, NodeInfo]:
    """Kind, tier and expected access of every node, from one inventory scan (run once per
    command, not per sample: neither changes between two reports of ``stat``)."""
    from cxlctl.inventory import scan

    inv = scan(host)
    return kinds_of(inv.nodes, inv.regions)


def kinds_of(inv_nodes: Sequence[Node], regions: Sequence[Region] = ()) -> Dict[int, NodeInfo]:
    """:func:`node_kinds` from an inventory already scanned (``cxlctl record``, the daemon)."""
    out: Dict[int, NodeInfo] = {}
    for n in inv_nodes:
        f = node_figures(n, regions, inv_nodes)
        out[n.id] = NodeInfo(n.kind, n.tier, f.cpu, f.source if f.cpu is not None else None)
    return out


def cxl_bandwidth(kinds: Dict[int, NodeInfo]) -> Tuple[Optional[int], Optional[int]]:
    """(read, write) MB/s of all CXL nodes together; None when one of them is not described."""
    cxl = [i for i in kinds.values() if i.kind == "cxl"]

    def total(vals: List[Optional[int]]) -> Optional[int]:
        return None if not vals or any(not v for v in vals) else sum(v for v in vals if v)

    return (
        total([i.hmat.read_bandwidth if i.hmat else None for i in cxl]),
        total([i.hmat.write_bandwidth if i.hmat else None for i in cxl]),
    )


# -- cgroup names -----------------------------------------------------------------------------


def cgroup_name(arg: str) -> str:
    """A cgroup as the user named it → its name as ``/proc/PID/cgroup`` shows it.

    Both ``/system.slice/vllm.service`` and ``/sys/fs/cgroup/system.slice/vllm.service``
    are accepted; ``..`` and relative names are refused (they would read outside
    the cgroup tree).
    """
    a = arg.strip()
    if a.rstrip("/") == paths.CGROUP_DIR:
        return "/"
    if a.startswith(paths.CGROUP_DIR + "/"):
        a = a[len(paths.CGROUP_DIR) :]
    if not a.startswith("/"):
        raise UsageError(
            f"cgroup {arg!r} is not a path",
            hint=f"name it as /proc/PID/cgroup shows it (/system.slice/x.service) or by its path under {paths.CGROUP_DIR}",
        )
    parts = [p for p in a.split("/") if p]
    if any(p in (".", "..") for p in parts) or "\0" in a:
        raise UsageError(f"cgroup {arg!r} contains '.' or '..'", hint="give the cgroup's path without them")
    return "/" + "/".join(parts)


def check_cgroup(host: Host, name: str) -> None:
    """Refuse a cgroup that does not exist (a usage error naming the directory looked at)."""
    if cgroup_v1(host.reader):
        raise UsageError(
            CGROUP_V1, hint="drop --cgroup, or boot with the unified hierarchy (systemd.unified_cgroup_hierarchy=1)"
        )
    d = paths.cgroup_file(name, "").rstrip("/") or "/"
    if not host.reader.isdir(d):
        raise UsageError(
            f"no cgroup {name} ({host.path(d)} does not exist)",
            hint="see `systemd-cgls` or /proc/PID/cgroup for cgroup names (cgroup v2 only)",
        )


def check_pid(host: Host, pid: int) -> None:
    """Refuse a PID that is not a process of ``host`` (a usage error saying where to find one)."""
    if pid <= 0:
        raise UsageError(f"--pid {pid} is not a process id", hint="give a PID from ps or pgrep")
    if not host.reader.isdir(paths.proc_pid(pid, "").rstrip("/")):
        raise UsageError(f"no process with PID {pid}", hint="check the PID (ps, pgrep)")


def check_nodes(kinds: Dict[int, NodeInfo], nodes: Sequence[int]) -> None:
    """Refuse nodes the host does not have (a usage error listing the nodes it has)."""
    unknown = [n for n in nodes if n not in kinds]
    if unknown:
        raise UsageError(
            f"no node {', '.join(map(str, unknown))} on this host (nodes: {', '.join(map(str, sorted(kinds)))})",
            hint="see cxlctl status for the nodes",
        )


def _subdir_of(r: Reader, d: str) -> Callable[[str], bool]:
    return lambda name: not name.startswith(".") and r.isdir(f"{d}/{name}")


def list_cgroups(r: Reader, limit: int = CGROUP_LIST_LIMIT, depth: int = CGROUP_LIST_DEPTH) -> List[str]:
    """Cgroups with a memory controller, breadth first, at most ``depth`` levels and ``limit`` of them;
    none on a cgroup v1 host (its ``memory/`` hierarchy is not a cgroup v2 tree)."""
    out: List[str] = []
    if cgroup_v1(r):
        return out
    level = ["/"]
    for _ in range(depth):
        nxt: List[str] = []
        for cg in level:
            d = paths.cgroup_file(cg, "").rstrip("/") or "/"
            for n in r.listdir(d, _subdir_of(r, d)):
                child = ("" if cg == "/" else cg) + "/" + n
                if r.exists(paths.cgroup_file(child, "memory.numa_stat")):
                    out.append(child)
                    nxt.append(child)
                    if len(out) >= limit:
                        return out
        level = nxt
    return out


# -- reading ----------------------------------------------------------------------------------


def _keyvals(r: Reader, path: str) -> Optional[Dict[str, int]]:
    text = r.text(path)
    return None if text is None else parse_keyvals(text)


def _flag(r: Reader, path: str) -> Optional[bool]:
    t = r.text(path)
    if t in ("true", "1"):
        return True
    if t in ("false", "0"):
        return False
    return None


def read_settings(r: Reader) -> Settings:
    return Settings(
        _flag(r, paths.DEMOTION_ENABLED),
        sysfs_int(r.text(paths.NUMA_BALANCING)),
        sysfs_int(r.text(paths.PROMOTE_RATE_LIMIT)),
    )


def read_node(r: Reader, nid: int, info: NodeInfo) -> NodeSample:
    mi_text = r.text(paths.node_file(nid, "meminfo"))
    mi = parse_meminfo(mi_text) if mi_text else {}
    memory: Dict[str, Optional[int]] = {
        "total": mi.get("MemTotal"),
        "free": mi.get("MemFree"),
        "used": mi.get("MemUsed"),
        "anon": mi.get("AnonPages"),
        "file": mi.get("FilePages"),
        "shmem": mi.get("Shmem"),
    }
    ns = _keyvals(r, paths.node_file(nid, "numastat")) or {}
    vm = pick_text(r.text(paths.node_file(nid, "vmstat")), NODE_COUNTERS)
    return NodeSample(nid, info.kind, info.tier, memory, vm, ns, info.hmat, info.hmat_from, read_memory_failure(r, nid))


def read_memory_failure(r: Reader, nid: int) -> Optional[Counters]:
    """A node's ``memory_failure/`` counters (one file each), None when the directory is absent."""
    d = paths.node_file(nid, paths.NODE_MEMORY_FAILURE)
    if not r.isdir(d):
        return None
    found: Dict[str, int] = {}
    for name in MEMORY_FAILURE:
        v = sysfs_int(r.text(f"{d}/{name}"))
        if v is not None:
            found[name] = v
    return pick(found, MEMORY_FAILURE, prefixes=())


def read_cgroup(r: Reader, name: str, counters: bool = True) -> CgroupSample:
    """A cgroup's bytes per node; with ``counters``, also its ``memory.stat`` and every type of
    ``memory.numa_stat``.  Without (``top``'s screen shows bytes per node only), ``numa_stat``
    holds the types those bytes are made of (:data:`NUMA_STAT_RESIDENT`): parsing the other
    twenty lines of 64 cgroups' files was a third of a refresh."""
    text = r.text(paths.cgroup_file(name, "memory.numa_stat"))
    if text is not None and not counters:
        text = "\n".join(line for line in text.splitlines() if line.startswith(_RESIDENT_LINES))
    ns = parse_numa_stat(text) if text is not None else {}
    stat = r.text(paths.cgroup_file(name, "memory.stat")) if counters else None
    cg_counters = pick_text(stat, CGROUP_COUNTERS + CGROUP_SIZES, prefixes=("pgpromote_", "pgdemote_"))
    d = paths.cgroup_file(name, "").rstrip("/") or "/"
    return CgroupSample(name, d, ns, resident_per_node(ns), cg_counters, text is not None)


_RESIDENT_LINES = tuple(t + " " for t in NUMA_STAT_RESIDENT)


def _numa_maps(r: Reader, pid: int) -> Optional[NumaMaps]:
    """A process' numa_maps; through the logging reader when it fits the reader's bound (1 MiB:
    then ``record`` copies it), else one bounded read of up to :data:`NUMA_MAPS_LIMIT`."""
    path = paths.proc_pid(pid, "numa_maps")
    notes = len(r.notes)
    text = r.text(path)
    if text is None and len(r.notes) > notes and "larger than" in r.notes[-1][1]:
        r.notes.pop()
        try:
            b = r.read(path, limit=NUMA_MAPS_LIMIT)
            text = None if b is None else b.decode("utf-8", "replace")
        except Unreadable as e:
            # tens of thousands of mappings: its placement is not parsed (the report says so in
            # notes; a --pid process shows readable false, a --top one is left out)
            r.notes.append((path, f"{e.reason} (numa_maps bound {NUMA_MAPS_LIMIT >> 20} MiB)"))
            text = None
    return None if text is None else parse_numa_maps(text)


_PAGE = PAGE_SIZE


def _rss(r: Reader, pid: int) -> Optional[int]:
    return _rss_of(r.raw(paths.proc_pid(pid, "statm")))


def asked_policy(r: Reader, pid: int) -> Optional[Tuple[str, Tuple[int, ...]]]:
    """The ``CXLCTL_POLICY`` a ``cxlctl launch``-ed process carries, as (mode, nodes).

    Never read through a logging reader (:meth:`~cxlctl.hostio.reader.Reader.unlogged`):
    ``cxlctl record`` must never copy a process' environment.
    """
    from cxlctl.launch.policy import parse_env_value

    for item in (r.unlogged().body(paths.proc_pid(pid, "environ")) or "").split("\0"):
        if item.startswith("CXLCTL_POLICY="):
            a = parse_env_value(item[len("CXLCTL_POLICY=") :])
            return None if a is None else (a.mode, a.nodes)
    return None


def read_process(r: Reader, pid: int, policy: bool = False) -> ProcessSample:
    """One process; ``policy``: also what ``cxlctl launch`` asked for it (processes named with --pid)."""
    cg = r.text(paths.proc_pid(pid, "cgroup"))
    return ProcessSample(
        pid,
        r.text(paths.proc_pid(pid, "comm")),
        cgroup_of(cg),
        _rss(r, pid),
        _numa_maps(r, pid),
        asked_policy(r, pid) if policy else None,
    )


def _rss_of(statm: Optional[bytes]) -> Optional[int]:
    """Resident bytes from ``statm`` bytes (``size resident shared ...`` in pages); None when odd."""
    if not statm:
        return None
    parts = statm.split(None, 2)
    if len(parts) < 2 or not parts[1].isdigit() or len(parts[1]) >= 20:  # bytes.isdigit: ASCII only
        return None
    return int(parts[1]) * _PAGE


def top_pids(r: Reader, n: int) -> List[int]:
    """The ``n`` processes with the largest RSS (kernel threads have none and are left out).

    On the live host psutil lists them (it is the declared dependency for
    process lists); under a ``--root`` tree, the tree's ``/proc`` is listed.
    Either way each one's ``statm`` is read through :meth:`Reader.leaves`, one
    ``openat`` per process through the handle of ``/proc``: creating a psutil
    ``Process`` per PID (it reads ``stat`` for the start time too) cost three
    times as much on a host with 1,000 processes.
    """
    if n <= 0:
        return []
    if r.root == "/":
        import psutil  # type: ignore[import-untyped]  # ~30 ms: only when processes are asked for

        names = [str(p) for p in psutil.pids()]
    else:
        names = r.listdir(paths.PROC, is_decimal, ordered=False)
    rss: List[Tuple[int, int]] = []
    for name, statm in zip(names, r.leaves(paths.PROC, names, "statm")):
        v = _rss_of(statm)
        if v:
            rss.append((-v, int(name)))
    rss.sort()
    return [pid for _, pid in rss[:n]]


def _largest(
    r: Reader,
    extra: List[int],
    t0: float,
    budget_s: Optional[float],
    cache: Optional[Dict[int, Tuple[float, ProcessSample]]],
    max_age: float,
    notes: List[str],
) -> List[ProcessSample]:
    """The ``extra`` processes (the largest by RSS) read within ``budget_s``, from ``cache`` when
    read less than ``max_age`` seconds before ``t0``; the cache then holds exactly them."""
    procs: List[ProcessSample] = []
    start = time.monotonic()
    for i, pid in enumerate(extra):
        if budget_s is not None and time.monotonic() - start > budget_s:
            notes.append(f"read {i} of the {len(extra)} largest processes within {budget_s:g} s; the rest left out")
            break
        hit = cache.get(pid) if cache is not None else None
        if hit is not None and t0 - hit[0] < max_age:
            procs.append(hit[1])
            continue
        p = read_process(r, pid)
        if p.maps is not None:  # a process that exited in between is left out
            procs.append(p)
            if cache is not None:
                cache[pid] = (t0, p)
    if cache is not None:
        for gone in set(cache) - set(extra):
            del cache[gone]
    return procs


def read_sample(
    r: Reader,
    kinds: Dict[int, NodeInfo],
    *,
    nodes: Optional[Sequence[int]] = None,
    cgroups: Sequence[str] = (),
    pids: Sequence[int] = (),
    top: int = 0,
    budget_s: Optional[float] = None,
    now: Optional[Tuple[float, float]] = None,
    cache: Optional[Dict[int, Tuple[float, ProcessSample]]] = None,
    max_age: float = 0.0,
    ranked: Optional[Sequence[int]] = None,
    cgroup_counters: bool = True,
) -> Sample:
    """Read one sample: the nodes (all, or ``nodes``), the cgroups and processes asked for.

    ``pids`` are read first, then the ``top`` largest processes by RSS (not
    already in ``pids``) until ``budget_s`` seconds have passed: numa_maps walks
    page tables and a host can have thousands of processes.  ``now``
    (monotonic, wall) is for tests.  ``cache`` (kept by the caller across
    samples) lets a "top" process read less than ``max_age`` seconds ago be
    reused instead of walking its page tables again, and ``ranked`` (the
    largest processes, listed by the caller earlier) spares listing every
    process again (``cxlctl top``).
    """
    t0, wall = now if now is not None else (time.monotonic(), time.time())
    notes: List[str] = []
    first_note = len(r.notes)  # a reader kept across samples: only this sample's notes
    kernel = r.text(paths.OSRELEASE)
    settings = read_settings(r)
    system = pick_text(r.text(paths.PROC_VMSTAT), SYSTEM_COUNTERS)
    if not system.readable:
        notes.append(f"{paths.PROC_VMSTAT} unreadable: no system-wide counters")
    names = r.listdir(paths.NODE_DIR, lambda x: decimal_suffix(x, "node") is not None)
    present = [n for n in (decimal_suffix(x, "node") for x in names) if n is not None]
    wanted = present if nodes is None else [n for n in nodes if n in present]
    node_samples = []
    for nid in wanted:
        try:
            node_samples.append(read_node(r, nid, kinds.get(nid, NodeInfo("other", None))))
        except Vanished:
            notes.append(f"node{nid} went away while it was read")
    v1 = cgroup_v1(r)
    cg_samples = () if v1 else tuple(read_cgroup(r, c, cgroup_counters) for c in cgroups)
    if v1:
        notes.append(CGROUP_V1)
    for c in cg_samples:
        if not c.readable:
            notes.append(f"cgroup {c.name}: no memory.numa_stat (is the memory controller enabled for it?)")
    procs = [read_process(r, pid, policy=True) for pid in pids]
    listed = (list(ranked)[:top] if ranked is not None else top_pids(r, top)) if top else []
    procs += _largest(r, [p for p in listed if p not in set(pids)], t0, budget_s, cache, max_age, notes)
    bw = cxl_bandwidth(kinds)
    return Sample(
        time=t0,
        wall=wall,
        kernel=kernel,
        settings=settings,
        system=system,
        nodes=tuple(node_samples),
        cgroups=cg_samples,
        processes=tuple(procs),
        damon=tuple(read_schemes(r)),
        cxl_read_mbps=bw[0],
        cxl_write_mbps=bw[1],
        cgroups_unavailable=CGROUP_V1 if v1 else None,
        root=r.root,
        notes=tuple(notes) + tuple(f"{p}: {why}" for p, why in r.notes[first_note:]),
    )
