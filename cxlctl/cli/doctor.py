"""``cxlctl doctor``: why CXL memory is missing, slow or misplaced (logic in :mod:`cxlctl.doctor`)."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from cxlctl.errors import UsageError

from .common import JSON_OPT, emit_json, host_root

ENGINES = ("vllm", "sglang")


def doctor(
    json_out: bool = JSON_OPT,
    engine: Optional[str] = typer.Option(
        None, "--for", metavar="ENGINE", help="Also check inference readiness for ENGINE (vllm or sglang)."
    ),
) -> None:
    """Walk firmware, kernel, devices, tools, tuning and (with --for) the engine: each finding with evidence and fix.

    Exit status 0 when no check fails, 1 otherwise.
    """
    if engine is not None and engine not in ENGINES:
        raise UsageError(f"--for {engine!r}: unknown engine", hint="use --for vllm or --for sglang")
    from cxlctl.doctor.gather import gather
    from cxlctl.doctor.report import exit_code, failure, render, run, to_json
    from cxlctl.hostio.host import Host

    facts = gather(Host(host_root()), engine=engine)
    checks = run(facts)
    if json_out:
        emit_json(to_json(facts, checks))
    else:
        from cxlctl.term import console

        render(facts, checks, console())
    sys.stdout.flush()
    if exit_code(checks):
        raise failure(checks)
