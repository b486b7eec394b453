"""Tolerant, root-relative reads of sysfs and procfs.

Every fact the inventory knows comes through :class:`Reader`, for three reasons:

* the root is injectable (``--root``), so recorded trees replace mocks in tests;
* odd content never raises: a missing attribute is ``None``, a permission-denied
  one is ``None`` plus a note, and a device that vanishes mid-scan raises
  :class:`Vanished`, which the scanner turns into "skip it and rescan once";
* every access can be logged, which is how ``cxlctl record`` copies exactly the
  subset of the tree that the scan used.

Reads are also *bounded and safe on hostile trees*: a file larger than
:data:`MAX_BYTES` is not parsed, a FIFO or device node is never opened for
reading (a FIFO would block, ``/dev/zero`` never ends), files are opened
``O_NONBLOCK``, and a link whose target lies outside a ``--root`` tree is
treated as absent.  Each refusal leaves a note, so ``status`` says what it
skipped instead of hanging or reading the host's files.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Callable, Dict, List, Optional, Set, Tuple

from .root import under

#: the largest file the reader parses; sysfs/procfs attributes are one page
MAX_BYTES = 1 << 20
_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
_DIGITS = frozenset("0123456789")

#: errnos meaning "the device went away while we were looking"
_GONE = (errno.ENODEV, errno.ENXIO, errno.ENOENT, errno.ESTALE)


class Vanished(Exception):
    """A device disappeared while it was being read (hot-unplug, region teardown)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


class Refused(Exception):
    """A file under the root that must not be read (not regular, too big, outside the root)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Reader:
    """Reads files under ``root`` as if it were ``/``.

    Paths given to the methods are absolute-looking (``/sys/bus/cxl``) and are
    resolved under the root.  ``notes`` collects what could not be read and why;
    ``log`` (when enabled) collects every path that was touched.
    """

    def __init__(self, root: str = "/", *, log: bool = False) -> None:
        self.root = os.path.abspath(root)
        self._fence = fence_of(self.root)
        self.notes: List[Tuple[str, str]] = []
        self.log: Optional[Set[str]] = set() if log else None
        self._data: Optional[Dict[str, bytes]] = {} if log else None
        #: the device being read (set by the scanner); a missing file means the
        #: device vanished only when this path no longer resolves
        self.device: Optional[str] = None

    # -- path helpers -------------------------------------------------------------
    def _touch(self, path: str) -> None:
        if self.log is not None:
            self.log.add(path)

    def captured(self, path: str) -> Optional[bytes]:
        """Bytes returned for ``path`` during this scan (recording mode only)."""
        return None if self._data is None else self._data.get(path)

    def _dev_gone(self, path: str) -> bool:
        """True when the device being read no longer exists (dangling link, removed dir).

        A missing attribute of a device that is still there is just "absent on this
        kernel", and reads outside any device (knobs, top-level masks) never vanish.
        """
        return self.device is not None and not os.path.exists(under(self.root, self.device))

    # -- reads ----------------------------------------------------------------------
    def raw(self, path: str) -> Optional[bytes]:
        """File content, or None if absent or unreadable (reason kept in notes)."""
        self._touch(path)
        try:
            data = read_bounded(under(self.root, path), self._fence)
        except Refused as e:
            self.notes.append((path, e.reason))
            return None
        except PermissionError:
            self.notes.append((path, "permission denied (root-only attribute)"))
            return None
        except FileNotFoundError:
            if self._dev_gone(path):
                raise Vanished(path) from None
            return None
        except IsADirectoryError:
            return None
        except OSError as e:
            if e.errno in _GONE:
                raise Vanished(path) from None
            self.notes.append((path, f"unreadable: {os.strerror(e.errno or 0)}"))
            return None
        if self._data is not None:
            self._data[path] = data
        return data

    def text(self, path: str) -> Optional[str]:
        """Stripped text content; None if absent/unreadable."""
        data = self.raw(path)
        if data is None:
            return None
        return data.decode("utf-8", "replace").strip()

    def link(self, path: str) -> Optional[str]:
        """Basename of a symlink's target, or None when there is no link."""
        target = self.readlink(path)
        return None if target is None else os.path.basename(target.rstrip("/"))

    def readlink(self, path: str) -> Optional[str]:
        self._touch(path)
        try:
            return os.readlink(under(self.root, path))
        except FileNotFoundError:
            if self._dev_gone(path):
                raise Vanished(path) from None
            return None
        except OSError:
            return None

    def devpath(self, path: str) -> str:
        """Real path of a bus entry (``/sys/bus/X/devices/NAME``), under the root.

        The kernel makes each bus entry one relative link straight to the device
        directory, so a single readlink and string normalisation give the real path;
        :meth:`realpath` would lstat every component (about 14 calls per entry,
        which dominated scans of large trees).  Falls back to realpath when the
        entry is not such a link.
        """
        target = self.readlink(path)
        if target is None or os.path.isabs(target):
            return self.realpath(path)
        return os.path.normpath(os.path.join(os.path.dirname(path), target))

    def realpath(self, path: str) -> str:
        """Resolved path, expressed under the root again (``/sys/devices/...``)."""
        self._touch(path)
        real = os.path.realpath(under(self.root, path))
        if self.root == "/":
            return real
        if real == self.root:
            return "/"
        if real.startswith(self.root + "/"):
            return real[len(self.root) :]
        return real  # link leaves the root: keep as-is; callers only use basenames

    def listdir(self, path: str, accept: Optional[Callable[[str], bool]] = None) -> List[str]:
        """Sorted entries of a directory (filtered), [] when it does not exist.

        Only accepted names are logged: the record then holds what was used, and a
        replay lists exactly those again.
        """
        try:
            names = _listdir(under(self.root, path), self._fence)
        except Refused as e:
            self.notes.append((path, e.reason))
            return []
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            return []
        except OSError as e:
            if e.errno in _GONE:
                raise Vanished(path) from None
            self.notes.append((path, f"cannot list: {os.strerror(e.errno or 0)}"))
            return []
        if accept is not None:
            names = [n for n in names if accept(n)]
        names.sort(key=natural_key)
        if self.log is not None:
            self.log.add(path)
            for n in names:
                self.log.add(path.rstrip("/") + "/" + n)
        return names

    def exists(self, path: str) -> bool:
        """For directories and links only: a record re-creates those, not files whose
        content was never read (read a file with :meth:`text` to depend on it)."""
        ok = os.path.lexists(under(self.root, path))
        if ok:
            self._touch(path)
        return ok

    def isdir(self, path: str) -> bool:
        ok = os.path.isdir(under(self.root, path))
        if ok:
            self._touch(path)
        return ok


def fence_of(root: str) -> Optional[str]:
    """The real path reads under ``root`` must stay inside; None for ``/`` (nothing escapes)."""
    return None if os.path.abspath(root) == "/" else os.path.realpath(root)


def _inside(fd: int, host_path: str, fence: str) -> bool:
    """Is the file open as ``fd`` inside ``fence``?  One readlink of ``/proc/self/fd``
    names the file after every link was followed (realpath would lstat each
    component); realpath is the fallback where /proc is not mounted."""
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        real = os.path.realpath(host_path)
    return real == fence or real.startswith(fence.rstrip("/") + "/")


def _check_type(mode: int, host_path: str) -> None:
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), host_path)
    if not stat.S_ISREG(mode):
        raise Refused("not a regular file (FIFO, device or socket): not read")


def read_bounded(host_path: str, fence: Optional[str] = None, limit: int = MAX_BYTES, *, head: bool = False) -> bytes:
    """Whole file at ``host_path``, at most ``limit`` bytes, never blocking.

    Raw os calls: about half the cost of ``open().read()``, which matters when a
    scan reads thousands of small attributes.  Raises :class:`Refused` for a
    file that is not regular, larger than ``limit`` (unless ``head``: then its
    first ``limit`` bytes are returned), or (when ``fence`` -- see
    :func:`fence_of` -- is given) reached through a link leading out of it;
    ``OSError`` as ``open`` does.  With a fence the type is checked with
    ``stat`` before opening, so a link to a device node never opens the device
    (opening some, such as a watchdog, has effects of its own).
    """
    if fence is not None:
        st = os.stat(host_path)
        _check_type(st.st_mode, host_path)
    fd = os.open(host_path, _FLAGS)
    try:
        if fence is None:
            st = os.fstat(fd)
            _check_type(st.st_mode, host_path)
        elif not _inside(fd, host_path, fence):
            raise Refused("a link leading out of the root: treated as absent")
        # sysfs reports every attribute as 4096 bytes and returns it in one read; a
        # file of known size is done when that much arrived; procfs (size 0) reads to EOF
        size = st.st_size
        chunks = []
        total = 0
        while True:
            b = os.read(fd, 65536)
            if not b:
                break
            chunks.append(b)
            total += len(b)
            if total > limit:
                if head:
                    return b"".join(chunks)[:limit]
                raise Refused(f"larger than {limit} bytes: not parsed")
            if size == 4096 and total < 4096 or 0 < size <= total:
                break
        return b"".join(chunks)
    finally:
        os.close(fd)


def _listdir(host_path: str, fence: Optional[str]) -> List[str]:
    """Entries of a directory; refused when it lies outside ``fence`` (if given)."""
    if fence is None:
        return os.listdir(host_path)
    fd = os.open(host_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if not _inside(fd, host_path, fence):
            raise Refused("a link leading out of the root: treated as absent")
        return os.listdir(fd)
    finally:
        os.close(fd)


def natural_key(name: str) -> Tuple[object, ...]:
    """Sort key putting ``mem2`` before ``mem10`` and ``decoder2.1`` before ``decoder10.0``."""
    out: List[object] = []
    num = ""
    txt = ""
    for ch in name:
        if ch in _DIGITS:  # ASCII only: str.isdigit() accepts "²", which int() rejects
            if txt:
                out.append(txt)
                txt = ""
            num += ch
        else:
            if num:
                out.append(int(num))
                num = ""
            txt += ch
    if num:
        out.append(int(num))
    if txt:
        out.append(txt)
    # Tag each element with its kind so ints and strs never get compared directly.
    return tuple((0, x) if isinstance(x, int) else (1, x) for x in out)


def read_text(root: str, path: str, *, limit: int = MAX_BYTES, head: bool = False) -> Optional[str]:
    """Text of one host file under ``root`` (not stripped), None when absent, unreadable or refused.

    For single reads outside a scan (procfs files of a process, a cgroup
    attribute); the same rules as :class:`Reader`, without notes or logging.
    """
    try:
        return read_bounded(under(root, path), fence_of(root), limit, head=head).decode("utf-8", "replace")
    except (OSError, Refused):
        return None
