"""prepare / apply / verify / revert / status: the tuning engine's entry points by reference.

The transaction itself — plan, commit, rollback — is :class:`.transaction.Transaction`;
:func:`prepare` and :func:`apply` are its shorthand for callers holding only a profile
reference.  Revert restores the journal's originals in reverse order; it is also the
crash recovery, since a killed apply leaves a journal in state ``applying``.

Every function returns a typed result (:mod:`.results`); the CLI (``cxlctl.cli.tune``)
decides exit codes and :mod:`.tune_json` shapes the JSON.  Nothing here prints.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from cxlctl.errors import UsageError
from cxlctl.hostio.host import Host
from cxlctl.hostio.lock import TuneLock, holder, is_held
from cxlctl.hostio.paths import PERSIST_SYSCTL, PERSIST_TMPFILES

from . import journal as jn
from .plan import Step
from .results import (
    ApplyResult,
    Check,
    DamonSchemeRow,
    FileResult,
    JournalSummary,
    PersistSummary,
    Prepared,
    RevertResult,
    StatusResult,
    TrialSummary,
    VerifyResult,
    VerifySummary,
)
from .state import this_boot
from .transaction import (
    ACTIVE_PROFILE,
    CAP_SYS_ADMIN,
    PERSIST_FILES,
    Progress,
    Transaction,
    canon,
    persisted,
    preflight,
    restore_files,
    restore_map,
    restore_persist,
    verify_entries,
    writable,
)
from .trial import alive

if TYPE_CHECKING:
    from cxlctl.damon.sysfs import DamonState

__all__ = [
    "ACTIVE_PROFILE",
    "CAP_SYS_ADMIN",
    "PERSIST_FILES",
    "ApplyResult",
    "Check",
    "FileResult",
    "Prepared",
    "RevertResult",
    "StatusResult",
    "Transaction",
    "VerifyResult",
    "apply",
    "preflight",
    "prepare",
    "restore_map",
    "revert",
    "status",
    "verify",
]


def prepare(host: Host, ref: str, *, persist: Optional[bool] = None, switching: bool = True) -> Prepared:
    """Profile ``ref`` + a fresh scan + current values → plan and conflicts (no writes)."""
    return Transaction(host, ref, persist=persist, switching=switching).prepared


def apply(
    host: Host, ref: str, *, dry_run: bool = False, persist: bool = False, wait: Optional[float] = None
) -> ApplyResult:
    """Apply profile ``ref`` transactionally (see :mod:`.transaction`)."""
    return Transaction(host, ref, persist=persist or None).commit(dry_run=dry_run, persist=persist, wait=wait)


# ---------------------------------------------------------------------------- verify


def verify(host: Host, ref: Optional[str] = None, wait: Optional[float] = None) -> VerifyResult:
    """Compare the host with the applied journal, or with profile ``ref`` when given.

    Under the tuning lock's shared side: a revert or apply running beside it is
    seen whole or not at all, never as "drift" of the knobs it has not reached
    yet (the 1,000-round concurrency bench met exactly that).  ``wait``: how long
    to wait for a writer (default ``CXLCTL_LOCK_WAIT``); then :class:`Locked`.
    """
    with TuneLock(host.root, wait, shared=True):
        return _verify(host, ref)


def _verify(host: Host, ref: Optional[str]) -> VerifyResult:
    if ref is not None:
        prep = prepare(host, ref, switching=False)
        checks = [_check_step(s) for s in prep.plan.steps]
        return VerifyResult(profile=prep.profile.name, basis="profile", checks=tuple(checks), messages=prep.messages)
    messages: List[str] = []
    j = this_boot(host, messages)
    if j is None:
        raise UsageError(
            "no tuning profile is applied on this boot"
            + (" (the journal is from an earlier boot)" if messages else ""),
            hint="name a profile to compare with: cxlctl tune verify inference-bandwidth",
        )
    if j.state != jn.APPLIED:
        what = {
            jn.APPLYING: f"the apply of {j.profile} was interrupted (pid {j.pid}); run `cxlctl tune revert`",
            jn.ROLLED_BACK: f"the last apply ({j.profile}) failed and was rolled back: {j.error}",
            jn.ROLLBACK_FAILED: f"the last apply ({j.profile}) failed and could not be fully rolled back: {j.error}",
            jn.REVERTED: f"{j.profile} was reverted at {j.finished}",
            jn.REVERT_FAILED: f"the revert of {j.profile} did not complete: {j.error}",
        }.get(j.state, j.state)
        raise UsageError(f"no tuning profile is in effect: {what}", hint="name a profile to compare with it")
    checks = verify_entries(host, list(j.entries))
    checks += [
        Check(setting=s, path="", expected=None, actual=None, status="unsupported", note=why) for s, why in j.skipped
    ]
    return VerifyResult(profile=j.profile, basis="journal", checks=tuple(checks), messages=tuple(messages))


def _check_step(s: Step) -> Check:
    """A plan step seen as a check against the profile alone: no change needed = pass."""
    if s.action == "noop":
        return Check(setting=s.setting, path=s.path, expected=s.desired, actual=s.current, status="pass")
    if s.action in ("set", "restore"):
        return Check(setting=s.setting, path=s.path, expected=s.desired, actual=s.current, status="drift")
    return Check(setting=s.setting, path=s.path, expected=None, actual=None, status="unsupported", note=s.note)


# ---------------------------------------------------------------------------- revert


def _nothing(profile: Optional[str], state: Optional[str], *messages: str) -> RevertResult:
    return RevertResult(
        ok=True, profile=profile, state_before=state, results=(), removed=(), errors=(), messages=messages
    )


def revert(host: Host, *, wait: Optional[float] = None) -> RevertResult:
    """Restore the journal's original values (also after a crashed apply, and ending a pending try)."""
    j0 = jn.load(host)
    if j0 is None and not writable(host.path(jn.RUN_DIR)):
        return _nothing(None, None, "nothing to revert: no tuning journal")
    if j0 is not None and j0.state in jn.ACTIVE_STATES and jn.same_boot(j0, host.boot_id):
        # the persist files too: a read-only /etc must refuse before any knob is restored
        preflight(host, [e.path for e in j0.entries], {e.knob for e in j0.entries}, "revert", tuple(j0.persist))
    messages: List[str] = []
    with TuneLock(host.root, wait):
        j = jn.load(host)
        if j is None:
            return _nothing(None, None, "nothing to revert: no tuning journal")
        if not jn.same_boot(j, host.boot_id):
            return _discard_earlier_boot(host, j)
        if j.state not in jn.ACTIVE_STATES:
            why = "it was already reverted" if j.state == jn.REVERTED else "the last apply was rolled back"
            return _nothing(j.profile, j.state, f"nothing to revert: {why}")
        if j.state == jn.APPLYING:
            messages.append(
                f"found the journal of an interrupted apply of {j.profile} (pid {j.pid}, {j.started}); restoring"
            )
        if j.trial is not None and j.trial.pending:
            messages.append(f"ended the pending `tune try` of {j.profile} (pid {j.trial.pid})")
        entries = list(j.entries)
        progress = Progress(entries)
        r = host.reader
        before = {e.path: canon(e.knob, r.body(e.path)) for e in entries}
        knobs: List[str] = []
        for e in entries:
            progress.status[e.path] = "unchanged"
            if e.knob not in knobs:
                knobs.append(e.knob)
        failures = restore_files(host, entries, knobs, "original", progress, messages)
        removed, perr = restore_persist(host, j.persist)
        failures += perr
        final = progress.entries(entries)
        # the knobs are back already; the journal keeps its originals, so repeating is safe
        unrecorded = (
            "the knobs were restored, but the journal still says "
            + j.state
            + ("; `cxlctl tune revert` again once it can be written (safe to repeat)")
        )
        if failures:
            jn.save(
                host,
                j._replace(
                    state=jn.REVERT_FAILED, entries=final, finished=jn.now(), error="; ".join(failures), trial=None
                ),
                done="; ".join(failures) + "; " + unrecorded,
            )
        else:
            jn.save(
                host,
                j._replace(state=jn.REVERTED, entries=final, finished=jn.now(), error=None, trial=None),
                done=unrecorded,
            )
    results = tuple(
        FileResult(
            setting=e.setting,
            path=e.path,
            before=before[e.path],
            after=canon(e.knob, e.original),
            status=progress.status[e.path],
            error=progress.errors.get(e.path),
        )
        for e in entries
    )
    return RevertResult(
        ok=not failures,
        profile=j.profile,
        state_before=j.state,
        results=results,
        removed=tuple(removed),
        errors=tuple(failures),
        messages=tuple(messages),
    )


def _discard_earlier_boot(host: Host, j: jn.Journal) -> RevertResult:
    removed, errs = restore_persist(host, j.persist)
    jn.discard(host)
    messages = [
        f"discarded the tuning journal of an earlier boot ({j.boot_id}, profile {j.profile}): the kernel "
        "reset those values when it booted; nothing to restore"
    ]
    if removed:
        messages.append(
            "removed the persisted settings (" + ", ".join(removed) + "); values set from them at boot "
            "stay until the next reboot"
        )
    return RevertResult(
        ok=not errs,
        profile=j.profile,
        state_before=j.state,
        results=(),
        removed=tuple(removed),
        errors=tuple(errs),
        messages=tuple(messages),
    )


# ---------------------------------------------------------------------------- status


def _journal_summary(j: jn.Journal, this_boot_: bool) -> JournalSummary:
    counts: Dict[str, int] = {}
    for e in j.entries:
        counts[e.status] = counts.get(e.status, 0) + 1
    return JournalSummary(
        path=jn.JOURNAL,
        state=j.state,
        this_boot=this_boot_,
        profile=j.profile,
        profile_source=j.profile_source,
        previous_profile=j.previous_profile,
        started=j.started,
        finished=j.finished,
        pid=j.pid,
        error=j.error,
        entries=tuple(counts.items()),
    )


def status(host: Host) -> StatusResult:
    """Active profile, when it was applied, journal state, a pending try, lock and persistence."""
    messages: List[str] = []
    j = jn.load(host)
    this = j is not None and jn.same_boot(j, host.boot_id)
    if j is not None and not this:
        messages.append(f"the journal is from an earlier boot ({j.boot_id}); `tune revert` or `tune apply` discards it")
    active = j.profile if j is not None and this and j.state == jn.APPLIED else None
    trial: Optional[TrialSummary] = None
    if active and j is not None and j.trial is not None and j.trial.pending:
        trial = TrialSummary(
            profile=j.profile,
            deadline=j.trial.deadline,
            seconds_left=max(0.0, round(j.trial.deadline - time.time(), 1)),
            pid=j.trial.pid,
            waiting=alive(j.trial.pid),
        )
    verify_: Optional[VerifySummary] = None
    if active and j is not None:
        checks = verify_entries(host, list(j.entries))
        verify_ = VerifySummary(
            passed=sum(1 for c in checks if c.status == "pass"),
            drift=tuple(c.setting for c in checks if c.status == "drift"),
            unsupported=tuple(c.setting for c in checks if c.status == "unsupported") + tuple(s for s, _ in j.skipped),
        )
    persist: Optional[PersistSummary] = None
    text = host.reader.body(ACTIVE_PROFILE)
    if text is not None or persisted(host):
        name: Optional[str] = None
        try:
            doc = json.loads(text or "{}")
        except (ValueError, RecursionError):
            messages.append(f"{host.path(ACTIVE_PROFILE)} is not valid JSON")
        else:
            if not isinstance(doc, dict):
                messages.append(f"{host.path(ACTIVE_PROFILE)} is not a JSON object")
            elif "checksum" in doc and doc["checksum"] != jn.checksum(doc):
                messages.append(
                    f"{host.path(ACTIVE_PROFILE)} fails its checksum (changed or damaged after cxlctl wrote it); "
                    "the daemon enforces no profile until `cxlctl tune apply --persist PROFILE` writes it again"
                )
            elif isinstance(doc.get("profile"), str):
                name = doc["profile"]
        persist = PersistSummary(
            sysctl_file=PERSIST_SYSCTL if os.path.exists(host.path(PERSIST_SYSCTL)) else None,
            profile=name,
            tmpfiles_file=PERSIST_TMPFILES if os.path.exists(host.path(PERSIST_TMPFILES)) else None,
        )
    held = is_held(host.root)
    damon = damon_rows(host, j if active else None, messages)
    return StatusResult(
        active_profile=active,
        journal=_journal_summary(j, this) if j is not None else None,
        trial=trial,
        verify=verify_,
        persisted=persist,
        lock_held=held,
        lock_holder=holder(host.root) if held else None,
        messages=tuple(messages),
        damon=damon,
    )


def damon_rows(host: Host, j: Optional[jn.Journal], messages: List[str]) -> Tuple[DamonSchemeRow, ...]:
    """Every kdamond's schemes with their statistics; cxlctl's are refreshed first.

    The kernel updates a scheme's ``stats/`` files only when asked (``update_schemes_stats``
    written to the kdamond's ``state``), so for cxlctl's running kdamonds status asks —
    through the one write primitive, when the file is writable — and otherwise shows
    the counters as of the last refresh and says so.  Other tools' kdamonds are only read.
    """
    from cxlctl.damon.sysfs import read_damon

    from .damon_tiering import owned

    mine = owned(restore_map(j)) if j is not None else None
    state = read_damon(host.reader)
    if not state.kdamonds:
        return ()
    state = refresh_damon_stats(host, state, mine, messages)
    rows = []
    for k in state.kdamonds:
        owner = "cxlctl" if mine is not None and k.id < mine else "other"
        for s in k.schemes:
            st = s.stats
            rows.append(
                DamonSchemeRow(
                    k.id,
                    owner,
                    k.state,
                    k.pid,
                    s.id,
                    s.action,
                    s.target_nid,
                    st.nr_tried,
                    st.sz_tried,
                    st.nr_applied,
                    st.sz_applied,
                    st.qt_exceeds,
                    tuple((d.node, d.weight) for d in s.dests),
                )
            )
    return tuple(rows)


def refresh_damon_stats(host: Host, state: DamonState, mine: Optional[int], messages: List[str]) -> DamonState:
    """``state`` read again after asking cxlctl's running kdamonds (ids below ``mine``) to refresh
    their scheme stats; other tools' kdamonds are never written to.  ``tune status`` and the
    daemon's metrics both use this (the kernel updates ``stats/`` only when asked)."""
    from cxlctl.damon import tree
    from cxlctl.damon.sysfs import read_damon
    from cxlctl.hostio.write import KnobError, write_knob

    stale = []
    refreshed = False
    for k in state.kdamonds:
        if mine is not None and k.id < mine and k.running:
            hp = host.path(tree.at(k.path, tree.STATE))
            if not writable(hp):
                stale.append(k.id)
                continue
            try:
                write_knob(host.root, f"{k.path}/state", "update_schemes_stats\n")
                refreshed = True
            except KnobError as e:
                stale.append(k.id)
                messages.append(f"DAMON kdamond {k.id}: cannot refresh scheme stats ({e.reason})")
    if stale:
        messages.append(
            f"DAMON scheme stats of kdamond(s) {', '.join(map(str, stale))} are as of their last refresh "
            "(run as root to refresh them)"
        )
    return read_damon(host.reread()) if refreshed else state
