"""Compare `cxlctl status --json` with the real tools' views of the same host.

Pure functions over parsed outputs, so the same checks run live in the VM tests
and on the peer outputs recorded beside each fixture (fixtures/*/*/peers/).
Each check returns mismatches plus a count of facts compared per category, so a
test can insist that something was actually compared (a comparison of nothing
would pass with the feature removed).
"""

from __future__ import annotations

import re
from typing import Any, Dict, Iterator, List, Optional, Tuple

Facts = Dict[str, int]


def walk(obj: Any) -> Iterator[Dict[str, Any]]:
    """Every JSON object in a `cxl list`/`daxctl list` document, depth first.

    `cxl list` nests children under keys like ``ports:root0`` and wraps several
    object kinds in containers (``{"memdevs": [...]}``); walking everything and
    classifying objects by their identifying key copes with all shapes.
    """
    if isinstance(obj, dict):
        yield obj
        for v in obj.values():
            yield from walk(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from walk(v)


def _index(doc: Any, key: str) -> Dict[str, Dict[str, Any]]:
    out: Dict[str, Dict[str, Any]] = {}
    for o in walk(doc):
        name = o.get(key)
        if isinstance(name, str):
            # the same object can appear twice (memdev nested in an endpoint and in
            # the memdevs list): merge, keeping every key seen
            out.setdefault(name, {}).update(o)
    return out


class Comparison:
    def __init__(self) -> None:
        self.mismatches: List[str] = []
        self.facts: Facts = {}

    def eq(self, category: str, what: str, ours: Any, theirs: Any) -> None:
        self.facts[category] = self.facts.get(category, 0) + 1
        if ours != theirs:
            self.mismatches.append(f"{what}: cxlctl={ours!r} peer={theirs!r}")


def compare_cxl_list(status: Dict[str, Any], cxl_list: Any, c: Optional[Comparison] = None) -> Comparison:
    """Memdevs, decoders, regions, ports/endpoints against `cxl list -vvv` JSON."""
    c = c or Comparison()
    mem_peer = {
        k: v for k, v in _index(cxl_list, "memdev").items() if "ram_size" in v or "pmem_size" in v or "serial" in v
    }
    mem_ours = {m["memdev"]: m for m in status["memdevs"]}
    c.eq("memdev", "memdev names", sorted(mem_ours), sorted(mem_peer))
    for name in sorted(set(mem_ours) & set(mem_peer)):
        o, p = mem_ours[name], mem_peer[name]
        # cxl list omits zero sizes; cxlctl reports 0
        c.eq("memdev", f"{name} ram_size", o["ram_size"] or None, p.get("ram_size"))
        c.eq("memdev", f"{name} pmem_size", o["pmem_size"] or None, p.get("pmem_size"))
        c.eq("memdev", f"{name} serial", o["serial"], p.get("serial"))
        c.eq("memdev", f"{name} host", o["host"], p.get("host"))
        if "numa_node" in p:
            c.eq("memdev", f"{name} numa_node", o["numa_node"], p.get("numa_node"))

    dec_peer = _index(cxl_list, "decoder")
    dec_ours = {d["decoder"]: d for d in status["decoders"]}
    c.eq("decoder", "decoder names", sorted(dec_ours), sorted(dec_peer))
    for name in sorted(set(dec_ours) & set(dec_peer)):
        o, p = dec_ours[name], dec_peer[name]
        if "size" in p:
            c.eq("decoder", f"{name} size", o["size"], p["size"])
        if "resource" in p:
            c.eq("decoder", f"{name} resource", o["resource"], p["resource"])
        if "interleave_ways" in p:
            c.eq("decoder", f"{name} interleave_ways", o["interleave_ways"], p["interleave_ways"])
        if "interleave_granularity" in p:
            c.eq("decoder", f"{name} interleave_granularity", o["interleave_granularity"], p["interleave_granularity"])
        if "targets" in p:
            theirs = [
                (t.get("position"), t.get("id")) for t in sorted(p["targets"], key=lambda t: t.get("position", 0))
            ]
            tgt_ours = [(t["position"], t["id"]) for t in o.get("targets", [])]
            c.eq("decoder", f"{name} targets (position, id)", tgt_ours, theirs)
        if "region" in p:
            c.eq("decoder", f"{name} region", o.get("region"), p["region"])
        if "dpa_size" in p:
            c.eq("decoder", f"{name} dpa_size", o.get("dpa_size"), p["dpa_size"])
        if "mode" in p:
            c.eq("decoder", f"{name} mode", o.get("mode"), p["mode"])

    reg_peer = {k: v for k, v in _index(cxl_list, "region").items() if "decode_state" in v or "interleave_ways" in v}
    reg_ours = {r["region"]: r for r in status["regions"]}
    c.eq("region", "region names", sorted(reg_ours), sorted(reg_peer))
    for name in sorted(set(reg_ours) & set(reg_peer)):
        ro, rp = reg_ours[name], reg_peer[name]
        for key in ("size", "resource", "interleave_ways", "interleave_granularity", "decode_state", "type"):
            if key in rp:
                c.eq("region", f"{name} {key}", ro[key], rp[key])
        if "mappings" in rp:
            theirs = [m.get("memdev") for m in sorted(rp["mappings"], key=lambda m: m.get("position", 0))]
            c.eq("region", f"{name} target order", ro["targets"], theirs)

    for kind, key in (("port", "port"), ("endpoint", "endpoint"), ("bus", "bus")):
        peer = _index(cxl_list, key)
        ours_list = status["ports" if kind == "port" else "endpoints" if kind == "endpoint" else "buses"]
        ours = {x[key]: x for x in ours_list}
        c.eq(kind, f"{kind} names", sorted(ours), sorted(peer))
        for name in sorted(set(ours) & set(peer)):
            if "depth" in peer[name]:
                c.eq(kind, f"{name} depth", ours[name]["depth"], peer[name]["depth"])
            if "host" in peer[name] and kind == "endpoint":
                c.eq(kind, f"{name} host", ours[name]["host"], peer[name]["host"])
    return c


def compare_daxctl(status: Dict[str, Any], daxctl_list: Any, c: Optional[Comparison] = None) -> Comparison:
    c = c or Comparison()
    peer = _index(daxctl_list, "chardev")
    ours = {d["chardev"]: d for d in status["dax_devices"]}
    c.eq("dax", "dax device names", sorted(ours), sorted(peer))
    for name in sorted(set(ours) & set(peer)):
        o, p = ours[name], peer[name]
        for key in ("size", "target_node", "mode", "align", "online_memblocks", "total_memblocks", "movable"):
            if key in p:
                c.eq("dax", f"{name} {key}", o[key], p[key])
    return c


_NODE_LINE = re.compile(r"node (\d+) (cpus|size|free):(.*)")


def parse_numactl_h(text: str) -> Tuple[Dict[int, Dict[str, Any]], Dict[int, List[int]]]:
    nodes: Dict[int, Dict[str, Any]] = {}
    dist: Dict[int, List[int]] = {}
    in_dist = False
    for line in text.splitlines():
        m = _NODE_LINE.match(line.strip())
        if m:
            n, what, rest = int(m.group(1)), m.group(2), m.group(3).strip()
            d = nodes.setdefault(n, {})
            if what == "cpus":
                d["cpus"] = [int(x) for x in rest.split()]
            else:
                d[what] = int(rest.split()[0])
            continue
        if line.startswith("node distances"):
            in_dist = True
            continue
        if in_dist:
            m2 = re.match(r"\s*(\d+):\s*(.*)", line)
            if m2:
                dist[int(m2.group(1))] = [int(x) for x in m2.group(2).split()]
    return nodes, dist


def compare_numactl(status: Dict[str, Any], numactl_h: str, c: Optional[Comparison] = None) -> Comparison:
    c = c or Comparison()
    nodes, dist = parse_numactl_h(numactl_h)
    ours = {n["id"]: n for n in status["nodes"] if n["has_memory"] or n["cpus"]}
    c.eq("node", "node ids", sorted(ours), sorted(nodes))
    for nid in sorted(set(ours) & set(nodes)):
        o, p = ours[nid], nodes[nid]
        c.eq("node", f"node {nid} cpus", o["cpus"], p.get("cpus"))
        c.eq("node", f"node {nid} size MB", (o["mem_total"] or 0) >> 20, p.get("size"))
        c.eq("node", f"node {nid} cpu-less", not o["cpus"], not p.get("cpus"))
        if nid in dist:
            c.eq("node", f"node {nid} distance row", o["distance"], dist[nid])
    return c
