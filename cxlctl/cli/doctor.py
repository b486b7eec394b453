"""``cxlctl doctor``: why CXL memory is missing, slow or misplaced (:func:`cxlctl.commands.doctor`)."""

from __future__ import annotations

from typing import List, Optional

import typer

from cxlctl.errors import UsageError

from .common import JSON_OPT, host
from .params import argument

ENGINES = ("vllm", "sglang")


def doctor(
    args: Optional[List[str]] = argument(
        None, "[-- ENGINE ARGS...]", "With --for: the engine's arguments to plan with (its NUMA flags are weighed)."
    ),
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
    if args and engine is None:
        raise UsageError("engine arguments need --for", hint="cxlctl doctor --for sglang -- --model-path M ...")
    from cxlctl.commands import doctor as run

    run(host(), json_out, engine, tuple(args or ()))
