"""Proactive demotion as an operator action: free DRAM before a large allocation (a KV cache).

Why a command and not a profile knob: it is a one-shot request, not a setting.  The kernel
reclaims up to SIZE from a DRAM node (``/sys/devices/system/node/nodeN/reclaim``, newer
kernels) or from a memory cgroup (``memory.reclaim``); with demotion enabled, reclaim on an
upper-tier node demotes the pages to the CXL node below it instead of swapping or dropping
them, and the kernel counts them as ``pgdemote_proactive``.  ``swappiness=N`` (0-200) weighs
anonymous against file pages (0: file pages only).  Nothing is journaled: there is nothing to
restore -- hot pages come back by promotion (NUMA balancing tiering, DAMON ``migrate_hot``).

What it reports, read from the kernel before and after: the node's free memory and the
``pgdemote_proactive`` and ``pgscan_proactive`` counters (the node's ``vmstat``, or the
cgroup's ``memory.stat``), so the operator sees how much went to CXL and how much left
memory altogether.

Why a node reclaim can scan nothing at all: ``nodeN/reclaim`` runs the kernel's node reclaim
(``__node_reclaim`` in mm/vmscan.c, the zone_reclaim_mode path), which shrinks the node only
while it holds more unmapped page cache than ``vm.min_unmapped_ratio`` (1 % of its memory by
default) or more reclaimable slab than ``vm.min_slab_ratio`` (5 %).  Anonymous memory -- a KV
cache, a model's weights copied into RAM -- does not open that gate; once it is open, anonymous
pages are demoted too.  :func:`node_gate` reads the same figures before the write, and the
result says so when the kernel scanned nothing (measured in a 7.3.4 guest: 1,855 unmapped page
cache pages against a threshold of 4,865, nothing scanned; with ``vm.min_unmapped_ratio=0``
2,528 pages scanned and 2,452 demoted).  ``memory.reclaim`` has no such gate.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from cxlctl.errors import CxlctlError, UsageError
from cxlctl.hostio import paths
from cxlctl.hostio.host import Host
from cxlctl.hostio.reader import Reader
from cxlctl.namedrecord import NamedTuple
from cxlctl.parse import format_size, parse_meminfo, parse_size, sysfs_int

#: the kernel's range for ``swappiness=`` (mm/vmscan.c: 0..MAX_SWAPPINESS)
SWAPPINESS_MAX = 200


#: zone_reclaim_mode bits (mm/internal.h): dirty file pages count, and mapped ones do
RECLAIM_WRITE, RECLAIM_UNMAP = 0x2, 0x4


class NodeGate(NamedTuple):
    """The kernel's condition for node reclaim to scan a node at all (pages), read before the write."""

    reclaimable_page_cache: int  # unmapped file pages (all file pages with RECLAIM_UNMAP), less dirty ones
    min_unmapped_pages: int  # vm.min_unmapped_ratio % of the node's memory
    slab_reclaimable: int
    min_slab_pages: int  # vm.min_slab_ratio % of the node's memory
    min_unmapped_ratio: int
    min_slab_ratio: int

    @property
    def open(self) -> bool:
        return self.reclaimable_page_cache > self.min_unmapped_pages or self.slab_reclaimable > self.min_slab_pages

    def as_json(self) -> Dict[str, Any]:
        return dict(self._asdict(), open=self.open)

    def closed_why(self, nid: int) -> str:
        from cxlctl.parse import PAGE_SIZE

        def mib(pages: int) -> str:
            return format_size(pages * PAGE_SIZE)

        return (
            f"the kernel scans node {nid} only while it holds more unmapped page cache than "
            f"vm.min_unmapped_ratio={self.min_unmapped_ratio} % of its memory ({mib(self.min_unmapped_pages)}) "
            f"or more reclaimable slab than vm.min_slab_ratio={self.min_slab_ratio} % "
            f"({mib(self.min_slab_pages)}); it held {mib(self.reclaimable_page_cache)} and "
            f"{mib(self.slab_reclaimable)}, and anonymous memory does not count (mm/vmscan.c, node reclaim)"
        )


#: what to do when the gate is shut: the cgroup route has no such gate; the ratio can be lowered
GATE_HINT = (
    "reclaim from the workload's cgroup instead (cxlctl tune reclaim SIZE --cgroup PATH: memory.reclaim "
    "scans anonymous memory too), or let node reclaim start with less page cache: sysctl "
    "vm.min_unmapped_ratio=0 (it also governs zone_reclaim_mode's reclaim)"
)


class ReclaimResult(NamedTuple):
    target: str  # "node 0" | "cgroup /inference.slice"
    path: str  # the file written
    written: str  # what was written
    asked: int  # bytes
    complete: bool  # False: the kernel reclaimed less than asked (EAGAIN)
    demoted_pages: Optional[int]  # pgdemote_proactive grew by this much; None: not counted there
    freed: Optional[int]  # bytes of MemFree gained on the node (node targets only)
    scanned_pages: Optional[int] = None  # pgscan_proactive grew by this much; None: not counted there
    gate: Optional[NodeGate] = None  # node targets: the kernel's condition to scan, before the write
    why_short: Optional[str] = None  # why less than asked, where the figures say

    def as_json(self) -> Dict[str, Any]:
        d = self._asdict()
        d["gate"] = None if self.gate is None else self.gate.as_json()
        return d


def _keyvals(r: Reader, path: str) -> Dict[str, int]:
    """A ``name value`` file (vmstat, memory.stat), parsed as ``cxlctl stat`` parses it; {} when unreadable."""
    from cxlctl.telemetry.counters import parse_keyvals

    return parse_keyvals(r.text(path) or "")


def _counters(r: Reader, path: str) -> Tuple[Optional[int], Optional[int]]:
    """(pgdemote_proactive, pgscan_proactive) of a vmstat or memory.stat; None where absent.

    The per-CPU deltas are folded first (``stat_refresh``): a node's counters reach its
    ``vmstat`` in batches, and a read just after the reclaim missed 8 of 4,160 scanned pages in a
    7.3.4 guest.  Without root the read is refused and the figures are as the kernel shows them."""
    r.text(paths.VM_STAT_REFRESH)
    got = _keyvals(r, path)
    return got.get("pgdemote_proactive"), got.get("pgscan_proactive")


def node_gate(r: Reader, nid: int) -> Optional[NodeGate]:
    """The kernel's node-reclaim condition for ``nid`` from its vmstat, meminfo and the vm sysctls,
    as ``node_pagecache_reclaimable`` and ``__node_reclaim`` compute it (the thresholds per zone
    there, of the node's total here: a few pages apart); None when a figure is unreadable."""
    vm = _keyvals(r, paths.node_file(nid, "vmstat"))
    total = parse_meminfo(r.text(paths.node_file(nid, "meminfo")) or "").get("MemTotal")
    ratios = [sysfs_int(r.text(p)) for p in (paths.MIN_UNMAPPED_RATIO, paths.MIN_SLAB_RATIO, paths.ZONE_RECLAIM_MODE)]
    need = ("nr_active_file", "nr_inactive_file", "nr_mapped", "nr_file_pages", "nr_dirty", "nr_slab_reclaimable")
    if total is None or any(x is None for x in ratios) or any(k not in vm for k in need):
        return None
    unmapped_ratio, slab_ratio, mode = (int(x) for x in ratios)  # type: ignore[arg-type]
    from cxlctl.parse import PAGE_SIZE

    pages = total // PAGE_SIZE
    if mode & RECLAIM_UNMAP:
        cache = vm["nr_file_pages"]
    else:
        cache = max(0, vm["nr_active_file"] + vm["nr_inactive_file"] - vm["nr_mapped"])
    if not mode & RECLAIM_WRITE:
        cache = max(0, cache - vm["nr_dirty"])
    return NodeGate(
        cache,
        pages * unmapped_ratio // 100,
        vm["nr_slab_reclaimable"],
        pages * slab_ratio // 100,
        unmapped_ratio,
        slab_ratio,
    )


def _free(r: Reader, nid: int) -> Optional[int]:
    text = r.text(paths.node_file(nid, "meminfo"))
    return parse_meminfo(text).get("MemFree") if text else None


def _target(host: Host, node: Optional[int], cgroup: Optional[str]) -> tuple:  # type: ignore[type-arg]
    """(label, file to write, counter file, node or None); UsageError when it cannot be used."""
    from cxlctl.telemetry.sample import node_kinds

    if (node is None) == (cgroup is None):
        raise UsageError("say what to reclaim from: --node N (a DRAM node) or --cgroup PATH")
    r = host.reader
    if node is not None:
        if node < 0 or not r.isdir(paths.node_dir(node)):
            raise UsageError(f"there is no NUMA node {node}", hint="cxlctl status lists the nodes")
        kinds = node_kinds(host)
        kind = kinds[node].kind if node in kinds else "other"
        if kind == "cxl":
            raise UsageError(
                f"node {node} is a CXL node: reclaim there swaps or drops pages (nothing below it to demote to)",
                hint="reclaim from the DRAM node above it; its cold pages then demote to this CXL node",
            )
        path = paths.node_file(node, "reclaim")
        if not r.exists(path):
            raise UsageError(
                f"this kernel has no per-node proactive reclaim ({path} is absent; kernels after 6.12 have it)",
                hint="reclaim from the workload's cgroup instead: cxlctl tune reclaim SIZE --cgroup PATH",
            )
        return f"node {node}", path, paths.node_file(node, "vmstat"), node
    assert cgroup is not None
    if not cgroup.startswith("/") or ".." in cgroup.split("/") or "\n" in cgroup or "\0" in cgroup:
        raise UsageError(f'--cgroup must be a cgroup path such as "/inference.slice"; got {cgroup!r}')
    name = cgroup.rstrip("/") or "/"
    path = paths.cgroup_file(name, "memory.reclaim")
    if not r.exists(path):
        raise UsageError(
            f"{path} is absent: no such cgroup, or its memory controller is off (or the root cgroup on an "
            "older kernel)",
            hint="name a cgroup with the memory controller (cat /proc/PID/cgroup shows a process' own)",
        )
    return f"cgroup {cgroup}", path, paths.cgroup_file(name, "memory.stat"), None


def reclaim(
    host: Host, size: str, *, node: Optional[int] = None, cgroup: Optional[str] = None, swappiness: Optional[int] = None
) -> ReclaimResult:
    """Ask the kernel to reclaim ``size`` from ``node`` or ``cgroup``; what it did, from its counters."""
    from cxlctl.hostio import write as hw

    try:
        asked = parse_size(size)
    except ValueError as e:
        raise UsageError(f"SIZE: {e}", hint='a size such as "2G" or "512M"') from None
    if asked <= 0:
        raise UsageError("SIZE must be larger than 0")
    if swappiness is not None and not 0 <= swappiness <= SWAPPINESS_MAX:
        raise UsageError(f"--swappiness must be 0-{SWAPPINESS_MAX}; got {swappiness}")
    label, path, counters, nid = _target(host, node, cgroup)
    text = str(asked) + ("" if swappiness is None else f" swappiness={swappiness}")
    r = host.reader
    before, scan0 = _counters(r, counters)
    free0 = _free(r, nid) if nid is not None else None
    gate = node_gate(r, nid) if nid is not None else None
    complete = True
    try:
        hw.write_knob(host.root, path, text + "\n")
    except hw.KnobBusy:
        complete = False  # EAGAIN: the kernel reclaimed less than asked
    except hw.KnobRejected as e:
        if swappiness is not None:
            raise UsageError(
                f"{path} refused {text!r} ({e}): this kernel takes no swappiness= argument there",
                hint="leave out --swappiness",
            ) from None
        raise CxlctlError(f"{path} refused {text!r}: {e}") from None
    except hw.KnobDenied as e:
        raise CxlctlError(f"{path}: {e}", hint="run as root") from None
    except hw.KnobError as e:
        raise CxlctlError(f"{path}: {e}") from None
    r2 = host.reread()  # the counters after the write
    after, scan1 = _counters(r2, counters)
    free1 = _free(r2, nid) if nid is not None else None
    demoted = None if before is None or after is None or after < before else after - before
    scanned = None if scan0 is None or scan1 is None or scan1 < scan0 else scan1 - scan0
    freed = None if free0 is None or free1 is None else free1 - free0
    why = None
    if not complete:
        if nid is not None and gate is not None and not gate.open and not scanned:
            why = gate.closed_why(nid)
        elif scanned == 0:
            why = "the kernel found nothing it could reclaim there"
        else:
            why = "not enough reclaimable memory there"
    return ReclaimResult(label, path, text, asked, complete, demoted, freed, scanned, gate, why)


def describe(res: ReclaimResult) -> str:
    """One paragraph for the terminal."""
    from cxlctl.parse import PAGE_SIZE

    out = f"asked {res.target} to reclaim {format_size(res.asked)} ({res.path}: {res.written})"
    out += "" if res.complete else f"; the kernel reclaimed less than asked (EAGAIN: {res.why_short})"
    if res.scanned_pages is not None:
        out += f"; scanned {res.scanned_pages} page(s) (pgscan_proactive)"
    if res.demoted_pages is not None:
        out += f"; demoted to CXL: {format_size(res.demoted_pages * PAGE_SIZE)} (pgdemote_proactive)"
    else:
        out += "; this kernel does not count proactive demotion (no pgdemote_proactive)"
    if res.freed is not None:
        out += f"; the node's free memory changed by {'+' if res.freed >= 0 else '-'}{format_size(abs(res.freed))}"
    if not res.complete and res.gate is not None and not res.gate.open and not res.scanned_pages:
        out += f". What to do: {GATE_HINT}"
    return out
