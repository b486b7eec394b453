"""Run every check in layer order; the exit code, the JSON document and the human view."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List

from cxlctl.errors import EXIT_FAILURE, CxlctlError
from cxlctl.term import clean, hang

from . import devices, inference, kernel, measured, newer, services
from .model import CANNOT, FAIL, LAYERS, RESULTS, Check, Evidence, Facts, worst

if TYPE_CHECKING:
    from rich.console import Console


def run(f: Facts) -> List[Check]:
    """All checks of ``f``, grouped by layer (firmware-to-engine order)."""
    kern, fw = kernel.checks(f)
    new = list(newer.checks(f))
    kern += [c for c in new if c.layer == kernel.K]
    fw += [c for c in new if c.layer == kernel.F] + measured.checks(f)
    dev = devices.checks(f) + [c for c in new if c.layer not in (kernel.K, kernel.F)]
    return kern + fw + dev + services.check_tools(f) + services.checks(f) + inference.check(f)


def exit_code(checks: List[Check]) -> int:
    """0 when nothing fails, 1 otherwise."""
    return 1 if any(c.result == FAIL for c in checks) else 0


def failure(checks: List[Check]) -> CxlctlError:
    """The error ``cxlctl doctor`` exits with when a check failed (exit 1, after the report)."""
    failed = [c.id for c in checks if c.result == "fail"]
    return CxlctlError(
        f"{len(failed)} check(s) failed: {', '.join(failed)}",
        code=EXIT_FAILURE,
        hint="each failed check names its evidence and its fix (cxlctl doctor; docs/doctor.md)",
    )


def where(f: Facts, e: Evidence) -> str:
    """The evidence's source as the user can open it: a file under ``--root`` (the checks name
    files as the host sees them, ``/proc/cmdline``); a command (``cxl version``) as it is."""
    return f.host.path(e.source) if e.source.startswith("/") else e.source


def to_json(f: Facts, checks: List[Check]) -> Dict[str, Any]:
    counts = {r: sum(1 for c in checks if c.result == r) for r in RESULTS}
    return {
        "root": f.host.root,
        "kernel": f.inv.kernel,
        "for": f.engine,
        "engine_args": list(f.engine_args) if f.engine else None,
        "as_root": f.as_root,
        "result": worst(checks),
        "counts": counts,
        "checks": [
            {
                "layer": c.layer,
                "id": c.id,
                "result": c.result,
                "message": f.host.hint(c.message),
                "evidence": [{"source": where(f, e), "value": e.value} for e in c.evidence],
                "fix": f.host.hint(c.fix) or None,
            }
            for c in checks
        ],
    }


_STYLE = {"ok": "green", "note": "cyan", "warn": "yellow", "fail": "bold red", "cannot-check": "magenta"}
_LABEL = {"ok": "ok", "note": "note", "warn": "warn", "fail": "FAIL", "cannot-check": "n/a"}


def render(f: Facts, checks: List[Check], console: Console) -> None:
    """Grouped by layer: the result, then the message with its evidence and fix under it;
    wrapped lines keep a hanging indent at 80 columns."""
    from rich.text import Text

    if not f.host.live:  # once, not on every evidence line: the evidence names files as the host sees them
        hang(console, Text("root: ", style="bold"), Text(clean(f.host.root)), 6)
        console.print()
    for layer in LAYERS:
        group = [c for c in checks if c.layer == layer]
        if not group:
            continue
        console.print(Text(layer, style="bold underline"))
        for c in group:
            msg = clean(f.host.hint(c.message))
            if c.result == CANNOT and not msg.startswith("cannot check"):
                msg = "cannot check: " + msg
            label = Text.assemble("  ", (f"{_LABEL[c.result]:<4}", _STYLE[c.result]), " ")
            hang(console, label, Text(msg), 7)
            for e in c.evidence:
                hang(console, Text(" " * 9), Text(f"{clean(e.source)}: {clean(e.value)}", style="dim"), 9)
            if c.fix:
                fix = Text("fix: ", style="bold")
                fix.append(clean(f.host.hint(c.fix)))
                hang(console, Text(" " * 9), fix, 9)
        console.print()
    counts = {r: sum(1 for c in checks if c.result == r) for r in RESULTS}
    summary = ", ".join(f"{n} {r}" for r, n in counts.items() if n)
    bad = exit_code(checks)
    console.print(
        Text(f"{'problems found' if bad else 'nothing fails'}: {summary}", style="bold red" if bad else "bold green")
    )
