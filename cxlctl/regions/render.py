"""Human view of region plans and of what ``region``/``dax`` commands did.

Moved out of the CLI so ``cxlctl.cli.region`` only parses, calls and emits.  A plan is
a :func:`cxlctl.term.grid`: position, memdev, decoder and DPA whole in their columns,
the route (port: dport → target index at each hop) beside them on a wide screen and
under its row at 80 columns.  The console (:func:`cxlctl.term.console`) reads no
markup, so a sysfs value holding ``[…]`` prints as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from cxlctl.term import Cell, fold_lines, fold_text, grid, join

if TYPE_CHECKING:
    from rich.console import Console

    from .batch import Batch
    from .dax import Reconfigured
    from .planner import Plan
    from .program import Destroyed


def plan(p: Plan, c: Console, title: str = "plan") -> None:
    from cxlctl.parse import format_size

    at = f" at {p.resource:#x}" if p.resource is not None else ""
    head = join(
        (title, "bold"),
        f": {p.ways}-way RAM region of {format_size(p.size)} on {p.root_decoder}{at}, granularity {p.granularity} B"
        + (
            f"  (window {format_size(p.window_size)}, largest free extent {format_size(p.window_free)})"
            if p.window_size
            else ""
        ),
    )
    for line in fold_text(head, c.width):
        c.print(line, soft_wrap=True)
    index = {(lv.port, t): i for lv in p.levels for i, t in enumerate(lv.targets)}
    rows: List[Tuple[Sequence[Cell], Optional[Cell]]] = []
    for tg in p.targets:
        route = "  ".join(f"{h.port}: {h.dport} → {index.get((h.port, h.dport), '?')}" for h in tg.hops)
        mode = "ram" if tg.mode == "ram" else f"{tg.mode} → ram"
        rows.append(([str(tg.position), tg.memdev, tg.decoder, mode, format_size(tg.dpa_size)], route))
    cols = [("POS", "right"), ("MEMDEV", "left"), ("DECODER", "left"), ("MODE", "left"), ("DPA", "right")]
    grid(c, cols, rows, note="ROUTE (port: dport → target index)", note_min=30)
    for lv in p.levels[1:]:
        c.print(
            f"  {lv.port}: {lv.decoder} will interleave {lv.ways}-way at {lv.granularity} B across dports "
            + ",".join(map(str, lv.targets))
        )
    for n in p.notes:
        for i, line in enumerate(fold_text(join(("note:", "yellow"), f" {n}"), c.width - 6)):
            c.print(line if i == 0 else join("      ", line), soft_wrap=True)


def created(batch: Batch) -> List[str]:
    """One line per region ``region create`` built: its shape, its DAX devices, its NUMA node."""
    from cxlctl.parse import format_size

    from . import region_json

    out: List[str] = []
    for b in batch.built:
        d = region_json.created(b, batch.block_size)
        nodes = sorted({x["target_node"] for x in d["dax"] if x["target_node"] is not None})
        daxs = ", ".join(
            f"{x['chardev']} {x['mode']}"
            + (
                f" node {x['target_node']} {x['online_memblocks']}/{x['total_memblocks']} blocks online {'/'.join(x['zones'])}"
                if x["mode"] == "system-ram"
                else ""
            )
            for x in d["dax"]
        )
        out.append(
            f"created {d['region']}: {d['interleave_ways']}-way, {format_size(d['size'])}, granularity "
            f"{d['interleave_granularity']} B, on {d['decoder']}, targets {' '.join(d['targets'])}"
            + (f"; {daxs}" if daxs else "")
            + (f"; NUMA node {', '.join(map(str, nodes))}" if nodes else "")
        )
    return out


def destroyed(d: Destroyed) -> str:
    n = sum(len(ids) for _, ids in d.offlined)
    return (
        f"destroyed {d.region}"
        + (f" (offlined {n} memory block(s) first)" if n else "")
        + (f"; freed {', '.join(d.freed_decoders)}" if d.freed_decoders else "")
    )


def reconfigured(r: Reconfigured, doc: Dict[str, Any]) -> str:
    """``dax reconfigure``'s line, from the device as its JSON shows it (node, blocks, zones)."""
    dev = doc["device"]
    if r.mode == "system-ram":
        return (
            f"{r.name}: {r.before} → system-ram, node {dev['target_node']}, "
            f"{dev['online_memblocks']}/{dev['total_memblocks']} blocks online in {'/'.join(dev['zones']) or '-'}"
            + ("" if r.changed else " (already so)")
        )
    return f"{r.name}: {r.before} → devdax" + ("" if r.changed else " (already so)")


def would_online(online: str, zone: str, why: Optional[str]) -> str:
    """A dry run's last line, folded at the terminal's width: what the DAX device would become, and why
    that zone (the host's split, capacity/pinnable.py, when --zone was not given)."""
    from cxlctl.term import console

    text = (
        f"then: DAX device → {online}"
        + (f" in ZONE_{zone.upper()}" if online == "system-ram" else "")
        + (f" ({why})" if why else "")
        + "; dry run, nothing written"
    )
    return "\n".join(fold_lines(text, console().width, indent="  "))
