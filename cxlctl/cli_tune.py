"""``cxlctl tune …``: the tuning engine's command line.

Thin on purpose: every command calls one function of :mod:`cxlctl.tuning.engine`
(or the profile/recommend modules), then renders the result as a rich table or
as one JSON document (``--json``), and maps the outcome to an exit code
(0 ok, 1 failed and rolled back, 2 bad profile/arguments — nothing written,
3 drift, 4 locked).  Messages go to stderr so ``--json`` output stays parseable.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, Dict, List, Optional

import typer

from .cli_params import Command, argument, seconds
from .errors import EXIT_DRIFT, EXIT_FAILURE, CxlctlError

if TYPE_CHECKING:
    from rich.console import Console

    from .tuning.engine import ApplyResult, Check, FileResult, Prepared, RevertResult
    from .tuning.profile import Profile

DEFAULT_PROFILE = "inference-bandwidth"
SCHEMA_VERSION = 1

tune_app = typer.Typer(
    name="tune",
    help="Plan, apply, verify and revert tuning profiles (sysctls, demotion, weighted interleave).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

JSON_OPT = typer.Option(False, "--json", help="One JSON document on stdout.")
WAIT_OPT = typer.Option(
    None, "--wait", metavar="SECONDS", parser=seconds, help="How long to wait for the lock (default 5)."
)


def _root() -> str:
    from .cli import STATE

    return STATE.root


def _console() -> Console:
    from rich.console import Console

    return Console(highlight=False)


def _emit(doc: Dict[str, Any]) -> None:
    doc = {"schema_version": SCHEMA_VERSION, **doc}
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")


def _note(msgs: Any) -> None:
    for m in msgs:
        sys.stderr.write(f"cxlctl: {m}\n")


def _v(x: Optional[str]) -> str:
    """A value read from the host, safe in rich markup (a sysfs file may hold ``[/]``)."""
    from rich.markup import escape

    return "-" if x is None else escape(x)


# ---------------------------------------------------------------------------- list / show


@tune_app.command("list")
def list_cmd(json_out: bool = JSON_OPT) -> None:
    """List built-in and user profiles (/etc/cxlctl/profiles)."""
    from .tuning.profile import ProfileError, list_names, load

    rows: List[Dict[str, Any]] = []
    for name, path, builtin in list_names(_root()):
        row: Dict[str, Any] = {"name": name, "source": path, "builtin": builtin, "summary": None, "error": None}
        try:
            row["summary"] = load(_root(), path).summary
        except ProfileError as e:
            row["error"] = str(e)
        rows.append(row)
    if json_out:
        _emit({"profiles": rows})
        return
    from rich.table import Table

    t = Table(title="Tuning profiles", title_justify="left")
    for col in ("profile", "from", "summary"):
        t.add_column(col)
    for r in rows:
        summary = r["summary"] if r["error"] is None else f"[red]invalid: {r['error']}[/red]"
        t.add_row(r["name"], "built-in" if r["builtin"] else r["source"], summary or "")
    _console().print(t)


def _profile_ref(path: str) -> str:
    """A profile file as users name it: the bare name for built-ins, else the path."""
    import os

    from .tuning.profile import BUILTIN_DIR

    if os.path.dirname(path) == BUILTIN_DIR and path.endswith(".toml"):
        return os.path.basename(path)[:-5]
    return path


def _profile_json(p: Profile) -> Dict[str, Any]:
    from .tuning.knobs import BY_NAME

    return {
        "name": p.name,
        "source": p.source,
        "builtin": p.builtin,
        "summary": p.summary,
        "description": p.description.strip(),
        "placement": p.placement,
        "includes": [_profile_ref(c) for c in p.chain[:-1]],
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


@tune_app.command("show", cls=Command)
def show_cmd(
    profile: str = argument(..., "PROFILE", "Profile name or path to a .toml file."), json_out: bool = JSON_OPT
) -> None:
    """Show a profile with its includes resolved: every setting, its value and reason."""
    from .tuning.profile import load

    p = load(_root(), profile)
    doc = _profile_json(p)
    if json_out:
        _emit({"profile": doc})
        return
    from rich.table import Table

    c = _console()
    c.print(f"[bold]{p.name}[/bold]  ({'built-in' if p.builtin else p.source})")
    if p.summary:
        c.print(p.summary)
    if p.description.strip():
        c.print(f"[dim]{p.description.strip()}[/dim]")
    if doc["includes"]:
        c.print("includes: " + " → ".join(doc["includes"]))
    if p.placement:
        c.print(f"placement (for the launcher): {p.placement}")
    t = Table(title_justify="left")
    for col in ("knob", "value", "reason"):
        t.add_column(col)
    for s in doc["settings"]:
        t.add_row(s["knob"], s["value"], s["reason"])
    c.print(t)


# ---------------------------------------------------------------------------- recommend


@tune_app.command("recommend")
def recommend_cmd(json_out: bool = JSON_OPT) -> None:
    """Recommend a built-in profile for this host, with the reasons."""
    from .inventory import scan
    from .tuning.knobs import read_current
    from .tuning.recommend import recommend

    rec = recommend(scan(_root()), read_current(_root()))
    if json_out:
        _emit(
            {
                "recommended": rec.profile,
                "reasons": list(rec.reasons),
                "alternatives": [{"profile": p, "when": w} for p, w in rec.alternatives],
            }
        )
        return
    c = _console()
    if rec.profile:
        c.print(f"recommended: [bold]{rec.profile}[/bold]")
    else:
        c.print("recommended: [bold]none[/bold]")
    for r in rec.reasons:
        c.print(f"  • {r}")
    for p, w in rec.alternatives:
        c.print(f"  alternative: [bold]{p}[/bold] — {w}")
    if rec.profile:
        c.print(f"next: cxlctl tune plan {rec.profile}")


# ---------------------------------------------------------------------------- plan


def _default_profile() -> str:
    from .tuning import journal as jn

    try:
        j = jn.load(_root())
    except CxlctlError:
        j = None
    if j is not None and j.state == jn.APPLIED and jn.same_boot(j, jn.boot_id(_root())):
        from .tuning.profile import candidates

        found = candidates(_root(), j.profile)
        if found and found[0][0] == j.profile_source:
            return j.profile  # still what the name resolves to
        return j.profile_source or j.profile
    return DEFAULT_PROFILE


def _plan_json(prep: Prepared) -> Dict[str, Any]:
    from .tuning.knobs import BY_NAME

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
        "messages": list(prep.messages),
    }


_ACTION_STYLE = {"set": "bold", "noop": "dim", "restore": "cyan", "unsupported": "yellow", "skip": "yellow"}


def _render_plan(prep: Prepared, c: Console, title: str) -> None:
    from rich.table import Table

    from .tuning.knobs import BY_NAME

    p = prep.plan
    head = f"[bold]{title}[/bold] {p.profile}"
    if prep.active and prep.active.profile != p.profile:
        head += f"  (switching from {prep.active.profile})"
    c.print(head)
    t = Table(title_justify="left")
    for col in ("knob", "current", "desired", "action", "reversible", "reason"):
        t.add_column(col)
    for s in p.steps:
        action = {"noop": "no change", "set": "change"}.get(s.action, s.action)
        style = _ACTION_STYLE.get(s.action, "")
        reason = s.reason + (f" [dim]({s.note})[/dim]" if s.note else "")
        t.add_row(
            s.setting,
            _v(s.current),
            _v(s.desired),
            f"[{style}]{action}[/{style}]" if style else action,
            ("yes" if s.reversible else "[red]no[/red]")
            + (f" [dim]({BY_NAME[s.knob].reversible_note})[/dim]" if BY_NAME[s.knob].reversible_note else ""),
            reason,
        )
    c.print(t)
    n = len(p.writes)
    c.print(f"{n} change(s)" + ("" if n else " — the host already matches this profile"))
    for w in p.warnings:
        c.print(f"[yellow]warning:[/yellow] {_v(w)}")
    if prep.conflicts:
        ct = Table(title="Other configuration setting the same keys", title_justify="left")
        for col in ("key", "cxlctl", "theirs", "source", "wins at boot", "why"):
            ct.add_column(col)
        for k in prep.conflicts:
            ct.add_row(_v(k.key), _v(k.ours), _v(k.theirs), _v(k.source), k.wins_at_boot, _v(k.note))
        c.print(ct)


@tune_app.command("plan")
def plan_cmd(
    profile: Optional[str] = argument(
        None, "PROFILE", "Profile name or .toml path (default: the active one, else inference-bandwidth)."
    ),
    persist: bool = typer.Option(False, "--persist", help="Report conflicts as if applied with --persist."),
    json_out: bool = JSON_OPT,
) -> None:
    """Show what applying a profile would change: knob, current, desired, reason, reversible."""
    from .tuning.engine import prepare

    prep = prepare(_root(), profile or _default_profile(), persist=persist or None)
    if json_out:
        _emit({"plan": _plan_json(prep)})
        return
    _note(prep.messages)
    _render_plan(prep, _console(), "plan")


# ---------------------------------------------------------------------------- apply


def _file_json(r: FileResult) -> Dict[str, Any]:
    return dict(r._asdict())


def _check_json(ch: Check) -> Dict[str, Any]:
    return dict(ch._asdict())


def _render_results(title: str, results: List[FileResult], c: Console) -> None:
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for col in ("knob", "file", "before", "target", "result"):
        t.add_column(col)
    style = {
        "written": "green",
        "restored": "cyan",
        "reverted": "cyan",
        "failed": "red",
        "restore-failed": "bold red",
        "gone": "yellow",
    }
    for r in results:
        st = style.get(r.status, "dim")
        res = f"[{st}]{r.status}[/{st}]" + (f" [dim]{r.error}[/dim]" if r.error else "")
        t.add_row(r.setting, r.path, _v(r.before), _v(r.after), res)
    c.print(t)


@tune_app.command("apply")
def apply_cmd(
    profile: Optional[str] = argument(
        None, "PROFILE", "Profile name or .toml path (default: the active one, else inference-bandwidth)."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the plan; write nothing."),
    persist: bool = typer.Option(
        False, "--persist", help="Also write /etc/sysctl.d/90-cxlctl.conf and /var/lib/cxlctl/active-profile."
    ),
    wait: Optional[float] = WAIT_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Apply a profile: journal the originals, write each knob, roll back on failure, verify."""
    from .tuning.engine import apply

    res = apply(_root(), profile or _default_profile(), dry_run=dry_run, persist=persist, wait=wait)
    if json_out:
        _emit(_apply_json(res))
    else:
        _note(res.messages)
        _render_apply(res)
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


def _apply_json(res: ApplyResult) -> Dict[str, Any]:
    return {
        "ok": res.ok,
        "dry_run": res.dry_run,
        "plan": _plan_json(res.prepared),
        "results": [_file_json(r) for r in res.results],
        "verify": [_check_json(ch) for ch in res.checks],
        "journal_state": res.journal.state if res.journal else None,
        "error": res.error,
        "rollback_errors": list(res.rollback_errors),
        "persisted": list(res.persisted),
        "messages": list(res.messages),
    }


def _render_apply(res: ApplyResult) -> None:
    c = _console()
    if res.dry_run:
        _render_plan(res.prepared, c, "dry run:")
        c.print("[dim]nothing was written[/dim]")
        return
    _render_plan(res.prepared, c, "apply")
    if res.results:
        _render_results("Result", list(res.results), c)
    if res.ok:
        passed = sum(1 for ch in res.checks if ch.status == "pass")
        c.print(f"[green]applied {res.prepared.plan.profile}[/green]: verify {passed} pass, 0 drift")
        for path in res.persisted:
            c.print(f"persisted: {path}")
        c.print("undo with: cxlctl tune revert")


# ---------------------------------------------------------------------------- verify / revert / status


@tune_app.command("verify")
def verify_cmd(
    profile: Optional[str] = argument(None, "PROFILE", "Compare with this profile instead of the applied one."),
    json_out: bool = JSON_OPT,
) -> None:
    """Check every applied setting: pass / drift / unsupported (exit 3 on drift)."""
    from .tuning.engine import verify

    res = verify(_root(), profile)
    if json_out:
        _emit(
            {
                "profile": res.profile,
                "basis": res.basis,
                "checks": [_check_json(ch) for ch in res.checks],
                "summary": {s: sum(1 for ch in res.checks if ch.status == s) for s in ("pass", "drift", "unsupported")},
                "messages": list(res.messages),
            }
        )
    else:
        from rich.table import Table

        _note(res.messages)
        c = _console()
        c.print(
            f"[bold]verify[/bold] {res.profile} (against the {'applied journal' if res.basis == 'journal' else 'profile'})"
        )
        t = Table(title_justify="left")
        for col in ("knob", "expected", "actual", "result"):
            t.add_column(col)
        style = {"pass": "green", "drift": "bold red", "unsupported": "yellow"}
        for ch in res.checks:
            st = style[ch.status]
            t.add_row(
                ch.setting,
                _v(ch.expected),
                _v(ch.actual),
                f"[{st}]{ch.status}[/{st}]" + (f" [dim]{ch.note}[/dim]" if ch.note else ""),
            )
        c.print(t)
    if res.drift:
        drifted = ", ".join(ch.setting for ch in res.checks if ch.status == "drift")
        raise CxlctlError(
            f"{res.drift} setting(s) drifted from {res.profile}: {drifted}",
            code=EXIT_DRIFT,
            hint=f"re-apply with `cxlctl tune apply {res.profile}`, or find what changed them (TuneD, sysctl.d, an admin)",
        )


@tune_app.command("revert")
def revert_cmd(wait: Optional[float] = WAIT_OPT, json_out: bool = JSON_OPT) -> None:
    """Restore every knob to its value before cxlctl (also after a crashed apply); remove persisted files."""
    from .tuning.engine import revert

    res = revert(_root(), wait=wait)
    if json_out:
        _emit(_revert_json(res))
    else:
        _note(res.messages)
        c = _console()
        if res.results:
            _render_results(f"revert {res.profile}", list(res.results), c)
        for path in res.removed:
            c.print(f"removed: {path}")
        if res.ok and res.results:
            n = sum(1 for r in res.results if r.status == "reverted")
            c.print(f"[green]reverted {res.profile}[/green]: {n} file(s) restored")
    if not res.ok:
        raise CxlctlError(
            "revert incomplete: " + "; ".join(res.errors),
            code=EXIT_FAILURE,
            hint="the journal keeps the originals; fix the cause and run `cxlctl tune revert` again",
        )


def _revert_json(res: RevertResult) -> Dict[str, Any]:
    return {
        "ok": res.ok,
        "profile": res.profile,
        "state_before": res.state_before,
        "results": [_file_json(r) for r in res.results],
        "removed": list(res.removed),
        "errors": list(res.errors),
        "messages": list(res.messages),
    }


@tune_app.command("status")
def status_cmd(json_out: bool = JSON_OPT) -> None:
    """Active profile, when it was applied, journal state, drift summary, lock, persistence."""
    from .tuning.engine import status

    st = status(_root())
    if json_out:
        _emit({k: v for k, v in st.items() if k != "schema_version"})
        return
    _note(st["messages"])
    c = _console()
    c.print(f"active profile: [bold]{st['active_profile'] or 'none'}[/bold]")
    j = st["journal"]
    if j is None:
        c.print("journal: none (nothing applied on this boot)")
    else:
        c.print(
            f"journal: {j['state']} — {j['profile']}, started {j['started']}"
            + (f", finished {j['finished']}" if j["finished"] else "")
            + ("" if j["this_boot"] else " [yellow](earlier boot)[/yellow]")
        )
        if j["previous_profile"]:
            c.print(f"  switched from: {j['previous_profile']}")
        if j["error"]:
            c.print(f"  [red]error:[/red] {j['error']}")
        if j["state"] == "applying":
            c.print("  [yellow]an apply was interrupted: run `cxlctl tune revert`[/yellow]")
    v = st["verify"]
    if v is not None:
        drift = v["drift"]
        c.print(
            f"verify: {v['pass']} pass, {len(drift)} drift"
            + (f" ([red]{', '.join(drift)}[/red])" if drift else "")
            + (f", {len(v['unsupported'])} unsupported" if v["unsupported"] else "")
        )
    pers = st["persisted"]
    c.print("persisted: " + (f"{pers['profile'] or '?'} ({pers['sysctl_file'] or 'no sysctl file'})" if pers else "no"))
    lk = st["lock"]
    if lk["held"]:
        c.print(f"lock: held by pid {lk['holder_pid'] or '?'}")
