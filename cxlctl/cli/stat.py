"""``cxlctl stat``: tiering counters per node, cgroup and process, vmstat-style.

The first report holds the totals since boot; each further one (``--interval``)
the per-second rates over the interval before it.  ``--json`` prints one JSON
object per report (JSON lines).  This module parses the options;
:func:`cxlctl.commands.stat` (the fast path's too) checks, samples and prints.
"""

from __future__ import annotations

from typing import List, Optional

import typer

from cxlctl.errors import UsageError

from .common import host, interval_option
from .params import integer


def _nodes(values: Optional[List[str]]) -> Optional[List[int]]:
    if not values:
        return None
    from cxlctl.parse import parse_nodelist

    out: List[int] = []
    for v in values:
        try:
            out += parse_nodelist(v)
        except ValueError as e:
            raise UsageError(
                f"--node {v!r}: {e}", hint="give node ids such as 0, 1 or 0-1 (see cxlctl status)"
            ) from None
    return sorted(set(out))


def stat(
    interval: Optional[str] = typer.Option(
        None, "--interval", "-i", metavar="S", help="Seconds between reports (default: one report, totals since boot)."
    ),
    count: Optional[int] = typer.Option(
        None,
        "--count",
        "-c",
        metavar="N",
        parser=integer(1),
        help="Number of reports, the first included (default: until Ctrl-C).",
    ),
    json_out: bool = typer.Option(
        False, "--json", help="One JSON object per report, one per line (docs/json-schema.md)."
    ),
    node: Optional[List[str]] = typer.Option(
        None, "--node", metavar="N", help="Only these NUMA nodes (repeat, or 0-1)."
    ),
    cgroup: Optional[List[str]] = typer.Option(
        None,
        "--cgroup",
        metavar="PATH",
        help="Bytes per node and demotions of a cgroup v2 (repeat): /system.slice/x.service.",
    ),
    pid: Optional[List[int]] = typer.Option(
        None, "--pid", metavar="PID", parser=integer(0), help="Pages per node of a process (repeat)."
    ),
    top: int = typer.Option(
        0, "--top", metavar="N", parser=integer(0), help="Also the N processes with the largest RSS."
    ),
) -> None:
    """Promotion, demotion and placement counters per node, cgroup and process (vmstat-style)."""
    from cxlctl.commands import stat as run

    every = None if interval is None else interval_option(interval, 0.1, "1 or 0.5")
    run(host(), json_out, every=every, count=count, nodes=_nodes(node), cgroups=cgroup or (), pids=pid or (), top=top)
