"""``cxlctl health``: per memdev, what the kernel and ndctl say about its health,
its poison list, the RAS events counted for it, and its fault domain.

Why the fault domain: an operator deciding whether to drain or replace an
expander needs what fails with it.  An interleaved region fails with *any* of
its devices, so a memdev's impact is every region it is a target of, the
nodes those regions' memory is onlined into, their memory blocks, and the
cgroups and processes holding memory on those nodes.

Sources, each optional (the report says which were missing and why):

* sysfs (always): memdev identity, regions, nodes, blocks;
* ``cxl list -M -H`` (ndctl; the device's health log via the
  mailbox), and ``--media-errors`` where this ndctl has it (v80+);
* the poison list: ``memX/trigger_poison_list`` (root) makes the kernel read
  the device's list and emit one ``cxl_poison`` event per record, captured in
  a short-lived private trace instance;
* event counts: the ``cxlctl-events`` collection instance, when running.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Set, Tuple

from cxlctl.hostio import paths
from cxlctl.hostio.host import Host
from cxlctl.model import Inventory
from cxlctl.namedrecord import NamedTuple

from .events import Event

if TYPE_CHECKING:
    from .health_probe import HealthStatus


class Poison(NamedTuple):
    """One range of a memdev's poison list, where it lands in the host."""

    dpa: Optional[int]
    length: Optional[int]
    hpa: Optional[int]
    region: Optional[str]
    node: Optional[int]
    memory_block: Optional[int]
    source: Optional[str]


class Proc(NamedTuple):
    """A process with memory on a memdev's nodes (from its numa_maps)."""

    pid: int
    comm: str
    cgroup: Optional[str]
    bytes_by_node: Dict[int, int]
    bytes: int


class CgroupUse(NamedTuple):
    cgroup: str
    bytes: int


class Impact(NamedTuple):
    """What fails with a memdev: its regions (and their other devices), nodes, blocks; then the
    processes and cgroups holding memory on those nodes (the first 50, and how many)."""

    regions: Tuple[str, ...]
    shared_with: Tuple[str, ...]
    nodes: Tuple[int, ...]
    memory_blocks: Tuple[int, ...]
    processes: Tuple[Proc, ...] = ()
    process_count: int = 0
    cgroups: Tuple[CgroupUse, ...] = ()


class Status(NamedTuple):
    """ok/warning/critical and why, by the daemon's rules (:mod:`cxlctl.ras.health_probe`)."""

    status: HealthStatus
    reasons: Tuple[str, ...]


class MemdevReport(NamedTuple):
    memdev: str
    serial: Optional[int]
    host: Optional[str]
    firmware_version: Optional[str]
    ram_size: Optional[int]
    driver: Optional[str]
    health: Optional[Dict[str, Any]]  # ndctl's health object, as it printed it
    health_status: Optional[Status]
    media_errors: Any  # ndctl's --media-errors answer, as it printed it
    poison: Optional[Tuple[Poison, ...]]  # None: not read
    event_counts: Optional[Dict[str, int]]  # None: no collection runs
    impact: Impact
    #: why ``health`` is None: what was looked for and how to get it (None: health was read)
    health_missing: Optional[str] = None


class HealthReport(NamedTuple):
    """``cxlctl health``: every memdev, the ports' events, notes, and the problems (exit 1)."""

    memdevs: Tuple[MemdevReport, ...]
    ports: Dict[str, Dict[str, int]]
    notes: Tuple[str, ...]
    errors: Tuple[str, ...]


#: where device health comes from, for the messages that say it was not there
HEALTH_SOURCE = "the device's health log, read through its mailbox by `cxl list -M -H` (ndctl)"


def _ndctl_health(host: Host, memdevs: List[str]) -> Tuple[Dict[str, Any], Dict[str, Any], List[str], str]:
    """(health per memdev, media errors per memdev, notes, why a memdev without health has none) from
    ndctl; nothing under a --root tree (a recording has no device to ask)."""
    notes: List[str] = []
    health: Dict[str, Any] = {}
    media: Dict[str, Any] = {}
    if not host.live:
        why = f"looked for {HEALTH_SOURCE}; --root reads a recorded tree, which has no device to ask: run `sudo cxlctl health` on the host"
        return health, media, ["ndctl not consulted: --root reads a recorded tree, not a live device"], why
    why = f"looked for {HEALTH_SOURCE}; the device gave none for this memdev (check: `sudo cxl list -M -H`)"
    if not memdevs:
        return health, media, notes, why
    from cxlctl.hostio.tools import ToolError, cxl_list

    try:
        got = cxl_list("-M", "-H", timeout=20)
    except ToolError as e:
        notes.append(e.note)
        why = f"looked for {HEALTH_SOURCE}; it could not run: {e.note}"
    else:
        for obj in got.memdevs:
            if isinstance(obj.get("health"), dict):
                health[obj["memdev"]] = obj["health"]
        if not health:
            notes.append("ndctl ran but reported no health object for any memdev (the device gave none)")
    try:
        got = cxl_list("-M", "--media-errors", timeout=20)
    except ToolError as e:
        notes.append(e.note + " (--media-errors needs ndctl v80+)")
    else:
        for obj in got.memdevs:
            media[obj["memdev"]] = obj.get("media_errors")
    return health, media, notes, why


def read_poison(host: Host, inv: Inventory, memdevs: List[str]) -> Tuple[Dict[str, List[Event]], List[str]]:
    """Trigger each memdev's poison list and collect the ``cxl_poison`` events.

    Uses its own instance (``cxlctl-health-<pid>``) with only ``cxl_poison``
    enabled, so a running collection or follower is not disturbed, and removes
    it afterwards.  Returns (events per memdev, notes)."""
    from cxlctl.hostio import tracefs
    from cxlctl.hostio.write import KnobError, write_knob

    from .collect import Mapper
    from .trace import Stream

    out: Dict[str, List[Event]] = {}
    notes: List[str] = []
    have = [m for m in memdevs if os.path.exists(host.path(f"{paths.cxl_device(m)}/trigger_poison_list"))]
    if not have:
        return out, ["no memdev has trigger_poison_list (kernel before 6.4, or the device lacks poison list support)"]
    try:
        tf = tracefs.find_tracefs(host.root)
    except tracefs.TracefsError as e:
        return out, [f"poison list not read: {e}"]
    if "cxl_poison" not in tracefs.cxl_events(host.root, tf):
        return out, ["poison list not read: this kernel has no cxl_poison trace event"]
    name = f"{paths.TRACE_INSTANCE_PREFIX}health-{os.getpid()}"
    try:
        inst = tracefs.create_instance(host.root, tf, name, ["cxl_poison"])
    except tracefs.TracefsError as e:
        return out, [f"poison list not read: {e}"]
    try:
        for m in have:
            try:
                write_knob(host.root, f"{paths.cxl_device(m)}/trigger_poison_list", "1\n")
                out[m] = []
            except KnobError as e:
                notes.append(f"{m}: trigger_poison_list: {e.reason}")
        time.sleep(0.2)  # the kernel emits the events synchronously; let the buffer settle
        data = tracefs.read_trace(host.root, inst)
    finally:
        tracefs.remove_instance(host.root, tf, name)
    stream = Stream()
    for ev in Mapper(host, inv).map(data.decode("utf-8", "replace").splitlines(), stream):
        if ev.memdev in out:
            out[ev.memdev].append(ev)
    if stream.error_count:
        notes.append(f"{stream.error_count} poison trace line(s) could not be parsed")
    return out, notes


def _event_counts(host: Host, inv: Inventory) -> Tuple[Optional[Dict[str, Dict[str, int]]], Optional[str]]:
    """Counts of collected events per memdev, "kind/severity" keys; None + why when no collection runs."""
    from cxlctl.hostio.tracefs import TracefsError

    from .collect import Mapper, read_collection
    from .trace import Stream

    try:
        _, data = read_collection(host)
    except TracefsError as e:
        return None, str(e)
    counts: Dict[str, Dict[str, int]] = {}
    for ev in Mapper(host, inv).map(data.decode("utf-8", "replace").splitlines(), Stream()):
        key = f"{ev.kind}/{ev.severity}" if ev.severity != ev.kind else ev.kind
        # a port's AER events are counted under the port (``port:NAME``): they name no memdev
        d = counts.setdefault(ev.memdev or (f"port:{ev.port}" if ev.port else "?"), {})
        d[key] = d.get(key, 0) + 1
    return counts, None


def _status(name: str, health: Dict[str, Any]) -> Optional[Status]:
    """ok/warning/critical and why, by the daemon's rules (cxlctl.ras.health_probe)."""
    if name not in health:
        return None
    from .health_probe import classify

    c = classify(name, health[name])
    return Status(c.status, tuple(c.reasons))


# ----------------------------------------------------------------------- impact


def fault_domain(inv: Inventory, memdev: str) -> Impact:
    """What fails with ``memdev``: its regions (and their other devices), nodes, blocks."""
    m = inv.memdev(memdev)
    regions = list(m.regions) if m else []
    peers: Set[str] = set()
    nodes: Set[int] = set()
    blocks: List[int] = []
    bs = inv.memory_block_size
    for rn in regions:
        r = inv.region(rn)
        if r is None:
            continue
        peers.update(t.memdev for t in r.targets if t.memdev and t.memdev != memdev)
        for d in inv.dax_devices:
            if d.name in r.dax_devices and d.target_node is not None and d.target_node >= 0:
                nodes.add(d.target_node)
        if r.resource is not None and r.size and bs:
            lo, hi = r.resource // bs, (r.resource + r.size - 1) // bs
            for n in inv.nodes:
                blocks.extend(b.id for b in n.memory_blocks if lo <= b.id <= hi)
    # nodes that hold *only* this memdev's regions are lost whole; others partly
    return Impact(tuple(regions), tuple(sorted(peers)), tuple(sorted(nodes)), tuple(sorted(set(blocks))))


def processes_on(host: Host, nodes: Set[int], limit: int = 4000) -> Tuple[List[Proc], int]:
    """Processes with pages on ``nodes`` (from numa_maps), largest first; and how
    many processes could not be read (not root, exited)."""
    from cxlctl.hostio.proc import cgroup_of, pids
    from cxlctl.hostio.reader import Unreadable
    from cxlctl.numa_maps import parse_mappings

    out: List[Proc] = []
    unreadable = 0
    if not nodes:
        return out, 0
    r = host.reader
    for pid in pids(r)[:limit]:
        try:
            b = r.read(paths.proc_pid(pid, "numa_maps"), limit=32 << 20)
        except Unreadable:
            b = None
        if b is None:  # exited, not ours to read, or too large
            unreadable += 1
            continue
        pages: Dict[int, int] = {}
        for mp in parse_mappings(b.decode("utf-8", "replace")):
            for n, p in mp.pages.items():
                if n in nodes:
                    pages[n] = pages.get(n, 0) + p * mp.page_kb * 1024
        if not pages:
            continue
        comm = (r.body(paths.proc_pid(pid, "comm")) or "").strip()
        cgroup = cgroup_of(r.body(paths.proc_pid(pid, "cgroup")))
        out.append(Proc(pid, comm, cgroup, pages, sum(pages.values())))
    out.sort(key=lambda p: -p.bytes)
    return out, unreadable


def cgroups_on(procs: List[Proc]) -> List[CgroupUse]:
    """Cgroups of the affected processes, with the bytes their processes hold there."""
    agg: Dict[str, int] = {}
    for p in procs:
        if p.cgroup:
            agg[p.cgroup] = agg.get(p.cgroup, 0) + p.bytes
    return [CgroupUse(k, v) for k, v in sorted(agg.items(), key=lambda kv: -kv[1])]


# ----------------------------------------------------------------------- report


def collect_health(host: Host, poison: bool = True, inv: Optional[Inventory] = None) -> HealthReport:
    from cxlctl.inventory import scan

    inv = inv or scan(host)
    names = [m.name for m in inv.memdevs]
    notes: List[str] = []
    health, media, nd_notes, no_health = _ndctl_health(host, names)
    notes += nd_notes
    poison_by: Dict[str, List[Event]] = {}
    if poison and names:
        if os.geteuid() != 0 and host.live:
            notes.append("poison list not read: trigger_poison_list needs root")
        else:
            poison_by, p_notes = read_poison(host, inv, names)
            notes += p_notes
    counts, why = _event_counts(host, inv)
    if why:
        notes.append(f"event counts: {why}")
    domains = {m.name: fault_domain(inv, m.name) for m in inv.memdevs}
    procs, unreadable = processes_on(host, {n for fd in domains.values() for n in fd.nodes})
    if unreadable and os.geteuid() != 0:
        notes.append(f"{unreadable} processes' numa_maps unreadable (not root): the process list is partial")
    memdevs = []
    for m in inv.memdevs:
        fd = domains[m.name]
        mine = [p for p in procs if set(fd.nodes) & set(p.bytes_by_node)]
        memdevs.append(
            MemdevReport(
                memdev=m.name,
                serial=m.serial,
                host=m.host,
                firmware_version=m.firmware_version,
                ram_size=m.ram_size,
                driver=m.driver,
                health=health.get(m.name),
                health_status=_status(m.name, health),
                media_errors=media.get(m.name),
                poison=None if m.name not in poison_by else tuple(_poison(e) for e in poison_by[m.name]),
                event_counts=None if counts is None else counts.get(m.name, {}),
                impact=fd._replace(
                    processes=tuple(mine[:50]), process_count=len(mine), cgroups=tuple(cgroups_on(mine))
                ),
                health_missing=None if m.name in health else no_health,
            )
        )
    ports = {k[len("port:") :]: v for k, v in (counts or {}).items() if k.startswith("port:")}
    return HealthReport(tuple(memdevs), ports, tuple(notes), tuple(problems(memdevs)))


def _poison(e: Event) -> Poison:
    return Poison(
        e.dpa, e.length, e.mapping.hpa, e.mapping.region, e.mapping.node, e.mapping.memory_block, e.fields.get("source")
    )


def problems(memdevs: Sequence[MemdevReport]) -> List[str]:
    """What makes ``cxlctl health`` exit 1: a device whose health log says critical, or poison
    on its list.  A warning (life used past the threshold, a temperature alarm) is shown but is
    not a failure: it asks for a plan, not for action now."""
    out: List[str] = []
    for md in memdevs:
        st = md.health_status
        if st is not None and st.status == "critical":
            out.append(f"{md.memdev}: health critical ({', '.join(st.reasons)})")
        if md.poison:
            out.append(f"{md.memdev}: {len(md.poison)} poisoned range(s)")
    return out


def to_json(report: HealthReport) -> Dict[str, Any]:
    """The ``cxlctl health --json`` document (docs/ras.md)."""
    return {
        "memdevs": [_memdev_json(md) for md in report.memdevs],
        "ports": report.ports,
        "notes": list(report.notes),
        "errors": list(report.errors),
    }


def _memdev_json(md: MemdevReport) -> Dict[str, Any]:
    imp = md.impact
    return {
        "memdev": md.memdev,
        "serial": md.serial,
        "host": md.host,
        "firmware_version": md.firmware_version,
        "ram_size": md.ram_size,
        "driver": md.driver,
        "health": md.health,
        "health_missing": md.health_missing,
        "health_status": None
        if md.health_status is None
        else {"status": md.health_status.status, "reasons": list(md.health_status.reasons)},
        "media_errors": md.media_errors,
        "poison": None if md.poison is None else [p._asdict() for p in md.poison],
        "event_counts": md.event_counts,
        "impact": {
            "regions": list(imp.regions),
            "shared_with": list(imp.shared_with),
            "nodes": list(imp.nodes),
            "memory_blocks": list(imp.memory_blocks),
            "processes": [
                {**p._asdict(), "bytes_by_node": {str(k): v for k, v in p.bytes_by_node.items()}} for p in imp.processes
            ],
            "process_count": imp.process_count,
            "cgroups": [c._asdict() for c in imp.cgroups],
        },
    }


def render_health(report: HealthReport) -> str:
    """Plain text, 80 columns: one block per memdev (the report's objects, not its JSON)."""
    from cxlctl.term import clean

    lines: List[str] = []
    if not report.memdevs:
        lines.append("no CXL memory devices")
    # why there is no device data is the same for every memdev (no ndctl, a recorded tree): said once
    missing: Dict[str, List[str]] = {}
    for md in report.memdevs:
        if not (isinstance(md.health, dict) and md.health_status):
            missing.setdefault(md.health_missing or HEALTH_SOURCE + " gave none", []).append(md.memdev)
    shared = {why for why, names in missing.items() if len(names) > 1}
    for md in report.memdevs:
        lines += _memdev_lines(md, said_below=(md.health_missing or HEALTH_SOURCE + " gave none") in shared)
    for why in sorted(shared):
        lines.append(f"no device data for {', '.join(clean(m) for m in missing[why])}: {clean(why)}")
    for port, c in sorted(report.ports.items()):
        lines.append(f"port {clean(port)}: events " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    for n in report.notes:
        lines.append(f"note: {clean(n)}")
    for e in report.errors:
        lines.append(f"PROBLEM: {clean(e)}")
    return "\n".join(_wrap(line) for line in lines) + "\n"


def _memdev_lines(md: MemdevReport, said_below: bool = False) -> List[str]:
    from cxlctl.parse import format_size
    from cxlctl.term import clean

    serial = f"{md.serial:#x}" if isinstance(md.serial, int) else "?"
    lines = [f"{clean(md.memdev)}  serial {serial}  {clean(md.host or '?')}  {format_size(md.ram_size)}"]
    h, st = md.health, md.health_status
    if isinstance(h, dict) and st:
        life = h.get("life_used_percent")
        temp = h.get("temperature")
        lines.append(
            f"  health: {st.status}"
            + (f" ({', '.join(clean(str(x)) for x in st.reasons)})" if st.reasons else "")
            + (f"; life used {life}%" if life is not None else "")
            + (f"; {temp} C" if temp is not None else "")
        )
    elif said_below:  # the reason, shared by several memdevs, follows them once
        lines.append("  health: no device data (why: below)")
    else:
        lines.append(f"  health: no device data: {clean(md.health_missing or HEALTH_SOURCE + ' gave none')}")
    if md.poison is not None:
        for p in md.poison[:10]:
            where = ", ".join(
                x
                for x in (
                    f"HPA {p.hpa:#x}" if p.hpa is not None else "",
                    clean(p.region or ""),
                    f"node {p.node}" if p.node is not None else "",
                    f"block {p.memory_block}" if p.memory_block is not None else "",
                )
                if x
            )
            dpa = f"{p.dpa:#x}" if p.dpa is not None else "?"
            lines.append(f"  poison: DPA {dpa} +{p.length or 0:#x}" + (f" -> {where}" if where else ""))
        if len(md.poison) > 10:
            lines.append(f"  poison: {len(md.poison) - 10} more (see --json)")
        if not md.poison:
            lines.append("  poison: none")
    if md.event_counts:
        lines.append("  events: " + ", ".join(f"{k} {v}" for k, v in sorted(md.event_counts.items())))
    imp = md.impact
    if imp.regions:
        lines.append(
            "  impact: "
            + ", ".join(clean(r) for r in imp.regions)
            + (f" (with {', '.join(clean(x) for x in imp.shared_with)})" if imp.shared_with else "")
            + (f"; node {', '.join(str(n) for n in imp.nodes)}" if imp.nodes else "")
            + (f"; {len(imp.memory_blocks)} memory blocks" if imp.memory_blocks else "")
        )
        lines.append(
            f"  processes with memory there: {imp.process_count}"
            + (" (" + ", ".join(f"{clean(p.comm)}[{p.pid}]" for p in imp.processes[:4]) + ")" if imp.processes else "")
        )
    else:
        lines.append("  impact: in no region (no memory in use)")
    return lines


def _wrap(line: str, width: int = 80) -> str:
    from cxlctl import term

    return term.fold(line, max(width, term.width(default=width)))
