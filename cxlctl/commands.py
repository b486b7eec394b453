"""The commands served by both entry paths: ``status``, ``doctor`` and ``stat``.

Each function here *is* the command: the typer command in :mod:`cxlctl.cli`
parses its options and calls it, and :mod:`cxlctl.__main__`'s fast path calls it
for the common command lines without importing typer (it costs about four times
the interpreter's start-up, bench/README.md).  So what each prints and how it
exits is written once.  Each takes the :class:`~cxlctl.hostio.host.Host` its
caller resolved and returns the exit code; a failure is raised as a
:class:`~cxlctl.errors.CxlctlError`, which :func:`cxlctl.emit.guarded` maps.

Imports are lazy and per form: ``status --json`` loads neither rich nor typing,
and the human ``status`` no rich unless stdout is a terminal (:func:`cxlctl.render.print_status`).
"""

from __future__ import annotations

import sys

# typing costs ~5 ms of start-up: only mypy needs it here
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Optional, Sequence

    from cxlctl.hostio.host import Host
    from cxlctl.status_filter import Filters

#: exit code of ``status`` when a directory it listed was unreadable (the inventory is incomplete)
EXIT_INCOMPLETE = 1


def status(host: Host, json_out: bool, filters: Optional[Filters] = None) -> int:
    """``cxlctl status [--json] [-m/-r/-d/--node NAME]``: the inventory (or the part ``filters`` keep,
    :mod:`cxlctl.status_filter`) as a table or one JSON document."""
    from cxlctl.inventory import scan

    inv = scan(host)
    measured = None
    from cxlctl.hostio.paths import PROBE_RESULTS

    # the probe's modules (and json) only when it ran here; a filtered view is about its objects only
    if filters is None and host.reader.exists(PROBE_RESULTS):
        from cxlctl.probe.store import load

        measured = load(host, inv)
    only = None
    if filters is not None:
        from cxlctl.status_filter import apply, describe

        inv, only = apply(inv, filters), describe(filters)
    if json_out:
        from cxlctl.status_json import dumps

        extra = None
        if measured is not None:
            from cxlctl.probe.view import measured_json

            extra = {"measured": measured_json(measured)}
        sys.stdout.write(dumps(inv, extra))
    else:
        from cxlctl.render import print_status

        print_status(inv, only, measured)
    return EXIT_INCOMPLETE if inv.unknown else 0


def doctor(host: Host, json_out: bool, engine: Optional[str] = None, engine_args: Sequence[str] = ()) -> int:
    """``cxlctl doctor [--json] [--for ENGINE [-- ARGS]]``: the checks; raises their failure when one fails."""
    from cxlctl.doctor.gather import gather
    from cxlctl.doctor.report import exit_code, failure, run, to_json

    facts = gather(host, engine=engine, engine_args=engine_args)
    checks = run(facts)
    if json_out:
        from cxlctl.emit import emit_json

        emit_json(to_json(facts, checks))
    else:
        from cxlctl.doctor.report import render
        from cxlctl.term import console

        render(facts, checks, console())
    sys.stdout.flush()
    if exit_code(checks):
        raise failure(checks)
    return 0


def stat(
    host: Host,
    json_out: bool,
    *,
    every: Optional[float] = None,
    count: Optional[int] = None,
    nodes: Optional[List[int]] = None,
    cgroups: Sequence[str] = (),
    pids: Sequence[int] = (),
    top: int = 0,
) -> int:
    """``cxlctl stat``: one report of the totals since boot, or one per ``every`` seconds
    (``count`` of them, else until Ctrl-C, which ends it quietly); ``--json``: one object a line."""
    from cxlctl.telemetry.report import to_dict
    from cxlctl.telemetry.sample import cgroup_name, check_cgroup, check_nodes, check_pid, node_kinds, read_sample
    from cxlctl.telemetry.sampler import Sampler, readings

    if count is not None and every is None:
        every = 1.0
    names = [cgroup_name(c) for c in cgroups]
    for c in names:
        check_cgroup(host, c)
    for p in pids:
        check_pid(host, p)
    kinds = node_kinds(host)
    if nodes is not None:
        check_nodes(kinds, nodes)
    total = count if count is not None else (None if every is not None else 1)
    sampler = Sampler(host, read=lambda r, k: read_sample(r, k, nodes=nodes, cgroups=names, pids=pids, top=top))
    try:
        for n, (s, r, verdicts) in enumerate(readings(sampler, kinds, every or 0.0, total)):
            if json_out:
                from cxlctl.emit import emit_json

                emit_json(to_dict(s, r, verdicts, n), indent=None)
            else:
                from cxlctl.telemetry.report import render_text
                from cxlctl.term import width

                sys.stdout.write(("\n" if n else "") + render_text(s, r, verdicts, n, width()) + "\n")
            sys.stdout.flush()
    except KeyboardInterrupt:
        pass
    return 0
