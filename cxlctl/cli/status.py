"""``cxlctl status``: the inventory, as a table or one JSON document (:func:`cxlctl.commands.status`).

``status`` and ``status --json`` on their own are usually served before this
module is imported (:mod:`cxlctl.__main__`'s fast path, the same function).
"""

from __future__ import annotations

import typer

from .common import host


def status(
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output (docs/json-schema.md)."),
) -> None:
    """Show CXL devices, regions, DAX devices, NUMA nodes, memory tiers and knobs."""
    from cxlctl.commands import status as run

    code = run(host(), json_out)
    if code:
        raise typer.Exit(code)
