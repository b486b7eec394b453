"""``cxlctl status``: the inventory, as a table or one JSON document.

``status --json`` on its own is usually served before this module is imported
(:mod:`cxlctl.__main__`'s fast path); this command handles every other form.
"""

from __future__ import annotations

import sys

import typer

from .common import host_root


def status(
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output (docs/json-schema.md)."),
) -> None:
    """Show CXL devices, regions, DAX devices, NUMA nodes, memory tiers and knobs."""
    from cxlctl.hostio.host import Host
    from cxlctl.inventory import scan

    inv = scan(Host(host_root()))
    if json_out:
        from cxlctl.status_json import dumps

        sys.stdout.write(dumps(inv))
    else:
        from cxlctl.render import render_status
        from cxlctl.term import console

        render_status(inv, console(highlight=True))
    if inv.unknown:
        raise typer.Exit(1)
