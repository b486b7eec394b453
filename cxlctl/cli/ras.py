"""``cxlctl events`` and ``cxlctl health``: CXL RAS events and per-memdev health.

Thin: options only.  What ``events`` does (sources, printing, summary) is
:func:`cxlctl.ras.command.events`; the parser, the mapping and the health model
live in :mod:`cxlctl.ras`; the tracefs instances in :mod:`cxlctl.hostio.tracefs`.
"""

from __future__ import annotations

import sys
from typing import Optional

import typer

from cxlctl.errors import EXIT_FAILURE

from .common import JSON_OPT, emit_json, host
from .params import seconds


def events(
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing events as they arrive (Ctrl-C ends)."),
    since: Optional[str] = typer.Option(
        None, "--since", metavar="DURATION", help="Only events of the last DURATION (90s, 15m, 2h, 1d)."
    ),
    collect: bool = typer.Option(
        False, "--collect", help="Start collecting into cxlctl's private trace instance (cxlctl-events), then show."
    ),
    stop: bool = typer.Option(False, "--stop", help="Stop collecting: remove the cxlctl-events trace instance."),
    input_file: Optional[str] = typer.Option(
        None, "--input", metavar="FILE", help="Parse saved trace lines from FILE ('-' = stdin) instead of tracefs."
    ),
    duration: Optional[float] = typer.Option(
        None, "--duration", metavar="SECONDS", help="With --follow: stop after SECONDS.", parser=seconds
    ),
    json_out: bool = typer.Option(False, "--json", help="JSON lines: one object per event, then a summary."),
) -> None:
    """CXL RAS trace events (media, DRAM, module health, poison, AER) mapped to region, node and memory block."""
    from cxlctl.ras.command import events as run

    run(
        host(),
        json_out=json_out,
        follow=follow,
        since=since,
        collect=collect,
        stop=stop,
        input_file=input_file,
        duration=duration,
    )


def health(
    json_out: bool = JSON_OPT,
    poison: bool = typer.Option(
        True,
        "--poison/--no-poison",
        help="Ask each memdev for its poison list (trigger_poison_list; root) and collect the result.",
    ),
) -> None:
    """Per-memdev health, poison list, event counts and fault domain (regions, nodes, blocks, processes)."""
    from cxlctl.ras.health import collect_health, render_health, to_json

    report = collect_health(host(), poison=poison)
    if json_out:
        emit_json(to_json(report))
    else:
        sys.stdout.write(render_health(report))
    if report.errors:  # a critical device or poison: exit 1, for scripts and checks
        raise typer.Exit(EXIT_FAILURE)
