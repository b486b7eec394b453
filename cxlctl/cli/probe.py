"""``cxlctl probe``: measured bandwidth and latency per node (:func:`cxlctl.probe.command.probe`)."""

from __future__ import annotations

from typing import Optional

import typer

from cxlctl.errors import UsageError

from .common import JSON_OPT, host, progress_bar
from .params import integer


def probe(
    json_out: bool = JSON_OPT,
    quick: bool = typer.Option(False, "--quick", help="Smaller buffers and shorter windows: a few seconds per pair."),
    nodes: Optional[str] = typer.Option(
        None, "--nodes", metavar="LIST", help="Only these memory nodes (0,2 or 1-3; default: every one)."
    ),
    buffer_mib: Optional[int] = typer.Option(
        None,
        "--buffer-mib",
        metavar="N",
        parser=integer(4),
        help="Buffer size of every measurement in MiB (default: past the last-level cache).",
    ),
) -> None:
    """Measure read bandwidth, a 2:1 read/write mix and idle latency of each memory node from each CPU node.

    The figures are stored in /var/lib/cxlctl/probe.json with the boot id, kernel and memdev serials;
    status shows them, doctor compares them with the firmware's, and profiles may take
    weights = "measured".  Nothing else on the host changes (docs/probe.md).
    """
    wanted = None
    if nodes is not None:
        from cxlctl.parse import parse_nodelist

        try:
            wanted = parse_nodelist(nodes)
        except ValueError as e:
            raise UsageError(f"--nodes {nodes!r}: {e}", hint="give memory node ids such as 0,1 or 1-3") from None
        if not wanted:
            raise UsageError("--nodes is empty", hint="give memory node ids such as 0,1 or 1-3")
    from cxlctl.probe.command import probe as run

    with progress_bar(json_out) as bar:
        run(host(), json_out, quick=quick, nodes=wanted, buffer_mib=buffer_mib, progress=bar)
