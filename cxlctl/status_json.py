"""The ``status --json`` document: the inventory in ``cxl list``'s vocabulary.

The schema is documented in docs/json-schema.md; bump ``SCHEMA_VERSION`` on any
incompatible change (renamed/removed key or changed type).  Keys whose value is
unknown are present with ``null`` (unlike ``cxl list``, which omits them), so a
consumer can tell "unknown" from "this cxlctl does not know the key".
"""

from __future__ import annotations

from .figures import node_figures
from .model import Coordinates, DaxDevice, Decoder, Figures, Inventory, Memdev, Node, Port, Region

# typing costs ~5 ms of start-up: only mypy needs it here
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional

    J = Dict[str, Any]


SCHEMA_VERSION = 1


def _coords(c: Optional[Coordinates]) -> Optional[J]:
    return None if c is None else dict(c._asdict())


def _dports(p: Port) -> List[J]:
    return [{"dport": d.name, "alias": d.alias, "id": d.id} for d in p.dports]


def bus(p: Port) -> J:
    return {
        "bus": p.name,
        "provider": p.provider,
        "host": p.host,
        "nr_dports": len(p.dports),
        "dports": _dports(p),
        "decoders": list(p.decoders),
    }


def port(p: Port) -> J:
    key = "endpoint" if p.kind == "endpoint" else "port"
    out: J = {
        key: p.name,
        "host": p.host,
        "parent": p.parent,
        "parent_dport": p.parent_dport,
        "depth": p.depth,
        "host_bridge": p.host_bridge,
        "decoders_committed": p.decoders_committed,
        "decoders": list(p.decoders),
    }
    if p.kind == "endpoint":
        out["memdev"] = p.memdev
    else:
        out["nr_dports"] = len(p.dports)
        out["dports"] = _dports(p)
    return out


def decoder(d: Decoder, inv: Optional[Inventory] = None) -> J:
    out: J = {
        "decoder": d.name,
        "port": d.port,
        "kind": d.kind,
        "resource": d.resource,
        "size": d.size,
        "interleave_ways": d.interleave_ways,
        "interleave_granularity": d.interleave_granularity,
        "locked": d.locked,
    }
    if d.size == 0:
        out["state"] = "disabled"
    if d.kind != "endpoint":
        dports: Dict[int, Optional[str]] = {}
        if inv is not None:
            for p in inv.buses + inv.ports:  # a loop, not next(generator): ~10 root and switch decoders
                if p.name == d.port:
                    dports = {x.id: x.name for x in p.dports}
                    break
        out["nr_targets"] = len(d.target_list)
        out["targets"] = [{"position": i, "id": t, "target": dports.get(t)} for i, t in enumerate(d.target_list)]
    if d.kind == "root":
        out.update(
            {
                "volatile_capable": d.cap_ram,
                "pmem_capable": d.cap_pmem,
                "accelmem_capable": d.cap_type2,
                "type3_capable": d.cap_type3,
                "qos_class": d.qos_class,
                "ram_region_creatable": d.can_create_ram,
            }
        )
    else:
        out["region"] = d.region
        out["target_type"] = d.target_type
    if d.kind == "endpoint":
        out.update({"mode": d.mode, "dpa_resource": d.dpa_resource, "dpa_size": d.dpa_size, "memdev": d.memdev})
    return out


def memdev(m: Memdev) -> J:
    total = (m.ram_size or 0) + (m.pmem_size or 0)
    return {
        "memdev": m.name,
        "ram_size": m.ram_size,
        "pmem_size": m.pmem_size,
        "ram_qos_class": m.ram_qos_class,
        "pmem_qos_class": m.pmem_qos_class,
        "serial": m.serial,
        "numa_node": m.numa_node,
        "host": m.host,
        "firmware_version": m.firmware_version,
        "security_state": m.security_state,
        "payload_max": m.payload_max,
        "label_storage_size": m.label_storage_size,
        "endpoint": m.endpoint,
        "driver": m.driver,
        "state": None if m.driver else "disabled",
        "chardev": m.chardev,
        "dpa_allocated": m.dpa_allocated,
        "unassigned_size": max(0, total - m.dpa_allocated),
        "regions": list(m.regions),
    }


def region(r: Region, inv: Inventory) -> J:
    nodes = sorted({d.target_node for d in inv.dax_devices if d.name in r.dax_devices and d.target_node is not None})
    return {
        "region": r.name,
        "decoder": r.root_decoder,
        "resource": r.resource,
        "size": r.size,
        "type": r.mode,
        "interleave_ways": r.interleave_ways,
        "interleave_granularity": r.interleave_granularity,
        "decode_state": None if r.committed is None else ("commit" if r.committed else "reset"),
        "uuid": r.uuid,
        "driver": r.driver,
        "targets": [t.memdev for t in r.targets],
        "mappings": [{"position": t.position, "memdev": t.memdev, "decoder": t.decoder} for t in r.targets],
        "dax_region": r.dax_region,
        "dax_devices": list(r.dax_devices),
        "nodes": nodes,
        "access0": _coords(r.access0),
        "access1": _coords(r.access1),
    }


def dax(d: DaxDevice) -> J:
    return {
        "chardev": d.name,
        "size": d.size,
        "target_node": d.target_node,
        "numa_node": d.numa_node,
        "align": d.align,
        "resource": d.resource,
        "mode": d.mode,
        "driver": d.driver,
        "memmap_on_memory": d.memmap_on_memory,
        "region": d.region,
        "provider": d.provider,
        "path": d.dax_region_path,
        "online_memblocks": d.online_memblocks,
        "total_memblocks": d.total_memblocks,
        "movable": None if not d.zones else d.zones == ("Movable",),
        "zones": list(d.zones),
    }


def figures(f: Figures) -> J:
    """The figures the kernel holds for a node (:func:`node_figures`): ``access1`` is what it
    weights and tiers by, ``access0`` its nearest initiator's, ``from`` "node" or "regions"."""
    return {
        "access1": _coords(f.cpu),
        "access0": _coords(f.nearest),
        "from": f.source,
        "regions": list(f.regions),
        "undetermined": f.undetermined,
        "chosen_by": f.chosen_by,
    }


def node(n: Node, inv: Inventory) -> J:
    zones: Dict[str, int] = {}
    online = 0
    for b in n.memory_blocks:
        if (b.state or "").startswith("online"):
            online += 1
            zones[b.zone or "unknown"] = zones.get(b.zone or "unknown", 0) + 1
    return {
        "id": n.id,
        "kind": n.kind,
        "cpus": list(n.cpus),
        "has_cpu": n.has_cpu,
        "has_memory": n.has_memory,
        "mem_total": n.mem_total,
        "mem_free": n.mem_free,
        "tier": n.tier,
        "distance": list(n.distance),
        "access0": _coords(n.access0),
        "access1": _coords(n.access1),
        "figures": figures(node_figures(n, inv.regions, inv.nodes)),
        "memory_blocks": {"total": len(n.memory_blocks), "online": online, "zones": zones},
        "weight": inv.weighted_interleave.weights.get(n.id),
        "regions": list(n.regions),
        "memdevs": list(n.memdevs),
        "dax_devices": list(n.dax_devices),
    }


def to_dict(inv: Inventory) -> J:
    from . import __version__

    wi = inv.weighted_interleave
    return {
        "schema_version": SCHEMA_VERSION,
        "cxlctl_version": __version__,
        "kernel": inv.kernel,
        "cxl_present": inv.has_cxl,
        "buses": [bus(p) for p in inv.buses],
        "ports": [port(p) for p in inv.ports],
        "endpoints": [port(p) for p in inv.endpoints],
        "decoders": [decoder(d, inv) for d in inv.decoders],
        "memdevs": [memdev(m) for m in inv.memdevs],
        "regions": [region(r, inv) for r in inv.regions],
        "dax_devices": [dax(d) for d in inv.dax_devices],
        "nodes": [node(n, inv) for n in inv.nodes],
        "tiers": [{"tier": t.id, "name": f"memory_tier{t.id}", "nodes": list(t.nodes)} for t in inv.tiers],
        "knobs": {k.name: {"value": k.value, "path": k.path, "supported": k.supported} for k in inv.knobs},
        "weighted_interleave": {
            "supported": wi.supported,
            "auto": wi.auto,
            "weights": {str(k): v for k, v in sorted(wi.weights.items())},
        },
        "memory_block_size": inv.memory_block_size,
        "totals": dict(inv.totals._asdict()),
        "warnings": [dict(w._asdict()) for w in inv.warnings],
        "notes": [{"path": p, "note": n} for p, n in inv.notes],
    }


def dumps(inv: Inventory, extra: Optional[Dict[str, Any]] = None) -> str:
    """``json.dumps(to_dict(inv), indent=2) + "\\n"``, byte for byte, without importing json.

    The ``json`` package imports ``re`` (for its decoder) and, with ``indent``,
    encodes in pure Python anyway; this writer does the same walk for the
    types :func:`to_dict` produces and saves ``status --json`` a few
    milliseconds of start-up.  tests/test_status_json.py holds it to ``json.dumps``.
    """
    doc = to_dict(inv)
    if extra:
        doc.update(extra)  # ``measured``: cxlctl probe's stored figures (docs/probe.md), when it ran
    return _text(doc, "\n", {}) + "\n"


def _quote(s: str) -> str:
    """``json.dumps(s)``: a string of printable ASCII without a quote or a backslash (nearly every
    name and value sysfs gives) is itself in quotes; anything else goes through the json
    package's own C encoder, loaded then (``_json`` is a shared library: ~0.4 ms to load,
    a tenth of ``status --json``'s own work)."""
    if s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
        return '"' + s + '"'
    return str(_c_quote()(s))


def _c_quote() -> Callable[[str], str]:
    try:  # the C string encoder the json package uses; importing it alone does not load json
        from _json import encode_basestring_ascii
    except ImportError:  # pragma: no cover - interpreters without the accelerator
        from json.encoder import encode_basestring_ascii
    return encode_basestring_ascii


def _scalar(v: object) -> str:
    """JSON text of a non-container, as ``json.dumps`` writes it (``allow_nan`` included)."""
    if isinstance(v, str):
        return _quote(v)
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return int.__repr__(v)
    if isinstance(v, float):
        if v != v:
            return "NaN"
        if v in (float("inf"), float("-inf")):
            return "Infinity" if v > 0 else "-Infinity"
        return float.__repr__(v)
    raise TypeError(f"Object of type {type(v).__name__} is not JSON serializable")


def _key(k: object) -> str:
    if isinstance(k, str):
        return _quote(k)
    if k is None or isinstance(k, (bool, int, float)):
        return _quote(_scalar(k))
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(k).__name__}")


def _emit(v: object, out: List[str], nl: str) -> None:
    """Append ``v`` indented by two spaces per level; ``nl`` is the newline plus the current indent."""
    out.append(_value(v, nl, {}))


def _value(v: object, nl: str, keys: Dict[object, str]) -> str:
    """JSON text of ``v``: a ``str``, ``int``, ``bool`` or ``None`` (exactly those types) here, anything
    else by :func:`_text`."""
    t = type(v)
    if t is str:
        return _quote(v)  # type: ignore[arg-type]
    if t is int:
        return f"{v}"
    if v is None:
        return "null"
    if t is bool:
        return "true" if v else "false"
    return _text(v, nl, keys)


def _text(v: object, nl: str, keys: Dict[object, str]) -> str:
    """JSON text of a container (or of a value of another type: :func:`_scalar`), its items
    indented by two spaces per level; ``nl`` is the newline plus the current indent.

    The document holds about a thousand values and this walk was a fifth of ``status --json``'s
    own work, so a dict's values of the usual kinds (a string of printable ASCII without a
    quote or a backslash, an int, None) are written in the loop, without a call each, and
    ``keys`` keeps the quoted form of each string key met (with its ``": "``): the document
    repeats a few dozen keys hundreds of times.  Only str keys are kept, so ``True`` or ``1``
    never finds ``"1"``'s."""
    if isinstance(v, dict):
        if not v:
            return "{}"
        inner = nl + "  "
        items: List[str] = []
        for k, x in v.items():
            key = keys.get(k)
            if key is None:
                key = _key(k) + ": "
                if type(k) is str:
                    keys[k] = key
            t = type(x)
            if t is str and x.isascii() and x.isprintable() and '"' not in x and "\\" not in x:
                items.append(f'{key}"{x}"')
            elif t is int:
                items.append(f"{key}{x}")
            elif x is None:
                items.append(key + "null")
            else:
                items.append(key + _value(x, inner, keys))
        return f"{{{inner}{(',' + inner).join(items)}{nl}}}"
    if isinstance(v, (list, tuple)):
        if not v:
            return "[]"
        inner = nl + "  "
        return f"[{inner}{(',' + inner).join([_value(x, inner, keys) for x in v])}{nl}]"
    return _scalar(v)
