"""The bound on each memory block's offline, and the signals that end a release early.

Why: in ZONE_MOVABLE ``offline_pages()`` (mm/memory_hotplug.c) retries
``scan_movable_pages()`` / ``do_migrate_range()`` until the range is empty, and
``do_migrate_range()`` puts a page that failed to migrate back and goes on, so
a page held by a short-term pin or an extra reference (O_DIRECT in flight,
vmsplice, a driver's pin without FOLL_LONGTERM) or an in-use hugetlb page with
no place elsewhere keeps the write to ``memoryN/state`` blocked.  The loop ends
only on ``signal_pending(current)``: the write fails with EINTR ("signal
backoff") and the block stays online.  Any signal does, the timer's too.

So a release runs under :class:`Guard` (main thread only: Python runs signal
handlers there): each block's offline arms ``ITIMER_REAL``; SIGALRM, SIGINT and
SIGTERM raise :class:`Interrupted` *while an offline write is in progress* (a
handler that returns would have Python retry the interrupted write, PEP 475),
and are held until the next step boundary otherwise, so a teardown step is
never cut in half and the rollback itself runs to its end.

Every offline goes through ``regions.dax.offline_blocks`` (``capacity release``, ``region
destroy --force``, ``dax reconfigure --mode devdax --force``), which takes the guard in force
(:func:`guarded`: a release's, with its ``--timeout``) or makes one with :data:`OFFLINE_TIMEOUT`
for its own blocks, so no offline write is ever unbounded.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from types import FrameType
from typing import Any, ClassVar, Dict, Iterator, Optional, Tuple

#: seconds one memory block's offline may take before it is interrupted and the release rolled back
OFFLINE_TIMEOUT = 120.0


class Interrupted(BaseException):
    """A release stopped by a signal or the offline bound; caught by the release, which rolls back.

    A BaseException, as KeyboardInterrupt: no ``except CxlctlError`` on the way swallows it."""

    def __init__(self, why: str, signum: int) -> None:
        super().__init__(why)
        self.why = why
        self.signum = signum

    @property
    def timeout(self) -> bool:
        return self.signum == signal.SIGALRM

    @property
    def exit_code(self) -> int:
        """1 for the bound; 128+N for a signal, as a shell reports a process it ended."""
        return 1 if self.timeout else 128 + self.signum


class Guard:
    """Install the handlers (restored on exit); :meth:`offlining` bounds one write."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)
    #: the guard whose handlers are installed now (one at a time: a nested one would lose a held signal)
    current: ClassVar[Optional[Guard]] = None

    def __init__(self, timeout: Optional[float] = OFFLINE_TIMEOUT) -> None:
        self.timeout = timeout if timeout and timeout > 0 else None
        self.pending: Optional[Interrupted] = None
        self._raising = False
        self._armed = False
        self._old: Dict[int, Any] = {}
        self.active = False
        self._outer: Optional[Guard] = None

    def __enter__(self) -> Guard:
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                # also when ignored by who started us (a background job of a script gets SIGINT ignored):
                # a `kill -INT` of the release is a request to stop, and a rollback loses nothing
                self._old[s] = signal.signal(s, self._handler)
            self.active = True
            self._outer, Guard.current = Guard.current, self
        return self

    def __exit__(self, *exc: object) -> None:
        if self.active:
            signal.setitimer(signal.ITIMER_REAL, 0)
            for s, h in self._old.items():
                signal.signal(s, h)
            self.active = False
            Guard.current = self._outer

    def _handler(self, signum: int, frame: Optional[FrameType]) -> None:
        if signum == signal.SIGALRM:
            if not self._armed:
                return
            why = f"an offline took longer than {self.timeout:g} s (the bound)"
        else:
            why = f"{signal.Signals(signum).name} received"
        e = Interrupted(why, signum)
        if self._raising:
            self._raising = False
            raise e
        if self.pending is None:
            self.pending = e

    def check(self) -> None:
        """Raise a signal held since the last step boundary."""
        e, self.pending = self.pending, None
        if e is not None:
            raise e

    @contextmanager
    def offlining(self) -> Iterator[None]:
        """One offline write: the timer armed and the signals raising while it runs."""
        self.check()
        if not self.active:
            yield
            return
        self._armed = True
        self._raising = True
        if self.timeout:
            signal.setitimer(signal.ITIMER_REAL, self.timeout)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            self._raising = False
            self._armed = False


@contextmanager
def guarded(timeout: Optional[float] = OFFLINE_TIMEOUT) -> Iterator[Tuple[Guard, bool]]:
    """(the guard in force, False) inside a release; else (a new guard bounding each write by
    ``timeout``, True): the caller owns it and says what an :class:`Interrupted` means.  Another
    thread gets a guard of its own, inactive (signals reach the main thread only): unbounded."""
    if Guard.current is not None and threading.current_thread() is threading.main_thread():
        yield Guard.current, False
        return
    with Guard(timeout) as g:
        yield g, True
