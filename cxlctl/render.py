"""Human view of the inventory (``cxlctl status``): with rich on a terminal, as plain text elsewhere.

The view is described once (:func:`_status`) against a small output interface
with two back-ends: :class:`_RichOut` prints through a rich console (colours
on a terminal; :func:`render_status` takes the console, so tests can render
into a StringIO at a fixed width), and :class:`_PlainOut` lays the same lines,
tree and tables out itself, for a pipe or a file, where rich prints no colour
anyway -- and importing rich alone costs about three times the interpreter's
start-up (bench/README.md).  The plain layout is byte-identical to rich's
uncoloured output (tests/test_thincli_render.py compares them on every fixture
at several widths); whenever it could not be sure of that -- a line rich would
wrap, a table rich would squeeze, a character outside the few it knows, a
bracket or backslash in a value -- it gives up (:class:`_NotPlain`) and rich
prints instead (:func:`print_status`).

Layout follows ``lsblk``/``ps``/``ip``: borderless columns with short upper-case
headers that carry the unit, values that never wrap or get cut, and — when the
terminal is too narrow for one wide NUMA table (80 columns, or piped) — the same
facts split over two tables instead of squeezed into one.  Every string that
comes from the kernel is escaped (``_e``) before it meets one of this module's markup
templates, and each template becomes :class:`rich.text.Text` here (``_m``): the console
(:func:`cxlctl.term.console`) reads no markup, so sysfs content is data, never markup.
"""

from __future__ import annotations

import os
import sys

from .figures import node_figures
from .hostio import paths
from .parse import format_nodelist, format_size
from .term import fold
from .term import markup_escape as _e  # kernel values inside this module's markup templates

# typing costs ~5 ms of start-up (it imports re): only mypy needs it here
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text
    from rich.tree import Tree

    from .model import Coordinates, Inventory, Node, Port
    from .probe.store import Stored

    Columns = Sequence[Tuple[str, str]]
    _Out = Union["_RichOut", "_PlainOut"]

_SEV_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _m(template: str) -> Text:
    """One of this module's markup templates (every value in it through :func:`_e`) as
    :class:`rich.text.Text`: the console (:func:`cxlctl.term.console`) reads no markup.
    No emoji codes either: rich would print the PCI address ``0000:ab:00.0`` as ``0000🆎00.0``."""
    from rich.text import Text

    return Text.from_markup(template, emoji=False)


# -- the two back-ends ------------------------------------------------------------------
# (both have: width, line, text, blank, tree, table, fits -- mypy knows them as _Out)


class _Branch:
    """A node of the topology tree: its label (a markup template) and its children."""

    __slots__ = ("label", "children")

    def __init__(self, label: str) -> None:
        self.label = label
        self.children: List[_Branch] = []

    def add(self, label: str) -> _Branch:
        b = _Branch(label)
        self.children.append(b)
        return b


class _RichOut:
    """The view through a rich console (a terminal: colours, highlighting)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.width = console.width

    def line(self, template: str, highlight: Optional[bool] = None, soft_wrap: bool = False) -> None:
        if highlight is None:
            self.console.print(_m(template), soft_wrap=soft_wrap)
        else:
            self.console.print(_m(template), highlight=highlight, soft_wrap=soft_wrap)

    def text(self, text: str) -> None:
        """A line that is not markup (no value in it could be taken for markup)."""
        self.console.print(text, highlight=False)

    def blank(self) -> None:
        self.console.print()

    def tree(self, root: _Branch) -> None:
        self.console.print(_rich_tree(root), highlight=False)

    def table(self, columns: Columns, rows: List[List[str]]) -> None:
        if not self.fits(columns, rows):  # rich would cut values to fit: one record per row instead
            for line in _stack(columns, rows, self.width):
                self.console.print(_m(line), soft_wrap=True, highlight=False)
            return
        t = _table(columns)
        for r in rows:
            t.add_row(*map(_m, r))
        self.console.print(t)

    def fits(self, columns: Columns, rows: List[List[str]]) -> bool:
        from rich.measure import Measurement

        t = _table(columns)
        for r in rows:
            t.add_row(*map(_m, r))
        unbounded = self.console.options.update_width(1 << 16)  # measure, not the clamp to the screen
        return Measurement.get(self.console, unbounded, t).maximum <= self.console.width


def _rich_tree(b: _Branch) -> Tree:
    from rich.tree import Tree

    def grow(t: Tree, b: _Branch) -> None:
        for c in b.children:
            grow(t.add(_m(c.label)), c)

    top = Tree(_m(b.label))
    grow(top, b)
    return top


def _table(columns: Columns) -> Table:
    """A borderless table like ``lsblk``'s: bold headers, values never cut (``…``)."""
    from rich.table import Table

    t = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 1))
    for name, just in columns:
        t.add_column(name, justify=just, no_wrap=True, overflow="fold")  # type: ignore[arg-type]
    return t


class _NotPlain(Exception):
    """The plain layout cannot promise rich's output here: let rich print."""


#: what the plain layout prints besides printable ASCII: each one cell wide, as rich counts it
_WIDE_OK = frozenset("→×├└│─")
_TAG_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz /")


def _plain(template: str) -> str:
    """A template without its markup tags (``[bold]``, ``[/]``, ``[bold red]``)."""
    out: List[str] = []
    i = 0
    while True:
        j = template.find("[", i)
        if j < 0:
            out.append(template[i:])
            break
        k = template.find("]", j)
        if k > j and all(ch in _TAG_CHARS for ch in template[j + 1 : k]):
            out.append(template[i:j])
            i = k + 1
        else:
            out.append(template[i : j + 1])
            i = j + 1
    return "".join(out)


class _PlainOut:
    """The view laid out as rich lays it out uncoloured, into :attr:`parts`; :class:`_NotPlain`
    where it cannot be sure of doing so."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.parts: List[str] = []

    def _check(self, text: str, wrap: bool = True) -> str:
        for ch in text:
            if not (" " <= ch <= "~" or ch == "\n" or ch in _WIDE_OK) or ch in "[\\":
                raise _NotPlain(ch)
        if wrap and any(len(x) > self.width for x in text.split("\n")):
            raise _NotPlain("wraps")
        return text

    def line(self, template: str, highlight: Optional[bool] = None, soft_wrap: bool = False) -> None:
        self.parts.append(self._check(_plain(template), wrap=not soft_wrap) + "\n")

    def text(self, text: str) -> None:
        self.parts.append(self._check(text) + "\n")

    def blank(self) -> None:
        self.parts.append("\n")

    def tree(self, root: _Branch) -> None:
        lines = [_plain(root.label)]

        def walk(b: _Branch, prefix: str) -> None:
            for i, c in enumerate(b.children):
                last = i == len(b.children) - 1
                lines.append(prefix + ("└── " if last else "├── ") + _plain(c.label))
                walk(c, prefix + ("    " if last else "│   "))

        walk(root, "")
        self.parts.append(self._check("\n".join(lines)) + "\n")

    def _widths(self, columns: Columns, rows: List[List[str]]) -> List[int]:
        widths = [len(h) for h, _ in columns]
        for r in rows:
            widths = [max(w, len(_plain(c))) for w, c in zip(widths, r)]
        return widths

    def table(self, columns: Columns, rows: List[List[str]]) -> None:
        if not rows:
            raise _NotPlain("empty table")
        if not self.fits(columns, rows):
            self.parts.append(self._check("\n".join(_plain(x) for x in _stack(columns, rows, self.width))) + "\n")
            return
        widths = self._widths(columns, rows)
        out = []
        for cells in [[h for h, _ in columns]] + [[_plain(c) for c in r] for r in rows]:
            out.append(
                "  ".join(
                    c.rjust(w) if just == "right" else c.ljust(w) for c, w, (_, just) in zip(cells, widths, columns)
                )
            )
        self.parts.append(self._check("\n".join(out)) + "\n")

    def fits(self, columns: Columns, rows: List[List[str]]) -> bool:
        return sum(self._widths(columns, rows)) + 2 * (len(columns) - 1) <= self.width


def _stack(columns: Columns, rows: List[List[str]], width: int) -> List[str]:
    """A table too wide for the screen as one record per row (markup templates): ``HEADER value``
    pairs two spaces apart, folded between pairs (a pair is never split, a value never cut),
    continuation lines indented 2 -- where rich would shrink the columns and cut ``dram`` to ``dra``."""
    out: List[str] = []
    for r in rows:
        line, used = "", 0
        for (h, _), cell in zip(columns, r):
            pair, n = f"[bold]{_e(h)}[/bold] {cell}", len(h) + 1 + len(_plain(cell))
            if used and used + 2 + n > width:
                out.append(line)
                line, used = "  " + pair, 2 + n
            else:
                line, used = (line + "  " + pair, used + 2 + n) if used else (pair, n)
        out.append(line)
    return out


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
    # the memdev's own regions (from its endpoint decoders, derive): right in a filtered view too
    regs = ", ".join(_e(r) for r in m.regions) or "no region"
    return (
        f"[green]{_e(m.name)}[/green] ram {format_size(m.ram_size)}"
        + (f" pmem {format_size(m.pmem_size)}" if m.pmem_size else "")
        + f"  serial {_hex(m.serial)}  pci {_or(m.host)}  ({regs})"
    )


def topology_tree(inv: Inventory) -> Tree:
    """The CXL topology as a rich tree."""
    return _rich_tree(_topology(inv))


def _topology(inv: Inventory) -> _Branch:
    top = _Branch("[bold]CXL topology[/bold]")
    children: Dict[str, List[Port]] = {}
    for p in inv.ports + inv.endpoints:
        children.setdefault(p.parent or "", []).append(p)
    decs = {d.name: d for d in inv.decoders}
    regions_by_root: Dict[str, List[str]] = {}
    for r in inv.regions:
        regions_by_root.setdefault(r.root_decoder or "", []).append(r.name)

    def add_port(branch: _Branch, p: Port, depth: int = 0) -> None:
        if p.kind == "endpoint":
            branch.add(_endpoint_label(inv, p))
            return
        label = "host bridge" if p.depth == 1 else f"switch (depth {p.depth})"
        sub = branch.add(f"{_e(p.name)} [dim]{label} {_or(p.host, '')}[/dim]")
        if depth < 32:  # a corrupt tree may loop; the kernel's is a few levels deep
            for c in children.get(p.name, []):
                add_port(sub, c, depth + 1)

    for b in inv.buses:
        bt = top.add(f"[bold]{_e(b.name)}[/bold] [dim]{_or(b.provider, '')} {_or(b.host, '')}[/dim]")
        for dn in b.decoders:
            d = decs.get(dn)
            if d is None:
                continue
            caps = "/".join(c for c, on in (("ram", d.cap_ram), ("pmem", d.cap_pmem)) if on) or "-"
            dt = bt.add(
                f"{_e(d.name)} window {format_size(d.size)} @ {_hex(d.resource)}  {caps}  "
                f"{d.interleave_ways or '?'}-way × {d.interleave_granularity or '?'} B"
            )
            for rn in regions_by_root.get(dn, []):
                reg = inv.region(rn)
                if reg is not None:
                    dt.add(f"[magenta]{_e(reg.name)}[/magenta] {_or(reg.mode)} {format_size(reg.size)}")
        for c in children.get(b.name, []):
            add_port(bt, c)
    return top


# -- regions ----------------------------------------------------------------------------


def _regions(inv: Inventory, out: _Out) -> None:
    out.line("\n[bold]Regions → DAX → NUMA node → tier[/bold]")
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
        # a line longer than the screen folds on spaces under its own start (rich would wrap it to column 0)
        out.line(
            "\n".join(x if len(_plain(x)) <= out.width else fold(x, out.width) for x in line.split("\n")),
            highlight=False,
        )


def _other_dax(inv: Inventory, out: _Out) -> None:
    other = [d for d in inv.dax_devices if d.region is None]
    if not other:
        return
    out.line("\n[bold]DAX devices outside CXL regions[/bold]")
    rows = []
    for d in other:
        node = "-" if d.target_node is None else str(d.target_node)
        rows.append([_e(d.name), _e(d.provider), format_size(d.size), _or(d.mode, "unbound"), node])
    out.table([("DAX", "left"), ("PROVIDER", "left"), ("SIZE", "right"), ("MODE", "left"), ("NODE", "right")], rows)


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
    """Distances and the CPU-class (``access1``) figures the kernel holds for the node
    (:func:`node_figures`).  A CXL node the kernel gave no files of its own (Linux 7.x) shows
    its region's figures, marked ``*``; a node whose regions differ shows the region its memory
    tier points to, or ``?`` when the tier does not tell (sysfs does not show the probe order)."""
    dist = " ".join(map(str, n.distance)) or "-"
    f = node_figures(n, inv.regions, inv.nodes)
    if f.undetermined:
        return [dist, "?", "?"]
    c = f.cpu
    mark = "*" if f.source == "regions" and c is not None else ""
    return [dist, _bw(c) + mark, _lat(c) + mark]


def _dim_note(out: _Out) -> Callable[[str], None]:
    """A dim note printer for ``out``: each note folded at its width on spaces (a path or figure
    kept whole), so the plain layout and rich print the same lines."""

    def note(text: str) -> None:
        out.line(f"[dim]{_e(fold(text, out.width))}[/dim]")

    return note


def _nodes(inv: Inventory, out: _Out) -> None:
    """One wide table when it fits; else node facts, then distances and performance."""
    wide = [_basic_cells(inv, n) + _perf_cells(inv, n) for n in inv.nodes]
    out.line("\n[bold]NUMA nodes[/bold]")
    if out.fits(_BASIC + _PERF, wide):
        out.table(_BASIC + _PERF, wide)
    else:
        out.table(_BASIC, [_basic_cells(inv, n) for n in inv.nodes])
        out.blank()
        out.table([("NODE", "right")] + _PERF, [[str(n.id), *_perf_cells(inv, n)] for n in inv.nodes])
    note = _dim_note(out)
    note(
        "WI: weighted-interleave weight; BW, LAT: HMAT/CDAT access1 (CPU initiators: what the kernel weights and tiers by)"
    )
    figures = [(n, node_figures(n, inv.regions, inv.nodes)) for n in inv.nodes]
    if any(f.source == "regions" and f.cpu is not None for _, f in figures):
        note(
            "*: the node's CXL region's figures (the kernel gave the node none of its own and "
            "took one region's: cxl_region_perf_attrs_callback)"
        )
    for n, f in figures:
        if f.undetermined:
            note(f"?: {f.undetermined}")
            continue
        if f.chosen_by:
            note(f.chosen_by)
        if f.nearest is not None and f.nearest != f.cpu:
            note(f"node {n.id}'s nearest initiator (access0): BW {_bw(f.nearest)} MB/s, LAT {_lat(f.nearest)} ns")
    if any(b.zone == "none" and (b.state or "").startswith("online") for n in inv.nodes for b in n.memory_blocks):
        # the kernel's valid_zones word for an online block whose memory is in more than one zone
        out.line("[dim]none (ONLINE BLOCKS): a block spanning two zones, which cannot be offlined[/dim]")


_MEASURED = [("NODE", "right"), ("FROM", "right"), ("READ MB/s", "right"), ("WRITE MB/s", "right")]
_MEASURED += [("LAT ns", "right"), ("FW BW MB/s R/W", "right"), ("FW LAT ns R/W", "right")]


def _span(p: Dict[str, Any], key: str, unit: str) -> Optional[str]:
    """``27787-28449 MB/s``: the lowest and highest window of one stored figure."""
    s = (p.get("spread") or {}).get(key) if isinstance(p.get("spread"), dict) else None
    if not isinstance(s, dict) or not all(isinstance(s.get(k), (int, float)) for k in ("min", "max")):
        return None
    fmt = "{:.1f}" if unit == "ns" else "{:.0f}"
    return f"{fmt.format(s['min'])}-{fmt.format(s['max'])} {unit}"


def _pair_spread(p: Dict[str, Any]) -> Optional[str]:
    """One pair's windows (min-max of each figure), the loaded-latency point and its huge pages."""
    parts = [f"{w} {x}" for w, k, u in _SPREAD for x in (_span(p, k, u),) if x]
    loaded = p.get("loaded")
    if isinstance(loaded, dict) and isinstance(loaded.get("latency_ns"), (int, float)):
        cpus = int(loaded.get("load_cpus") or 0)
        parts.append(
            f"loaded latency {loaded['latency_ns']:g} ns while {cpus} CPU(s) read "
            f"{float(loaded.get('load_mbps') or 0):.0f} MB/s"
        )
    how = p.get("how")
    chase = how.get("latency") if isinstance(how, dict) else None
    if isinstance(chase, dict) and isinstance(chase.get("huge_pct"), (int, float)):
        parts.append(f"chase on huge pages {chase['huge_pct']:g}%")
    if not parts:
        return None
    return f"node {p.get('mem_node')} from {p.get('cpu_node')}: " + ", ".join(parts)


_SPREAD = (("read", "read_mbps", "MB/s"), ("write", "write_mbps", "MB/s"), ("latency", "latency_ns", "ns"))


def _measured(inv: Inventory, stored: Stored, out: _Out) -> None:
    """``cxlctl probe``'s stored figures beside the firmware's (the CPU-class figures the kernel holds, as the NUMA table shows them),
    one row per measured (CPU node, memory node) pair, then each pair's spread over its windows;
    marked stale, with why, when the host changed."""
    doc = stored.record
    when = doc.get("measured_at")
    head = f"\n[bold]Measured[/bold] (cxlctl probe, {_e(str(when))})" if when else "\n[bold]Measured[/bold]"
    out.line(head, highlight=False)
    if stored.stale:
        why = "; ".join(stored.stale)
        out.line(f"[yellow]{_e(fold(f'stale, not used: {why}; run cxlctl probe again', out.width))}[/yellow]")
    rows = []
    spreads: List[str] = []
    for p in doc.get("pairs") or []:
        if not isinstance(p, dict):
            continue
        m = p.get("mem_node")
        node = inv.node(m) if isinstance(m, int) else None
        c = node_figures(node, inv.regions, inv.nodes).cpu if node else None
        vals = [p.get(k) for k in ("mem_node", "cpu_node", "read_mbps", "write_mbps", "latency_ns")]
        rows.append([_e("-" if v is None else str(v)) for v in vals] + [_bw(c), _lat(c)])
        spreads += [x for x in (_pair_spread(p),) if x]
    if rows:
        out.table(_MEASURED, rows)
        note = _dim_note(out)
        note("FROM: CPU node that ran it; WRITE: non-temporal stores; each figure the median of its windows")
        note("FW: the kernel's HMAT/CDAT figures, CPU class (access1)")
        for text in spreads:
            note(text)
    for sk in doc.get("skipped") or []:
        if isinstance(sk, dict):
            what = f"node {sk.get('mem_node')} from node {sk.get('cpu_node')}: {sk.get('reason')}"
            out.line(f"  skipped {_e(what)}", highlight=False, soft_wrap=True)


def render_measured(inv: Inventory, stored: Stored, console: Console) -> None:
    """The measured table alone (``cxlctl probe``'s report)."""
    _measured(inv, stored, _RichOut(console))


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


def _knobs(inv: Inventory, out: _Out) -> None:
    """``sysctl -a`` style: one ``name = value`` per line (names are long, values short)."""
    out.line("\n[bold]Kernel knobs[/bold]")
    cannot = unreadable(inv)
    for k in inv.knobs:
        value = _e(k.value) if k.supported else "[dim]unsupported on this kernel[/dim]"
        if k.path in cannot:  # there, but not readable: not "unsupported"
            value = f"[red]{_e(cannot[k.path])}[/red]"
        out.line(f"  {_e(k.name)} = {value}", highlight=False)
    out.line(f"  weighted_interleave = {weighted_interleave_line(inv)}", highlight=False)


def _warnings(inv: Inventory, out: _Out) -> None:
    """Severity in a column of its own; a long message wraps indented under its text."""
    from .term import fold_lines

    if not inv.warnings:
        return
    out.line("\n[bold]Notes and warnings[/bold]")
    sev_w = max(len(w.severity) for w in inv.warnings)
    width = max(20, out.width - sev_w - 1)
    for warn in inv.warnings:
        style = _SEV_STYLE.get(warn.severity, "")
        sev = _e(f"{warn.severity:>{sev_w}}")
        lines = fold_lines(f"{warn.message}  ({warn.code})", width) or [""]
        text = f"\n{' ' * sev_w} ".join(_e(x) for x in lines)
        out.line(f"[{style}]{sev}[/] {text}" if style else f"{sev} {text}", highlight=False, soft_wrap=True)


def _status(inv: Inventory, out: _Out, only: Optional[str] = None, measured: Optional[Stored] = None) -> None:
    out.line(f"[bold]cxlctl status[/bold]  kernel {_or(inv.kernel)}", highlight=False)
    if only:
        out.line(_e(f"only {only} and what relates to it"), highlight=False)
    if inv.has_cxl:
        out.tree(_topology(inv))
    elif paths.CXL_DEVICES in unreadable(inv):  # unknown, not empty
        out.line(f"[red]CXL devices: {_e(unreadable(inv)[paths.CXL_DEVICES])}[/red]", highlight=False)
    elif only:
        out.line("[cyan]No CXL device relates to it.[/cyan]")
    else:
        out.line("[cyan]No CXL devices on this host.[/cyan]")
    if inv.regions:
        _regions(inv, out)
    _other_dax(inv, out)
    _nodes(inv, out)
    if measured is not None:
        _measured(inv, measured, out)
    if inv.has_cxl:
        tot = inv.totals
        # folded here, on spaces, a size never apart from its unit (rich's own wrap split "256 MiB")
        out.text(
            fold(
                f"CXL {format_size(tot.cxl_capacity)}: regions {format_size(tot.cxl_in_regions)}, "
                f"online {format_size(tot.cxl_online)}, free {format_size(tot.cxl_free)}, "
                f"unassigned {format_size(tot.cxl_unassigned)}",
                out.width,
            )
        )
    _knobs(inv, out)
    _warnings(inv, out)


def render_status(
    inv: Inventory, console: Console, only: Optional[str] = None, measured: Optional[Stored] = None
) -> None:
    """``cxlctl status``'s view on ``console`` (rich: colours when it is a terminal); ``only``: what
    a filtered view keeps (``memdev mem0``), said under the heading; ``measured``: cxlctl probe's figures."""
    _status(inv, _RichOut(console), only, measured)


def plain_status(
    inv: Inventory, width: int, only: Optional[str] = None, measured: Optional[Stored] = None
) -> Optional[str]:
    """The view as rich would print it uncoloured at ``width`` columns, laid out without rich;
    None where that layout cannot promise rich's output (then rich must print it)."""
    out = _PlainOut(width)
    try:
        _status(inv, out, only, measured)
    except _NotPlain:
        return None
    return "".join(out.parts)


def _uncoloured(stream: object) -> bool:
    """Whether rich would print no colour and use its Unicode tree guides on ``stream``: not a
    terminal, UTF-8, and none of the variables that make rich treat a pipe as a terminal."""
    from .term import isatty

    enc = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
    if enc != "utf8" or isatty(stream):  # type: ignore[arg-type]
        return False
    return not any(v in os.environ for v in ("FORCE_COLOR", "TTY_COMPATIBLE", "JUPYTER_COLUMNS", "JPY_PARENT_PID"))


def print_status(inv: Inventory, only: Optional[str] = None, measured: Optional[Stored] = None) -> None:
    """``cxlctl status`` on stdout: laid out here for a pipe or a file (no rich import), else by rich."""
    from .term import width

    plain = _uncoloured(sys.stdout)
    text = plain_status(inv, width(), only, measured) if plain else None
    if text is not None:
        sys.stdout.write(text)
        return
    from .term import console

    c = console(highlight=True)
    if not plain:
        render_status(inv, c, only, measured)
        return
    with c.capture() as cap:  # no colour to keep: the lines rich wrapped lose the spaces it left at their ends
        render_status(inv, c, only, measured)
    sys.stdout.write("".join(line.rstrip() + "\n" for line in cap.get().splitlines()))
