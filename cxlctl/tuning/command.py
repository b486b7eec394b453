"""What the ``cxlctl tune`` commands decide once their options are parsed: inputs and exits.

The command line (cli/tune.py) parses, calls the engine (:mod:`.engine`,
:mod:`.transaction`, :mod:`.trial`) and renders; the rest lives here: the
profile listing, ``tune try``'s ``--timeout`` and stdin, and the error each
outcome exits with -- a failed apply (1, rolled back), drift (3), an incomplete
revert (1), and a try that was not confirmed (1, reverted).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from cxlctl.errors import EXIT_DRIFT, EXIT_FAILURE, CxlctlError, UsageError

if TYPE_CHECKING:
    from .results import ApplyResult, RevertResult, UndoResult, VerifyResult

#: how long ``tune try`` waits for a confirmation unless ``--timeout`` says otherwise
DEFAULT_TRY_TIMEOUT = 120.0

#: why a try was undone, per :mod:`.trial` outcome
WHY_NOT = {
    "timeout": "no confirmation within {t:g} s",
    "eof": "stdin was closed before a confirmation",
    "interrupted": "interrupted before a confirmation",
}


def profile_rows(root: str) -> List[Dict[str, Any]]:
    """``tune list``: every built-in and user profile with its summary, or the error loading it."""
    from .profile import ProfileError, list_names, load

    rows: List[Dict[str, Any]] = []
    for name, path, builtin in list_names(root):
        row: Dict[str, Any] = {"name": name, "source": path, "builtin": builtin, "summary": None, "error": None}
        try:
            row["summary"] = load(root, path).summary
        except ProfileError as e:
            row["error"] = str(e)
        rows.append(row)
    return rows


def apply_failed(res: ApplyResult) -> None:
    """Exit 1 for an apply that failed, saying whether the rollback completed."""
    if not res.ok:
        raise CxlctlError(
            f"apply of {res.prepared.plan.profile} failed: {res.error}"
            + (
                "; ROLLBACK INCOMPLETE: " + "; ".join(res.rollback_errors)
                if res.rollback_errors
                else "; every change was rolled back"
            ),
            code=EXIT_FAILURE,
            hint="see `cxlctl tune status`" + ("; then `cxlctl tune revert`" if res.rollback_errors else ""),
        )


def drifted(res: VerifyResult) -> None:
    """Exit 3 naming the settings that drifted from the applied profile."""
    if res.drift:
        names = ", ".join(ch.setting for ch in res.checks if ch.status == "drift")
        raise CxlctlError(
            f"{res.drift} setting(s) drifted from {res.profile}: {names}",
            code=EXIT_DRIFT,
            hint=f"re-apply with `cxlctl tune apply {res.profile}`, or find what changed them (TuneD, sysctl.d, an admin)",
        )


def revert_incomplete(res: RevertResult) -> None:
    """Exit 1 when some knob could not be restored (the journal keeps the originals)."""
    if not res.ok:
        raise CxlctlError(
            "revert incomplete: " + "; ".join(res.errors),
            code=EXIT_FAILURE,
            hint="the journal keeps the originals; fix the cause and run `cxlctl tune revert` again",
        )


def try_timeout(text: str) -> float:
    """``tune try --timeout``: positive seconds (the shared ASCII-digit parser); 0 would be no try at all."""
    from cxlctl.parse import parse_seconds

    try:
        timeout = parse_seconds(text)
    except ValueError:
        timeout = 0.0
    if timeout <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {text!r}", hint="e.g. --timeout 120")
    return timeout


def stdin_fd() -> Optional[int]:
    """The fd ``tune try`` reads Enter from; None when stdin is not a real file (e.g. under a test runner)."""
    import io

    try:
        return sys.stdin.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return None


def try_ended(name: str, timeout: float, outcome: str, reverted: Optional[UndoResult]) -> None:
    """How a try that did not fail to apply exits: 0 when confirmed, else 1 saying what happened."""
    if outcome == "confirmed":
        return
    if outcome == "superseded":
        raise CxlctlError(
            f"the try of {name} was ended by another command (the tuning journal changed): nothing to revert here",
            code=EXIT_FAILURE,
            hint="see `cxlctl tune status`",
        )
    assert reverted is not None
    why = WHY_NOT[outcome].format(t=timeout)
    if not reverted.ok:
        raise CxlctlError(
            f"{why}: reverting {name} failed: " + "; ".join(reverted.errors),
            code=EXIT_FAILURE,
            hint="the journal keeps the values; run `cxlctl tune revert`",
        )
    raise CxlctlError(
        f"{why}: reverted {name} to the previous values"
        + (f" ({reverted.back_to} is in effect again)" if reverted.back_to else ""),
        code=EXIT_FAILURE,
    )
