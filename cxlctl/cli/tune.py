"""``cxlctl tune …``: the tuning engine's command line.

Thin on purpose: every command calls one function of :mod:`cxlctl.tuning.engine`
(or the transaction, trial, profile and recommend modules), then renders the result
as a rich table or as one JSON document (``--json``, shaped by
:mod:`cxlctl.tuning.tune_json`), and maps the outcome to an exit code (0 ok, 1
failed and rolled back, 2 bad profile/arguments — nothing written, 3 drift, 4
locked).  Messages go to stderr so ``--json`` output stays parseable.

Before any ``tune`` command runs, an expired unconfirmed ``tune try`` is reverted
(:func:`cxlctl.tuning.trial.expire`), and the command says so.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, Union

import typer

from cxlctl.errors import EXIT_DRIFT, EXIT_FAILURE, CxlctlError

from .common import JSON_OPT, WAIT_OPT, group, host_root, progress_bar
from .common import emit_json as _emit
from .common import note as _note
from .params import Command, argument

if TYPE_CHECKING:
    from rich.console import Console

    from cxlctl.tuning.engine import ApplyResult, FileResult, Prepared
    from cxlctl.tuning.journal import Journal
    from cxlctl.tuning.profile import Profile
    from cxlctl.tuning.results import UndoResult

DEFAULT_PROFILE = "inference-bandwidth"

tune_app = group("tune", "Plan, apply, verify and revert tuning profiles (sysctls, demotion, weighted interleave).")


def _console() -> Console:
    from rich.console import Console

    return Console(highlight=False)


def _v(x: Optional[str]) -> str:
    """A value read from the host, safe in rich markup (a sysfs file may hold ``[/]``)."""
    from rich.markup import escape

    return "-" if x is None else escape(x)


@tune_app.callback()
def _before_any_command() -> None:
    # a `tune try` whose waiting process was killed: revert it once expired, before anything else
    from cxlctl.tuning import tune_json as view
    from cxlctl.tuning.trial import expire

    try:
        _note(view.expired(expire(host_root())))
    except CxlctlError as e:
        _note([f"warning: {e}" + (f" ({e.hint})" if e.hint else "")])


# ---------------------------------------------------------------------------- list / show


@tune_app.command("list")
def list_cmd(json_out: bool = JSON_OPT) -> None:
    """List built-in and user profiles (/etc/cxlctl/profiles)."""
    from cxlctl.tuning.profile import ProfileError, list_names, load

    rows: List[Dict[str, Any]] = []
    for name, path, builtin in list_names(host_root()):
        row: Dict[str, Any] = {"name": name, "source": path, "builtin": builtin, "summary": None, "error": None}
        try:
            row["summary"] = load(host_root(), path).summary
        except ProfileError as e:
            row["error"] = str(e)
        rows.append(row)
    if json_out:
        _emit({"profiles": rows})
        return
    from rich.table import Table

    t = Table(title="Tuning profiles", title_justify="left")
    for col in ("profile", "from", "summary"):
        t.add_column(col, overflow="fold")
    for r in rows:
        summary = r["summary"] if r["error"] is None else f"[red]invalid: {r['error']}[/red]"
        t.add_row(r["name"], "built-in" if r["builtin"] else r["source"], summary or "")
    _console().print(t)


@tune_app.command("show", cls=Command)
def show_cmd(
    profile: str = argument(..., "PROFILE", "Profile name or path to a .toml file."), json_out: bool = JSON_OPT
) -> None:
    """Show a profile with its includes resolved: every setting, its value and reason."""
    from cxlctl.tuning import tune_json as view
    from cxlctl.tuning.profile import load

    p = load(host_root(), profile)
    doc = view.profile(p)
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
        t.add_column(col, overflow="fold")
    for s in doc["settings"]:
        t.add_row(s["knob"], s["value"], s["reason"])
    c.print(t)


# ---------------------------------------------------------------------------- recommend


@tune_app.command("recommend")
def recommend_cmd(json_out: bool = JSON_OPT) -> None:
    """Recommend a built-in profile for this host, with the reasons."""
    from cxlctl.inventory import scan
    from cxlctl.tuning.knobs import read_current
    from cxlctl.tuning.recommend import recommend

    rec = recommend(scan(host_root()), read_current(host_root()))
    if json_out:
        from cxlctl.tuning import tune_json as view

        _emit(view.recommendation(rec))
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


def _default_profile() -> Union[str, Profile]:
    """The profile in effect this boot (rebuilt from the journal when it has no file), else the default."""
    from cxlctl.tuning.state import applied_journal

    j = applied_journal(host_root())
    if j is not None:
        from cxlctl.tuning.profile import candidates, from_data

        if j.profile_data is not None:
            return from_data(host_root(), j.profile, j.profile_data, j.profile_source)

        found = candidates(host_root(), j.profile)
        if found and found[0][0] == j.profile_source:
            return j.profile  # still what the name resolves to
        return j.profile_source or j.profile
    return DEFAULT_PROFILE


BESIDE_OPT = typer.Option(
    False,
    "--beside-other-damon",
    help="Run the profile's DAMON kdamonds beside DAMON modules' (DAMON_RECLAIM/LRU_SORT/STAT) instead of refusing.",
)


def _beside(ref: Union[str, Profile], beside: bool) -> Union[str, Profile]:
    """The profile with its ``[damon]`` asked to work beside other DAMON users (``--beside-other-damon``)."""
    if not beside:
        return ref
    from cxlctl.tuning.profile import load, with_beside_other_damon

    return with_beside_other_damon(load(host_root(), ref) if isinstance(ref, str) else ref)


_ACTION_STYLE = {"set": "bold", "noop": "dim", "restore": "cyan", "unsupported": "yellow", "skip": "yellow"}


def _render_plan(prep: Prepared, c: Console, title: str) -> None:
    from rich.table import Table

    from cxlctl.tuning.knobs import BY_NAME

    p = prep.plan
    head = f"[bold]{title}[/bold] {p.profile}"
    if prep.active and prep.active.profile != p.profile:
        head += f"  (switching from {prep.active.profile})"
    c.print(head)
    t = Table(title_justify="left")
    for col in ("knob", "current", "desired", "action", "reversible", "reason"):
        t.add_column(col, overflow="fold")
    last = ("", "")
    for s in p.steps:
        action = {"noop": "no change", "set": "change"}.get(s.action, s.action)
        style = _ACTION_STYLE.get(s.action, "")
        reason = s.reason + (f" [dim]({s.note})[/dim]" if s.note else "")
        note = BY_NAME[s.knob].reversible_note
        # a group's many files (DAMON's) share one reason: say it (and the note) once, then 〃
        if (s.knob, reason) == last and s.knob == "damon":
            reason, note = "〃", ""
        else:
            last = (s.knob, reason)
        t.add_row(
            s.setting,
            _v(s.current),
            _v(s.desired),
            f"[{style}]{action}[/{style}]" if style else action,
            ("yes" if s.reversible else "[red]no[/red]") + (f" [dim]({note})[/dim]" if note else ""),
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
            ct.add_column(col, overflow="fold")
        for k in prep.conflicts:
            ct.add_row(_v(k.key), _v(k.ours), _v(k.theirs), _v(k.source), k.wins_at_boot, _v(k.note))
        c.print(ct)


@tune_app.command("plan")
def plan_cmd(
    profile: Optional[str] = argument(
        None, "PROFILE", "Profile name or .toml path (default: the active one, else inference-bandwidth)."
    ),
    persist: bool = typer.Option(False, "--persist", help="Report conflicts as if applied with --persist."),
    beside: bool = BESIDE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Show what applying a profile would change: knob, current, desired, reason, reversible."""
    from cxlctl.tuning import tune_json as view
    from cxlctl.tuning.transaction import Transaction

    prep = Transaction(host_root(), _beside(profile or _default_profile(), beside), persist=persist or None).prepared
    if json_out:
        _emit({"plan": view.plan(prep)})
        return
    _note(prep.messages)
    _render_plan(prep, _console(), "plan")


# ---------------------------------------------------------------------------- apply


def _render_results(title: str, results: List[FileResult], c: Console) -> None:
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for col in ("knob", "file", "before", "target", "result"):
        t.add_column(col, overflow="fold")
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
    beside: bool = BESIDE_OPT,
    wait: Optional[float] = WAIT_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Apply a profile: journal the originals, write each knob, roll back on failure, verify."""
    from cxlctl.tuning import tune_json as view
    from cxlctl.tuning.transaction import Transaction

    txn = Transaction(host_root(), _beside(profile or _default_profile(), beside), persist=persist or None)
    with progress_bar(json_out) as progress:
        res = txn.commit(dry_run=dry_run, persist=persist, wait=wait, on_progress=progress)
    if json_out:
        _emit(view.apply(res))
    else:
        _note(res.messages)
        _render_apply(res)
    _raise_failed(res)


def _raise_failed(res: ApplyResult) -> None:
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
    from cxlctl.tuning import tune_json as view
    from cxlctl.tuning.engine import verify

    res = verify(host_root(), profile)
    if json_out:
        _emit(view.verify(res))
    else:
        from rich.table import Table

        _note(res.messages)
        c = _console()
        c.print(
            f"[bold]verify[/bold] {res.profile} (against the {'applied journal' if res.basis == 'journal' else 'profile'})"
        )
        t = Table(title_justify="left")
        for col in ("knob", "expected", "actual", "result"):
            t.add_column(col, overflow="fold")
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
    from cxlctl.tuning import tune_json as view
    from cxlctl.tuning.engine import revert

    res = revert(host_root(), wait=wait)
    if json_out:
        _emit(view.revert(res))
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


@tune_app.command("status")
def status_cmd(json_out: bool = JSON_OPT) -> None:
    """Active profile, when it was applied, journal state, a pending try, drift summary, lock, persistence."""
    from cxlctl.tuning import tune_json as view
    from cxlctl.tuning.engine import status

    st = status(host_root())
    if json_out:
        _emit(view.status(st))
        return
    _note(st.messages)
    c = _console()
    c.print(f"active profile: [bold]{st.active_profile or 'none'}[/bold]")
    j = st.journal
    if j is None:
        c.print("journal: none (nothing applied on this boot)")
    else:
        c.print(
            f"journal: {j.state} — {j.profile}, started {j.started}"
            + (f", finished {j.finished}" if j.finished else "")
            + ("" if j.this_boot else " [yellow](earlier boot)[/yellow]")
        )
        if j.previous_profile:
            c.print(f"  switched from: {j.previous_profile}")
        if j.error:
            c.print(f"  [red]error:[/red] {j.error}")
        if j.state == "applying":
            c.print("  [yellow]an apply was interrupted: run `cxlctl tune revert`[/yellow]")
    t = st.trial
    if t is not None:
        c.print(
            f"[yellow]try pending:[/yellow] {t.profile} is reverted at {view.when(t.deadline)} "
            f"({t.seconds_left:g} s left) unless confirmed (`cxlctl tune confirm`); waiting pid {t.pid}"
            + ("" if t.waiting else " is gone: the next `cxlctl tune` command after the deadline reverts it")
        )
    v = st.verify
    if v is not None:
        drift = v.drift
        c.print(
            f"verify: {v.passed} pass, {len(drift)} drift"
            + (f" ([red]{', '.join(drift)}[/red])" if drift else "")
            + (f", {len(v.unsupported)} unsupported" if v.unsupported else "")
        )
    pers = st.persisted
    c.print("persisted: " + (f"{pers.profile or '?'} ({pers.sysctl_file or 'no sysctl file'})" if pers else "no"))
    if st.lock_held:
        c.print(f"lock: held by pid {st.lock_holder or '?'}")
    if st.damon:
        _render_damon(st, c)


def _render_damon(st: Any, c: Console) -> None:
    from rich.table import Table

    from cxlctl.parse import format_size

    def n(v: Optional[int]) -> str:
        return "-" if v is None else str(v)

    t = Table(title="DAMON schemes", title_justify="left")
    for col in ("kdamond", "owner", "state", "action", "to node", "tried", "applied", "quota hits"):
        t.add_column(col, overflow="fold")
    for r in st.damon:
        t.add_row(
            str(r.kdamond) + (f" (pid {r.pid})" if r.pid and r.state == "on" else ""),
            r.owner,
            _v(r.state),
            _v(r.action),
            n(r.target_nid)
            if not r.dests
            else ",".join(n(d) for d, _ in r.dests) + " (" + ":".join(n(w) for _, w in r.dests) + ")",
            f"{n(r.nr_tried)} / {format_size(r.sz_tried)}",
            f"{n(r.nr_applied)} / {format_size(r.sz_applied)}",
            n(r.qt_exceeds),
        )
    c.print(t)


# ---------------------------------------------------------------------------- try / confirm

DEFAULT_TRY_TIMEOUT = 120.0

_WHY_NOT = {
    "timeout": "no confirmation within {t:g} s",
    "eof": "stdin was closed before a confirmation",
    "interrupted": "interrupted before a confirmation",
}


def _stdin_fd() -> Optional[int]:
    """The fd to read Enter from; None when stdin is not a real file (e.g. under a test runner)."""
    import io

    try:
        return sys.stdin.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return None


def _term(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@tune_app.command("try", cls=Command)
def try_cmd(
    profile: str = argument(..., "PROFILE", "Profile name or .toml path."),
    timeout: float = typer.Option(
        DEFAULT_TRY_TIMEOUT, "--timeout", metavar="SECONDS", help="How long to wait for confirmation (default 120)."
    ),
    beside: bool = BESIDE_OPT,
    wait: Optional[float] = WAIT_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Apply a profile, then revert it unless confirmed in time (Enter, or `cxlctl tune confirm`)."""
    import math
    import signal

    from cxlctl.errors import UsageError
    from cxlctl.tuning import tune_json as view
    from cxlctl.tuning.transaction import Transaction

    if not math.isfinite(timeout) or timeout <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {timeout:g}")
    # SIGTERM is Ctrl-C from the start: during the apply it rolls back, while waiting it reverts
    old = signal.signal(signal.SIGTERM, _term)
    try:
        try:
            with progress_bar(json_out) as progress:
                res = Transaction(host_root(), _beside(profile, beside)).commit(
                    wait=wait, trial_timeout=timeout, on_progress=progress
                )
        except KeyboardInterrupt:
            # between recording the try and returning it: undo it here rather than leave it to expire
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            from cxlctl.tuning.trial import abandon

            undone = abandon(host_root())
            if undone is not None and not undone.ok:
                raise CxlctlError(
                    f"interrupted: reverting {undone.profile} failed: " + "; ".join(undone.errors),
                    hint="the journal keeps the values; run `cxlctl tune revert`",
                ) from None
            raise CxlctlError(
                "interrupted" + (f": reverted {undone.profile} to the previous values" if undone else ""),
                hint="see `cxlctl tune status`",
            ) from None
        j = res.journal
        if not res.ok or j is None or j.trial is None:
            if json_out:
                _emit(view.trial(res, timeout, None, "failed", None))
            else:
                _note(res.messages)
                _render_apply(res)
            _raise_failed(res)
            return
        outcome, reverted = _await_confirmation(res, j, timeout, json_out)
    finally:
        signal.signal(signal.SIGTERM, old)
    if json_out:
        assert j.trial is not None
        _emit(view.trial(res, timeout, j.trial.deadline, outcome, reverted))
    _report_try(res.prepared.plan.profile, timeout, outcome, reverted, json_out)


def _await_confirmation(
    res: ApplyResult, j: Journal, timeout: float, json_out: bool
) -> Tuple[str, Optional[UndoResult]]:
    """Wait for the confirmation; undo the try without one. (outcome, the undo or None)."""
    import signal

    from cxlctl.tuning import trial
    from cxlctl.tuning import tune_json as view

    assert j.trial is not None
    name = res.prepared.plan.profile
    try:
        if not json_out:
            _note(res.messages)
            _render_plan(res.prepared, _console(), "try")
            if res.results:
                _render_results("Result", list(res.results), _console())
        _note(
            [
                f"applied {name} on trial: press Enter to keep it, or run `cxlctl tune confirm` from another shell "
                f"within {timeout:g} s (until {view.when(j.trial.deadline)}); otherwise it is reverted"
            ]
        )
        outcome = trial.wait(host_root(), j, _stdin_fd())
    except KeyboardInterrupt:
        outcome = "interrupted"
    if outcome not in _WHY_NOT:
        return outcome, None
    # the undo itself is not interruptible: a second Ctrl-C must not leave it half done
    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    old_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        reverted = trial.give_up(host_root(), j)
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
    if reverted is None:
        return "confirmed", None  # confirmed in the same instant, from another shell
    return outcome, reverted


def _report_try(name: str, timeout: float, outcome: str, reverted: Optional[UndoResult], json_out: bool) -> None:
    """Say how the try ended; exit 1 unless it was confirmed."""
    if outcome == "confirmed":
        _note([f"kept {name} (confirmed)"])
        return
    if outcome == "superseded":
        raise CxlctlError(
            f"the try of {name} was ended by another command (the tuning journal changed): nothing to revert here",
            code=EXIT_FAILURE,
            hint="see `cxlctl tune status`",
        )
    assert reverted is not None
    if not json_out and reverted.results:
        _render_results(f"revert {name}", list(reverted.results), _console())
    why = _WHY_NOT[outcome].format(t=timeout)
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


@tune_app.command("confirm")
def confirm_cmd(wait: Optional[float] = WAIT_OPT, json_out: bool = JSON_OPT) -> None:
    """Keep the profile of a pending `tune try` (from any shell); error when no try is pending."""
    from cxlctl.tuning import tune_json as view
    from cxlctl.tuning.trial import confirm

    c = confirm(host_root(), wait)
    if json_out:
        _emit(view.confirmed(c))
        return
    _console().print(f"[green]confirmed {c.profile}[/green]: it stays applied (undo with: cxlctl tune revert)")
