"""``cxlctl status``: the inventory, as a table or one JSON document (:func:`cxlctl.commands.status`).

``status`` and ``status --json`` on their own are usually served before this
module is imported (:mod:`cxlctl.__main__`'s fast path, the same function); the
filters (``-m``, ``-r``, ``-d``, ``--node``, as ``cxl list`` takes them) come here.
"""

from __future__ import annotations

from typing import List

import typer

from .common import JSON_OPT, host
from .params import argument


def status(
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output (docs/json-schema.md)."),
    memdev: List[str] = typer.Option(
        [], "--memdev", "-m", metavar="NAME", help="Only this memdev and what relates to it (mem0; repeat or A,B)."
    ),
    region: List[str] = typer.Option(
        [], "--region", "-r", metavar="NAME", help="Only this region and what relates to it (region0)."
    ),
    decoder: List[str] = typer.Option(
        [], "--decoder", "-d", metavar="NAME", help="Only this decoder and what relates to it (decoder0.0)."
    ),
    node: List[str] = typer.Option(
        [], "--node", metavar="ID", help="Only this NUMA node and what relates to it (1; repeat or 1,2)."
    ),
) -> None:
    """Show CXL devices, regions, DAX devices, NUMA nodes, memory tiers and knobs.

    The filters work as `cxl list`'s: each keeps the objects related to the names given, and
    together they keep what meets them all.
    """
    from cxlctl.commands import status as run
    from cxlctl.status_filter import Filters, names, node_ids

    f = Filters(
        memdevs=names(memdev, "--memdev"),
        regions=names(region, "--region"),
        decoders=names(decoder, "--decoder"),
        nodes=node_ids(node),
    )
    code = run(host(), json_out, f if f.given else None)
    if code:
        raise typer.Exit(code)


def list_cmd(
    kind: str = argument(..., "KIND", "memdevs, regions, dax or nodes."),
    output: str = typer.Option("default", "--output", "-o", metavar="FORMAT", help="default, wide, name or json."),
    no_headers: bool = typer.Option(False, "--no-headers", help="No header row."),
    json_out: bool = JSON_OPT,
) -> None:
    """One row per memdev, region, DAX device or NUMA node, for scripts (as `cxl list` or `kubectl get`)."""
    from cxlctl.listing import run

    run(host(), kind, "json" if json_out else output, not no_headers)
