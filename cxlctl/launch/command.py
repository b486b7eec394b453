"""What ``cxlctl launch …`` and ``cxlctl policy show`` do once their options are parsed.

:func:`launch` plans a :class:`~cxlctl.launch.build.Request`, prints the plan
(on stdout with ``--dry-run``; else on stderr, so the engine's stdout stays the
engine's), refuses when a pre-flight check failed (exit 1, nothing launched) and
otherwise replaces cxlctl with the engine.  :func:`drift` is ``policy show``'s
verdict: a process placed otherwise than asked is exit 3.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Dict

from cxlctl.errors import EXIT_DRIFT, CxlctlError
from cxlctl.hostio.host import Host

from .build import Request


def launch(host: Host, req: Request, json_out: bool) -> None:
    """Plan ``req``, show the plan, and (unless a dry run) execute it; never returns after an exec."""
    from .build import build, execute, to_json

    lp = build(host, req)
    out = sys.stdout if req.dry_run else sys.stderr
    if json_out:
        out.write(json.dumps(to_json(lp, req.dry_run), indent=2 if req.dry_run else None) + "\n")
    else:
        from .render import plan_text

        plan_text(lp, out, req.dry_run)
    if lp.failed:
        raise CxlctlError(
            f"pre-flight failed ({len(lp.failed)} problem(s)); nothing was launched",
            hint="each problem above names its fix",
        )
    if not req.dry_run:
        execute(host, lp)


def drift(rep: Dict[str, Any], pid: int) -> None:
    """``policy show``'s exit: :class:`CxlctlError` (exit 3) naming the failed checks when the
    process' placement differs from what ``cxlctl launch`` asked."""
    if rep["match"] is False:
        bad = ", ".join(c["check"] for c in rep["checks"] if c["status"] == "fail")
        raise CxlctlError(
            f"process {pid} differs from what was asked ({bad})",
            code=EXIT_DRIFT,
            hint="a child may have set its own policy (vLLM --numa-bind, vLLM's CPU worker binding to its CPU's node, "
            "SGLang NUMA binding), or the weights/cpuset changed",
        )
