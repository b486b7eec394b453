"""Proactive demotion as an operator action: free DRAM before a large allocation (a KV cache).

Why a command and not a profile knob: it is a one-shot request, not a setting.  The kernel
reclaims up to SIZE from a DRAM node (``/sys/devices/system/node/nodeN/reclaim``, newer
kernels) or from a memory cgroup (``memory.reclaim``); with demotion enabled, reclaim on an
upper-tier node demotes the pages to the CXL node below it instead of swapping or dropping
them, and the kernel counts them as ``pgdemote_proactive``.  ``swappiness=N`` (0-200) weighs
anonymous against file pages (0: file pages only).  Nothing is journaled: there is nothing to
restore -- hot pages come back by promotion (NUMA balancing tiering, DAMON ``migrate_hot``).

What it reports, read from the kernel before and after: the node's free memory and the
``pgdemote_proactive`` counter (the node's ``vmstat``, or the cgroup's ``memory.stat``), so
the operator sees how much went to CXL and how much left memory altogether.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from cxlctl.errors import CxlctlError, UsageError
from cxlctl.hostio import paths
from cxlctl.hostio.reader import Reader
from cxlctl.namedrecord import NamedTuple
from cxlctl.parse import format_size, parse_meminfo, parse_size, sysfs_int

#: the kernel's range for ``swappiness=`` (mm/vmscan.c: 0..MAX_SWAPPINESS)
SWAPPINESS_MAX = 200


class ReclaimResult(NamedTuple):
    target: str  # "node 0" | "cgroup /inference.slice"
    path: str  # the file written
    written: str  # what was written
    asked: int  # bytes
    complete: bool  # False: the kernel reclaimed less than asked (EAGAIN)
    demoted_pages: Optional[int]  # pgdemote_proactive grew by this much; None: not counted there
    freed: Optional[int]  # bytes of MemFree gained on the node (node targets only)

    def as_json(self) -> Dict[str, Any]:
        return self._asdict()


def _pgdemote(r: Reader, path: str) -> Optional[int]:
    for line in (r.text(path) or "").splitlines():
        f = line.split()
        if len(f) == 2 and f[0] == "pgdemote_proactive":
            return sysfs_int(f[1])
    return None


def _free(r: Reader, nid: int) -> Optional[int]:
    text = r.text(paths.node_file(nid, "meminfo"))
    return parse_meminfo(text).get("MemFree") if text else None


def _target(root: str, node: Optional[int], cgroup: Optional[str]) -> tuple:  # type: ignore[type-arg]
    """(label, file to write, counter file, node or None); UsageError when it cannot be used."""
    from cxlctl.hostio.host import Host
    from cxlctl.telemetry.sample import node_kinds

    if (node is None) == (cgroup is None):
        raise UsageError("say what to reclaim from: --node N (a DRAM node) or --cgroup PATH")
    r = Reader(root)
    if node is not None:
        if node < 0 or not r.isdir(paths.node_dir(node)):
            raise UsageError(f"there is no NUMA node {node}", hint="cxlctl status lists the nodes")
        kinds = node_kinds(Host(root))
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
    root: str, size: str, *, node: Optional[int] = None, cgroup: Optional[str] = None, swappiness: Optional[int] = None
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
    label, path, counters, nid = _target(root, node, cgroup)
    text = str(asked) + ("" if swappiness is None else f" swappiness={swappiness}")
    r = Reader(root)
    before = _pgdemote(r, counters)
    free0 = _free(r, nid) if nid is not None else None
    complete = True
    try:
        hw.write_knob(root, path, text + "\n")
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
    r2 = Reader(root)
    after = _pgdemote(r2, counters)
    free1 = _free(r2, nid) if nid is not None else None
    demoted = None if before is None or after is None or after < before else after - before
    freed = None if free0 is None or free1 is None else free1 - free0
    return ReclaimResult(label, path, text, asked, complete, demoted, freed)


def describe(res: ReclaimResult) -> str:
    """One paragraph for the terminal."""
    from cxlctl.parse import PAGE_SIZE

    out = f"asked {res.target} to reclaim {format_size(res.asked)} ({res.path}: {res.written})"
    out += "" if res.complete else "; the kernel reclaimed less than asked (EAGAIN: not enough reclaimable memory)"
    if res.demoted_pages is not None:
        out += f"; demoted to CXL: {format_size(res.demoted_pages * PAGE_SIZE)} (pgdemote_proactive)"
    else:
        out += "; this kernel does not count proactive demotion (no pgdemote_proactive)"
    if res.freed is not None:
        out += f"; the node's free memory changed by {'+' if res.freed >= 0 else '-'}{format_size(abs(res.freed))}"
    return out
