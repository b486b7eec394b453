"""apply / verify / revert / status: the transactional part of the tuning engine.

Apply follows pyroute2's transaction with TuneD's save-the-original and
daxctl's re-read-after-failure (docs/tuning.md has the full story):

1. load and validate the profile, scan, read the knobs, plan (pure);
2. check, before touching anything, that every target file is writable (and,
   on the live system, that ``CAP_SYS_ADMIN`` is there for numa_balancing);
3. take the lock (``/run/cxlctl/lock``, shared with the daemon);
4. write the journal — every file of every knob group the plan touches, with
   its original value — atomically and durably, *before* the first knob write;
5. write the knobs one by one (:func:`~.write.write_knob`); on a failure,
   re-read (another agent may have raced us to the same value), otherwise stop
   and restore every knob already attempted — the failing one included — in
   reverse order, and record in the journal what happened;
6. verify by reading everything back; persist if asked; mark the journal applied.

Revert restores the journal's originals in reverse order; it is also the
crash recovery, since a killed apply leaves a journal in state ``applying``.

Every function returns a result object; the CLI (``cxlctl.cli_tune``) decides
exit codes and rendering.  Nothing here prints.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, NamedTuple, Optional, Set, Tuple

from cxlctl import __version__
from cxlctl.errors import EXIT_FAILURE, CxlctlError
from cxlctl.model import Inventory
from cxlctl.rootpath import under as host

from . import journal as jn
from .conflicts import PERSIST_SYSCTL, Conflict, find, our_keys
from .journal import Entry, Journal
from .knobs import BY_NAME, Current, read_current
from .lock import TuneLock, holder, is_held
from .plan import Plan, Restore, Step
from .plan import plan as make_plan
from .profile import Profile, load
from .write import KnobError, pause_hook, read_raw, write_with_retry

ACTIVE_PROFILE = "/var/lib/cxlctl/active-profile"
PERSIST_FILES = (PERSIST_SYSCTL, ACTIVE_PROFILE)
CAP_SYS_ADMIN = 21


# ---------------------------------------------------------------------------- results


class FileResult(NamedTuple):
    setting: str
    path: str
    before: Optional[str]  # canonical value found
    after: Optional[str]  # canonical value wanted
    status: str
    error: Optional[str] = None


class Check(NamedTuple):
    setting: str
    path: str
    expected: Optional[str]
    actual: Optional[str]
    status: str  # pass | drift | unsupported
    note: str = ""


class Prepared(NamedTuple):
    profile: Profile
    inventory: Inventory
    plan: Plan
    conflicts: Tuple[Conflict, ...]
    active: Optional[Journal]  # the journal in effect this boot (state applied), if any
    messages: Tuple[str, ...]


class ApplyResult(NamedTuple):
    ok: bool
    dry_run: bool
    prepared: Prepared
    results: Tuple[FileResult, ...]
    journal: Optional[Journal]
    error: Optional[str]
    rollback_errors: Tuple[str, ...]
    checks: Tuple[Check, ...]
    persisted: Tuple[str, ...]
    messages: Tuple[str, ...]


class VerifyResult(NamedTuple):
    profile: str
    basis: str  # "journal" | "profile"
    checks: Tuple[Check, ...]
    messages: Tuple[str, ...]

    @property
    def drift(self) -> int:
        return sum(1 for c in self.checks if c.status == "drift")


class RevertResult(NamedTuple):
    ok: bool
    profile: Optional[str]
    state_before: Optional[str]
    results: Tuple[FileResult, ...]
    removed: Tuple[str, ...]
    errors: Tuple[str, ...]
    messages: Tuple[str, ...]


# ---------------------------------------------------------------------------- helpers


def _canon(path_knob: str, raw: Optional[str]) -> Optional[str]:
    if raw is None:
        return None
    knob = BY_NAME[path_knob]
    c = knob.canonical(raw)
    return c if c is not None else raw.strip()


def restore_map(j: Optional[Journal]) -> Dict[str, Tuple[str, Optional[str]]]:
    """path → (knob, original) of an applied journal (for switching profiles)."""
    if j is None:
        return {}
    return {e.path: (e.knob, e.original) for e in j.entries}


def _peek(root: str, messages: List[str]) -> Optional[Journal]:
    """The journal if it belongs to this boot (read-only; nothing is discarded here)."""
    j = jn.load(root)
    if j is None:
        return None
    if not jn.same_boot(j, jn.boot_id(root)):
        messages.append(f"the tuning journal is from an earlier boot ({j.boot_id}); it will be discarded")
        return None
    return j


def _persisted(root: str) -> bool:
    return os.path.exists(host(root, PERSIST_SYSCTL))


def _desired_values(p: Plan) -> Dict[str, Optional[str]]:
    return our_keys(
        (s.knob, s.path, s.desired) for s in p.steps if s.action in ("set", "noop") and BY_NAME[s.knob].kind != "group"
    )


def prepare(root: str, ref: str, *, persist: Optional[bool] = None, switching: bool = True) -> Prepared:
    """Profile + inventory + current values → plan and conflicts (no writes).

    ``switching``: plan as a switch from the applied profile (knobs it set and this
    profile does not mention are restored); False compares with the profile alone.
    """
    from cxlctl.inventory import scan

    profile = load(root, ref)
    inv = scan(root)
    cur = read_current(root)
    messages: List[str] = []
    j = _peek(root, messages)
    active = j if j is not None and j.state == jn.APPLIED and switching else None
    p = make_plan(inv, profile, cur, restore_map(active))
    persisting = _persisted(root) if persist is None else persist
    conflicts = tuple(find(root, _desired_values(p), persisting))
    return Prepared(profile, inv, p, conflicts, active, tuple(messages))


def _has_cap(bit: int) -> bool:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> bit & 1)
    except (OSError, ValueError, IndexError):
        pass
    return os.geteuid() == 0


def _writable(path: str) -> bool:
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


def preflight(root: str, paths: List[str], knobs: Set[str], action: str, extra: Tuple[str, ...] = ()) -> None:
    """Refuse — before anything is written — when this process cannot write the targets.

    The check is on the files themselves (``access(W_OK)`` with effective ids), so it
    means the same for the live system and for a ``--root`` tree.  On the live
    system (root ``/``) kernel.numa_balancing also needs ``CAP_SYS_ADMIN``, which
    the file mode does not show, so the capability is checked too.
    """
    denied = [p for p in paths if os.path.lexists(host(root, p)) and not _writable(host(root, p))]
    denied += [p for p in (jn.RUN_DIR,) + extra if not _writable(host(root, p))]
    cap = root == "/" and "kernel.numa_balancing" in knobs and not _has_cap(CAP_SYS_ADMIN)
    if not denied and not cap:
        return
    shown = ", ".join(denied[:4]) + (f" and {len(denied) - 4} more" if len(denied) > 4 else "")
    why = f"cannot write {shown}" if denied else "kernel.numa_balancing needs CAP_SYS_ADMIN"
    hint = "run it as root (sudo cxlctl tune " + action + " ...)"
    if "kernel.numa_balancing" in knobs:
        hint += "; kernel.numa_balancing also needs CAP_SYS_ADMIN (containers and systemd units often drop it)"
    raise CxlctlError(f"tune {action} needs root: {why}; nothing was changed", hint=hint)


# ---------------------------------------------------------------------------- transaction


def _build_entries(p: Plan, cur: Current, restore: Restore) -> List[Entry]:
    steps = {s.path: s for s in p.steps if s.action in ("set", "noop", "restore")}
    out = []
    for knob, path in p.saved:
        raw = cur.get(path)
        st = steps.get(path)
        original = restore[path][1] if path in restore else raw
        out.append(
            Entry(
                knob=knob,
                setting=st.setting if st else _member(knob, path),
                path=path,
                original=original,
                prior=raw,
                desired=st.desired if st else None,
                write=st.write if st else None,
                status="pending" if st is not None and st.write is not None else "unchanged",
            )
        )
    return out


def _member(knob: str, path: str) -> str:
    if BY_NAME[knob].kind == "group":
        name = path.rsplit("/", 1)[-1]
        return f"{knob}." + ("auto" if name.endswith("auto_type") else name)
    return knob


def _run_writes(
    root: str, writes: Tuple[Step, ...], status: Dict[str, str], errors: Dict[str, str], attempted: List[str]
) -> Optional[Step]:
    """Write each step; the failing step, or None.  Fills status/errors per path.

    A knob joins ``attempted`` *before* its first write (pyroute2's rule), so a
    rollback always includes the knob that failed or was interrupted.
    """
    for i, st in enumerate(writes, 1):
        assert st.write is not None
        if st.knob not in attempted:
            attempted.append(st.knob)
        hp = host(root, st.path)
        try:
            write_with_retry(hp, st.write, index=i)
            status[st.path] = "written"
        except KnobError as e:
            _, raw = read_raw(hp)
            if raw is not None and st.desired is not None and _canon(st.knob, raw) == st.desired:
                # raced to the same value (another agent), or the write took effect after all
                status[st.path] = "written"
                errors[st.path] = f"{e.kind}: {e.reason}, but the file now holds the wanted value"
            else:
                status[st.path] = "failed"
                errors[st.path] = f"{e.kind}: {e.reason}"
                return st
        pause_hook(i)
    return None


def _restore(
    root: str,
    entries: List[Entry],
    knobs: List[str],
    target: str,
    status: Dict[str, str],
    errors: Dict[str, str],
) -> List[str]:
    """Put every file of ``knobs`` (in reverse knob order) back to ``target`` (prior|original).

    Within a knob, files go in the registry's file order (weights before ``auto``).
    Only files whose text differs are written; each write is read back.
    """
    failures: List[str] = []
    for knob in reversed(knobs):
        for e in [x for x in entries if x.knob == knob]:
            want = e.prior if target == "prior" else e.original
            hp = host(root, e.path)
            exists, raw = read_raw(hp)
            if not exists:
                status[e.path] = "gone"
                continue
            if raw == want:
                continue
            if want is None:
                status[e.path] = "restore-failed"
                errors[e.path] = "no saved value to restore"
                failures.append(f"{e.path}: no saved value to restore")
                continue
            try:
                write_with_retry(hp, want)
            except KnobError as err:
                status[e.path] = "restore-failed"
                errors[e.path] = f"{err.kind}: {err.reason}"
                failures.append(f"{e.setting}: {err.kind}: {err.reason}")
                continue
            _, back = read_raw(hp)
            if _canon(e.knob, back) != _canon(e.knob, want):
                status[e.path] = "restore-failed"
                errors[e.path] = f"reads {back!r} after restoring {want!r}"
                failures.append(f"{e.setting}: reads {(back or '').strip()!r} after restoring {want.strip()!r}")
            else:
                status[e.path] = "restored" if target == "prior" else "reverted"
    return failures


def _verify_entries(root: str, entries: List[Entry]) -> List[Check]:
    out = []
    for e in entries:
        if e.desired is None:
            continue
        exists, raw = read_raw(host(root, e.path))
        if raw is None:
            out.append(
                Check(e.setting, e.path, e.desired, None, "unsupported", "vanished" if not exists else "unreadable")
            )
            continue
        actual = _canon(e.knob, raw)
        out.append(Check(e.setting, e.path, e.desired, actual, "pass" if actual == e.desired else "drift"))
    return out


def _persist_contents(p: Plan, profile: Profile) -> Dict[str, str]:
    lines = [
        f"# Written by cxlctl {__version__}: `cxlctl tune apply --persist {profile.name}` ({jn.now()}).",
        "# `cxlctl tune revert` removes this file. Edit the profile, not this file.",
    ]
    for s in p.steps:
        knob = BY_NAME[s.knob]
        if knob.sysctl_key and s.desired is not None and s.action in ("set", "noop"):
            lines.append(f"{knob.sysctl_key} = {s.desired}")
    active = {
        "schema": 1,
        "profile": profile.name,
        "source": profile.source,
        "applied": jn.now(),
        "note": "the cxlctl daemon re-applies this profile at boot (sysfs knobs and weights)",
    }
    return {PERSIST_SYSCTL: "\n".join(lines) + "\n", ACTIVE_PROFILE: json.dumps(active, indent=2) + "\n"}


def _restore_persist(root: str, saved: Dict[str, Optional[str]]) -> Tuple[List[str], List[str]]:
    """Put persist files back (None = remove); (paths changed, errors)."""
    changed, errs = [], []
    for path, before in saved.items():
        hp = host(root, path)
        try:
            if before is None:
                if os.path.lexists(hp):
                    os.unlink(hp)
                    changed.append(path)
            else:
                jn.atomic_write(hp, before.encode(), 0o644)
                changed.append(path)
        except OSError as e:
            errs.append(f"{path}: {e.strerror}")
    return changed, errs


def _read_text(root: str, path: str) -> Optional[str]:
    return read_raw(host(root, path))[1]


# ---------------------------------------------------------------------------- apply


def apply(
    root: str, ref: str, *, dry_run: bool = False, persist: bool = False, wait: Optional[float] = None
) -> ApplyResult:
    """Apply profile ``ref`` transactionally (see the module docstring)."""
    prep = prepare(root, ref, persist=persist or None)
    if dry_run:
        return ApplyResult(True, True, prep, (), None, None, (), (), (), prep.messages)
    p0 = prep.plan
    knobs = {s.knob for s in p0.steps if s.write is not None}
    extra = PERSIST_FILES if persist else ()
    preflight(root, [s.path for s in p0.writes], knobs, "apply", extra)
    messages: List[str] = []
    with TuneLock(root, wait):
        bid = jn.boot_id(root)
        old = jn.load(root)
        if old is not None and not jn.same_boot(old, bid):
            jn.discard(root)
            messages.append(
                f"discarded the tuning journal of an earlier boot ({old.boot_id}, profile {old.profile}): "
                "the kernel reset those values when it booted"
            )
            old = None
        if old is not None and old.state == jn.APPLYING:
            raise CxlctlError(
                f"an earlier apply of {old.profile} (pid {old.pid}, {old.started}) was interrupted; "
                "its knobs may be half-changed",
                hint="run `cxlctl tune revert` to restore the original values, then apply again",
            )
        if old is not None and old.state in (jn.ROLLBACK_FAILED, jn.REVERT_FAILED):
            raise CxlctlError(
                f"the last {'apply' if old.state == jn.ROLLBACK_FAILED else 'revert'} could not restore every knob "
                f"({old.error or old.state})",
                hint="run `cxlctl tune revert` (and `cxlctl tune status`) until it succeeds, then apply again",
            )
        active = old if old is not None and old.state == jn.APPLIED else None
        restore = restore_map(active)
        # re-plan under the lock: knob values may have changed while we waited (the
        # inventory — nodes, bandwidth — is reused: it does not change with knobs)
        cur = read_current(root)
        p = make_plan(prep.inventory, prep.profile, cur, restore)
        if p.writes != p0.writes:
            preflight(root, [s.path for s in p.writes], {s.knob for s in p.writes}, "apply", extra)
        prep = prep._replace(plan=p, active=active)
        entries = _build_entries(p, cur, restore)
        persist_saved: Dict[str, Optional[str]] = dict(active.persist) if active else {}
        if persist:
            for path in PERSIST_FILES:
                persist_saved.setdefault(path, _read_text(root, path))
        elif _persisted(root):
            messages.append(
                f"{PERSIST_SYSCTL} (from an earlier `apply --persist`) still sets the boot-time values; "
                "add --persist to update it, or `cxlctl tune revert` to remove it"
            )
        j = Journal(
            schema=jn.SCHEMA,
            state=jn.APPLYING,
            profile=p.profile,
            profile_source=p.source,
            boot_id=bid,
            pid=os.getpid(),
            tool=f"cxlctl {__version__}",
            started=jn.now(),
            finished=None,
            entries=tuple(entries),
            skipped=tuple((s.setting, s.note) for s in p.steps if s.action in ("unsupported", "skip")),
            persist=persist_saved,
            previous_profile=active.profile if active else None,
        )
        jn.save(root, j)  # write-ahead: originals are durable before the first knob write
        pause_hook(0)
        status: Dict[str, str] = {e.path: e.status for e in entries}
        errors: Dict[str, str] = {}
        attempted: List[str] = []
        try:
            failed = _run_writes(root, p.writes, status, errors, attempted)
        except KeyboardInterrupt:
            # Ctrl-C between two writes: undo what was written, like any failure
            rb = _restore(root, entries, attempted, "prior", status, errors)
            done = tuple(e._replace(status=status.get(e.path, e.status)) for e in entries)
            if rb:
                jn.save(
                    root, j._replace(state=jn.ROLLBACK_FAILED, finished=jn.now(), entries=done, error="interrupted")
                )
            elif active is not None:
                jn.save(root, active._replace(error=f"switching to {p.profile} was interrupted and rolled back"))
            else:
                jn.save(root, j._replace(state=jn.ROLLED_BACK, finished=jn.now(), entries=done, error="interrupted"))
            raise CxlctlError(
                "interrupted" + ("; ROLLBACK INCOMPLETE: " + "; ".join(rb) if rb else "; every change was rolled back"),
                hint="see `cxlctl tune status`",
            ) from None
        error: Optional[str] = None
        checks: List[Check] = []
        persisted: List[str] = []
        if failed is not None:
            error = f"{failed.setting}: {errors.get(failed.path, 'failed')}"
        else:
            checks = _verify_entries(root, entries)
            bad = [c for c in checks if c.status != "pass" and c.status != "unsupported"]
            if bad:
                error = "read-back after apply: " + "; ".join(
                    f"{c.setting} reads {c.actual!r}, wanted {c.expected!r}" for c in bad
                )
            elif persist:
                try:
                    for path, text in _persist_contents(p, prep.profile).items():
                        jn.atomic_write(host(root, path), text.encode(), 0o644)
                        persisted.append(path)
                except OSError as e:
                    error = f"cannot persist: {e.filename}: {e.strerror}"
        rollback_errors: List[str] = []
        if error is not None:
            rollback_errors = _restore(root, entries, attempted, "prior", status, errors)
            if persisted:
                _, perr = _restore_persist(root, {k: v for k, v in persist_saved.items() if k in persisted})
                rollback_errors += perr
                persisted = []
        final_entries = tuple(e._replace(status=status.get(e.path, e.status)) for e in entries)
        if error is None:
            j = j._replace(state=jn.APPLIED, finished=jn.now(), entries=final_entries)
        elif rollback_errors:
            j = j._replace(state=jn.ROLLBACK_FAILED, finished=jn.now(), entries=final_entries, error=error)
        elif active is not None:
            # a failed switch: the previous profile is in effect again
            j = active._replace(error=f"switching to {p.profile} failed and was rolled back: {error}")
        else:
            j = j._replace(state=jn.ROLLED_BACK, finished=jn.now(), entries=final_entries, error=error)
        jn.save(root, j)
    results = tuple(
        FileResult(
            e.setting, e.path, _canon(e.knob, e.prior), e.desired, status.get(e.path, e.status), errors.get(e.path)
        )
        for e in entries
    )
    return ApplyResult(
        error is None,
        False,
        prep,
        results,
        j,
        error,
        tuple(rollback_errors),
        tuple(checks),
        tuple(persisted),
        prep.messages + tuple(messages),
    )


# ---------------------------------------------------------------------------- verify


def verify(root: str, ref: Optional[str] = None) -> VerifyResult:
    """Compare the host with the applied journal, or with profile ``ref`` when given."""
    if ref is not None:
        prep = prepare(root, ref, switching=False)
        checks = []
        for s in prep.plan.steps:
            if s.action == "noop":
                checks.append(Check(s.setting, s.path, s.desired, s.current, "pass"))
            elif s.action in ("set", "restore"):
                checks.append(Check(s.setting, s.path, s.desired, s.current, "drift"))
            else:
                checks.append(Check(s.setting, s.path, None, None, "unsupported", s.note))
        return VerifyResult(prep.profile.name, "profile", tuple(checks), prep.messages)
    messages: List[str] = []
    j = _peek(root, messages)
    if j is None:
        raise CxlctlError(
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
        raise CxlctlError(f"no tuning profile is in effect: {what}", hint="name a profile to compare with it")
    checks = _verify_entries(root, list(j.entries))
    checks += [Check(s, "", None, None, "unsupported", why) for s, why in j.skipped]
    return VerifyResult(j.profile, "journal", tuple(checks), tuple(messages))


# ---------------------------------------------------------------------------- revert


def revert(root: str, *, wait: Optional[float] = None) -> RevertResult:
    """Restore the journal's original values (also after a crashed apply)."""
    j0 = jn.load(root)
    if j0 is None and not _writable(host(root, jn.RUN_DIR)):
        return RevertResult(True, None, None, (), (), (), ("nothing to revert: no tuning journal",))
    if j0 is not None and j0.state in jn.ACTIVE_STATES and jn.same_boot(j0, jn.boot_id(root)):
        preflight(root, [e.path for e in j0.entries], {e.knob for e in j0.entries}, "revert")
    messages: List[str] = []
    with TuneLock(root, wait):
        j = jn.load(root)
        if j is None:
            return RevertResult(True, None, None, (), (), (), ("nothing to revert: no tuning journal",))
        if not jn.same_boot(j, jn.boot_id(root)):
            removed, errs = _restore_persist(root, j.persist)
            jn.discard(root)
            messages.append(
                f"discarded the tuning journal of an earlier boot ({j.boot_id}, profile {j.profile}): the kernel "
                "reset those values when it booted; nothing to restore"
            )
            if removed:
                messages.append(
                    "removed the persisted settings (" + ", ".join(removed) + "); values set from them at boot "
                    "stay until the next reboot"
                )
            return RevertResult(not errs, j.profile, j.state, (), tuple(removed), tuple(errs), tuple(messages))
        if j.state not in jn.ACTIVE_STATES:
            why = "it was already reverted" if j.state == jn.REVERTED else "the last apply was rolled back"
            return RevertResult(True, j.profile, j.state, (), (), (), (f"nothing to revert: {why}",))
        if j.state == jn.APPLYING:
            messages.append(
                f"found the journal of an interrupted apply of {j.profile} (pid {j.pid}, {j.started}); restoring"
            )
        entries = list(j.entries)
        status: Dict[str, str] = {e.path: e.status for e in entries}
        errors: Dict[str, str] = {}
        before = {e.path: _canon(e.knob, read_raw(host(root, e.path))[1]) for e in entries}
        knobs: List[str] = []
        for e in entries:
            if e.knob not in knobs:
                knobs.append(e.knob)
        for e in entries:
            status[e.path] = "unchanged"
        failures = _restore(root, entries, knobs, "original", status, errors)
        removed, perr = _restore_persist(root, j.persist)
        failures += perr
        final = tuple(e._replace(status=status[e.path]) for e in entries)
        if failures:
            jn.save(
                root, j._replace(state=jn.REVERT_FAILED, entries=final, finished=jn.now(), error="; ".join(failures))
            )
        else:
            jn.save(root, j._replace(state=jn.REVERTED, entries=final, finished=jn.now(), error=None))
    results = tuple(
        FileResult(e.setting, e.path, before[e.path], _canon(e.knob, e.original), status[e.path], errors.get(e.path))
        for e in entries
    )
    return RevertResult(not failures, j.profile, j.state, results, tuple(removed), tuple(failures), tuple(messages))


# ---------------------------------------------------------------------------- status


def status(root: str) -> Dict[str, Any]:
    """Active profile, when it was applied, journal state, lock and persistence (JSON-ready)."""
    out: Dict[str, Any] = {"schema_version": 1}
    messages: List[str] = []
    j = jn.load(root)
    this_boot = j is not None and jn.same_boot(j, jn.boot_id(root))
    if j is not None and not this_boot:
        messages.append(f"the journal is from an earlier boot ({j.boot_id}); `tune revert` or `tune apply` discards it")
    active = j.profile if j is not None and this_boot and j.state == jn.APPLIED else None
    out["active_profile"] = active
    out["journal"] = None
    if j is not None:
        counts: Dict[str, int] = {}
        for e in j.entries:
            counts[e.status] = counts.get(e.status, 0) + 1
        out["journal"] = {
            "path": jn.JOURNAL,
            "state": j.state,
            "this_boot": this_boot,
            "profile": j.profile,
            "profile_source": j.profile_source,
            "previous_profile": j.previous_profile,
            "started": j.started,
            "finished": j.finished,
            "pid": j.pid,
            "error": j.error,
            "entries": counts,
        }
    if active and j is not None:
        checks = _verify_entries(root, list(j.entries))
        out["verify"] = {
            "pass": sum(1 for c in checks if c.status == "pass"),
            "drift": [c.setting for c in checks if c.status == "drift"],
            "unsupported": [c.setting for c in checks if c.status == "unsupported"] + [s for s, _ in j.skipped],
        }
    else:
        out["verify"] = None
    persisted: Optional[Dict[str, Any]] = None
    text = _read_text(root, ACTIVE_PROFILE)
    if text is not None or _persisted(root):
        persisted = {"sysctl_file": PERSIST_SYSCTL if _persisted(root) else None, "profile": None}
        try:
            persisted["profile"] = json.loads(text or "{}").get("profile")
        except ValueError:
            messages.append(f"{host(root, ACTIVE_PROFILE)} is not valid JSON")
    out["persisted"] = persisted
    held = is_held(root)
    out["lock"] = {"held": held, "holder_pid": holder(root) if held else None}
    out["messages"] = messages
    return out


def fail(message: str, hint: str = "") -> CxlctlError:
    return CxlctlError(message, code=EXIT_FAILURE, hint=hint)
