"""The one lock that serialises every knob writer: ``<root>/run/cxlctl/lock``.

Protocol (shared with the daemon, which must use this module or follow it):

* ``flock(LOCK_EX)`` on ``/run/cxlctl/lock``, opened ``O_RDWR|O_CREAT``;
* the holder writes its pid into the file right after locking, and empties
  it before unlocking, so a waiter can name who holds it;
* the file is never deleted: deleting a lock file races with a process that
  opened it just before (certbot's lock.py works around exactly that), and in
  ``/run`` it costs nothing to keep;
* a reader that must not see a transaction half done (``tune verify``, the
  daemon's drift check) takes ``flock(LOCK_SH)`` on the same file, opened
  read-only and never created: no lock file means no writer ever ran, so there
  is nothing to wait for (and a refused or read-only command writes nothing).

The kernel drops an flock when its holder dies, so a SIGKILLed apply never
leaves a stale lock behind (unlike PID files).
"""

from __future__ import annotations

import fcntl
import os
import time
from types import TracebackType
from typing import Optional, Type

from cxlctl.errors import EXIT_LOCKED, CxlctlError, UsageError

from .paths import DAEMON_LOCK, LOCK
from .proc import comm as _comm
from .reader import Reader, Unreadable, fence_of
from .root import under
from .write import dir_fenced, open_fenced

DEFAULT_WAIT = 5.0


class Locked(CxlctlError):
    def __init__(self, path: str, pid: Optional[int], waited: float) -> None:
        who = f"pid {pid}" if pid else "another process"
        comm = _comm(pid) if pid else None
        if comm:
            who += f" ({comm})"
        super().__init__(
            f"{path} is held by {who}; waited {waited:g} s",
            code=EXIT_LOCKED,
            hint="another cxlctl apply/revert or the cxlctl daemon is changing knobs; retry when it is done "
            "(or pass --wait SECONDS)",
        )
        self.pid = pid


def holder(root: str, lock: str = LOCK) -> Optional[int]:
    """Pid written by the current holder (may be stale if nobody holds the lock)."""
    try:
        b = Reader(root).read(lock, limit=64)
    except Unreadable:
        return None
    if b is None:
        return None
    text = b.decode("ascii", "replace").strip()
    return int(text) if text.isascii() and text.isdigit() else None


def is_held(root: str) -> bool:
    """True when some process holds the lock right now (probe with a non-blocking shared try)."""
    fence = fence_of(root)
    try:
        if fence is not None and not fence.dir_inside(os.path.dirname(under(root, LOCK))):
            return False  # a lock outside the tree is not this tree's
        fd = os.open(under(root, LOCK), os.O_RDONLY | os.O_CLOEXEC | (0 if fence is None else os.O_NOFOLLOW))
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def env_wait() -> float:
    """The lock wait from ``CXLCTL_LOCK_WAIT`` (seconds, ASCII digits), else :data:`DEFAULT_WAIT`.

    A value that is not a number of seconds is a usage error (exit 2), not a
    traceback and not "wait forever": ``-1`` and ``abc`` are refused like ``--wait -1``.
    """
    from cxlctl.parse import parse_seconds

    env = os.environ.get("CXLCTL_LOCK_WAIT")
    if not env:
        return DEFAULT_WAIT
    try:
        return parse_seconds(env)
    except ValueError:
        raise UsageError(
            f"CXLCTL_LOCK_WAIT={env[:40]!r} is not a number of seconds",
            hint="set it to 0 or more seconds in ASCII digits (e.g. 5 or 0.5), or unset it (default 5)",
        ) from None


class TuneLock:
    """Context manager: ``with TuneLock(root, wait=5): ...`` or raise :class:`Locked` (exit 4).

    ``shared=True`` is the readers' side (``LOCK_SH``): it waits only for a writer's
    transaction to end, never for other readers, and creates nothing.
    """

    LOCK = LOCK

    def __init__(self, root: str, wait: Optional[float] = None, *, shared: bool = False) -> None:
        self.root = root
        if wait is None:
            wait = env_wait()
        self.wait = max(0.0, wait)
        self.shared = shared
        self.path = under(root, self.LOCK)
        self.fd: Optional[int] = None

    def _open(self) -> Optional[int]:
        """The lock file's descriptor; None for a reader when no writer ever made it."""
        fence = fence_of(self.root)
        try:
            if self.shared:
                flags = os.O_RDONLY | os.O_CLOEXEC
                return os.open(self.path, flags) if fence is None else open_fenced(fence, self.path, flags)
            flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
            if fence is None:
                os.makedirs(os.path.dirname(self.path), mode=0o755, exist_ok=True)
                return os.open(self.path, flags, 0o644)
            os.close(dir_fenced(fence, os.path.dirname(self.path), create=True))
            return open_fenced(fence, self.path, flags, 0o644)
        except OSError as e:
            if self.shared and isinstance(e, FileNotFoundError):
                return None
            from .atomic import StorageError

            raise StorageError(self.path, e) from None

    def acquire(self) -> None:
        """Take the lock (or raise :class:`Locked`); under a ``--root`` tree, only inside it."""
        fd = self._open()
        if fd is None:
            return
        deadline = time.monotonic() + self.wait
        delay = 0.02
        op = fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX
        while True:
            try:
                fcntl.flock(fd, op | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise self.locked(holder(self.root, self.LOCK)) from None
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 2, 0.25)
        self.fd = fd
        if self.shared:
            return
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # the pid only names the holder to waiters: a full /run must not stop the lock

    def locked(self, pid: Optional[int]) -> CxlctlError:
        return Locked(self.path, pid, self.wait)

    def release(self) -> None:
        if self.fd is None:
            return
        if not self.shared:
            try:
                os.ftruncate(self.fd, 0)
            except OSError:
                pass
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> TuneLock:
        self.acquire()
        return self

    def __exit__(
        self, et: Optional[Type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.release()


class DaemonLock(TuneLock):
    """One ``cxlctl daemon run`` per host: held for the daemon's life, never waited for.

    Why: two daemons would both enforce profiles, both answer metrics and both revert an
    expired try; each transaction is safe under the tuning lock, but their logs, metrics and
    shutdown rollbacks would contradict each other.  The second refuses (exit 4) and names the
    first.  ``daemon run --once`` does not take it: it is one reconcile, like a CLI command.
    """

    LOCK = DAEMON_LOCK

    def __init__(self, root: str) -> None:
        super().__init__(root, 0.0)

    def locked(self, pid: Optional[int]) -> CxlctlError:
        who = f"pid {pid}" if pid else "another process"
        comm = _comm(pid) if pid else None
        return CxlctlError(
            f"another cxlctl daemon is running here ({who}{f', {comm}' if comm else ''}; {self.path} is held)",
            code=EXIT_LOCKED,
            hint="stop it first (`systemctl stop cxlctl`), or run `cxlctl daemon run --once` beside it",
        )
