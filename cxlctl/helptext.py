"""``--help`` on a narrow screen: every word whole (issue 44 item 11).

typer's rich help lays options out as a table; under about 80 columns rich shrinks its columns
and cuts names and values with an ellipsis (``--set-weigh…``, ``weighted-in…``).  Below
:data:`NARROW` columns the commands of :mod:`cxlctl.cli` print this stacked layout instead (their
``format_help``, :class:`cxlctl.cli.params.Command` and ``Group``): the usage and the description
folded on spaces, then each argument, option and command with its names on a line of their own
and its help under them, folded by :func:`cxlctl.term.fold_lines` (a path, a flag or a number with
its unit is never broken).
"""

from __future__ import annotations

import sys
from typing import Any, List, Optional, Tuple

import typer
from typer.core import TyperGroup

#: below this many columns ``--help`` is stacked (:func:`narrow_help`): rich's option table cut
#: names and values with an ellipsis at 60 columns (``--set-weigh…``, ``weighted-in…``)
NARROW = 80


def _entries(title: str, rows: List[Tuple[str, str]], width: int) -> List[str]:
    """A section of stacked entries: the names on a line of their own, the help folded under them."""
    from cxlctl.term import fold_lines, unmarked

    if not rows:
        return []
    out = ["", f"{title}:"]
    for names, text in rows:
        out += fold_lines(names, width, "  ", "    ")
        out += fold_lines(" ".join(unmarked(text).split()), width, "      ", "      ")
    return out


def narrow_help(cmd: Any, ctx: Any) -> Optional[str]:
    """``--help`` for a screen under :data:`NARROW` columns, every word whole: the usage and the
    description folded on spaces, then each argument, option and command with its names on one
    line and its help under them (None on a wider screen: typer's own panels).  ``cmd`` and
    ``ctx`` are click's command and context, which typer vendors and asks not to import."""
    from cxlctl.term import fold_lines, unmarked, width

    w = width(sys.stdout)
    if w >= NARROW:
        return None
    usage = " ".join([ctx.command_path, *cmd.collect_usage_pieces(ctx)])
    out = fold_lines(usage, w, "Usage: ", "         ")
    for para in [p for p in unmarked(cmd.help or "").split("\n\n") if p.strip()]:
        out += [""] + fold_lines(" ".join(para.replace("\b", "").split()), w, "  ", "  ")
    args: List[Tuple[str, str]] = []
    opts: List[Tuple[str, str]] = []
    for param in cmd.get_params(ctx):
        rec = param.get_help_record(ctx)
        if rec is not None:
            (args if param.param_type_name == "argument" else opts).append(rec)
    out += _entries("Arguments", args, w) + _entries("Options", opts, w)
    subs: List[Tuple[str, str]] = []
    for name in getattr(cmd, "list_commands", lambda c: [])(ctx):
        sub = cmd.get_command(ctx, name)
        if sub is not None and not sub.hidden:
            subs.append((name, (sub.short_help or sub.help or "").split("\n\n")[0]))
    out += _entries("Commands", subs, w)
    return "\n".join(out) + "\n"


class Stacked:
    """Mixin of the CLI's commands and groups: ``--help`` stacked on a narrow screen
    (:func:`narrow_help`), typer's panels otherwise."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        text = narrow_help(self, ctx)
        if text is None:
            super().format_help(ctx, formatter)  # type: ignore[misc]
        else:
            typer.echo(text, nl=False)


class Group(Stacked, TyperGroup):
    """Every command group of the app (:func:`cxlctl.cli.common.group`, the application's own)."""
