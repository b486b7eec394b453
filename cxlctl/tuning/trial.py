"""``tune try``: apply a profile, keep it only if someone confirms it in time (netplan's ``try``).

Why the journal holds the try (:class:`~.journal.Trial`: deadline, waiting pid, the
journal it replaced): the waiting process can be SIGKILLed, and then nothing in
memory remains to undo it.  So every ``cxlctl tune`` command, and the daemon's
reconcile, first calls :func:`expire` — an unconfirmed try whose deadline has
passed is undone to the exact values before it (each file's ``prior``), and the
journal it replaced is put back, before the command does anything else.  An
unexpired try is left alone: its waiter may still get its confirmation.

Confirmation is a journal change made under the lock (:func:`confirm`), so it
works from any shell; the waiter polls the journal (:func:`wait`).
"""

from __future__ import annotations

import os
import select
import time
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Optional, Union

from cxlctl.errors import CxlctlError, UsageError
from cxlctl.hostio.atomic import read_only
from cxlctl.hostio.host import Host
from cxlctl.hostio.lock import TuneLock
from cxlctl.namedrecord import NamedTuple

from . import journal as jn
from .journal import Journal
from .results import ApplyResult, UndoResult
from .transaction import undo, writable

if TYPE_CHECKING:
    from cxlctl.progress import ProgressFn

    from .profile import Profile

POLL = 0.2  # seconds between two looks at the journal while waiting

#: why a wait ended
CONFIRMED = "confirmed"  # `tune confirm`, or Enter on stdin
TIMEOUT = "timeout"
EOF_ = "eof"  # stdin closed
SUPERSEDED = "superseded"  # the journal is no longer this try's (a revert came after it)
INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM while waiting
FAILED = "failed"  # the apply itself failed (and was rolled back): nothing to wait for
#: the ends of a wait after which the try is undone
UNDONE_AFTER = (TIMEOUT, EOF_, INTERRUPTED)


class Confirmed(NamedTuple):
    profile: str
    confirmed: str  # when
    pid: int  # the process that was waiting


def pending(j: Optional[Journal]) -> bool:
    """This journal is a try still waiting for confirmation."""
    return j is not None and j.state == jn.APPLIED and j.trial is not None and j.trial.pending


def _expired(j: Optional[Journal], now: float) -> bool:
    return pending(j) and j is not None and j.trial is not None and j.trial.deadline <= now


def _mine(j: Optional[Journal], pid: int, started: str) -> bool:
    return pending(j) and j is not None and j.trial is not None and j.trial.pid == pid and j.started == started


def expire(host: Host, wait: Optional[float] = None) -> Optional[UndoResult]:
    """Undo an unconfirmed try whose deadline has passed (None when there is none).

    Cheap when there is nothing to do (one journal read, no lock).  Raises
    :class:`CxlctlError` when the try cannot be undone by this process (not root).
    """
    try:
        j = jn.load(host)
    except CxlctlError:
        return None
    if not _expired(j, time.time()) or j is None or not jn.same_boot(j, host.boot_id):
        return None
    if not writable(host.path(jn.RUN_DIR)):
        if read_only(host.path(jn.RUN_DIR)):
            raise CxlctlError(
                f"the `tune try` of {j.profile} expired unconfirmed and must be reverted, but "
                f"{host.path(jn.RUN_DIR)} is on a read-only file system",
                hint="remount it read-write; the next `cxlctl tune` command or the daemon then reverts the try",
            )
        raise CxlctlError(
            f"the `tune try` of {j.profile} expired unconfirmed and must be reverted, which needs root",
            hint="run any `sudo cxlctl tune` command (e.g. `sudo cxlctl tune status`)",
        )
    with TuneLock(host.root, wait):
        j = jn.load(host)
        if not _expired(j, time.time()) or j is None or j.trial is None:
            return None  # someone else got there first
        res = undo(host, j, j.trial.previous)
    when = time.strftime("%H:%M:%S", time.localtime(j.trial.deadline))
    waiter = f"pid {j.trial.pid}, " + ("still running but stopped waiting" if alive(j.trial.pid) else "is gone")
    said = (
        f"the `tune try` of {res.profile} was not confirmed by its deadline ({when}; its waiting process, {waiter}): "
        "reverted it to the values before it" + (f" ({res.back_to} is in effect again)" if res.back_to else "")
    )
    return res._replace(messages=(said,) + res.messages)


def alive(pid: int) -> bool:
    """The process exists (a zombie or another user's process counts): :func:`cxlctl.hostio.proc.alive`."""
    from cxlctl.hostio.proc import alive as exists

    return exists(pid)


def confirm(host: Host, wait: Optional[float] = None) -> Confirmed:
    """Keep the pending try (any process may confirm it). :class:`UsageError` when none is pending:
    checked before the lock is taken too, so a refusal writes nothing (not even the lock file)."""
    _pending_try(host)
    with TuneLock(host.root, wait):
        j = _pending_try(host)
        t = j.trial
        assert t is not None  # _pending_try checked it
        when = jn.now()
        jn.save(
            host,
            j._replace(trial=t._replace(confirmed=when, previous=None)),
            done=f"the try of {j.profile} is NOT confirmed: it is reverted at its deadline unless confirmed",
        )
    return Confirmed(profile=j.profile, confirmed=when, pid=t.pid)


def _pending_try(host: Host) -> Journal:
    """The journal of the try waiting for confirmation, or :class:`UsageError`."""
    j = jn.load(host)
    if j is None or not jn.same_boot(j, host.boot_id) or not pending(j) or j.trial is None:
        raise UsageError(
            "no `tune try` is waiting for confirmation",
            hint="`cxlctl tune status` shows the tuning state; `cxlctl tune try PROFILE` starts a try",
        )
    return j


def _stdin_event(fd: Optional[int], timeout: float) -> Optional[str]:
    """Wait up to ``timeout`` on stdin: CONFIRMED on a line, EOF_ when closed, None otherwise."""
    if fd is None:
        time.sleep(timeout)
        return None
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
    except (OSError, ValueError):
        return EOF_  # stdin closed (<&-)
    if not ready:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return EOF_
    if not data:
        return EOF_
    return CONFIRMED if b"\n" in data or b"\r" in data else None


def wait(host: Host, j: Journal, stdin_fd: Optional[int]) -> str:
    """Wait for the try recorded in ``j`` to be confirmed: CONFIRMED, TIMEOUT, EOF_ or SUPERSEDED.

    ``stdin_fd``: a line on it confirms, its end (EOF) refuses; None to wait for
    `tune confirm` or the deadline only.  KeyboardInterrupt (Ctrl-C, or SIGTERM
    turned into one by the caller) passes through: the caller undoes the try.
    """
    assert j.trial is not None
    while True:
        now = time.time()
        try:
            cur = jn.load(host)
        except CxlctlError:
            cur = None
        if cur is not None and cur.started == j.started and cur.trial is not None and cur.trial.confirmed:
            return CONFIRMED
        if not _mine(cur, j.trial.pid, j.started):
            return SUPERSEDED
        if now >= j.trial.deadline:
            return TIMEOUT
        event = _stdin_event(stdin_fd, min(POLL, j.trial.deadline - now))
        if event == CONFIRMED:
            try:
                confirm(host)
            except UsageError:
                return SUPERSEDED
            return CONFIRMED
        if event == EOF_:
            return EOF_


def give_up(host: Host, j: Journal, wait_lock: Optional[float] = None) -> Optional[UndoResult]:
    """Undo this process's own try (no confirmation came); None when the journal is no longer
    this try's (confirmed meanwhile, or replaced by a revert)."""
    assert j.trial is not None
    with TuneLock(host.root, wait_lock):
        cur = jn.load(host)
        if not _mine(cur, j.trial.pid, j.started) or cur is None or cur.trial is None:
            return None
        return undo(host, cur, cur.trial.previous)


def abandon(host: Host) -> Optional[UndoResult]:
    """Undo this process's try when it was interrupted right after recording it (before the
    caller got to wait); None when there is none."""
    with TuneLock(host.root, None):
        cur = jn.load(host)
        if not pending(cur) or cur is None or cur.trial is None or cur.trial.pid != os.getpid():
            return None
        return undo(host, cur, cur.trial.previous)


class TryOutcome(NamedTuple):
    """How a `tune try` ended: the apply, why the wait ended, and the undo when there was one."""

    result: ApplyResult
    outcome: str  # CONFIRMED, SUPERSEDED, FAILED, or one of UNDONE_AFTER
    reverted: Optional[UndoResult]


def _term(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def run(
    host: Host,
    ref: Union[str, Profile],
    timeout: float,
    *,
    wait_lock: Optional[float] = None,
    stdin_fd: Optional[int] = None,
    progress: Optional[Callable[[], ContextManager[Optional[ProgressFn]]]] = None,
    on_applied: Optional[Callable[[ApplyResult], None]] = None,
) -> TryOutcome:
    """Apply ``ref`` as a try, wait for its confirmation, undo it without one.

    Why the signals are handled here: SIGTERM is Ctrl-C from the start, so during
    the apply it rolls back and while waiting it reverts; an interrupt between
    recording the try and waiting for it undoes the try here rather than leaving it
    to expire (:class:`CxlctlError`, saying what was undone); and the undo itself is
    not interruptible, so a second Ctrl-C cannot leave it half done.  ``progress``
    opens the caller's progress display around the apply; ``on_applied`` is called
    (e.g. to show the plan and how to confirm) once the try is recorded, before the
    wait; ``stdin_fd`` as for :func:`wait`.
    """
    import contextlib
    import signal

    from .transaction import Transaction

    old = signal.signal(signal.SIGTERM, _term)
    try:
        try:
            with progress() if progress is not None else contextlib.nullcontext() as on_progress:
                res = Transaction(host, ref).commit(wait=wait_lock, trial_timeout=timeout, on_progress=on_progress)
        except KeyboardInterrupt:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            undone = abandon(host)
            if undone is not None and not undone.ok:
                raise CxlctlError(
                    f"interrupted: reverting {undone.profile} failed: " + "; ".join(undone.errors),
                    hint="the journal keeps the values; run `cxlctl tune revert`",
                ) from None
            # the same words as an interrupt during the wait: to the user both are a try
            # interrupted before its confirmation (a SIGTERM can land either side of the journal write)
            raise CxlctlError(
                "interrupted"
                + (f" before a confirmation: reverted {undone.profile} to the previous values" if undone else ""),
                hint="see `cxlctl tune status`",
            ) from None
        j = res.journal
        if not res.ok or j is None or j.trial is None:
            return TryOutcome(res, FAILED, None)
        try:
            if on_applied is not None:
                on_applied(res)
            outcome = wait(host, j, stdin_fd)
        except KeyboardInterrupt:
            outcome = INTERRUPTED
        if outcome not in UNDONE_AFTER:
            return TryOutcome(res, outcome, None)
        old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
        old_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            reverted = give_up(host, j)
        finally:
            signal.signal(signal.SIGINT, old_int)
            signal.signal(signal.SIGTERM, old_term)
        if reverted is None:
            return TryOutcome(res, CONFIRMED, None)  # confirmed in the same instant, from another shell
        return TryOutcome(res, outcome, reverted)
    finally:
        signal.signal(signal.SIGTERM, old)
