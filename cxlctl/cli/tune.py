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

from typing import TYPE_CHECKING, List, Optional, Union

import typer

from cxlctl.errors import CxlctlError
from cxlctl.hostio.host import Host
from cxlctl.tuning.command import DEFAULT_TRY_TIMEOUT

from .common import JSON_OPT, WAIT_OPT, group, host, progress_bar
from .common import emit_json as _emit
from .common import note as _note
from .params import Command, argument, integer

if TYPE_CHECKING:
    from rich.console import Console

    from cxlctl.tuning.engine import ApplyResult, FileResult, Prepared
    from cxlctl.tuning.profile import Profile
    from cxlctl.tuning.results import UndoResult

tune_app = group("tune", "Plan, apply, verify and revert tuning profiles (sysctls, demotion, weighted interleave).")


def _console() -> Console:
    from cxlctl.term import console

    return console()


@tune_app.callback()
def _before_any_command() -> None:
    # a `tune try` whose waiting process was killed: revert it once expired, before anything else
    from cxlctl.tuning import tune_json as view
    from cxlctl.tuning.trial import expire

    try:
        _note(view.expired(expire(host())))
    except CxlctlError as e:
        _note([f"warning: {e}" + (f" ({e.hint})" if e.hint else "")])


# ---------------------------------------------------------------------------- list / show


@tune_app.command("list", cls=Command)
def list_cmd(json_out: bool = JSON_OPT) -> None:
    """List built-in and user profiles (/etc/cxlctl/profiles)."""
    from cxlctl.tuning.command import profile_rows

    h = host()
    rows = profile_rows(h)
    if json_out:
        _emit({"profiles": rows})
        return
    from cxlctl.tuning import render

    render.profiles(rows, _console(), h.root)


@tune_app.command("show", cls=Command)
def show_cmd(
    profile: str = argument(..., "PROFILE", "Profile name or path to a .toml file."), json_out: bool = JSON_OPT
) -> None:
    """Show a profile with its includes resolved: every setting, its value and reason."""
    from cxlctl.tuning import tune_json as view
    from cxlctl.tuning.profile import load

    p = load(host(), profile)
    doc = view.profile(p)
    if json_out:
        _emit({"profile": doc})
        return
    from cxlctl.tuning import render

    render.profile(p, doc, _console())


# ---------------------------------------------------------------------------- recommend


@tune_app.command("recommend", cls=Command)
def recommend_cmd(json_out: bool = JSON_OPT) -> None:
    """Recommend a built-in profile for this host, with the reasons."""
    from cxlctl.inventory import scan
    from cxlctl.tuning.knobs import read_current
    from cxlctl.tuning.recommend import recommend

    h = host()
    rec = recommend(scan(h), read_current(h))
    if json_out:
        from cxlctl.tuning import tune_json as view

        _emit(view.recommendation(rec))
        return
    from cxlctl.tuning import render

    render.recommendation(rec, _console(), h)


# ---------------------------------------------------------------------------- plan


def _profile(h: Host, ref: Optional[str]) -> Union[str, Profile]:
    from cxlctl.tuning.profile import for_command

    return for_command(h, ref)


def _render_plan(prep: Prepared, c: Console, title: str) -> None:
    from cxlctl.tuning import render

    render.plan(prep, c, title)


@tune_app.command("plan", cls=Command)
def plan_cmd(
    profile: Optional[str] = argument(
        None, "PROFILE", "Profile name or .toml path (default: the active one, else inference-bandwidth)."
    ),
    persist: bool = typer.Option(False, "--persist", help="Report conflicts as if applied with --persist."),
    json_out: bool = JSON_OPT,
) -> None:
    """Show what applying a profile would change: knob, current, desired, reason, reversible."""
    from cxlctl.tuning import tune_json as view
    from cxlctl.tuning.transaction import Transaction

    h = host()
    prep = Transaction(h, _profile(h, profile or None), persist=persist or None).prepared
    if json_out:
        _emit({"plan": view.plan(prep)})
        return
    _note(prep.messages)
    _render_plan(prep, _console(), "plan")


# ---------------------------------------------------------------------------- apply


def _render_results(title: str, results: List[FileResult], c: Console) -> None:
    from cxlctl.tuning import render

    render.results(title, results, c)


@tune_app.command("apply", cls=Command)
def apply_cmd(
    profile: Optional[str] = argument(
        None, "PROFILE", "Profile name or .toml path (default: the active one, else inference-bandwidth)."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the plan; write nothing."),
    persist: bool = typer.Option(
        False,
        "--persist",
        help="Also write the sysctl file (/etc/sysctl.d/90-cxlctl.conf) and record the profile as active (in /var/lib/cxlctl).",
    ),
    wait: Optional[float] = WAIT_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Apply a profile: journal the originals, write each knob, roll back on failure, verify."""
    from cxlctl.tuning import tune_json as view
    from cxlctl.tuning.command import apply_failed
    from cxlctl.tuning.transaction import Transaction

    h = host()
    txn = Transaction(h, _profile(h, profile or None), persist=persist or None)
    with progress_bar(json_out) as progress:
        res = txn.commit(dry_run=dry_run, persist=persist, wait=wait, on_progress=progress)
    if json_out:
        _emit(view.apply(res))
    else:
        _note(res.messages)
        _render_apply(res, h)
    apply_failed(res)


def _render_apply(res: ApplyResult, h: Host) -> None:
    from cxlctl.tuning import render

    render.apply(res, _console(), host=h)


# ---------------------------------------------------------------------------- verify / revert / status


@tune_app.command("verify", cls=Command)
def verify_cmd(
    profile: Optional[str] = argument(None, "PROFILE", "Compare with this profile instead of the applied one."),
    json_out: bool = JSON_OPT,
) -> None:
    """Check every applied setting: pass / drift / unsupported (exit 3 on drift)."""
    from cxlctl.tuning import tune_json as view
    from cxlctl.tuning.command import drifted
    from cxlctl.tuning.engine import verify

    res = verify(host(), profile)
    if json_out:
        _emit(view.verify(res))
    else:
        from cxlctl.tuning import render

        _note(res.messages)
        render.verify(res, _console())
    drifted(res)


@tune_app.command("revert", cls=Command)
def revert_cmd(wait: Optional[float] = WAIT_OPT, json_out: bool = JSON_OPT) -> None:
    """Restore every knob to its value before cxlctl (also after a crashed apply); remove persisted files."""
    from cxlctl.tuning import tune_json as view
    from cxlctl.tuning.command import revert_incomplete
    from cxlctl.tuning.engine import revert

    h = host()
    res = revert(h, wait=wait)
    if json_out:
        _emit(view.revert(res))
    else:
        from cxlctl.tuning import render

        _note(res.messages)
        render.revert(res, _console(), host=h)
    revert_incomplete(res)


@tune_app.command("status", cls=Command)
def status_cmd(json_out: bool = JSON_OPT) -> None:
    """Active profile, when it was applied, journal state, a pending try, drift summary, lock, persistence."""
    from cxlctl.tuning import tune_json as view
    from cxlctl.tuning.engine import status

    h = host()
    st = status(h)
    if json_out:
        _emit(view.status(st))
        return
    from cxlctl.tuning import render

    _note(st.messages)
    render.status(st, _console(), h)


# ---------------------------------------------------------------------------- try / confirm


@tune_app.command("try", cls=Command)
def try_cmd(
    profile: str = argument(..., "PROFILE", "Profile name or .toml path."),
    timeout_arg: str = typer.Option(
        f"{DEFAULT_TRY_TIMEOUT:g}",
        "--timeout",
        metavar="SECONDS",
        show_default=False,
        help="How long to wait for confirmation (default 120).",
    ),
    wait: Optional[float] = WAIT_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Apply a profile, then revert it unless confirmed in time (Enter, or `cxlctl tune confirm`)."""
    from cxlctl.tuning import trial
    from cxlctl.tuning import tune_json as view
    from cxlctl.tuning.command import apply_failed, stdin_fd, try_timeout

    timeout = try_timeout(timeout_arg)

    def applied(res: ApplyResult) -> None:
        assert res.journal is not None and res.journal.trial is not None
        if not json_out:
            _note(res.messages)
            _render_plan(res.prepared, _console(), "try")
            if res.results:
                _render_results("Result", list(res.results), _console())
        _note(
            [
                f"applied {res.prepared.plan.profile} on trial: press Enter to keep it, or run `cxlctl tune confirm` "
                f"from another shell within {timeout:g} s (until {view.when(res.journal.trial.deadline)}); "
                "otherwise it is reverted"
            ]
        )

    h = host()
    t = trial.run(
        h,
        _profile(h, profile),
        timeout,
        wait_lock=wait,
        stdin_fd=stdin_fd(),
        progress=lambda: progress_bar(json_out),
        on_applied=applied,
    )
    res = t.result
    if t.outcome == trial.FAILED:
        if json_out:
            _emit(view.trial(res, timeout, None, "failed", None))
        else:
            _note(res.messages)
            _render_apply(res, h)
        apply_failed(res)
        return
    if json_out:
        assert res.journal is not None and res.journal.trial is not None
        _emit(view.trial(res, timeout, res.journal.trial.deadline, t.outcome, t.reverted))
    _report_try(res.prepared.plan.profile, timeout, t.outcome, t.reverted, json_out)


def _report_try(name: str, timeout: float, outcome: str, reverted: Optional[UndoResult], json_out: bool) -> None:
    """Say how the try ended; exit 1 unless it was confirmed (:func:`cxlctl.tuning.command.try_ended`)."""
    from cxlctl.tuning.command import try_ended

    if outcome == "confirmed":
        _note([f"kept {name} (confirmed)"])
    elif outcome != "superseded" and reverted is not None and not json_out and reverted.results:
        _render_results(f"revert {name}", list(reverted.results), _console())
    try_ended(name, timeout, outcome, reverted)


@tune_app.command("confirm", cls=Command)
def confirm_cmd(wait: Optional[float] = WAIT_OPT, json_out: bool = JSON_OPT) -> None:
    """Keep the profile of a pending `tune try` (from any shell); error when no try is pending."""
    from cxlctl.tuning import tune_json as view
    from cxlctl.tuning.trial import confirm

    h = host()
    c = confirm(h, wait)
    if json_out:
        _emit(view.confirmed(c))
        return
    from cxlctl.tuning import render

    render.confirmed(c.profile, _console(), h)


@tune_app.command("reclaim", cls=Command)
def reclaim_cmd(
    size: str = argument(..., "SIZE", "How much to reclaim: 2G, 512M."),
    node: Optional[int] = typer.Option(
        None, "--node", parser=integer(0), help="A DRAM node: its cold pages demote to CXL (nodeN/reclaim)."
    ),
    cgroup: Optional[str] = typer.Option(
        None, "--cgroup", metavar="CGROUP", help="A cgroup under /sys/fs/cgroup (memory.reclaim)."
    ),
    swappiness: Optional[int] = typer.Option(
        None, "--swappiness", parser=integer(0, 200), help="0-200: weigh anonymous against file pages (0: file only)."
    ),
    json_out: bool = JSON_OPT,
) -> None:
    """Demote cold memory now (proactive reclaim), to free DRAM before a large allocation; nothing to undo."""
    from cxlctl.tuning.reclaim import describe, reclaim

    res = reclaim(host(), size, node=node, cgroup=cgroup, swappiness=swappiness)
    if json_out:
        _emit({"reclaim": res.as_json()})
        return
    from cxlctl import term

    typer.echo(term.fold(describe(res), term.width(default=80)))
