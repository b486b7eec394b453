"""``cxlctl top``: a live view of tiering for an operator on a terminal.

On a terminal: a full-screen rich view refreshed every ``--interval`` seconds;
``q`` quits, ``s`` cycles the sort of the cgroup and process lists (CXL, DRAM,
total bytes).  When stdout is not a terminal (a pipe, a log, a script), the same
facts are printed as plain text, one block per refresh; ``--json`` prints each
refresh as a ``stat --json`` object (JSON lines).  This module parses the
options; :func:`cxlctl.telemetry.live.run` samples and shows, the view itself is
:mod:`cxlctl.telemetry.top`.
"""

from __future__ import annotations

from typing import Optional

import typer

from .common import host, interval_option
from .params import integer


def top(
    interval: str = typer.Option("2", "--interval", "-i", metavar="S", help="Seconds between refreshes."),
    count: Optional[int] = typer.Option(
        None, "--count", "-c", metavar="N", parser=integer(1), help="Stop after N refreshes."
    ),
    rows: int = typer.Option(8, "--rows", metavar="N", parser=integer(1), help="Cgroups and processes shown."),
    json_out: bool = typer.Option(
        False, "--json", help="One JSON object per refresh (stat's schema, with the cgroups and processes looked at)."
    ),
) -> None:
    """Live view: node usage by tier, promote/demote rates, top CXL users, verdicts (q quits)."""
    from cxlctl.telemetry.live import run

    run(host(), interval_option(interval, 0.2, "2"), count, rows, json_out)
