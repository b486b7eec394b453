"""``cxlctl stat``: tiering counters per node, cgroup and process, vmstat-style.

The first report holds the totals since boot; each further one (``--interval``)
the per-second rates over the interval before it.  ``--json`` prints one JSON
object per report (JSON lines).  The reading and judging live in
:mod:`cxlctl.telemetry`; this module parses options and loops.
"""

from __future__ import annotations

import sys
from typing import List, Optional

import typer

from cxlctl.errors import UsageError

from .common import emit_json, host_root, interval_option
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
    from cxlctl.hostio.host import Host
    from cxlctl.telemetry.report import render_text, to_dict
    from cxlctl.telemetry.sample import cgroup_name, check_cgroup, check_nodes, check_pid, node_kinds, read_sample
    from cxlctl.telemetry.sampler import Sampler, readings

    host = Host(host_root())
    every = None if interval is None else interval_option(interval, 0.1, "1 or 0.5")
    if count is not None and every is None:
        every = 1.0
    nodes = _nodes(node)
    cgroups = [cgroup_name(c) for c in cgroup or []]
    for c in cgroups:
        check_cgroup(host, c)
    for p in pid or []:
        check_pid(host, p)
    kinds = node_kinds(host)
    if nodes is not None:
        check_nodes(kinds, nodes)
    total = count if count is not None else (None if every is not None else 1)
    from cxlctl.term import width as term_width

    width = term_width()
    sampler = Sampler(host, read=lambda r, k: read_sample(r, k, nodes=nodes, cgroups=cgroups, pids=pid or (), top=top))
    try:
        for n, (s, r, verdicts) in enumerate(readings(sampler, kinds, every or 0.0, total)):
            if json_out:
                emit_json(to_dict(s, r, verdicts, n), indent=None)
            else:
                sys.stdout.write(("\n" if n else "") + render_text(s, r, verdicts, n, width) + "\n")
            sys.stdout.flush()
    except KeyboardInterrupt:
        return
