"""Human view of the tuning engine's results (``cxlctl tune …``), built with rich.

Moved out of the CLI so ``cxlctl.cli.tune`` only parses, calls the engine and emits.
Every renderer takes the engine's typed results (:mod:`.results`) and a console from
:func:`cxlctl.term.console`, which reads no markup: a knob's value, a profile's reason
or a note naming ``[damon]`` prints as it is.  Tables are :func:`cxlctl.term.grid`:
knob names, paths and values whole in their columns, the long reason beside them on a
wide screen and folded under its row at 80 columns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from cxlctl.hostio.host import Host
from cxlctl.term import Cell, grid, hang, join, styled

if TYPE_CHECKING:
    from rich.console import Console

    from cxlctl.tuning.recommend import Recommendation

    from .profile import Profile
    from .results import ApplyResult, FileResult, Prepared, RevertResult, StatusResult, VerifyResult

_ACTION_STYLE = {"set": "bold", "noop": "dim", "restore": "cyan", "unsupported": "yellow", "skip": "yellow"}
_RESULT_STYLE = {
    "written": "green",
    "restored": "cyan",
    "reverted": "cyan",
    "failed": "red",
    "restore-failed": "bold red",
    "gone": "yellow",
}
_CHECK_STYLE = {"pass": "green", "drift": "bold red", "unsupported": "yellow"}


def _v(x: Optional[str]) -> str:
    return "-" if x is None else x


def _command(c: Console, label: str, command: str) -> None:
    """``label`` and a command to run, folded between its words with `` \\`` continuations
    (:func:`cxlctl.term.fold_command`): the lines copied together still run as the one command."""
    from cxlctl.term import fold_command

    for line in fold_command(command, c.width, first=label, indent="  "):
        c.print(line, soft_wrap=True, highlight=False)


def _title(title: str, rest: str = "") -> Any:
    return join((title, "bold"), rest)


def profiles(rows: Sequence[Dict[str, Any]], c: Console, root: str = "/") -> None:
    """``tune list``: name and origin whole, the summary (or why it is invalid) as the note.  A
    profile file is named as the host sees it (``/etc/cxlctl/profiles/x.toml``), not under a
    ``--root`` tree (the JSON keeps the path it was read from)."""
    c.print(styled("Tuning profiles", "bold"))
    out: List[Tuple[Sequence[Cell], Optional[Cell]]] = []
    base = root.rstrip("/")
    for r in rows:
        summary: Cell = (r["summary"] or "") if r["error"] is None else styled(f"invalid: {r['error']}", "red")
        src = str(r["source"] or "")
        if base and src.startswith(base + "/"):
            src = src[len(base) :]
        out.append(([r["name"], "built-in" if r["builtin"] else src], summary))
    grid(c, [("PROFILE", "left"), ("FROM", "left")], out, note="SUMMARY")


def profile(p: Profile, doc: Dict[str, Any], c: Console) -> None:
    """``tune show``: the profile's head, then each setting, its value and its reason."""
    c.print(_title(p.name, f"  ({'built-in' if p.builtin else p.source})"))
    if p.summary:
        hang(c, "", p.summary, 0)
    if p.description.strip():
        hang(c, "", styled(" ".join(p.description.split()), "dim"), 0)
    if doc["includes"]:
        c.print("includes: " + " → ".join(doc["includes"]))
    if p.placement:
        c.print(f"placement (for the launcher): {p.placement}")
    rows = [([s["knob"], s["value"]], s["reason"]) for s in doc["settings"]]
    grid(c, [("KNOB", "left"), ("VALUE", "left")], rows, note="REASON")


def recommendation(rec: Recommendation, c: Console, host: Host) -> None:
    """The profile, each reason and alternative folded under its own start (a hanging indent),
    and the next command as it runs against ``host``."""
    c.print(join("recommended: ", (rec.profile or "none", "bold")))
    for r in rec.reasons:
        hang(c, "  • ", host.hint(r), 4)
    for p, w in rec.alternatives:
        hang(c, "  ", join("alternative: ", (p, "bold"), f" — {host.hint(w)}"), 4)
    if rec.profile:
        _command(c, "next: ", host.command(f"tune plan {rec.profile}"))


def plan(prep: Prepared, c: Console, title: str) -> None:
    """``tune plan`` (and the plan part of apply/try): one row per setting, its reason as the note.

    A group's many files (DAMON's) share one reason: :func:`~cxlctl.term.grid` says it once.
    """
    from .knobs import BY_NAME

    p = prep.plan
    head = p.profile
    if prep.active and prep.active.profile != p.profile:
        head += f"  (switching from {prep.active.profile})"
    c.print(_title(title, f" {head}"))
    rows: List[Tuple[Sequence[Cell], Optional[Cell]]] = []
    for s in p.steps:
        action = {"noop": "no change", "set": "change"}.get(s.action, s.action)
        note = BY_NAME[s.knob].reversible_note
        reason: Optional[Cell] = join(s.reason, (f" ({s.note})", "dim") if s.note else "")
        if note:
            reason = join(reason or "", (f" (reversible: {note})", "dim"))
        rows.append(
            (
                [
                    s.setting,
                    _v(s.current),
                    _v(s.desired),
                    styled(action, _ACTION_STYLE.get(s.action, "")),
                    "yes" if s.reversible else styled("no", "red"),
                ],
                reason,
            )
        )
    cols = [("KNOB", "left"), ("CURRENT", "left"), ("DESIRED", "left"), ("ACTION", "left"), ("UNDO", "left")]
    grid(c, cols, rows, note="REASON")
    n = len(p.writes)
    c.print(f"{n} change(s)" + ("" if n else " — the host already matches this profile"))
    for w in p.warnings:
        hang(c, styled("warning: ", "yellow"), w, 2)
    for r in p.refusals:
        # every reason, not only the first the damon row names: an apply refuses and writes nothing
        hang(c, styled("refused: ", "red"), f"tune apply would change nothing: {r}", 2)
    if prep.conflicts:
        c.print(styled("Other configuration setting the same keys", "bold"))
        grid(
            c,
            [("KEY", "left"), ("CXLCTL", "left"), ("THEIRS", "left"), ("SOURCE", "left"), ("WINS AT BOOT", "left")],
            [([k.key, _v(k.ours), k.theirs, k.source, k.wins_at_boot], k.note) for k in prep.conflicts],
            note="WHY",
        )


def results(title: str, res: Sequence[FileResult], c: Console) -> None:
    """What each write did: knob and file whole, the error (if any) as the note."""
    c.print(styled(title, "bold"))
    rows: List[Tuple[Sequence[Cell], Optional[Cell]]] = [
        ([r.setting, r.path, _v(r.before), _v(r.after), styled(r.status, _RESULT_STYLE.get(r.status, "dim"))], r.error)
        for r in res
    ]
    cols = [("KNOB", "left"), ("FILE", "left"), ("BEFORE", "left"), ("TARGET", "left"), ("RESULT", "left")]
    grid(c, cols, rows, note="ERROR")


def apply(res: ApplyResult, c: Console, *, host: Optional[Host] = None) -> None:
    """The apply's plan, results and outcome; files it persisted named where they are (under ``host``'s root)."""
    if res.dry_run:
        plan(res.prepared, c, "dry run:")
        c.print(styled("nothing was written", "dim"))
        return
    plan(res.prepared, c, "apply")
    if res.results:
        results("Result", list(res.results), c)
    if res.ok:
        passed = sum(1 for ch in res.checks if ch.status == "pass")
        c.print(join((f"applied {res.prepared.plan.profile}", "green"), f": verify {passed} pass, 0 drift"))
        for path in res.persisted:
            hang(c, "persisted: ", host.path(path) if host else path, 2)
        _command(c, "undo with: ", host.command("tune revert") if host else "cxlctl tune revert")


def verify(res: VerifyResult, c: Console) -> None:
    c.print(
        _title("verify", f" {res.profile} (against the {'applied journal' if res.basis == 'journal' else 'profile'})")
    )
    rows: List[Tuple[Sequence[Cell], Optional[Cell]]] = [
        ([ch.setting, _v(ch.expected), _v(ch.actual), styled(ch.status, _CHECK_STYLE[ch.status])], ch.note or None)
        for ch in res.checks
    ]
    grid(c, [("KNOB", "left"), ("EXPECTED", "left"), ("ACTUAL", "left"), ("RESULT", "left")], rows, note="NOTE")


def revert(res: RevertResult, c: Console, *, host: Optional[Host] = None) -> None:
    """The revert's results; files it removed named where they were (under ``host``'s root)."""
    if res.results:
        results(f"revert {res.profile}", list(res.results), c)
    for path in res.removed:
        hang(c, "removed: ", host.path(path) if host else path, 2)
    if res.ok and res.results:
        n = sum(1 for r in res.results if r.status == "reverted")
        c.print(join((f"reverted {res.profile}", "green"), f": {n} file(s) restored"))


def status(st: StatusResult, c: Console, host: Host) -> None:
    """``tune status``: files named where they are (under ``host``'s root), commands as they run against it."""
    from . import tune_json as view

    c.print(join("active profile: ", (st.active_profile or "none", "bold")))
    j = st.journal
    if j is None:
        c.print("journal: none (nothing applied on this boot)")
    else:
        hang(
            c,
            "journal: ",
            join(
                f"{j.state} — {j.profile}, started {j.started}" + (f", finished {j.finished}" if j.finished else ""),
                ("" if j.this_boot else " (earlier boot)", "yellow"),
            ),
            2,
        )
        if j.previous_profile:
            c.print(f"  switched from: {j.previous_profile}")
        if j.error:
            c.print(join("  ", ("error:", "red"), f" {j.error}"))
        if j.state == "applying":
            c.print(styled(f"  an apply was interrupted: run `{host.command('tune revert')}`", "yellow"))
    t = st.trial
    if t is not None:
        c.print(
            join(
                ("try pending:", "yellow"),
                f" {t.profile} is reverted at {view.when(t.deadline)} "
                f"({t.seconds_left:g} s left) unless confirmed (`{host.command('tune confirm')}`); waiting pid {t.pid}"
                + ("" if t.waiting else " is gone: the next `cxlctl tune` command after the deadline reverts it"),
            )
        )
    v = st.verify
    if v is not None:
        drift = v.drift
        c.print(
            join(
                f"verify: {v.passed} pass, {len(drift)} drift",
                " (" if drift else "",
                (", ".join(drift), "red"),
                ")" if drift else "",
                f", {len(v.unsupported)} unsupported" if v.unsupported else "",
            )
        )
    pers = st.persisted
    files = ", ".join(host.path(f) for f in (pers.sysctl_file, pers.tmpfiles_file) if f) if pers else ""
    hang(c, "persisted: ", f"{pers.profile or '?'} ({files or 'no boot file'})" if pers else "no", 2)
    if st.lock_held:
        c.print(f"lock: held by pid {st.lock_holder or '?'}")
    if st.damon:
        damon(st, c)


def damon(st: StatusResult, c: Console) -> None:
    from cxlctl.parse import format_size

    def n(v: Optional[int]) -> str:
        return "-" if v is None else str(v)

    c.print(styled("DAMON schemes", "bold"))
    rows: List[Tuple[Sequence[Cell], Optional[Cell]]] = []
    for r in st.damon:
        rows.append(
            (
                [
                    str(r.kdamond),
                    str(r.pid) if r.pid and r.state == "on" else _v(r.state),  # a running kdamond has a pid
                    r.owner,
                    _v(r.action),
                    n(r.target_nid)
                    if not r.dests
                    else ",".join(n(d) for d, _ in r.dests) + " (" + ":".join(n(w) for _, w in r.dests) + ")",
                    f"{n(r.nr_tried)} / {format_size(r.sz_tried)}",
                    f"{n(r.nr_applied)} / {format_size(r.sz_applied)}",
                    n(r.qt_exceeds),
                ],
                None,
            )
        )
    # PID: the kdamond's while it runs, else its state (off); with a STATE column of its own the
    # table took 81 columns of an 80-column screen
    cols = [("KDAMOND", "right"), ("PID", "right"), ("OWNER", "left"), ("ACTION", "left")]
    cols += [("TO NODE", "left"), ("TRIED", "right"), ("APPLIED", "right"), ("QUOTA", "right")]
    grid(c, cols, rows)


def confirmed(profile_name: str, c: Console, host: Host) -> None:
    undo = host.command("tune revert")
    c.print(join((f"confirmed {profile_name}", "green"), f": it stays applied (undo with: {undo})"))
