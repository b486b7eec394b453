"""Human view of the inventory (``cxlctl status``), built with rich.

rich is imported inside the functions: this module is only loaded when a person
asked for the human view.  Renderers take a Console so tests can render into a
StringIO at a fixed width.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional

from .model import Coordinates, Inventory, Port
from .parse import format_nodelist, format_size

if TYPE_CHECKING:
    from rich.console import Console
    from rich.tree import Tree

_SEV_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _bw(c: Optional[Coordinates]) -> str:
    if c is None or (c.read_bandwidth is None and c.write_bandwidth is None):
        return "-"
    return f"{c.read_bandwidth or '?'}/{c.write_bandwidth or '?'}"


def _lat(c: Optional[Coordinates]) -> str:
    if c is None or (c.read_latency is None and c.write_latency is None):
        return "-"
    return f"{c.read_latency or '?'}/{c.write_latency or '?'}"


def _hex(v: Optional[int]) -> str:
    return "?" if v is None else hex(v)


def topology_tree(inv: Inventory) -> Tree:
    from rich.tree import Tree

    top = Tree("[bold]CXL topology[/bold]")
    children: Dict[str, List[Port]] = {}
    for p in inv.ports + inv.endpoints:
        children.setdefault(p.parent or "", []).append(p)
    mem = {m.name: m for m in inv.memdevs}
    decs = {d.name: d for d in inv.decoders}
    regions_by_root: Dict[str, List[str]] = {}
    for r in inv.regions:
        regions_by_root.setdefault(r.root_decoder or "", []).append(r.name)

    def add_port(branch: Tree, p: Port) -> None:
        if p.kind == "endpoint":
            m = mem.get(p.memdev or "")
            if m is None:
                branch.add(f"{p.name} → {p.memdev or '?'}")
                return
            used = [decs[d] for d in p.decoders if d in decs and decs[d].dpa_size]
            regs = ", ".join(sorted({d.region for d in used if d.region})) or "no region"
            branch.add(
                f"[green]{m.name}[/green] ram {format_size(m.ram_size)}"
                + (f" pmem {format_size(m.pmem_size)}" if m.pmem_size else "")
                + f"  serial {_hex(m.serial)}  pci {m.host or '?'}  ({regs})"
            )
            return
        label = "host bridge" if p.depth == 1 else f"switch (depth {p.depth})"
        sub = branch.add(f"{p.name} [dim]{label} {p.host or ''}[/dim]")
        for c in children.get(p.name, []):
            add_port(sub, c)

    for b in inv.buses:
        bt = top.add(f"[bold]{b.name}[/bold] [dim]{b.provider or ''} {b.host or ''}[/dim]")
        for dn in b.decoders:
            d = decs.get(dn)
            if d is None:
                continue
            caps = "/".join(c for c, on in (("ram", d.cap_ram), ("pmem", d.cap_pmem)) if on) or "-"
            dt = bt.add(
                f"{d.name} window {format_size(d.size)} @ {_hex(d.resource)}  {caps}  "
                f"{d.interleave_ways or '?'}-way × {d.interleave_granularity or '?'} B"
            )
            for rn in regions_by_root.get(dn, []):
                reg = inv.region(rn)
                if reg is not None:
                    dt.add(f"[magenta]{reg.name}[/magenta] {reg.mode or '?'} {format_size(reg.size)}")
        for c in children.get(b.name, []):
            add_port(bt, c)
    return top


def render_status(inv: Inventory, console: Console) -> None:
    from rich.table import Table

    console.print(f"[bold]cxlctl status[/bold]  kernel {inv.kernel or '?'}")
    if inv.has_cxl:
        console.print(topology_tree(inv))
    else:
        console.print("[cyan]No CXL devices on this host.[/cyan] NUMA nodes found:")

    if inv.regions:
        console.print("[bold]Regions → DAX → NUMA node → tier[/bold]")
        for r in inv.regions:
            daxes = [d for d in inv.dax_devices if d.name in r.dax_devices]
            state = {True: "committed", False: "[red]NOT committed[/red]", None: "state ?"}[r.committed]
            targets = ", ".join(x.memdev or x.decoder for x in r.targets) or "no targets"
            line = (
                f"  [magenta]{r.name}[/magenta] {r.mode or '?'} {format_size(r.size)}, "
                f"{r.interleave_ways or '?'}-way × {r.interleave_granularity or '?'} B, {state}, "
                f"targets {targets}"
            )
            for d in daxes:
                zone_txt = f" in {'/'.join(d.zones)}" if d.zones else ""
                node = inv.node(d.target_node) if d.target_node is not None else None
                line += f"\n      → {d.name} {d.mode or 'unbound'}{zone_txt}"
                if node is not None and d.mode == "system-ram":
                    line += f" → node {node.id} ({node.kind})"
                    line += f" → memory_tier{node.tier}" if node.tier is not None else " → no tier"
            if not daxes:
                line += "\n      → no DAX device"
            console.print(line, highlight=False)

    other_dax = [d for d in inv.dax_devices if d.region is None]
    if other_dax:
        t = Table(title="DAX devices outside CXL regions", title_justify="left")
        for col in ("dax", "provider", "size", "mode", "node"):
            t.add_column(col)
        for d in other_dax:
            t.add_row(d.name, d.provider, format_size(d.size), d.mode or "unbound", str(d.target_node))
        console.print(t)

    t = Table(
        title="NUMA nodes (bandwidth/latency: HMAT/CDAT access0; wi: weighted-interleave weight)", title_justify="left"
    )
    for col, just in (
        ("node", "right"),
        ("kind", "left"),
        ("cpus", "left"),
        ("size", "right"),
        ("free", "right"),
        ("tier", "right"),
        ("distance", "left"),
        ("MB/s r/w", "right"),
        ("ns r/w", "right"),
        ("online blocks", "left"),
        ("wi", "right"),
    ):
        t.add_column(col, justify=just, no_wrap=col in ("node", "size", "free", "tier", "wi"))  # type: ignore[arg-type]
    for n in inv.nodes:
        zones: Dict[str, int] = {}
        for b in n.memory_blocks:
            if (b.state or "").startswith("online"):
                zones[b.zone or "?"] = zones.get(b.zone or "?", 0) + 1
        kind = {"cxl": "[magenta]cxl[/magenta]", "dram": "dram"}.get(n.kind, n.kind)
        t.add_row(
            str(n.id),
            kind,
            format_nodelist(n.cpus) or "-",
            format_size(n.mem_total),
            format_size(n.mem_free),
            "-" if n.tier is None else str(n.tier),
            " ".join(map(str, n.distance)),
            _bw(n.access0),
            _lat(n.access0),
            " ".join(f"{c} {z}" for z, c in sorted(zones.items())) or "-",
            str(inv.weighted_interleave.weights.get(n.id, "-")),
        )
    console.print(t)

    if inv.has_cxl:
        tot = inv.totals
        console.print(
            f"CXL capacity {format_size(tot.cxl_capacity)}: in regions {format_size(tot.cxl_in_regions)}, "
            f"online {format_size(tot.cxl_online)}, free {format_size(tot.cxl_free)}, "
            f"in no region {format_size(tot.cxl_unassigned)}"
        )

    kt = Table(title="Kernel knobs", title_justify="left")
    kt.add_column("knob")
    kt.add_column("value")
    for k in inv.knobs:
        kt.add_row(k.name, k.value if k.supported else "[dim]unsupported on this kernel[/dim]")
    wi = inv.weighted_interleave
    if wi.supported:
        w = " ".join(f"node{k}={v}" for k, v in sorted(wi.weights.items())) or "-"
        kt.add_row("weighted_interleave", w + ("" if wi.auto is None else f"  (auto={str(wi.auto).lower()})"))
    else:
        kt.add_row("weighted_interleave", "[dim]unsupported on this kernel (needs 6.9+)[/dim]")
    console.print(kt)

    if inv.warnings:
        console.print("[bold]Notes and warnings[/bold]")
        for warn in inv.warnings:
            style = _SEV_STYLE.get(warn.severity, "")
            console.print(f"[{style}]{warn.severity:>7}[/] {warn.message}  [dim]({warn.code})[/dim]")
