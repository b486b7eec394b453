"""The tuning transaction: a profile object, the plan against a host, ``commit()`` and ``rollback()``.

Apply follows pyroute2's transaction with TuneD's save-the-original and
daxctl's re-read-after-failure (docs/tuning.md has the full story).  A
:class:`Transaction` is built from a :class:`~cxlctl.hostio.host.Host`, a :class:`~.profile.Profile` (or a
reference to load) and optionally an :class:`~cxlctl.model.Inventory` the caller
already has; building it plans (no writes), so the CLI's plan, the daemon's
"is there anything to write?" and the launcher's weight preview all read the same
``plan`` that ``commit()`` then carries out.  ``commit()`` runs the phases:

1. **check** — before touching anything, every target file is writable (and, on
   the live system, ``CAP_SYS_ADMIN`` is there for numa_balancing);
2. **lock** (``/run/cxlctl/lock``, shared with the daemon) and **settle** the
   journal found (an earlier boot's is discarded; an interrupted one refuses);
3. **replan** under the lock (knob values may have changed while waiting);
4. **journal** — every file of every knob group the plan touches, with its
   original value — atomically and durably, *before* the first knob write;
5. **write** the knobs one by one; on a failure, re-read (another agent may have
   raced us to the same value), otherwise stop;
6. **verify** by reading everything back, **persist** if asked;
7. on any failure **restore** every knob already attempted — the failing one
   included — in reverse order; **finish** by recording the outcome in the journal.

``rollback()`` undoes a committed transaction to the exact values before it
(``tune try`` without confirmation); :func:`undo` does the same from the journal
alone, for a try whose waiting process was killed.
"""

from __future__ import annotations

import errno
import json
import os
from typing import Dict, List, Optional, Set, Tuple, Union

from cxlctl import __version__
from cxlctl.errors import EXIT_LOCKED, CxlctlError, UsageError
from cxlctl.hostio import paths
from cxlctl.hostio.atomic import StorageError, atomic_write, read_only, remove
from cxlctl.hostio.host import Host
from cxlctl.hostio.lock import TuneLock
from cxlctl.hostio.paths import LOCK, PERSIST_SYSCTL, PERSIST_TMPFILES
from cxlctl.hostio.proc import has_cap
from cxlctl.hostio.reader import Reader, Unreadable
from cxlctl.hostio.write import KnobError, OutsideRoot, check_inside, pause_hook, write_with_retry
from cxlctl.model import Inventory
from cxlctl.progress import ProgressFn, tick

from . import journal as jn
from .conflicts import find, our_keys
from .journal import Entry, Journal, Trial
from .knobs import BY_NAME, WI_AUTO_NAMES, Current, Knob, read_current
from .plan import Plan, Restore, Step, memcgs_of
from .plan import plan as make_plan
from .profile import Profile, document, load
from .results import ApplyResult, Check, FileResult, Prepared, UndoResult
from .state import this_boot

ACTIVE_PROFILE = paths.ACTIVE_PROFILE
PERSIST_FILES = (PERSIST_SYSCTL, PERSIST_TMPFILES, ACTIVE_PROFILE)
CAP_SYS_ADMIN = 21


# ---------------------------------------------------------------------------- helpers


def canon(knob: str, raw: Optional[str]) -> Optional[str]:
    """The canonical form of a raw knob text (what plans and checks compare)."""
    if raw is None:
        return None
    c = BY_NAME[knob].canonical(raw)
    return c if c is not None else raw.strip()


def restore_map(j: Optional[Journal]) -> Restore:
    """path → (knob, original) of an applied journal (for switching profiles)."""
    if j is None:
        return {}
    return {e.path: (e.knob, e.original) for e in j.entries}


def persisted(host: Host) -> bool:
    """Whether a boot-time file of an earlier ``apply --persist`` is there (sysctl.d or tmpfiles.d)."""
    return any(os.path.exists(host.path(f)) for f in (PERSIST_SYSCTL, PERSIST_TMPFILES))


def _knob_file(r: Reader, path: str) -> Tuple[bool, Optional[str]]:
    """(exists, text) of a knob file through the fenced reader: text None when absent, or when
    it is there but cannot be read (a FIFO, a link out of the root, permission): then it exists."""
    try:
        b = r.read(path)
    except Unreadable:
        return True, None
    return (False, None) if b is None else (True, b.decode("utf-8", "replace"))


def _desired_values(p: Plan) -> Dict[str, Optional[str]]:
    return our_keys(
        (s.knob, s.path, s.desired) for s in p.steps if s.action in ("set", "noop") and BY_NAME[s.knob].kind != "group"
    )


def writable(path: str) -> bool:
    """Writable by this process (effective ids); for a missing path, its nearest existing parent."""
    p = path
    while not os.path.lexists(p):
        parent = os.path.dirname(p)
        if parent == p:
            return False
        p = parent
    if os.access in os.supports_effective_ids:
        return os.access(p, os.W_OK, effective_ids=True)
    return os.access(p, os.W_OK)


def preflight(host: Host, paths: List[str], knobs: Set[str], action: str, extra: Tuple[str, ...] = ()) -> None:
    """Refuse — before anything is written — when this process cannot write the targets.

    The check is on the files themselves (``access(W_OK)`` with effective ids), so it
    means the same for the live system and for a ``--root`` tree.  On the live
    system (root ``/``) kernel.numa_balancing also needs ``CAP_SYS_ADMIN``, which
    the file mode does not show, so the capability is checked too.  Under a ``--root``
    tree, a target, the journal or the lock reached through a link leading out of the
    tree is refused first (:func:`~cxlctl.hostio.write.check_inside`, exit 2).  Messages
    name the files under the root, where they are.
    """
    check_inside(host.root, [*paths, jn.JOURNAL, LOCK, *extra])
    denied = [p for p in paths if os.path.lexists(host.path(p)) and not writable(host.path(p))]
    denied += [p for p in (jn.RUN_DIR,) + extra if not writable(host.path(p))]
    cap = host.live and "kernel.numa_balancing" in knobs and not has_cap(CAP_SYS_ADMIN)
    if not denied and not cap:
        return
    ro = [p for p in denied if read_only(host.path(p))]
    if ro:
        # access(W_OK) fails on a read-only mount for root too: "run it as root" would mislead
        shown = ", ".join(host.path(p) for p in ro[:4]) + (f" and {len(ro) - 4} more" if len(ro) > 4 else "")
        raise CxlctlError(
            f"tune {action} cannot write {shown}: read-only file system; nothing was changed",
            hint="remount that file system read-write (`findmnt -T PATH` shows it), then run the command again",
        )
    shown = ", ".join(host.path(p) for p in denied[:4]) + (f" and {len(denied) - 4} more" if len(denied) > 4 else "")
    why = f"cannot write {shown}" if denied else "kernel.numa_balancing needs CAP_SYS_ADMIN"
    hint = "run it as root (sudo cxlctl tune " + action + " ...)"
    if os.geteuid() == 0 and denied:
        # root is refused only by the mount, a file attribute or a security module, never by modes
        hint = "you are root already: check the file's attributes (`lsattr`), its mount and any security module"
    if "kernel.numa_balancing" in knobs:
        hint += "; kernel.numa_balancing also needs CAP_SYS_ADMIN (containers and systemd units often drop it)"
    raise CxlctlError(f"tune {action} needs root: {why}; nothing was changed", hint=hint)


def member(knob: str, path: str) -> str:
    """Display name of one file of a knob (``weighted_interleave.node2``)."""
    if BY_NAME[knob].kind == "group":
        name = path.rsplit("/", 1)[-1]
        return f"{knob}." + ("auto" if name.endswith("auto_type") else name)
    return knob


class Progress:
    """Per-file outcome of one transaction (status and error by path) and the knobs attempted.

    A knob joins ``attempted`` *before* its first write (pyroute2's rule), so a
    rollback always includes the knob that failed or was interrupted.
    """

    def __init__(self, entries: List[Entry]) -> None:
        self.status: Dict[str, str] = {e.path: e.status for e in entries}
        self.errors: Dict[str, str] = {}
        self.attempted: List[str] = []

    def fail(self, path: str, status: str, error: str) -> None:
        self.status[path] = status
        self.errors[path] = error

    def entries(self, entries: List[Entry]) -> Tuple[Entry, ...]:
        return tuple(e._replace(status=self.status.get(e.path, e.status)) for e in entries)


#: what the kernel says when weighted interleave's ``auto`` is switched on without bandwidth figures
AUTO_WITHOUT_FIGURES = (
    "the kernel refuses to switch weighted_interleave.auto back on (ENODEV: it has no bandwidth figures, "
    "no HMAT/CDAT, for its nodes; Linux 6.16+ reads auto as true at boot all the same), so auto stays false; "
    "the weights are back at their saved values, which are what auto mode gave"
)


def _auto_without_figures(e: Entry, want: str, err: KnobError) -> bool:
    """Restoring ``auto = true`` refused with ENODEV: the kernel cannot re-enter auto mode (no figures)."""
    name = e.path.rsplit("/", 1)[-1]
    return (
        e.knob == "weighted_interleave"
        and name in WI_AUTO_NAMES
        and canon(e.knob, want) in ("true", "1")
        and err.errno == errno.ENODEV
    )


def restore_files(
    host: Host,
    entries: List[Entry],
    knobs: List[str],
    target: str,
    progress: Progress,
    notes: Optional[List[str]] = None,
) -> List[str]:
    """Put every file of ``knobs`` (in reverse knob order) back to ``target`` (prior|original).

    Within a knob, files go in the registry's file order (weights before ``auto``).
    Only files whose text differs are written; each write is read back.  One refusal is
    not a failure: ``auto = true`` on a kernel without bandwidth figures (ENODEV), where auto
    mode cannot be entered again once a weight was written; ``notes`` gets why.
    """
    failures: List[str] = []
    r = host.reread()  # after this command's writes (DAMON's re-create directories): no handle kept from before
    for knob in reversed(knobs):
        group = [x for x in entries if x.knob == knob]
        if knob == "damon":
            group = _damon_order(host, group, target, failures)
        for e in group:
            want = e.prior if target == "prior" else e.original
            exists, raw = _knob_file(r, e.path)
            if not exists:
                # a file the apply created (a kdamond's) is gone once its parent count is restored
                progress.status[e.path] = "gone" if want is not None else "removed"
                continue
            if raw == want:
                continue
            if want is None:
                progress.fail(e.path, "restore-failed", "no saved value to restore")
                failures.append(f"{e.path}: no saved value to restore")
                continue
            try:
                write_with_retry(host.root, e.path, want)
            except KnobError as err:
                if _auto_without_figures(e, want, err):
                    progress.status[e.path] = "unchanged"
                    if notes is not None:
                        notes.append(AUTO_WITHOUT_FIGURES)
                    continue
                progress.fail(e.path, "restore-failed", f"{err.kind}: {err.reason}")
                failures.append(f"{e.setting}: {err.kind}: {err.reason}")
                continue
            _, back = _knob_file(r, e.path)
            if canon(e.knob, back) != canon(e.knob, want):
                progress.fail(e.path, "restore-failed", f"reads {back!r} after restoring {want!r}")
                failures.append(f"{e.setting}: reads {(back or '').strip()!r} after restoring {want.strip()!r}")
            else:
                progress.status[e.path] = "restored" if target == "prior" else "reverted"
    return failures


def _damon_order(host: Host, group: List[Entry], target: str, failures: List[str]) -> List[Entry]:
    """DAMON's files in restore order, after stopping cxlctl's running kdamonds when needed.

    A kdamond only takes its files on ``on``/``commit``, and ``nr_kdamonds`` is refused (EBUSY)
    while any kdamond runs.  So when anything besides the ``state`` files must change back (a
    re-target re-created the kdamonds, or rewrote a running one's scheme), every journaled kdamond
    that runs is stopped first; then ``nr_kdamonds``, the member files (counts before children, in
    journal order) and last the ``state`` files — a kdamond that ran before starts again on exactly
    its restored files.  Otherwise (only states differ) the states alone are put back.
    """
    from .damon_tiering import NR_KDAMONDS, is_state

    states = [e for e in group if is_state(e.path)]
    rest = sorted((e for e in group if not is_state(e.path)), key=lambda e: e.path != NR_KDAMONDS)
    differs = False
    r = host.reread()
    for e in rest:
        want = e.prior if target == "prior" else e.original
        exists, raw = _knob_file(r, e.path)
        if e.path == NR_KDAMONDS or exists:
            differs = differs or (raw != want and want is not None)
    if differs:
        for e in states:
            _, raw = _knob_file(r, e.path)
            if raw is not None and raw.strip() == "on":
                try:
                    write_with_retry(host.root, e.path, "off\n")
                except KnobError as err:
                    failures.append(f"{e.setting}: cannot stop it before restoring: {err.kind}: {err.reason}")
    return rest + states


def verify_entries(host: Host, entries: List[Entry]) -> List[Check]:
    """Read back every file with a desired value: pass, drift or unsupported (vanished/unreadable)."""
    out = []
    r = host.reread()  # the read-back follows the writes
    for e in entries:
        if e.desired is None:
            continue
        exists, raw = _knob_file(r, e.path)
        if raw is None and BY_NAME[e.knob].name == "damon" and not exists:
            # a kdamond removed by hand (nr_kdamonds written) is drift, not a kernel without the file
            out.append(Check(e.setting, e.path, e.desired, None, "drift", "kdamond removed"))
            continue
        if raw is None:
            out.append(
                Check(
                    setting=e.setting,
                    path=e.path,
                    expected=e.desired,
                    actual=None,
                    status="unsupported",
                    note="vanished" if not exists else "unreadable",
                )
            )
            continue
        actual = canon(e.knob, raw)
        out.append(
            Check(
                setting=e.setting,
                path=e.path,
                expected=e.desired,
                actual=actual,
                status="pass" if actual == e.desired else "drift",
            )
        )
    return out


def restore_persist(host: Host, saved: Dict[str, Optional[str]]) -> Tuple[List[str], List[str]]:
    """Put persist files back (None = remove); (paths changed, errors)."""
    changed, errs = [], []
    for path, before in saved.items():
        try:
            if before is None:
                if remove(host.root, path):
                    changed.append(path)
            else:
                atomic_write(host.root, path, before.encode(), mode=0o644)
                changed.append(path)
        except OSError as e:
            errs.append(f"{host.path(path)}: {e.strerror}")
        except OutsideRoot as e:
            errs.append(str(e))
    return changed, errs


def file_results(entries: List[Entry], progress: Progress) -> Tuple[FileResult, ...]:
    return tuple(
        FileResult(
            setting=e.setting,
            path=e.path,
            before=canon(e.knob, e.prior),
            after=e.desired,
            status=progress.status.get(e.path, e.status),
            error=progress.errors.get(e.path),
        )
        for e in entries
    )


def _build_entries(p: Plan, cur: Current, restore: Restore) -> List[Entry]:
    steps = {s.path: s for s in p.steps if s.action in ("set", "noop", "restore")}
    baseline = dict(p.baseline)
    out = []
    for knob, path in p.saved:
        raw = cur.get(path)
        if raw is None:
            raw = baseline.get(path)
        st = steps.get(path)
        out.append(
            Entry(
                knob=knob,
                setting=st.setting if st else member(knob, path),
                path=path,
                original=restore[path][1] if path in restore else raw,
                prior=raw,
                desired=st.desired if st else None,
                write=st.write if st else None,
                status="pending" if st is not None and st.write is not None else "unchanged",
            )
        )
    return out


def _persist_contents(p: Plan, profile: Profile) -> Dict[str, Optional[str]]:
    """Each persist file's new text (None: the file is removed, nothing of the profile needs it).

    Sysctls go to sysctl.d for systemd-sysctl; single sysfs files (``demotion_enabled``,
    ``auto_online_blocks``) to tmpfiles.d, whose ``w`` lines systemd-tmpfiles writes at boot
    ("Write the argument parameter to a file, if the file exists", tmpfiles.d(5)): without it
    ``numa_balancing=2`` came back at boot and demotion did not.  The groups (weights, DAMON)
    depend on nodes and memory that appear later in boot: the daemon re-applies them from
    ``active-profile``.
    """
    head = f"# Written by cxlctl {__version__}: `cxlctl tune apply --persist {profile.name}` ({jn.now()})."
    keep = "# `cxlctl tune revert` removes this file. Edit the profile, not this file."
    sysctl = [head, keep]
    tmpfiles = [head, keep, "# Type Path Mode User Group Age Argument (tmpfiles.d(5): w writes the file if it exists)"]
    for knob, desired in persisted_knobs(p):
        if knob.sysctl_key:
            sysctl.append(f"{knob.sysctl_key} = {desired}")
        else:
            tmpfiles.append(f"w {knob.path} - - - - {knob.text(desired).strip()}")
    active = {
        "schema": 1,
        "profile": profile.name,
        "source": profile.source,
        # the document itself: the daemon applies it at boot without re-reading a file another
        # user may have changed since (issue 43); includes still resolve by name or path
        "document": document(profile),
        "applied": jn.now(),
        "note": "the cxlctl daemon re-applies this profile at boot (sysfs knobs and weights)",
    }
    active["checksum"] = jn.checksum(active)  # the daemon refuses a damaged record (journal.verified)
    return {
        PERSIST_SYSCTL: "\n".join(sysctl) + "\n",
        PERSIST_TMPFILES: "\n".join(tmpfiles) + "\n" if len(tmpfiles) > 3 else None,
        ACTIVE_PROFILE: json.dumps(active, indent=2) + "\n",
    }


def persisted_knobs(p: Plan) -> List[Tuple[Knob, str]]:
    """(knob, desired value) of every single-file knob the plan sets: what the persist files carry."""
    out = []
    for s in p.steps:
        knob = BY_NAME[s.knob]
        if knob.kind != "group" and s.desired is not None and s.action in ("set", "noop"):
            out.append((knob, s.desired))
    return out


def boot_only_by_daemon(p: Plan) -> List[str]:
    """The knobs the plan sets that no persist file carries (weights, DAMON): only the daemon re-applies them."""
    return sorted({s.knob for s in p.steps if BY_NAME[s.knob].kind == "group" and s.action in ("set", "noop")})


def _refuse_unsettled(old: Journal) -> None:
    """An earlier transaction that left knobs in an unknown state needs a human first."""
    if old.state == jn.APPLYING:
        raise CxlctlError(
            f"an earlier apply of {old.profile} (pid {old.pid}, {old.started}) was interrupted; "
            "its knobs may be half-changed",
            hint="run `cxlctl tune revert` to restore the original values, then apply again",
        )
    if old.state in (jn.ROLLBACK_FAILED, jn.REVERT_FAILED):
        raise CxlctlError(
            f"the last {'apply' if old.state == jn.ROLLBACK_FAILED else 'revert'} could not restore every knob "
            f"({old.error or old.state})",
            hint="run `cxlctl tune revert` (and `cxlctl tune status`) until it succeeds, then apply again",
        )
    if old.state == jn.APPLIED and old.trial is not None and old.trial.pending:
        # exit 4 like a held lock: the try holds the knobs until it is confirmed or runs out
        raise CxlctlError(
            f"a `tune try` of {old.profile} is waiting for confirmation (pid {old.trial.pid})",
            code=EXIT_LOCKED,
            hint="confirm it (`cxlctl tune confirm`), or let it time out, then apply again",
        )


# ---------------------------------------------------------------------------- the transaction


class Transaction:
    """One profile against one host: the plan now, ``commit()`` to apply it, ``rollback()`` to undo it.

    ``profile``: a :class:`Profile` (e.g. built in memory) or a reference to load.
    ``inventory``: a scan the caller already has (the daemon's); scanned when None.
    ``persist``: report conflicts as if persisted (None: as the host is now).
    ``switching``: plan as a switch from the applied profile (knobs it set and this
    profile does not mention are restored); False compares with the profile alone.
    """

    def __init__(
        self,
        host: Host,
        profile: Union[Profile, str],
        *,
        inventory: Optional[Inventory] = None,
        persist: Optional[bool] = None,
        switching: bool = True,
    ) -> None:
        self.host = host
        self.profile = load(host, profile) if isinstance(profile, str) else profile
        self.prepared = self._prepare(inventory, persist, switching)
        self.journal: Optional[Journal] = None  # after commit: the journal written
        self._previous: Optional[Journal] = None  # the journal this commit replaced

    @property
    def plan(self) -> Plan:
        return self.prepared.plan

    # -- phases ------------------------------------------------------------------------

    def _prepare(self, inventory: Optional[Inventory], persist: Optional[bool], switching: bool) -> Prepared:
        """Profile + inventory + current values → plan and conflicts (no writes)."""
        if inventory is None:
            from cxlctl.inventory import scan

            inventory = scan(self.host)
        messages: List[str] = []
        j = this_boot(self.host, messages)
        active = j if j is not None and j.state == jn.APPLIED and switching else None
        p = make_plan(inventory, self.profile, read_current(self.host, memcgs_of(self.profile)), restore_map(active))
        persisting = persisted(self.host) if persist is None else persist
        conflicts = tuple(find(self.host, _desired_values(p), persisting))
        return Prepared(
            profile=self.profile,
            inventory=inventory,
            plan=p,
            conflicts=conflicts,
            active=active,
            messages=tuple(messages),
        )

    def _check(self, p: Plan, extra: Tuple[str, ...]) -> None:
        if p.refusals:
            raise UsageError(
                f"tune apply {p.profile} refused; nothing was changed: " + " ".join(p.refusals),
                hint="`cxlctl tune plan` shows the plan; docs/tuning.md (DAMON tiering) explains the choice",
            )
        preflight(self.host, [s.path for s in p.writes], {s.knob for s in p.writes}, "apply", extra)

    def _settle(self, messages: List[str]) -> Optional[Journal]:
        """The journal found under the lock: an earlier boot's is discarded; unsettled ones refuse."""
        old = jn.load(self.host)
        if old is not None and not jn.same_boot(old, self.host.boot_id):
            jn.discard(self.host)
            messages.append(
                f"discarded the tuning journal of an earlier boot ({old.boot_id}, profile {old.profile}): "
                "the kernel reset those values when it booted"
            )
            return None
        if old is not None:
            _refuse_unsettled(old)
        return old

    def _replan(self, active: Optional[Journal], extra: Tuple[str, ...]) -> Tuple[Plan, Current]:
        """Plan again under the lock: knob values may have changed while we waited (the
        inventory — nodes, bandwidth — is reused: it does not change with knobs)."""
        self.host.reread()  # another writer may have re-created DAMON's directories meanwhile
        cur = read_current(self.host, memcgs_of(self.profile))
        p = make_plan(self.prepared.inventory, self.profile, cur, restore_map(active))
        if p.writes != self.prepared.plan.writes:
            self._check(p, extra)
        self.prepared = self.prepared._replace(plan=p, active=active)
        return p, cur

    def _journal(
        self, p: Plan, entries: List[Entry], active: Optional[Journal], persist: bool, messages: List[str]
    ) -> Journal:
        """Write-ahead: the originals are durable before the first knob write."""
        persist_saved: Dict[str, Optional[str]] = dict(active.persist) if active else {}
        if persist:
            r = self.host.reader
            for path in PERSIST_FILES:
                persist_saved.setdefault(path, _knob_file(r, path)[1])
        elif persisted(self.host):
            messages.append(
                f"{self.host.path(PERSIST_SYSCTL)} (from an earlier `apply --persist`) still sets the boot-time values; "
                "add --persist to update it, or `cxlctl tune revert` to remove it"
            )
        j = Journal(
            schema=jn.SCHEMA,
            state=jn.APPLYING,
            profile=p.profile,
            profile_source=p.source,
            boot_id=self.host.boot_id,
            pid=os.getpid(),
            tool=f"cxlctl {__version__}",
            started=jn.now(),
            finished=None,
            entries=tuple(entries),
            skipped=tuple((s.setting, s.note) for s in p.steps if s.action in ("unsupported", "skip")),
            persist=persist_saved,
            previous_profile=active.profile if active else None,
            profile_data=self.profile.data,
        )
        jn.save(self.host, j)
        pause_hook(self.host.root, 0)
        return j

    def _write(
        self, writes: Tuple[Step, ...], progress: Progress, on_progress: Optional[ProgressFn] = None
    ) -> Optional[Step]:
        """Write each step; the failing step, or None (``on_progress`` after each step)."""
        for i, st in enumerate(writes, 1):
            assert st.write is not None
            if st.knob not in progress.attempted:
                progress.attempted.append(st.knob)
            try:
                write_with_retry(self.host.root, st.path, st.write, index=i)
                progress.status[st.path] = "written"
            except KnobError as e:
                _, raw = _knob_file(self.host.reread(), st.path)
                command = st.write.strip() == "commit"  # reads back "on" whether or not the kernel took it
                if raw is not None and st.desired is not None and not command and canon(st.knob, raw) == st.desired:
                    # raced to the same value (another agent), or the write took effect after all
                    progress.status[st.path] = "written"
                    progress.errors[st.path] = f"{e.kind}: {e.reason}, but the file now holds the wanted value"
                else:
                    progress.fail(st.path, "failed", f"{e.kind}: {e.reason}")
                    return st
            tick(on_progress, i, len(writes), "writing tuning knobs")
            pause_hook(self.host.root, i)
        return None

    def _interrupted(
        self, j: Journal, entries: List[Entry], active: Optional[Journal], progress: Progress
    ) -> CxlctlError:
        """Ctrl-C between two writes: undo what was written, like any failure."""
        rb = restore_files(self.host, entries, progress.attempted, "prior", progress)
        done = progress.entries(entries)
        if rb:
            jn.save(
                self.host, j._replace(state=jn.ROLLBACK_FAILED, finished=jn.now(), entries=done, error="interrupted")
            )
        elif active is not None:
            jn.save(self.host, active._replace(error=f"switching to {j.profile} was interrupted and rolled back"))
        else:
            jn.save(self.host, j._replace(state=jn.ROLLED_BACK, finished=jn.now(), entries=done, error="interrupted"))
        return CxlctlError(
            "interrupted" + ("; ROLLBACK INCOMPLETE: " + "; ".join(rb) if rb else "; every change was rolled back"),
            hint="see `cxlctl tune status`",
        )

    def _verify(self, entries: List[Entry]) -> Tuple[List[Check], Optional[str]]:
        checks = verify_entries(self.host, entries)
        bad = [c for c in checks if c.status != "pass" and c.status != "unsupported"]
        if not bad:
            return checks, None
        return checks, "read-back after apply: " + "; ".join(
            f"{c.setting} reads {c.actual!r}, wanted {c.expected!r}" for c in bad
        )

    def _boot_note(self, p: Plan) -> List[str]:
        """What ``--persist`` cannot carry to boot in a file (weights, DAMON), and who does."""
        later = boot_only_by_daemon(p)
        if not later:
            return []
        return [
            f"{', '.join(later)}: in no boot file (they depend on nodes and memory that appear "
            f"later in boot); only the cxlctl daemon re-applies them at boot, from "
            f"{self.host.path(ACTIVE_PROFILE)}: check `systemctl is-enabled cxlctl.service`, "
            "enable it with `sudo systemctl enable --now cxlctl.service`"
        ]

    def _persist(self, p: Plan, done: List[str]) -> Optional[str]:
        """Write the boot-time files (``done`` collects what was written); an error, or None."""
        try:
            for path, text in _persist_contents(p, self.profile).items():
                if text is None:
                    if remove(self.host.root, path):
                        done.append(path)
                    continue
                atomic_write(self.host.root, path, text.encode(), mode=0o644)
                done.append(path)
        except OSError as e:
            return f"cannot persist: {self.host.path(path)}: {e.strerror}"
        except OutsideRoot as e:
            return f"cannot persist: {e}"
        return None

    def _restore(
        self, entries: List[Entry], progress: Progress, persist_saved: Dict[str, Optional[str]], written: List[str]
    ) -> List[str]:
        """After a failure: every knob attempted back to its prior value, persist files too."""
        errors = restore_files(self.host, entries, progress.attempted, "prior", progress)
        if written:
            _, perr = restore_persist(self.host, {k: v for k, v in persist_saved.items() if k in written})
            errors += perr
            written.clear()
        return errors

    def _finish(
        self,
        j: Journal,
        final: Tuple[Entry, ...],
        active: Optional[Journal],
        error: Optional[str],
        rollback_errors: List[str],
        trial: Optional[Trial],
    ) -> Journal:
        """Record the outcome: applied, rolled back, the previous profile again, or rollback-failed."""
        if error is None:
            j = j._replace(state=jn.APPLIED, finished=jn.now(), entries=final, trial=trial)
        elif rollback_errors:
            j = j._replace(state=jn.ROLLBACK_FAILED, finished=jn.now(), entries=final, error=error)
        elif active is not None:
            # a failed switch: the previous profile is in effect again
            j = active._replace(error=f"switching to {j.profile} failed and was rolled back: {error}")
        else:
            j = j._replace(state=jn.ROLLED_BACK, finished=jn.now(), entries=final, error=error)
        jn.save(self.host, j)
        return j

    def _unrecorded(
        self, e: StorageError, j: Journal, entries: List[Entry], progress: Progress, written: List[str], undo: bool
    ) -> StorageError:
        """The outcome cannot be recorded (the journal's storage failed after the knob writes).

        Undo the apply (when it had not failed already), so no knob is left changed while the
        journal on disk — the write-ahead one, state ``applying`` with the boot values — is the
        only record; ``tune revert`` settles it once the storage is fixed.
        """
        errors = self._restore(entries, progress, j.persist, written) if undo else []
        done = (
            "ROLLBACK INCOMPLETE: " + "; ".join(errors) if errors else "every change was rolled back"
        ) + f"; the journal still holds the boot values (run `cxlctl tune revert` once {e.path} can be written)"
        return StorageError(e.path, e.cause, done)

    # -- commit / rollback -------------------------------------------------------------

    def commit(
        self,
        *,
        dry_run: bool = False,
        persist: bool = False,
        wait: Optional[float] = None,
        trial_timeout: Optional[float] = None,
        on_progress: Optional[ProgressFn] = None,
    ) -> ApplyResult:
        """Apply the plan transactionally (the phases in the module docstring).

        ``trial_timeout``: record the apply as a `tune try` that must be confirmed within
        that many seconds (see :mod:`cxlctl.tuning.trial`).
        ``on_progress``: called after each knob write (done, total, what; :mod:`cxlctl.progress`).
        """
        prep = self.prepared
        if dry_run:
            return ApplyResult(
                ok=True,
                dry_run=True,
                prepared=prep,
                results=(),
                journal=None,
                error=None,
                rollback_errors=(),
                checks=(),
                persisted=(),
                messages=prep.messages,
            )
        extra = PERSIST_FILES if persist else ()
        self._check(prep.plan, extra)
        messages: List[str] = []
        with TuneLock(self.host.root, wait):
            old = self._settle(messages)
            active = old if old is not None and old.state == jn.APPLIED else None
            p, cur = self._replan(active, extra)
            entries = _build_entries(p, cur, restore_map(active))
            j = self._journal(p, entries, active, persist, messages)
            progress = Progress(entries)
            try:
                failed = self._write(p.writes, progress, on_progress)
            except KeyboardInterrupt:
                raise self._interrupted(j, entries, active, progress) from None
            checks: List[Check] = []
            written: List[str] = []
            error: Optional[str] = None
            if failed is not None:
                error = f"{failed.setting}: {progress.errors.get(failed.path, 'failed')}"
            else:
                checks, error = self._verify(entries)
                if error is None and persist:
                    error = self._persist(p, written)
                    if error is None:
                        messages += self._boot_note(p)
            rollback_errors = self._restore(entries, progress, j.persist, written) if error is not None else []
            trial = None
            if trial_timeout is not None:
                import time

                trial = Trial(
                    deadline=time.time() + trial_timeout, timeout=trial_timeout, pid=os.getpid(), previous=old
                )
            try:
                j = self._finish(j, progress.entries(entries), active, error, rollback_errors, trial)
            except StorageError as e:
                raise self._unrecorded(e, j, entries, progress, written, error is None) from None
        self.journal = j if error is None else None
        self._previous = old
        return ApplyResult(
            ok=error is None,
            dry_run=False,
            prepared=self.prepared,
            results=file_results(entries, progress),
            journal=j,
            error=error,
            rollback_errors=tuple(rollback_errors),
            checks=tuple(checks),
            persisted=tuple(written),
            messages=prep.messages + tuple(messages),
        )

    def rollback(self, *, wait: Optional[float] = None) -> UndoResult:
        """Undo a committed transaction to the exact values before it, and put back the journal it replaced.

        Refuses when the journal on disk is no longer this transaction's (another apply or a
        revert came after it: undoing would clobber that).
        """
        if self.journal is None:
            raise CxlctlError("nothing to roll back: this transaction did not commit")
        mine = self.journal
        with TuneLock(self.host.root, wait):
            j = jn.load(self.host)
            if j is None or j.pid != mine.pid or j.started != mine.started or j.state != jn.APPLIED:
                raise CxlctlError(
                    f"cannot roll back {mine.profile}: the tuning journal changed since it was applied",
                    hint="see `cxlctl tune status`",
                )
            return undo(self.host, j, self._previous)


def undo(host: Host, j: Journal, previous: Optional[Journal]) -> UndoResult:
    """Put every file of journal ``j`` back to its value before ``j`` (its ``prior``), then record
    ``previous`` (the journal ``j`` replaced) as in effect again — or ``j`` as rolled back when
    there was none.  The caller holds the lock."""
    entries = list(j.entries)
    progress = Progress(entries)
    for e in entries:
        progress.status[e.path] = "unchanged"
    knobs: List[str] = []
    for e in entries:
        if e.knob not in knobs:
            knobs.append(e.knob)
    errors = restore_files(host, entries, knobs, "prior", progress)
    messages: List[str] = []
    # the journal on disk keeps the boot values whatever happens below: `tune revert` settles it
    done = ("; ".join(errors) + "; " if errors else "the knobs are back to their values before the try; ") + (
        "the journal still records the try: `cxlctl tune revert` once it can be written"
    )
    if errors:
        jn.save(
            host,
            j._replace(
                state=jn.ROLLBACK_FAILED,
                finished=jn.now(),
                entries=progress.entries(entries),
                error="undoing the try: " + "; ".join(errors),
                trial=None,
            ),
            done=done,
        )
    elif previous is not None:
        jn.save(host, previous, done=done)
    else:
        jn.save(
            host,
            j._replace(
                state=jn.ROLLED_BACK,
                finished=jn.now(),
                entries=progress.entries(entries),
                error="the try was not confirmed and was rolled back",
                trial=None,
            ),
            done=done,
        )
    back_to = previous.profile if previous is not None and previous.state == jn.APPLIED else None
    results = tuple(
        FileResult(
            setting=e.setting,
            path=e.path,
            before=e.desired,
            after=canon(e.knob, e.prior),
            status=progress.status[e.path],
            error=progress.errors.get(e.path),
        )
        for e in entries
    )
    return UndoResult(
        ok=not errors,
        profile=j.profile,
        back_to=back_to,
        results=results,
        errors=tuple(errors),
        messages=tuple(messages),
    )
