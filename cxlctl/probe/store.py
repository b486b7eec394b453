"""The stored probe record: what was measured, on which host, and whether it still applies.

One JSON file, :data:`~cxlctl.hostio.paths.PROBE_RESULTS`, written atomically by
``cxlctl probe``.  It names the boot id, the kernel release and, per memory node,
the memdevs (name and serial) whose memory it holds.  A record is *stale* when
any of them differs from the host now: another boot (memory may be placed or
interleaved differently), another kernel (7.4 changed how the firmware figures
are computed, and the whole stack may differ), or another memdev set behind a
node (a device was replaced or a region rebuilt).  Stale figures are shown as
stale and never used: :attr:`Stored.usable` holds none of them.
"""

from __future__ import annotations

import datetime
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from cxlctl.hostio import paths
from cxlctl.hostio.host import Host
from cxlctl.model import Inventory

from .measure import Outcome, Result, Sizes, Skipped

#: 2: a non-temporal write bandwidth (``write_mbps``) replaced the 2:1 mix; spreads, huge pages, THP
SCHEMA = 2


class Figures(NamedTuple):
    """What one memory node does for its nearest CPU node (the lowest measured latency)."""

    mem_node: int
    cpu_node: int
    read_mbps: int
    write_mbps: int
    latency_ns: float

    @property
    def bandwidth(self) -> int:
        """MB/s the weights use: min(read, write), as the kernel takes of the firmware's figures
        (mm/mempolicy.c ``mempolicy_set_node_perf``)."""
        return min(self.read_mbps, self.write_mbps)


class Stored(NamedTuple):
    """A record read back, and why it no longer describes the host (empty: it does)."""

    record: Dict[str, Any]
    stale: Tuple[str, ...]

    @property
    def figures(self) -> Dict[int, Figures]:
        """Per memory node, stale or not (for showing)."""
        return node_figures(self.record)

    @property
    def usable(self) -> Dict[int, Figures]:
        """The figures cxlctl may act on: none when the record is stale."""
        return {} if self.stale else self.figures

    def why_not(self) -> str:
        """Why :attr:`usable` is empty (for messages)."""
        return "stored probe results are stale (" + "; ".join(self.stale) + "): run cxlctl probe again"


def identity(boot_id: Optional[str], inv: Inventory) -> Dict[str, Any]:
    """What the record is checked against: boot id, kernel, memdevs (name, serial) per memory node."""
    devs = {d.name: d.serial for d in inv.memdevs}
    nodes = {
        str(n.id): {"kind": n.kind, "memdevs": [{"name": m, "serial": devs.get(m)} for m in sorted(n.memdevs)]}
        for n in inv.nodes
        if n.has_memory
    }
    return {"boot_id": boot_id, "kernel": inv.kernel, "nodes": nodes}


def _sizes(sz: Optional[Sizes]) -> Dict[str, Any]:
    if sz is None:
        return {}
    return {
        "bandwidth_buffer_bytes": sz.bandwidth,
        "latency_buffer_bytes": sz.latency,
        "seconds_per_measurement": sz.seconds,
        "last_level_cache_bytes": sz.llc,
    }


def pair_doc(r: Result) -> Dict[str, Any]:
    """One measured pair as stored: the medians, each figure's spread, the loaded point, how it ran."""
    from .measure import spread

    keys = {"read": "read_mbps", "write": "write_mbps", "latency": "latency_ns", "loaded": "loaded_latency_ns"}
    out: Dict[str, Any] = {
        "cpu_node": r.cpu_node,
        "mem_node": r.mem_node,
        "cpus": list(r.cpus),
        "read_mbps": r.read_mbps,
        "write_mbps": r.write_mbps,
        "latency_ns": r.latency_ns,
        "loaded": r.loaded,
        "spread": {keys[m]: spread(v) for m, v in r.samples.items() if m in keys},
        "samples": r.samples,
        "how": r.how or {},
    }
    out.update(_sizes(r.sizes))
    return out


def record(
    host: Host, inv: Inventory, outcomes: Sequence[Outcome], tool: str, thp: Optional[Dict[str, Any]] = None
) -> Dict[str, Any]:
    """The document ``probe`` stores and prints (``--json``); ``thp``: the host's THP mode."""
    from .measure import WINDOWS

    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    doc: Dict[str, Any] = {"schema_version": SCHEMA, "measured_at": now.isoformat()}
    doc.update(identity(host.boot_id, inv))
    doc["settings"] = {"tool": tool, "windows": WINDOWS, "transparent_hugepage": thp or {}}
    doc["pairs"] = [pair_doc(r) for r in outcomes if isinstance(r, Result)]
    doc["skipped"] = [
        {"cpu_node": s.cpu_node, "mem_node": s.mem_node, "reason": s.reason} for s in outcomes if isinstance(s, Skipped)
    ]
    return doc


def save(host: Host, doc: Dict[str, Any]) -> str:
    """Write the record (world-readable: status and the daemon's metrics show it); its path."""
    import json

    from cxlctl.hostio.atomic import StorageError, atomic_write

    try:
        return atomic_write(host.root, paths.PROBE_RESULTS, json.dumps(doc, indent=2) + "\n", mode=0o644)
    except OSError as e:
        raise StorageError(host.path(paths.PROBE_RESULTS), e, "the results were not stored") from None


def _int(v: Any) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _num(v: Any) -> Optional[float]:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


def node_figures(doc: Dict[str, Any]) -> Dict[int, Figures]:
    """Per memory node, the pair from its nearest CPU node (lowest latency; ties: highest read)."""
    best: Dict[int, Figures] = {}
    for p in doc.get("pairs") or []:
        if not isinstance(p, dict):
            continue
        c, m = p.get("cpu_node"), p.get("mem_node")
        r, x, lat = _int(p.get("read_mbps")), _int(p.get("write_mbps")), _num(p.get("latency_ns"))
        if not isinstance(c, int) or not isinstance(m, int) or r is None or x is None or lat is None:
            continue
        f = Figures(m, c, r, x, lat)
        old = best.get(m)
        if old is None or (f.latency_ns, -f.read_mbps) < (old.latency_ns, -old.read_mbps):
            best[m] = f
    return best


def stale_reasons(doc: Dict[str, Any], now: Dict[str, Any]) -> Tuple[str, ...]:
    """Why ``doc`` (a stored record) does not describe the host whose :func:`identity` is ``now``."""
    out: List[str] = []
    if "error" in doc and "pairs" not in doc:
        return (str(doc["error"]),)
    if doc.get("schema_version") != SCHEMA:
        out.append(f"written by another cxlctl (schema {doc.get('schema_version')!r})")
    if doc.get("boot_id") != now["boot_id"]:
        out.append("measured in another boot")
    if doc.get("kernel") != now["kernel"]:
        out.append(f"measured on kernel {doc.get('kernel')}, running {now['kernel']}")
    got = doc.get("nodes")
    then: Dict[str, Any] = got if isinstance(got, dict) else {}
    for nid, cur in sorted(now["nodes"].items(), key=lambda kv: int(kv[0])):
        old = then.get(nid)
        if old is None:
            out.append(f"node {nid} was not there")
        elif isinstance(old, dict) and old.get("memdevs") != cur["memdevs"]:
            out.append(f"node {nid}'s memdevs changed")
    gone = sorted(set(then) - set(now["nodes"]), key=lambda k: (len(k), k))
    if gone:
        out.append(f"node(s) {', '.join(gone)} are gone")
    return tuple(out)


def read(host: Host) -> Optional[Dict[str, Any]]:
    """The stored record as read (``{"error": why}`` when it is not a JSON object); None when absent."""
    raw = host.reader.read(paths.PROBE_RESULTS)
    if raw is None:
        return None
    import json

    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {"error": f"{host.path(paths.PROBE_RESULTS)} is not valid JSON"}
    if not isinstance(doc, dict):
        return {"error": f"{host.path(paths.PROBE_RESULTS)} is not a JSON object"}
    return doc


def judge(doc: Dict[str, Any], boot_id: Optional[str], inv: Inventory) -> Stored:
    """``doc`` with why it no longer describes the host (boot id ``boot_id``, inventory ``inv``)."""
    return Stored(doc, stale_reasons(doc, identity(boot_id, inv)))


def load(host: Host, inv: Inventory) -> Optional[Stored]:
    """The stored record and its staleness; None when there is none."""
    doc = read(host)
    return None if doc is None else judge(doc, host.boot_id, inv)


#: firmware and measurement disagree when one is more than this many times the other (doctor's
#: firmware.measured check and the weights planner: one rule)
DISAGREE = 2.0


def bandwidth_disagreements(inv: Inventory, stored: Stored) -> Dict[int, Tuple[int, int]]:
    """Node -> (the firmware's read bandwidth, the measured one) where they differ by more than
    :data:`DISAGREE`: the figures the kernel weights and tiers by (the CPU access class, one
    region's on 7.x: :func:`~cxlctl.figures.node_figures`) against ``cxlctl probe``'s current ones."""
    from cxlctl.figures import node_figures

    out: Dict[int, Tuple[int, int]] = {}
    for nid, m in sorted(stored.usable.items()):
        node = inv.node(nid)
        figs = node_figures(node, inv.regions, inv.nodes) if node is not None else None
        fw = figs.cpu.read_bandwidth if figs is not None and figs.cpu is not None else None
        if fw and m.read_mbps and max(fw, m.read_mbps) / min(fw, m.read_mbps) > DISAGREE:
            out[nid] = (fw, m.read_mbps)
    return out
