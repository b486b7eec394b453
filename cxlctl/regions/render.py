"""Human view of region plans and of what ``region``/``dax`` commands did.

Moved out of the CLI so ``cxlctl.cli.region`` only parses, calls and emits.  A plan is
a :func:`cxlctl.term.grid`: position, memdev, decoder and DPA whole in their columns,
the route (port: dport → target index at each hop) beside them on a wide screen and
under its row at 80 columns.  The console (:func:`cxlctl.term.console`) reads no
markup, so a sysfs value holding ``[…]`` prints as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

from cxlctl.term import Cell, fold_text, grid, join

if TYPE_CHECKING:
    from rich.console import Console

    from .planner import Plan


def plan(p: Plan, c: Console, title: str = "plan") -> None:
    from cxlctl.parse import format_size

    at = f" at {p.resource:#x}" if p.resource is not None else ""
    head = join(
        (title, "bold"),
        f": {p.ways}-way RAM region of {format_size(p.size)} on {p.root_decoder}{at}, granularity {p.granularity}"
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
            f"  {lv.port}: {lv.decoder} will interleave {lv.ways}-way at {lv.granularity} across dports "
            + ",".join(map(str, lv.targets))
        )
    for n in p.notes:
        for i, line in enumerate(fold_text(join(("note:", "yellow"), f" {n}"), c.width - 6)):
            c.print(line if i == 0 else join("      ", line), soft_wrap=True)
