"""The one lock that serialises every knob writer: ``<root>/run/cxlctl/lock``.

Protocol (shared with the daemon, which must use this module or follow it):

* ``flock(LOCK_EX)`` on ``/run/cxlctl/lock``, opened ``O_RDWR|O_CREAT``, mode 0600 in a
  0700 ``/run/cxlctl`` (issue 43): ``flock`` works on a read-only descriptor, so a lock any
  user can open is a lock any user can hold, and a user holding it stalls every apply,
  revert, reconcile and the auto-revert of a ``tune try``.  Root fixes the directory's mode,
  and replaces a lock file that others could open (or that root does not own) with a fresh
  one -- once it holds the old one, or when only other users hold it (``/proc/locks``): a
  holder of the old file then holds nothing anyone waits for;
* after ``flock`` succeeds the locker checks that its descriptor is still the file at the
  path (the replacement above), and locks the new file when it is not;
* the holder writes its pid into the file right after locking, and empties
  it before unlocking, so a waiter can name who holds it;
* the file is never deleted: deleting a lock file races with a process that
  opened it just before (certbot's lock.py works around exactly that), and in
  ``/run`` it costs nothing to keep;
* a reader that must not see a transaction half done (``tune verify``, the
  daemon's drift check) takes ``flock(LOCK_SH)`` on the same file, opened
  read-only and never created: no lock file means no writer ever ran, so there
  is nothing to wait for (and a refused or read-only command writes nothing).
  A reader that is not root takes it only on a lock file of its own (a ``--root``
  tree it made): on the host it cannot open root's file, and must not hold it.

The kernel drops an flock when its holder dies, so a SIGKILLed apply never
leaves a stale lock behind (unlike PID files).
"""

from __future__ import annotations

import fcntl
import os
import stat
import time
from types import TracebackType
from typing import List, Optional, Type

from cxlctl.errors import EXIT_LOCKED, CxlctlError, UsageError

from .paths import DAEMON_LOCK, LOCK, SELF_FD
from .proc import comm as _comm
from .proc import euid_of, flock_holders
from .reader import Fence, Reader, Unreadable, fence_of
from .root import under
from .write import dir_fenced, open_fenced

DEFAULT_WAIT = 5.0
#: the lock files' and their directory's modes: no one but their owner (root) may open them
PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700


def _private_dir(dfd: int) -> None:
    """Make the directory behind ``dfd`` (an ``O_PATH`` handle) 0700 when it is ours (root: any):
    the runtime directory closed to others, whatever mode an older cxlctl or ``RuntimeDirectoryMode=0755`` left it.
    (``fchmod`` refuses an ``O_PATH`` handle; its ``/proc/self/fd`` link reaches the same inode.)"""
    st = os.fstat(dfd)
    if os.geteuid() in (0, st.st_uid) and stat.S_IMODE(st.st_mode) != PRIVATE_DIR:
        os.chmod(f"{SELF_FD}/{dfd}", PRIVATE_DIR)


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
        if os.geteuid() != 0 and os.fstat(fd).st_uid != os.geteuid():
            return False  # root's lock: a user's probe must not hold it, even for an instant
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
        """The lock file's descriptor; None for a reader when no writer ever made it, or when the
        reader is not root and the file is not its own (it must not hold root's lock)."""
        fence = fence_of(self.root)
        try:
            if self.shared:
                flags = os.O_RDONLY | os.O_CLOEXEC
                try:
                    fd = os.open(self.path, flags) if fence is None else open_fenced(fence, self.path, flags)
                except PermissionError:
                    if os.geteuid() != 0:
                        return None  # root's lock, closed to others: nothing this reader may hold
                    raise
                if os.geteuid() != 0 and os.fstat(fd).st_uid != os.geteuid():
                    os.close(fd)  # an old, world-readable lock of root's: do not take it
                    return None
                return fd
            return self._open_writer(fence)
        except OSError as e:
            if self.shared and isinstance(e, FileNotFoundError):
                return None
            from .atomic import StorageError

            raise StorageError(self.path, e) from None

    def _dir(self, fence: Optional[Fence]) -> int:
        """An ``O_PATH`` handle on the lock's directory, made 0700 when missing (inside the tree)."""
        d = os.path.dirname(self.path)
        if fence is None:
            os.makedirs(d, mode=PRIVATE_DIR, exist_ok=True)
            return os.open(d, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        return dir_fenced(fence, d, create=True)

    def _open_writer(self, fence: Optional[Fence]) -> int:
        """Open (or create) the lock file for writing, 0600 in a 0700 directory (the directory's
        mode fixed when it is ours; root: always)."""
        dfd = self._dir(fence)
        try:
            _private_dir(dfd)
            flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
            if fence is None:
                return os.open(self.path, flags, PRIVATE_FILE)
            return open_fenced(fence, self.path, flags, PRIVATE_FILE)
        finally:
            os.close(dfd)

    def _loose(self, fd: int) -> bool:
        """True for root when the lock file is one others could open (an older cxlctl's 0644) or
        is not root's: a user may hold a descriptor on it that no ``chmod`` takes away."""
        if os.geteuid() != 0:
            return False
        st = os.fstat(fd)
        return st.st_uid != 0 or bool(stat.S_IMODE(st.st_mode) & 0o077)

    def _replace(self) -> None:
        """Put a fresh 0600 lock file in place of the old one (the one atomic writer: a new file
        renamed over it, inside the tree): a user's descriptor on the old file then holds nothing
        anyone waits for."""
        from .atomic import StorageError, atomic_write

        try:
            atomic_write(self.root, self.LOCK, b"", mode=PRIVATE_FILE, sync_dir=False)
        except OSError as e:
            raise StorageError(self.path, e) from None

    def _holders(self, fd: int) -> Optional[List[int]]:
        """The effective uids of the processes holding the lock file ``fd`` (``/proc/locks``);
        None when they cannot all be told (no ``/proc``, a pid from another namespace)."""
        st = os.fstat(fd)
        pids = flock_holders(st.st_dev, st.st_ino)
        if pids is None:
            return None
        uids = [euid_of(p) for p in pids if p != os.getpid()]
        return None if any(u is None for u in uids) else [u for u in uids if u is not None]

    def _same_file(self, fd: int) -> bool:
        """True when ``fd`` is still the file at the lock's path (root may have replaced it)."""
        try:
            a, b = os.fstat(fd), os.stat(self.path)
        except OSError:
            return False
        return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)

    def acquire(self) -> None:
        """Take the lock (or raise :class:`Locked`); under a ``--root`` tree, only inside it.

        Root meeting a lock file others could open (:meth:`_loose`) replaces it: at once when it
        gets the lock (nobody else may hold the old file after it), or when the wait runs out and
        every holder is another user (``/proc/locks``: uid 65534 holding the old 0644 file).  A
        root holder (an older cxlctl mid-transaction) is waited for as always.  A root reader
        that meets only other users' holders reads on without the lock: no writer is running."""
        deadline = time.monotonic() + self.wait
        op = fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX
        fd = -1
        for attempt in range(8):
            got = self._open()
            if got is None:
                return
            fd = got
            loose = self._loose(fd) and attempt < 7
            if not self._wait_for(fd, op, deadline):
                uids = self._holders(fd) if loose else None
                os.close(fd)
                if uids == []:
                    continue  # released meanwhile
                if uids is not None and 0 not in uids:
                    if self.shared:
                        return
                    self._replace()
                    continue
                raise self.locked(holder(self.root, self.LOCK))
            if loose and not self.shared:
                self._replace()  # held now: no one else is inside; lock the new file
                os.close(fd)
                continue
            if self._same_file(fd) or attempt == 7:
                break
            os.close(fd)  # root replaced the file meanwhile: the lock that counts is the new one
        self.fd = fd
        if self.shared:
            return
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # the pid only names the holder to waiters: a full /run must not stop the lock

    def _wait_for(self, fd: int, op: int, deadline: float) -> bool:
        """``flock(fd, op)``, retried until ``deadline``; False when it passed (``fd`` left open)."""
        delay = 0.02
        while True:
            try:
                fcntl.flock(fd, op | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 2, 0.25)

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
