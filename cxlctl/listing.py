"""``cxlctl list KIND``: one row per object for scripts, as ``cxl list -M/-R`` or ``kubectl get`` give.

Kinds: ``memdevs``, ``regions``, ``dax``, ``nodes``.  Outputs (``-o``): the default columns, ``wide``
(more columns), ``name`` (the names alone, one a line) and ``json`` (a list of objects, sizes in
bytes).  ``--no-headers`` leaves the header row out.  Every cell is one word (a list is comma
separated, a size is ``256MiB``, nothing is ``-``), so ``awk '{print $2}'`` takes a column; the
columns are padded with two spaces or more, never cut or folded, whatever the width of the screen.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from cxlctl.errors import UsageError
from cxlctl.model import Inventory
from cxlctl.parse import format_nodelist, format_size

KINDS = ("memdevs", "regions", "dax", "nodes")
OUTPUTS = ("default", "wide", "name", "json")


def _sz(v: Optional[int]) -> str:
    return "-" if v is None else format_size(v).replace(" ", "")


def _words(xs: Sequence[object]) -> str:
    return ",".join(str(x) for x in xs) or "-"


def _v(x: object) -> str:
    return "-" if x is None or x == "" else str(x).replace(" ", "_")


#: kind -> (columns, how many of them the default output shows, rows of (cells, json object))
Rows = List[Tuple[List[str], Dict[str, Any]]]


def _memdevs(inv: Inventory) -> Tuple[List[str], int, Rows]:
    cols = ["NAME", "RAM", "REGIONS", "SERIAL", "HOST", "ENDPOINT", "DRIVER", "FIRMWARE", "NUMA"]
    rows: Rows = []
    for m in inv.memdevs:
        serial = f"{m.serial:#x}" if m.serial is not None else None
        cells = [m.name, _sz(m.ram_size), _words(m.regions), _v(serial), _v(m.host), _v(m.endpoint)]
        cells += [_v(m.driver), _v(m.firmware_version), _v(m.numa_node)]
        doc: Dict[str, Any] = {"name": m.name, "ram_bytes": m.ram_size, "regions": list(m.regions), "serial": m.serial}
        doc.update(
            host=m.host, endpoint=m.endpoint, driver=m.driver, firmware=m.firmware_version, numa_node=m.numa_node
        )
        rows.append((cells, doc))
    return cols, 4, rows


def _regions(inv: Inventory) -> Tuple[List[str], int, Rows]:
    cols = ["NAME", "MODE", "SIZE", "WAYS", "DAX", "NODE", "GRANULARITY", "DECODER", "TARGETS", "COMMITTED"]
    rows: Rows = []
    for r in inv.regions:
        daxes = [d for d in inv.dax_devices if d.name in r.dax_devices]
        nodes = sorted({d.target_node for d in daxes if d.target_node is not None and d.mode == "system-ram"})
        targets = [t.memdev or t.decoder for t in r.targets]
        committed = None if r.committed is None else ("yes" if r.committed else "no")
        cells = [r.name, _v(r.mode), _sz(r.size), _v(r.interleave_ways), _words(r.dax_devices), _words(nodes)]
        cells += [_v(r.interleave_granularity), _v(r.root_decoder), _words(targets), _v(committed)]
        doc: Dict[str, Any] = {"name": r.name, "mode": r.mode, "size_bytes": r.size, "ways": r.interleave_ways}
        doc.update(dax=list(r.dax_devices), nodes=nodes, granularity_bytes=r.interleave_granularity)
        doc.update(decoder=r.root_decoder, targets=targets, committed=r.committed)
        rows.append((cells, doc))
    return cols, 6, rows


def _dax(inv: Inventory) -> Tuple[List[str], int, Rows]:
    cols = ["NAME", "MODE", "SIZE", "NODE", "REGION", "PROVIDER", "ZONES", "ONLINE"]
    rows: Rows = []
    for d in inv.dax_devices:
        online = None if d.total_memblocks is None else f"{d.online_memblocks or 0}/{d.total_memblocks}"
        cells = [d.name, _v(d.mode or "unbound"), _sz(d.size), _v(d.target_node), _v(d.region), _v(d.provider)]
        cells += [_words(d.zones), _v(online)]
        doc: Dict[str, Any] = {
            "name": d.name,
            "mode": d.mode,
            "size_bytes": d.size,
            "node": d.target_node,
            "region": d.region,
        }
        doc.update(provider=d.provider, zones=list(d.zones), online_blocks=d.online_memblocks, blocks=d.total_memblocks)
        rows.append((cells, doc))
    return cols, 5, rows


def _nodes(inv: Inventory) -> Tuple[List[str], int, Rows]:
    cols = ["NODE", "KIND", "CPUS", "SIZE", "FREE", "TIER", "WEIGHT", "REGIONS", "MEMDEVS"]
    rows: Rows = []
    wi = inv.weighted_interleave.weights
    for n in inv.nodes:
        tier = None if n.tier is None else f"memory_tier{n.tier}"
        cells = [str(n.id), n.kind, format_nodelist(n.cpus) or "-", _sz(n.mem_total), _sz(n.mem_free), _v(tier)]
        cells += [_v(wi.get(n.id)), _words(n.regions), _words(n.memdevs)]
        doc: Dict[str, Any] = {
            "node": n.id,
            "kind": n.kind,
            "cpus": list(n.cpus),
            "size_bytes": n.mem_total,
            "free_bytes": n.mem_free,
        }
        doc.update(tier=n.tier, weight=wi.get(n.id), regions=list(n.regions), memdevs=list(n.memdevs))
        rows.append((cells, doc))
    return cols, 6, rows


TABLES: Dict[str, Callable[[Inventory], Tuple[List[str], int, Rows]]] = {
    "memdevs": _memdevs,
    "regions": _regions,
    "dax": _dax,
    "nodes": _nodes,
}


def check(kind: str, output: str) -> None:
    from cxlctl.suggest import did_you_mean

    if kind not in KINDS:
        raise UsageError(f"list {kind!r}: not one of {', '.join(KINDS)}", hint=did_you_mean(kind, KINDS, "cxlctl list"))
    if output not in OUTPUTS:
        raise UsageError(f"-o {output!r}: not one of {', '.join(OUTPUTS)}", hint=did_you_mean(output, OUTPUTS, "-o"))


def listing(inv: Inventory, kind: str, output: str = "default", headers: bool = True) -> Tuple[str, List[Any]]:
    """(text, json objects) of ``kind``: the text for -o default|wide|name, the objects for json."""
    check(kind, output)
    cols, short, rows = TABLES[kind](inv)
    if output == "name":
        return "".join(cells[0] + "\n" for cells, _ in rows), [doc for _, doc in rows]
    n = len(cols) if output == "wide" else short
    table = ([cols[:n]] if headers else []) + [cells[:n] for cells, _ in rows]
    widths = [max(len(r[i]) for r in table) for i in range(n)] if table else []
    text = "".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n" for r in table)
    return text, [doc for _, doc in rows]


def run(host: Any, kind: str, output: str, headers: bool) -> None:
    """``cxlctl list``: the rows on stdout, or ``{"kind", "items"}`` as JSON with ``-o json``."""
    import sys

    from cxlctl.emit import emit_json
    from cxlctl.inventory import scan

    check(kind, output)
    text, docs = listing(scan(host), kind, output, headers)
    if output == "json":
        emit_json({"kind": kind, "items": docs})
    else:
        sys.stdout.write(text)
