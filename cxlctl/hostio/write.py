"""The one function that writes a kernel knob, and what its errors mean.

Why one small primitive: sysctl and sysfs both require the whole value in a
single ``write()`` at offset 0 (``sysctl_writes_strict``; sysfs does not support
partial writes), and the kernel reports a rejected value as the errno of that
``write()``.  Buffered text I/O hides both (the error surfaces at ``close()`` or
the value is split), so every knob write in cxlctl goes through
:func:`write_knob`: ``os.open`` + one ``os.write`` + byte count check.

``O_TRUNC`` is included so a recorded fixture tree (regular files) behaves like
the kernel: the new value replaces the old one.  On procfs/sysfs it is a no-op;
it is what the shell's ``echo 1 > /proc/sys/...`` does too.  ``O_CREAT`` is
deliberately absent: a knob that vanished must stay vanished.

Errors are classified the way irqbalance and daxctl do it (see
docs/tuning.md): *gone* (the file or its device went away), *rejected* (the
kernel refused the value), *busy* (transient; retried a few times), *denied*
(permissions or a missing capability).

Test hooks (environment variables, read on every call; for the test suite only, and honoured only
with ``CXLCTL_TEST_HOOKS=1`` under a ``--root`` tree, or on a test machine: :mod:`cxlctl.hostio.testhooks`):

``CXLCTL_TEST_FAULT=K:WHAT``
    the K-th knob write of an apply (1-based, counting every file written)
    fails: ``WHAT`` is an errno name (``EINVAL``, ``EBUSY``, ``EPERM``, …),
    raised where the kernel would raise it (at ``write()``, after a successful
    ``open()``), or ``vanished``, which unlinks the file first so the real
    ``open()`` fails with ENOENT.
``CXLCTL_TEST_PAUSE_AFTER_WRITES=K``
    after K knob writes of an apply (0 = right after the journal was written),
    print ``cxlctl-test: paused after K writes`` to stderr and sleep, so a test
    can SIGKILL the process at that point.
``CXLCTL_TEST_HANG_WRITE=TEXT``
    a write of ``offline`` to a file whose path contains ``TEXT`` blocks, as the
    kernel's ``offline_pages()`` does on a page it cannot migrate (it retries
    until a signal is pending, then fails with EINTR): the write sleeps until a
    signal handler raises, and the file is left unchanged (the block stays
    online).  Python retries a write interrupted by a signal whose handler
    returns (PEP 475), so only a handler that raises ends the real write too.
"""

from __future__ import annotations

import errno
import os
import sys
import time

from cxlctl.errors import UsageError

from .reader import Fence, Refused, _real_of, fence_of
from .root import under

# typing costs ~5 ms of start-up: only mypy needs it here
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterable, Optional, Type


_GONE = frozenset({errno.ENOENT, errno.ENODEV, errno.ENXIO, errno.ESTALE, errno.ENOTDIR})
_REJECTED = frozenset({errno.EINVAL, errno.ERANGE, errno.EOPNOTSUPP, errno.EOVERFLOW, errno.ENOSPC})
_BUSY = frozenset({errno.EBUSY, errno.EAGAIN, errno.EINTR})
_DENIED = frozenset({errno.EPERM, errno.EACCES, errno.EROFS})


class KnobError(Exception):
    """A knob write failed; ``kind`` is one of gone/rejected/busy/denied/failed."""

    kind = "failed"

    def __init__(self, path: str, err: Optional[int], detail: str, reason: str = "") -> None:
        super().__init__(detail)
        self.path = path
        self.errno = err
        #: the detail without the path, for messages that already name the knob
        self.reason = reason or detail

    @property
    def errno_name(self) -> Optional[str]:
        return None if self.errno is None else errno.errorcode.get(self.errno, str(self.errno))


class KnobGone(KnobError):
    """ENOENT/ENODEV/ENXIO: the knob or its device disappeared (hot-unplug, module unload)."""

    kind = "gone"


class KnobRejected(KnobError):
    """EINVAL/ERANGE/EOPNOTSUPP: the kernel does not accept this value (permanent)."""

    kind = "rejected"


class KnobBusy(KnobError):
    """EBUSY/EAGAIN/EINTR: transient; the caller retries a bounded number of times."""

    kind = "busy"


class KnobDenied(KnobError):
    """EPERM/EACCES/EROFS: not root, a missing capability, or a read-only /proc or /sys."""

    kind = "denied"


class KnobOutside(KnobError):
    """The knob file, or a directory on its way, is a link leading out of the ``--root`` tree: not written."""

    kind = "outside"


class OutsideRoot(UsageError):
    """A write cxlctl was about to make would land outside the ``--root`` tree (exit 2, nothing written).

    The tree given is the input at fault: one of its links leads out of it
    (``ROOT/run`` → ``/tmp/elsewhere``).  The message names that link.
    """

    def __init__(self, link: str, target: str) -> None:
        super().__init__(
            f"{link} is a link leading out of the root (to {target}); cxlctl writes nothing outside the "
            "--root tree it was given, so nothing was written",
            hint="make it a directory (or a link) inside the tree, or point --root at the tree it leads to",
        )
        self.link = link
        self.target = target


def outside(fence: Fence, host_path: str) -> OutsideRoot:
    """The error for ``host_path``, naming the link on its way that leads out of ``fence``."""
    return OutsideRoot(*fence.leading_out(host_path))


def check_inside(root: str, paths: Iterable[str]) -> None:
    """Before anything is written: :class:`OutsideRoot` for the first of ``paths`` (host paths,
    existing or to be made) that would land outside the ``--root`` tree; nothing on ``/``.

    The writes themselves are fenced too; this check lets a transaction refuse
    as a whole instead of stopping (and rolling back) at the first such file.
    """
    fence = fence_of(root)
    if fence is None:
        return
    for p in paths:
        host = under(root, p)
        if not fence.holds(os.path.realpath(host)):
            raise outside(fence, host)


def classify(e: OSError, path: str) -> KnobError:
    """Turn an OSError from open/write into one of the four knob error classes."""
    code = e.errno
    what = os.strerror(code) if code else str(e)
    cls: Type[KnobError]
    if code in _GONE:
        cls, why = KnobGone, f"gone ({what})"
    elif code in _REJECTED:
        cls, why = KnobRejected, f"value rejected by the kernel ({what})"
    elif code in _BUSY:
        cls, why = KnobBusy, f"busy ({what})"
    elif code in _DENIED:
        cls, why = KnobDenied, f"permission denied ({what})"
    else:
        cls, why = KnobError, f"write failed ({what})"
    return cls(path, code, f"{path}: {why}", why)


def _fault_for(root: str, index: Optional[int]) -> Optional[str]:
    """The test fault configured for write number ``index``, if any (test hook; gated by
    :func:`cxlctl.hostio.testhooks.hook`)."""
    from .testhooks import hook

    spec = hook("CXLCTL_TEST_FAULT", root)
    if not spec or index is None:
        return None
    k, _, what = spec.partition(":")
    try:
        return what if int(k) == index else None
    except ValueError:
        return None


_WRITE = os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC
_PATH = getattr(os, "O_PATH", os.O_RDONLY) | os.O_CLOEXEC


def _hang(host_path: str, text: str) -> None:
    """Test hook ``CXLCTL_TEST_HANG_WRITE``: block like an offline the kernel cannot finish."""
    what = os.environ.get("CXLCTL_TEST_HANG_WRITE")
    if not what or text != "offline" or what not in host_path:
        return
    sys.stderr.write(f"cxlctl-test: write to {host_path} hangs\n")
    sys.stderr.flush()
    while True:  # ended only by a signal handler that raises, as the real write
        time.sleep(0.05)


def write_knob(root: str, path: str, text: str, *, index: Optional[int] = None) -> None:
    """Write ``text`` to the knob file ``path`` (a host path such as ``/proc/sys/vm/swappiness``) under ``root``.

    One ``open``, one ``write``, byte count checked; raises a :class:`KnobError`
    subclass, whose ``path`` is the file under the root (what messages name).
    Under a ``--root`` tree the write is fenced like a read (:func:`open_fenced`):
    a link leading out of the tree is :class:`KnobOutside` and nothing is written.
    ``index`` numbers the writes of one apply, for the fault hook.
    """
    host_path = under(root, path)
    data = text.encode("utf-8")
    fault = _fault_for(root, index)
    if fault == "vanished":
        try:
            os.unlink(host_path)
        except FileNotFoundError:
            pass
    _hang(host_path, text)  # before the open: O_TRUNC would empty the copied file the kernel leaves as it was
    fence = fence_of(root)
    try:
        fd = os.open(host_path, _WRITE) if fence is None else open_fenced(fence, host_path, _WRITE)
    except OutsideRoot as e:
        why = f"not written: {e.link} is a link leading out of the root (to {e.target})"
        raise KnobOutside(host_path, None, f"{host_path}: {why}", why) from None
    except OSError as e:
        raise classify(e, host_path) from None
    try:
        if fault and fault != "vanished":
            code = getattr(errno, fault, errno.EIO)
            raise OSError(code, os.strerror(code), host_path)
        n = os.write(fd, data)
        if n != len(data):
            why = f"short write ({n} of {len(data)} bytes)"
            raise KnobRejected(host_path, None, f"{host_path}: {why}", why)
    except OSError as e:
        raise classify(e, host_path) from None
    finally:
        os.close(fd)


def open_fenced(fence: Fence, host_path: str, flags: int, mode: int = 0o644) -> int:
    """``os.open(host_path, flags, mode)`` for writing, landing inside ``fence`` or not at all.

    The directory is opened and checked first (:meth:`Fence.open_dir`), and the
    file opened relative to that handle, ``O_NOFOLLOW|O_NONBLOCK`` (a FIFO is never
    waited on).  A file that is itself a link is resolved with an ``O_PATH`` open
    (which has no effect on the file) and checked before it is opened for
    writing.  :class:`OutsideRoot` when the directory or the file leads out.
    """
    d, _, name = host_path.rpartition("/")
    dfd = dir_fenced(fence, d or "/")
    try:
        try:
            return os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK, mode, dir_fd=dfd)
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
        pfd = os.open(name, _PATH, dir_fd=dfd)  # the last component is a link: where does it lead?
        try:
            real = _real_of(pfd, host_path)
            if not fence.holds(real):
                raise OutsideRoot(host_path, real)
            return os.open(real, flags | os.O_NOFOLLOW | os.O_NONBLOCK, mode)
        finally:
            os.close(pfd)
    finally:
        os.close(dfd)


def dir_fenced(fence: Fence, host_dir: str, *, create: bool = False) -> int:
    """An ``O_PATH`` handle on ``host_dir``, proven inside ``fence`` (:class:`OutsideRoot` if not).

    ``create``: missing directories are made (0755), each one inside the one
    checked before it, so a tree whose ``run`` is a link out of it never gets a
    ``cxlctl/`` made at the far end.
    """
    missing = []
    d = host_dir
    while True:
        try:
            fd = fence.open_dir(d)
            break
        except Refused:
            raise outside(fence, host_dir) from None
        except FileNotFoundError:
            parent = os.path.dirname(d)
            if not create or d == fence.given or parent == d:
                raise
            if os.path.islink(d):  # a dangling link: mkdir would not follow it, but say where it leads
                if not fence.holds(os.path.realpath(d)):
                    raise outside(fence, host_dir) from None
                raise
            missing.append(os.path.basename(d))
            d = parent
    try:
        for name in reversed(missing):
            try:
                os.mkdir(name, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            # a real directory, not a link put there meanwhile (O_NOFOLLOW|O_DIRECTORY: ENOTDIR)
            nfd = os.open(name, _PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_with_retry(root: str, path: str, text: str, *, index: Optional[int] = None, attempts: int = 3) -> int:
    """:func:`write_knob`, retrying *busy* errors with a short backoff; returns attempts used."""
    delay = 0.005
    for attempt in range(1, attempts + 1):
        try:
            write_knob(root, path, text, index=index)
            return attempt
        except KnobBusy:
            if attempt == attempts:
                raise
            time.sleep(delay)
            delay *= 4
    return attempts  # pragma: no cover - loop always returns or raises


def pause_hook(root: str, done: int) -> None:
    """Test hook: stop after ``done`` writes so a test can SIGKILL a real apply there (gated by
    :func:`cxlctl.hostio.testhooks.hook`)."""
    from .testhooks import hook

    spec = hook("CXLCTL_TEST_PAUSE_AFTER_WRITES", root)
    if spec is None:
        return
    try:
        k = int(spec)
    except ValueError:
        return
    if k == done:
        sys.stderr.write(f"cxlctl-test: paused after {done} writes\n")
        sys.stderr.flush()
        time.sleep(float(os.environ.get("CXLCTL_TEST_PAUSE_SECONDS", "60")))
