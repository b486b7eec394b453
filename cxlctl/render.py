"""Human view of the inventory (``cxlctl status``), built with rich.

rich is imported inside the functions: this module is only loaded when a person
asked for the human view.  Renderers take a Console so tests can render into a
StringIO at a fixed width.

Layout follows ``lsblk``/``ps``/``ip``: borderless columns with short upper-case
headers that carry the unit, values that never wrap or get cut, and — when the
terminal is too narrow for one wide NUMA table (80 columns, or piped) — the same
facts split over two tables instead of squeezed into one.  Every string that
comes from the kernel is escaped (``_e``) before it meets one of this module's markup
templates, and each template becomes :class:`rich.text.Text` here (``_m``): the console
(:func:`cxlctl.term.console`) reads no markup, so sysfs content is data, never markup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from .derive import expected_access
from .hostio import paths
from .model import Coordinates, Inventory, Node, Port
from .parse import format_nodelist, format_size

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text
    from rich.tree import Tree

_SEV_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _e(value: object) -> str:
    """A kernel-provided value, safe inside rich markup (``[/]`` stays text)."""
    from rich.markup import escape

    return escape(str(value))


def _m(template: str) -> Text:
    """One of this module's markup templates (every value in it through :func:`_e`) as
    :class:`rich.text.Text`: the console (:func:`cxlctl.term.console`) reads no markup."""
    from rich.text import Text

    return Text.from_markup(template)


def _pair(a: Optional[int], b: Optional[int]) -> str:
    if a is None and b is None:
        return "-"
    return f"{'?' if a is None else a}/{'?' if b is None else b}"


def _bw(c: Optional[Coordinates]) -> str:
    return "-" if c is None else _pair(c.read_bandwidth, c.write_bandwidth)


def _lat(c: Optional[Coordinates]) -> str:
    return "-" if c is None else _pair(c.read_latency, c.write_latency)


def _hex(v: Optional[int]) -> str:
    return "?" if v is None else hex(v)


def _or(v: object, dflt: str = "?") -> str:
    return dflt if v is None or v == "" else _e(v)


# -- topology tree ----------------------------------------------------------------------


def _endpoint_label(inv: Inventory, p: Port) -> str:
    m = next((x for x in inv.memdevs if x.name == p.memdev), None)
    if m is None:
        return f"{_e(p.name)} → {_or(p.memdev)}"
    decs = {d.name: d for d in inv.decoders}
    used = [decs[d] for d in p.decoders if d in decs and decs[d].dpa_size]
    regs = ", ".join(sorted({_e(d.region) for d in used if d.region})) or "no region"
    return (
        f"[green]{_e(m.name)}[/green] ram {format_size(m.ram_size)}"
        + (f" pmem {format_size(m.pmem_size)}" if m.pmem_size else "")
        + f"  serial {_hex(m.serial)}  pci {_or(m.host)}  ({regs})"
    )


def topology_tree(inv: Inventory) -> Tree:
    from rich.tree import Tree

    top = Tree(_m("[bold]CXL topology[/bold]"))
    children: Dict[str, List[Port]] = {}
    for p in inv.ports + inv.endpoints:
        children.setdefault(p.parent or "", []).append(p)
    decs = {d.name: d for d in inv.decoders}
    regions_by_root: Dict[str, List[str]] = {}
    for r in inv.regions:
        regions_by_root.setdefault(r.root_decoder or "", []).append(r.name)

    def add_port(branch: Tree, p: Port, depth: int = 0) -> None:
        if p.kind == "endpoint":
            branch.add(_m(_endpoint_label(inv, p)))
            return
        label = "host bridge" if p.depth == 1 else f"switch (depth {p.depth})"
        sub = branch.add(_m(f"{_e(p.name)} [dim]{label} {_or(p.host, '')}[/dim]"))
        if depth < 32:  # a corrupt tree may loop; the kernel's is a few levels deep
            for c in children.get(p.name, []):
                add_port(sub, c, depth + 1)

    for b in inv.buses:
        bt = top.add(_m(f"[bold]{_e(b.name)}[/bold] [dim]{_or(b.provider, '')} {_or(b.host, '')}[/dim]"))
        for dn in b.decoders:
            d = decs.get(dn)
            if d is None:
                continue
            caps = "/".join(c for c, on in (("ram", d.cap_ram), ("pmem", d.cap_pmem)) if on) or "-"
            dt = bt.add(
                _m(
                    f"{_e(d.name)} window {format_size(d.size)} @ {_hex(d.resource)}  {caps}  "
                    f"{d.interleave_ways or '?'}-way × {d.interleave_granularity or '?'} B"
                )
            )
            for rn in regions_by_root.get(dn, []):
                reg = inv.region(rn)
                if reg is not None:
                    dt.add(_m(f"[magenta]{_e(reg.name)}[/magenta] {_or(reg.mode)} {format_size(reg.size)}"))
        for c in children.get(b.name, []):
            add_port(bt, c)
    return top


# -- regions ----------------------------------------------------------------------------


def _regions(inv: Inventory, console: Console) -> None:
    console.print(_m("\n[bold]Regions → DAX → NUMA node → tier[/bold]"))
    for r in inv.regions:
        daxes = [d for d in inv.dax_devices if d.name in r.dax_devices]
        state = {True: "committed", False: "[red]NOT committed[/red]", None: "state ?"}[r.committed]
        targets = ", ".join(_e(x.memdev or x.decoder) for x in r.targets) or "no targets"
        line = (
            f"  [magenta]{_e(r.name)}[/magenta] {_or(r.mode)} {format_size(r.size)}, "
            f"{r.interleave_ways or '?'}-way × {r.interleave_granularity or '?'} B, {state}, "
            f"targets {targets}"
        )
        for d in daxes:
            zone_txt = f" in {_e('/'.join(d.zones))}" if d.zones else ""
            node = inv.node(d.target_node) if d.target_node is not None else None
            line += f"\n      → {_e(d.name)} {_or(d.mode, 'unbound')}{zone_txt}"
            if node is not None and d.mode == "system-ram":
                line += f" → node {node.id} ({_e(node.kind)})"
                line += f" → memory_tier{node.tier}" if node.tier is not None else " → no tier"
        if not daxes:
            line += "\n      → no DAX device"
        console.print(_m(line), highlight=False)


def _table(console: Console, columns: Sequence[Tuple[str, str]]) -> Table:
    """A borderless table like ``lsblk``'s: bold headers, values never cut (``…``)."""
    from rich.table import Table

    t = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 1))
    for name, just in columns:
        t.add_column(name, justify=just, no_wrap=True, overflow="fold")  # type: ignore[arg-type]
    return t


def _other_dax(inv: Inventory, console: Console) -> None:
    other = [d for d in inv.dax_devices if d.region is None]
    if not other:
        return
    console.print(_m("\n[bold]DAX devices outside CXL regions[/bold]"))
    t = _table(console, [("DAX", "left"), ("PROVIDER", "left"), ("SIZE", "right"), ("MODE", "left"), ("NODE", "right")])
    for d in other:
        node = "-" if d.target_node is None else str(d.target_node)
        t.add_row(*map(_m, (_e(d.name), _e(d.provider), format_size(d.size), _or(d.mode, "unbound"), node)))
    console.print(t)


# -- NUMA nodes -------------------------------------------------------------------------


def _blocks(n: Node) -> str:
    zones: Dict[str, int] = {}
    for b in n.memory_blocks:
        if (b.state or "").startswith("online"):
            zones[b.zone or "?"] = zones.get(b.zone or "?", 0) + 1
    return ", ".join(f"{c} {_e(z)}" for z, c in sorted(zones.items())) or "-"


_BASIC = [("NODE", "right"), ("KIND", "left"), ("CPUS", "left"), ("SIZE", "right"), ("FREE", "right")]
_BASIC += [("TIER", "right"), ("ONLINE BLOCKS", "left"), ("WI", "right")]
_PERF = [("DISTANCES", "left"), ("BW MB/s R/W", "right"), ("LAT ns R/W", "right")]


def _basic_cells(inv: Inventory, n: Node) -> List[str]:
    kind = {"cxl": "[magenta]cxl[/magenta]", "dram": "dram"}.get(n.kind, _e(n.kind))
    w = inv.weighted_interleave.weights.get(n.id)
    return [
        str(n.id),
        kind,
        format_nodelist(n.cpus) or "-",
        format_size(n.mem_total),
        format_size(n.mem_free),
        "-" if n.tier is None else str(n.tier),
        _blocks(n),
        "-" if w is None else str(w),
    ]


def _perf_cells(inv: Inventory, n: Node) -> List[str]:
    """Distances and access0 figures.  A CXL node the kernel gave no ``access0`` of its own
    (Linux 7.x computes the figures for the region only) shows its regions' figures, marked
    ``*``: printing "-" there hid the bandwidth every other view (weights, stat) used."""
    c, source = expected_access(n, inv.regions)
    mark = "*" if source == "regions" else ""
    bw, lat = _bw(c), _lat(c)
    return [" ".join(map(str, n.distance)) or "-", bw + mark if c else bw, lat + mark if c else lat]


def _fits(console: Console, table: Table) -> bool:
    from rich.measure import Measurement

    unbounded = console.options.update_width(1 << 16)  # measure, not the clamp to the screen
    return Measurement.get(console, unbounded, table).maximum <= console.width


def _nodes(inv: Inventory, console: Console) -> None:
    """One wide table when it fits; else node facts, then distances and performance."""
    wide = _table(console, _BASIC + _PERF)
    for n in inv.nodes:
        wide.add_row(*map(_m, _basic_cells(inv, n) + _perf_cells(inv, n)))
    console.print(_m("\n[bold]NUMA nodes[/bold]"))
    if _fits(console, wide):
        console.print(wide)
    else:
        basic = _table(console, _BASIC)
        perf = _table(console, [("NODE", "right")] + _PERF)
        for n in inv.nodes:
            basic.add_row(*map(_m, _basic_cells(inv, n)))
            perf.add_row(*map(_m, [str(n.id), *_perf_cells(inv, n)]))
        console.print(basic)
        console.print()
        console.print(perf)
    console.print(_m("[dim]WI: weighted-interleave weight; BW, LAT: HMAT/CDAT access0 (nearest initiator)[/dim]"))
    if any(expected_access(n, inv.regions)[1] == "regions" for n in inv.nodes):
        console.print(_m("[dim]*: the node's regions' access0 (bandwidths summed, slowest latency)[/dim]"))
    if any(b.zone == "none" and (b.state or "").startswith("online") for n in inv.nodes for b in n.memory_blocks):
        # the kernel's valid_zones word for an online block whose memory is in more than one zone
        console.print(_m("[dim]none (ONLINE BLOCKS): a block spanning two zones, which cannot be offlined[/dim]"))


# -- knobs ------------------------------------------------------------------------------


def weighted_interleave_line(inv: Inventory) -> str:
    """The weights of the nodes that exist, then those of nodes that are not online.

    The kernel keeps a weight file for every *possible* node: the others only
    matter when such a node comes online (a new CXL region), so they are named as
    such instead of mixed in with the live ones.
    """
    wi = inv.weighted_interleave
    if not wi.supported:
        return "[dim]unsupported on this kernel (needs 6.9+)[/dim]"
    online = {n.id for n in inv.nodes}
    live = [f"node{k}={v}" for k, v in sorted(wi.weights.items()) if k in online]
    absent = sorted((k, v) for k, v in wi.weights.items() if k not in online)
    out = " ".join(live) or "-"
    if wi.auto is not None:
        out += f"  (auto={str(wi.auto).lower()})"
    if absent:
        values = {v for _, v in absent}
        if len(values) == 1:
            txt = f"node{format_nodelist(k for k, _ in absent)}={values.pop()}"
        else:
            txt = " ".join(f"node{k}={v}" for k, v in absent)
        out += f"; not online: {txt}"
    return out


def unreadable(inv: Inventory) -> Dict[str, str]:
    """Host path -> "cannot read ROOT/path: why" of what the scan found there but could not read."""
    return {w.subject: w.message for w in inv.warnings if w.code == "unreadable" and w.subject}


def _knobs(inv: Inventory, console: Console) -> None:
    """``sysctl -a`` style: one ``name = value`` per line (names are long, values short)."""
    console.print(_m("\n[bold]Kernel knobs[/bold]"))
    cannot = unreadable(inv)
    for k in inv.knobs:
        value = _e(k.value) if k.supported else "[dim]unsupported on this kernel[/dim]"
        if k.path in cannot:  # there, but not readable: not "unsupported"
            value = f"[red]{_e(cannot[k.path])}[/red]"
        console.print(_m(f"  {_e(k.name)} = {value}"), highlight=False)
    console.print(_m(f"  weighted_interleave = {weighted_interleave_line(inv)}"), highlight=False)


def _warnings(inv: Inventory, console: Console) -> None:
    """Severity in a column of its own; a long message wraps indented under its text."""
    from .term import fold_lines

    if not inv.warnings:
        return
    console.print(_m("\n[bold]Notes and warnings[/bold]"))
    sev_w = max(len(w.severity) for w in inv.warnings)
    width = max(20, console.width - sev_w - 1)
    for warn in inv.warnings:
        style = _SEV_STYLE.get(warn.severity, "")
        sev = _e(f"{warn.severity:>{sev_w}}")
        lines = fold_lines(f"{warn.message}  ({warn.code})", width) or [""]
        text = f"\n{' ' * sev_w} ".join(_e(x) for x in lines)
        console.print(_m(f"[{style}]{sev}[/] {text}" if style else f"{sev} {text}"), highlight=False, soft_wrap=True)


def render_status(inv: Inventory, console: Console) -> None:
    console.print(_m(f"[bold]cxlctl status[/bold]  kernel {_or(inv.kernel)}"), highlight=False)
    if inv.has_cxl:
        console.print(topology_tree(inv), highlight=False)
    elif paths.CXL_DEVICES in unreadable(inv):  # unknown, not empty
        console.print(_m(f"[red]CXL devices: {_e(unreadable(inv)[paths.CXL_DEVICES])}[/red]"), highlight=False)
    else:
        console.print(_m("[cyan]No CXL devices on this host.[/cyan]"))
    if inv.regions:
        _regions(inv, console)
    _other_dax(inv, console)
    _nodes(inv, console)
    if inv.has_cxl:
        tot = inv.totals
        console.print(
            f"CXL {format_size(tot.cxl_capacity)}: regions {format_size(tot.cxl_in_regions)}, "
            f"online {format_size(tot.cxl_online)}, free {format_size(tot.cxl_free)}, "
            f"unassigned {format_size(tot.cxl_unassigned)}",
            highlight=False,
        )
    _knobs(inv, console)
    _warnings(inv, console)
