"""The tune subsystem's JSON documents, shaped in one place.

Each function turns one engine result into the dict ``cxlctl tune … --json``
prints (the CLI adds ``schema_version``).  Field names are an interface
(docs/tuning.md lists them): change them only with a schema bump.
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Optional

from .knobs import BY_NAME
from .profile import BUILTIN_DIR, Profile
from .recommend import Recommendation
from .results import (
    ApplyResult,
    Check,
    FileResult,
    Prepared,
    RevertResult,
    StatusResult,
    UndoResult,
    VerifyResult,
)
from .trial import Confirmed


def profile_ref(path: str) -> str:
    """A profile file as users name it: the bare name for built-ins, else the path."""
    if os.path.dirname(path) == BUILTIN_DIR and path.endswith(".toml"):
        return os.path.basename(path)[:-5]
    return path


def profile(p: Profile) -> Dict[str, Any]:
    return {
        "name": p.name,
        "source": p.source,
        "builtin": p.builtin,
        "summary": p.summary,
        "description": p.description.strip(),
        "placement": p.placement,
        "includes": [profile_ref(c) for c in p.chain[:-1]],
        "settings": [
            {
                "knob": s.knob,
                "value": BY_NAME[s.knob].show(s.value),
                "reason": s.reason,
                "from": s.origin,
                "reversible": BY_NAME[s.knob].reversible,
            }
            for s in p.settings
        ],
    }


def recommendation(rec: Recommendation) -> Dict[str, Any]:
    return {
        "recommended": rec.profile,
        "reasons": list(rec.reasons),
        "alternatives": [{"profile": p, "when": w} for p, w in rec.alternatives],
    }


def plan(prep: Prepared) -> Dict[str, Any]:
    p = prep.plan
    return {
        "profile": p.profile,
        "source": p.source,
        "placement": p.placement,
        "switching_from": prep.active.profile if prep.active else None,
        "steps": [
            {
                "setting": s.setting,
                "knob": s.knob,
                "path": s.path,
                "current": s.current,
                "desired": s.desired,
                "action": s.action,
                "write": s.write,
                "reason": s.reason,
                "reversible": s.reversible,
                "reversible_note": BY_NAME[s.knob].reversible_note or None,
                "note": s.note,
                "from": s.origin,
            }
            for s in p.steps
        ],
        "changes": len(p.writes),
        "warnings": list(p.warnings),
        "conflicts": [c._asdict() for c in prep.conflicts],
        "refusals": list(p.refusals),
        "messages": list(prep.messages),
    }


def file_result(r: FileResult) -> Dict[str, Any]:
    return dict(r._asdict())


def check(ch: Check) -> Dict[str, Any]:
    return dict(ch._asdict())


def apply(res: ApplyResult) -> Dict[str, Any]:
    return {
        "ok": res.ok,
        "dry_run": res.dry_run,
        "plan": plan(res.prepared),
        "results": [file_result(r) for r in res.results],
        "verify": [check(ch) for ch in res.checks],
        "journal_state": res.journal.state if res.journal else None,
        "error": res.error,
        "rollback_errors": list(res.rollback_errors),
        "persisted": list(res.persisted),
        "messages": list(res.messages),
    }


def verify(res: VerifyResult) -> Dict[str, Any]:
    return {
        "profile": res.profile,
        "basis": res.basis,
        "checks": [check(ch) for ch in res.checks],
        "summary": {s: sum(1 for ch in res.checks if ch.status == s) for s in ("pass", "drift", "unsupported")},
        "messages": list(res.messages),
    }


def revert(res: RevertResult) -> Dict[str, Any]:
    return {
        "ok": res.ok,
        "profile": res.profile,
        "state_before": res.state_before,
        "results": [file_result(r) for r in res.results],
        "removed": list(res.removed),
        "errors": list(res.errors),
        "messages": list(res.messages),
    }


def when(epoch: float) -> str:
    """A wall-clock time as the journal writes times (local time with offset)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(epoch))


def status(st: StatusResult) -> Dict[str, Any]:
    j = st.journal
    v = st.verify
    pers = st.persisted
    t = st.trial
    return {
        "active_profile": st.active_profile,
        "journal": None
        if j is None
        else {
            "path": j.path,
            "state": j.state,
            "this_boot": j.this_boot,
            "profile": j.profile,
            "profile_source": j.profile_source,
            "previous_profile": j.previous_profile,
            "started": j.started,
            "finished": j.finished,
            "pid": j.pid,
            "error": j.error,
            "entries": dict(j.entries),
        },
        "try": None
        if t is None
        else {
            "profile": t.profile,
            "deadline": when(t.deadline),
            "seconds_left": t.seconds_left,
            "pid": t.pid,
            "waiting": t.waiting,
        },
        "verify": None if v is None else {"pass": v.passed, "drift": list(v.drift), "unsupported": list(v.unsupported)},
        "persisted": None
        if pers is None
        else {"sysctl_file": pers.sysctl_file, "tmpfiles_file": pers.tmpfiles_file, "profile": pers.profile},
        "lock": {"held": st.lock_held, "holder_pid": st.lock_holder},
        "damon": [r._asdict() for r in st.damon],
        "messages": list(st.messages),
    }


def undo(res: Optional[UndoResult]) -> Optional[Dict[str, Any]]:
    if res is None:
        return None
    return {
        "ok": res.ok,
        "profile": res.profile,
        "back_to": res.back_to,
        "results": [file_result(r) for r in res.results],
        "errors": list(res.errors),
        "messages": list(res.messages),
    }


def trial(
    applied: ApplyResult, timeout: float, deadline: Optional[float], outcome: str, reverted: Optional[UndoResult]
) -> Dict[str, Any]:
    """`tune try --json`: the apply, how the wait ended, and the revert when there was one."""
    return {
        "ok": applied.ok and outcome == "confirmed",
        "apply": apply(applied),
        "timeout": timeout,
        "deadline": None if deadline is None else when(deadline),
        "outcome": outcome,
        "reverted": undo(reverted),
    }


def confirmed(c: Confirmed) -> Dict[str, Any]:
    return {"ok": True, "profile": c.profile, "confirmed": c.confirmed, "waiting_pid": c.pid}


def expired(res: Optional[UndoResult]) -> List[str]:
    """Messages about an expired try reverted before a command (what every tune command says first)."""
    return [] if res is None else list(res.messages) + [f"revert error: {e}" for e in res.errors]
