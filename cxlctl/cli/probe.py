"""``cxlctl probe``: measured bandwidth and latency per node (:func:`cxlctl.probe.command.probe`)."""

from __future__ import annotations

from typing import Optional

import typer

from .common import JSON_OPT, host, progress_bar
from .params import integer


def probe(
    json_out: bool = JSON_OPT,
    quick: bool = typer.Option(False, "--quick", help="Smaller buffers and shorter windows: a few seconds per pair."),
    nodes: Optional[str] = typer.Option(None, "--nodes", metavar="LIST", help="Only these memory nodes (0,2 or 1-3)."),
    buffer_mib: Optional[int] = typer.Option(
        None, "--buffer-mib", metavar="N", parser=integer(4), help="MiB per buffer."
    ),
) -> None:
    """Measure read and non-temporal write bandwidth, idle and loaded latency of each memory node from each CPU node.

    Stores them in /var/lib/cxlctl/probe.json (status, doctor and weights = "measured" use them); docs/probe.md.
    """
    from cxlctl.probe.command import probe as run

    with progress_bar(json_out) as bar:
        run(host(), json_out, quick=quick, nodes=nodes, buffer_mib=buffer_mib, progress=bar)
