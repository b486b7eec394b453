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

Test hooks (environment variables, read on every call; for the test suite only):

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
"""

from __future__ import annotations

import errno
import os
import sys
import time

# typing costs ~5 ms of start-up: only mypy needs it here
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional, Type


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


def _fault_for(index: Optional[int]) -> Optional[str]:
    """The test fault configured for write number ``index``, if any (test hook)."""
    spec = os.environ.get("CXLCTL_TEST_FAULT")
    if not spec or index is None:
        return None
    k, _, what = spec.partition(":")
    try:
        return what if int(k) == index else None
    except ValueError:
        return None


def write_knob(host_path: str, text: str, *, index: Optional[int] = None) -> None:
    """Write ``text`` to the knob file at ``host_path`` (already resolved under the root).

    One ``open``, one ``write``, byte count checked; raises a :class:`KnobError`
    subclass.  ``index`` numbers the writes of one apply, for the fault hook.
    """
    data = text.encode("utf-8")
    fault = _fault_for(index)
    if fault == "vanished":
        try:
            os.unlink(host_path)
        except FileNotFoundError:
            pass
    try:
        fd = os.open(host_path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
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


def write_with_retry(host_path: str, text: str, *, index: Optional[int] = None, attempts: int = 3) -> int:
    """:func:`write_knob`, retrying *busy* errors with a short backoff; returns attempts used."""
    delay = 0.005
    for attempt in range(1, attempts + 1):
        try:
            write_knob(host_path, text, index=index)
            return attempt
        except KnobBusy:
            if attempt == attempts:
                raise
            time.sleep(delay)
            delay *= 4
    return attempts  # pragma: no cover - loop always returns or raises


def pause_hook(done: int) -> None:
    """Test hook: stop after ``done`` writes so a test can SIGKILL a real apply there."""
    spec = os.environ.get("CXLCTL_TEST_PAUSE_AFTER_WRITES")
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
