"""What processes hold on CXL nodes and DAX devices, for the capacity report.

Read from procfs through the fenced reader (:mod:`cxlctl.hostio.proc`): each
process' ``numa_maps`` (its memory policies, and the ``/dev/daxX.Y`` files it
maps), ``status`` (``Mems_allowed_list``: a cpuset confining it), its open
descriptors (a devdax device open but not mapped) and ``CXLCTL_POLICY`` in its
environment (a process ``cxlctl launch`` started, with the nodes it was given).
A process that exits or cannot be read mid-walk is skipped: the report is a
snapshot, and ``capacity release`` reads again under the lock.
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Tuple

from cxlctl.hostio import paths
from cxlctl.hostio.proc import pids, status_field
from cxlctl.hostio.reader import Reader, Unreadable
from cxlctl.numa_maps import parse_mappings
from cxlctl.parse import parse_nodelist

DEV_PREFIX = "/dev/"


class Proc(NamedTuple):
    pid: int
    name: str
    #: nodes of each ``bind`` policy the process' mappings carry (a bind leaves the kernel no other node)
    binds: Tuple[Tuple[int, ...], ...]
    #: the cpuset's nodes (``Mems_allowed_list``); None when unread
    mems_allowed: Optional[Tuple[int, ...]]
    #: DAX devices (``daxX.Y``) the process maps or holds open
    dax: Tuple[str, ...]
    #: the nodes ``cxlctl launch`` gave it (``CXLCTL_POLICY``), None when cxlctl did not launch it
    launched: Optional[Tuple[int, ...]]
    #: bytes of its pages per node (numa_maps)
    on_node: Dict[int, int]


def _dax_name(path: Optional[str]) -> Optional[str]:
    if path and path.startswith(DEV_PREFIX + "dax"):
        return path[len(DEV_PREFIX) :]
    return None


def _open_dax(r: Reader, pid: int) -> List[str]:
    """DAX devices among the process' open descriptors (``/proc/PID/fd``: root or the owner only)."""
    fd_dir = paths.proc_pid(pid, "fd")
    out = []
    for fd in r.listdir(fd_dir, ordered=False):
        name = _dax_name(r.readlink(f"{fd_dir}/{fd}"))
        if name:
            out.append(name)
    return out


def read_proc(r: Reader, pid: int, look_for_fds: bool) -> Optional[Proc]:
    """One process, or None when it is gone or tells nothing (a kernel thread has no numa_maps)."""
    from cxlctl.launch.policy import parse_env_value
    from cxlctl.launch.proof import _environ

    try:
        maps_text = r.body(paths.proc_pid(pid, "numa_maps"), limit=64 << 20)
        status = r.body(paths.proc_pid(pid, "status"))
        env = _environ(r, pid)
        fds = _open_dax(r, pid) if look_for_fds else []
    except (Unreadable, OSError):
        return None
    if not maps_text and status is None:
        return None
    maps = parse_mappings(maps_text or "")
    binds = sorted({m.nodes for m in maps if m.mode == "bind" and m.nodes})
    dax = {d for d in (_dax_name(m.file) for m in maps) if d} | set(fds)
    on_node: Dict[int, int] = {}
    for m in maps:
        for n, pages in m.pages.items():
            on_node[n] = on_node.get(n, 0) + pages * m.page_kb * 1024
    allowed_text = status_field(status, "Mems_allowed_list")
    try:
        allowed = parse_nodelist(allowed_text) if allowed_text else None
    except ValueError:
        allowed = None
    asked = parse_env_value(env) if env else None
    name = status_field(status, "Name") or ""
    return Proc(pid, name, tuple(binds), allowed, tuple(sorted(dax)), asked.nodes if asked else None, on_node)


def read_procs(r: Reader, look_for_fds: bool) -> List[Proc]:
    """Every readable process under the root's ``/proc``."""
    out = []
    for pid in pids(r):
        p = read_proc(r, pid, look_for_fds)
        if p is not None:
            out.append(p)
    return out
