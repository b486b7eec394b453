"""Human view of ``cxlctl capacity``: a grid per memdev and per CXL node, then each blocker with its fix.

The grid (:func:`cxlctl.term.grid`) keeps values whole at 80 columns; blockers
are sentences, folded on spaces under their subject.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from cxlctl.parse import format_nodelist, format_size
from cxlctl.term import fold_lines, grid

if TYPE_CHECKING:
    from rich.console import Console

    from .report import Blocker, Report


def _sizes(n: Optional[int]) -> str:
    return format_size(n)


def blocker_lines(b: Blocker, width: int) -> List[str]:
    return fold_lines(b.message, width, first="  ✗ ", indent="    ") + fold_lines(
        b.fix, width, first="    fix: ", indent="         "
    )


def render(rep: Report, c: Console) -> None:
    if not rep.memdevs:
        c.print("no CXL memdevs: nothing to give back")
        return
    rows = []
    for m in rep.memdevs:
        where = ", ".join(m.regions) or "-"
        node = format_nodelist(m.nodes) if m.nodes else ("devdax" if m.devdax else "-")
        parts = [f"with {', '.join(m.release_with)}"] if m.release_with else []
        parts += [f"after {', '.join(m.depends_on)} (decoder order)"] if m.depends_on else []
        note = "; ".join(parts) or None
        rows.append(
            (
                [
                    m.memdev,
                    _sizes(m.capacity),
                    where,
                    node,
                    _sizes(m.online) if m.online else "-",
                    _sizes(m.movable) if m.online else "-",
                    m.state,
                    _sizes(m.releasable),
                ],
                note,
            )
        )
    grid(
        c,
        [
            ("memdev", "left"),
            ("capacity", "right"),
            ("region", "left"),
            ("node", "left"),
            ("online", "right"),
            ("movable", "right"),
            ("state", "left"),
            ("releasable", "right"),
        ],
        rows,
        note="note",
    )
    if rep.nodes:
        c.print()
        grid(
            c,
            [
                ("node", "right"),
                ("memdevs", "left"),
                ("in use", "right"),
                ("movable", "right"),
                ("normal", "right"),
                ("releasable", "right"),
            ],
            [
                (
                    [
                        str(n.node),
                        ", ".join(n.memdevs) or "-",
                        _sizes(n.used),
                        _sizes(n.movable),
                        _sizes(n.normal),
                        _sizes(n.releasable),
                    ],
                    None,
                )
                for n in rep.nodes
            ],
        )
    _share(rep, c)
    _blockers(rep, c)
    for note in rep.notes:
        c.print()
        for line in fold_lines(f"note: {note}", c.width, indent="  "):
            c.print(line, soft_wrap=True)
    _host(rep, c)


def _blockers(rep: Report, c: Console) -> None:
    """Each blocker paragraph once: the members of an interleaved region share their blockers."""
    groups: Dict[Tuple[Blocker, ...], List[str]] = {}
    for m in rep.memdevs:
        if m.blockers:
            groups.setdefault(m.blockers, []).append(m.memdev)
    for blockers, names in groups.items():
        c.print()
        title = f"{names[0]} is blocked:" if len(names) == 1 else f"{', '.join(names)} are blocked:"
        for line in fold_lines(title, c.width, indent="  "):
            c.print(line, soft_wrap=True)
        for b in blockers:
            for line in blocker_lines(b, c.width):
                c.print(line, soft_wrap=True)


def _host(rep: Report, c: Console) -> None:
    """The host as a whole, when it is not ready (a surprise removal: drain and reboot)."""
    if rep.host_state != "ready":
        c.print()
        for line in fold_lines(f"host: {rep.host_state}: {rep.host_reason or ''}", c.width, indent="  "):
            c.print(line, soft_wrap=True)


def _share(rep: Report, c: Console) -> None:
    """The host's split (capacity/pinnable.py): the pinnable share's target against its CXL memory."""
    sh = rep.share
    if sh is None or (sh.target is None and not sh.pinnable and not sh.lendable):
        return
    from cxlctl.capacity import pinnable

    zone, _why = pinnable.zone_for(sh, pinnable.ADOPT)
    text = (
        f"split: {_sizes(sh.pinnable)} pinnable (kernel zone: pinned KV, not lendable), {_sizes(sh.lendable)} "
        f"lendable (ZONE_MOVABLE); {sh.setting}"
        + (f", short by {_sizes(sh.shortfall)}" if sh.shortfall else "")
        + f"; next adopted capacity: ZONE_{zone.upper()}"
    )
    c.print()
    for line in fold_lines(text, c.width, indent="  "):
        c.print(line, soft_wrap=True)
