"""Tolerant, root-relative reads of sysfs and procfs.

Every fact the inventory knows comes through :class:`Reader`, for three reasons:

* the root is injectable (``--root``), so recorded trees replace mocks in tests;
* odd content never raises: a missing attribute is ``None``, a permission-denied
  one is ``None`` plus a note, and a device that vanishes mid-scan raises
  :class:`Vanished`, which the scanner turns into "skip it and rescan once";
* every access can be logged, which is how ``cxlctl record`` copies exactly the
  subset of the tree that the scan used.
"""

from __future__ import annotations

import errno
import os
from typing import Callable, Dict, List, Optional, Set, Tuple

#: errnos meaning "the device went away while we were looking"
_GONE = (errno.ENODEV, errno.ENXIO, errno.ENOENT, errno.ESTALE)


class Vanished(Exception):
    """A device disappeared while it was being read (hot-unplug, region teardown)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


class Reader:
    """Reads files under ``root`` as if it were ``/``.

    Paths given to the methods are absolute-looking (``/sys/bus/cxl``) and are
    resolved under the root.  ``notes`` collects what could not be read and why;
    ``log`` (when enabled) collects every path that was touched.
    """

    def __init__(self, root: str = "/", *, log: bool = False) -> None:
        self.root = os.path.abspath(root)
        self.notes: List[Tuple[str, str]] = []
        self.log: Optional[Set[str]] = set() if log else None
        self._data: Optional[Dict[str, bytes]] = {} if log else None
        #: the device being read (set by the scanner); a missing file means the
        #: device vanished only when this path no longer resolves
        self.device: Optional[str] = None

    # -- path helpers -------------------------------------------------------------
    def host(self, path: str) -> str:
        """Path on this machine's file system for ``path`` under the root."""
        if self.root == "/":
            return path
        return self.root + path

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
        return self.device is not None and not os.path.exists(self.host(self.device))

    # -- reads ----------------------------------------------------------------------
    def raw(self, path: str) -> Optional[bytes]:
        """File content, or None if absent or unreadable (reason kept in notes)."""
        self._touch(path)
        try:
            data = _read_all(self.host(path))
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
            return os.readlink(self.host(path))
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
        real = os.path.realpath(self.host(path))
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
            names = os.listdir(self.host(path))
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
        ok = os.path.lexists(self.host(path))
        if ok:
            self._touch(path)
        return ok

    def isdir(self, path: str) -> bool:
        ok = os.path.isdir(self.host(path))
        if ok:
            self._touch(path)
        return ok


def _read_all(path: str) -> bytes:
    """Whole file with raw os calls: about half the cost of ``open().read()``, which
    matters when a scan reads thousands of small attributes."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while True:
            b = os.read(fd, 65536)
            if not b:
                break
            chunks.append(b)
            if len(b) < 4096:  # sysfs/procfs attributes fit one page; stop early
                break
        return b"".join(chunks)
    finally:
        os.close(fd)


def natural_key(name: str) -> Tuple[object, ...]:
    """Sort key putting ``mem2`` before ``mem10`` and ``decoder2.1`` before ``decoder10.0``."""
    out: List[object] = []
    num = ""
    txt = ""
    for ch in name:
        if "0" <= ch <= "9":  # ASCII only: int() rejects "²", which isdigit() accepts
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
