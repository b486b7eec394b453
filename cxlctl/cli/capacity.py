"""``cxlctl capacity``: thin; the report is :mod:`cxlctl.capacity.report` (docs/capacity.md)."""

from __future__ import annotations

import typer

from .common import JSON_OPT, host

capacity_app = typer.Typer(
    name="capacity",
    help="CXL capacity that comes and goes: what could be given back to the pool now, and what blocks it "
    "(docs/capacity.md).",
    invoke_without_command=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@capacity_app.callback()
def capacity(ctx: typer.Context, json_out: bool = JSON_OPT) -> None:
    """Per memdev and per CXL node: in use, releasable now, and each blocker with its fix. No root needed."""
    if ctx.invoked_subcommand is None:
        from cxlctl.capacity.command import show

        show(host(), json_out)
