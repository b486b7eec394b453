"""Tolerant, root-relative reads of sysfs and procfs.

Every fact the inventory knows comes through :class:`Reader`, for three reasons:

* the root is injectable (``--root``), so recorded trees replace mocks in tests;
* odd content never raises: a missing attribute is ``None``, a permission-denied
  one is ``None`` plus a note, and a device that vanishes mid-scan raises
  :class:`Vanished`, which the scanner turns into "skip it and rescan once";
* every access can be logged, which is how ``cxlctl record`` copies exactly the
  subset of the tree that the scan used.

Reads are also *bounded and safe on hostile trees*: a file larger than
:data:`MAX_BYTES` is not parsed, a link to a device node is never opened
(``/dev/zero`` never ends; opening some devices has effects), files are opened
``O_NONBLOCK`` so a FIFO is never waited on (its type is checked when a read
says "empty" or "would block"), and a link whose target lies outside a ``--root`` tree is
treated as absent.  Each refusal leaves a note, so ``status`` says what it
skipped instead of hanging or reading the host's files.
"""

from __future__ import annotations

import errno
import os
import stat

from .root import under

# typing costs ~5 ms of start-up: only mypy needs it here
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple, TypeVar

    T = TypeVar("T")


#: the largest file the reader parses; sysfs/procfs attributes are one page
MAX_BYTES = 1 << 20
_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)

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


class Unreadable(Exception):
    """A file that is there but cannot be read (permission, a FIFO, too large, a link out of the root).

    Raised by :meth:`Reader.read`, so a caller can tell "absent" (None) from
    "cannot read" and say which file, under the root the user gave (``where``),
    and why (``reason``); ``errno`` is the system's, when it gave one.
    """

    def __init__(self, path: str, where: str, reason: str, err: Optional[int] = None) -> None:
        super().__init__(f"cannot read {where}: {reason}")
        self.path = path
        self.where = where
        self.reason = reason
        self.errno = err


class Reader:
    """Reads files under ``root`` as if it were ``/``.

    Paths given to the methods are absolute-looking (``/sys/bus/cxl``) and are
    resolved under the root.  ``notes`` collects what could not be read and why;
    ``log`` (when enabled) collects every path that was touched.  A reader keeps a
    few directory handles open (see :meth:`_dirfd`): use one per thread.
    """

    def __init__(self, root: str = "/", *, log: bool = False) -> None:
        self.root = os.path.abspath(root)
        self._fence = fence_of(self.root)
        #: directories proven inside the root, open (O_PATH) for ``openat``: see :meth:`_dirfd`
        self._dirfds: Dict[str, int] = {}
        #: the device (:attr:`device`) being read when each handle was opened: see :meth:`_stale`
        self._owner: Dict[str, Optional[str]] = {}
        #: sort keys of the entry names listed so far (see :func:`sort_names`)
        self._keys: Dict[str, str] = {}
        self.notes: List[Tuple[str, str]] = []
        self.log: Optional[Set[str]] = set() if log else None
        self._data: Optional[Dict[str, bytes]] = {} if log else None
        #: the device being read (set by the scanner); a missing file means the
        #: device vanished only when this path no longer resolves
        self.device: Optional[str] = None
        #: the first attribute :meth:`attrs` found missing while reading :attr:`device`,
        #: not yet told apart from a device that went away: see :meth:`confirm`
        self.absent: Optional[str] = None

    # -- path helpers -------------------------------------------------------------
    def _touch(self, path: str) -> None:
        if self.log is not None:
            self.log.add(path)

    def unlogged(self) -> Reader:
        """This reader, or one of the same root that does not log when this one does: for
        what ``cxlctl record`` must never copy (a process' environment)."""
        return self if self.log is None else Reader(self.root)

    def captured(self, path: str) -> Optional[bytes]:
        """Bytes returned for ``path`` during this scan (recording mode only)."""
        return None if self._data is None else self._data.get(path)

    def _dev_gone(self, path: str) -> bool:
        """True when the device being read no longer exists (dangling link, removed dir).

        A missing attribute of a device that is still there is just "absent on this
        kernel", and reads outside any device (knobs, top-level masks) never vanish.
        """
        return self.device is not None and not os.path.exists(under(self.root, self.device))

    def confirm(self) -> None:
        """After the reads of :attr:`device`: raise :class:`Vanished` if an attribute
        :meth:`attrs` found missing was missing because the device went away.

        One existence check per device instead of one per missing attribute (a
        kernel without ``qos_class`` misses two per memdev): a device that vanished
        at any point of its reads is gone at their end too.
        """
        path, self.absent = self.absent, None
        if path is not None and self._dev_gone(path):
            raise Vanished(path)

    # -- directory handles ------------------------------------------------------------
    def _dirfd(self, d: str) -> int:
        """An ``O_PATH`` handle on directory ``d`` (a host path) proven inside the root.

        A scan reads ten to fifty attributes of each device directory.  Opening
        them relative to one handle (``openat``) spares the kernel the walk of
        the whole path (and of the bus link in it) per attribute, and the fence
        check is done once, on the handle itself -- the directory read from is
        the one that was checked, even if the tree changes in between.  A
        subdirectory of a directory whose handle is kept (a memdev's ``ram/``) is
        opened through that handle without following a link: a real directory
        inside a directory inside the root is inside the root, so it needs no
        check of its own.  A few recent handles are kept (a scan moves from device
        to device); :meth:`close` releases them.
        """
        fd = self._dirfds.get(d)
        if fd is not None:
            return fd
        parent, _, base = d.rpartition("/")
        pfd = self._dirfds.get(parent)
        fd = -1
        if pfd is not None and base not in _NOT_NAMES:
            try:
                fd = os.open(base, _SUBDIR_FLAGS, dir_fd=pfd)
            except OSError:  # a link (ENOTDIR), or gone: the general path decides
                fd = -1
        if fd < 0:
            host = under(self.root, d)
            fd = os.open(host, _DIR_FLAGS) if self._fence is None else self._fence.open_dir(host)
        self._keep(d, fd)
        return fd

    def alias(self, d: str, parent: str, name: str, *, open_parent: bool = False) -> None:
        """Read directory ``d`` (a bus entry, say) as entry ``name`` of directory ``parent``.

        A scan that found ``name`` by listing ``parent`` (a port's decoders) and
        still holds ``parent``'s handle opens ``d``'s through it, without following
        a link: one ``openat`` instead of a walk through the bus link plus the
        fence check (a real directory inside a directory inside the root is
        inside the root).  Nothing happens when ``parent``'s handle is not kept (unless
        ``open_parent``: then it is opened, and checked, first) or the entry is not a
        directory: ``d`` is then opened the general way.
        """
        if d in self._dirfds or name in _NOT_NAMES or "/" in name:
            return
        pfd = self._dirfds.get(parent)
        if pfd is None and open_parent:
            try:
                pfd = self._dirfd(parent)
            except (OSError, Refused):  # the general way says why
                return
        if pfd is None:
            return
        try:
            fd = os.open(name, _SUBDIR_FLAGS, dir_fd=pfd)
        except OSError:
            return
        self._keep(d, fd)

    def _keep(self, d: str, fd: int) -> None:
        if len(self._dirfds) >= _DIRFDS_KEPT:
            old = next(iter(self._dirfds))
            os.close(self._dirfds.pop(old))
            self._owner.pop(old, None)
        self._dirfds[d] = fd
        self._owner[d] = self.device

    def _at(self, d: str, op: Callable[[int], T]) -> T:
        """``op(handle of d)``.  A missing entry through a handle kept from earlier is asked
        again through a fresh one: the directory may have been replaced since (a reader
        kept across a region or DAX reconfiguration on a tree that changes).  A handle
        opened while reading the current device is not asked again (see :meth:`_stale`)."""
        try:
            dfd = self._dirfds.get(d)
            if dfd is not None:
                try:
                    return op(dfd)
                except FileNotFoundError:
                    if not self._stale(d):
                        raise
                    os.close(self._dirfds.pop(d))
            return op(self._dirfd(d or "/"))
        except ValueError:
            # a NUL byte in a name made from kernel text (a release "6.1\0x" in
            # /boot/config-RELEASE): no such file can exist
            raise FileNotFoundError(errno.ENOENT, "name with a NUL byte", d) from None

    def _stale(self, d: str) -> bool:
        """May the kept handle of ``d`` point at a directory replaced since it was opened?

        Not when it was opened while reading the device being read now: a scan reads
        a device's attributes within microseconds of opening its directory, and a
        device replaced in that window is a hot-plug race like any other (the scan's
        vanished check and rescan handle it).  Asking again through a fresh handle
        costs four system calls per absent attribute, which a scan meets a few times
        per memdev (a kernel without ``qos_class``).
        """
        return self.device is None or self._owner.get(d) != self.device

    def close(self) -> None:
        """Release the directory handles (the reader stays usable: it reopens them)."""
        fds, self._dirfds = self._dirfds, {}
        self._owner = {}
        self._keys = {}
        for fd in fds.values():
            os.close(fd)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to release into
            pass

    def _read(self, path: str) -> bytes:
        """Content of host file ``path`` under the root, with :func:`_read_bounded`'s rules.

        Under a ``--root`` tree, a plain file (not a link: ``O_NOFOLLOW``) is
        opened relative to its directory's handle; a link, an odd name and the
        live host (``/``: no fence) take :func:`_read_bounded`'s general path.
        """
        d, _, name = path.rpartition("/")
        if self._fence is None or name in _NOT_NAMES:
            return _read_bounded(under(self.root, path), self._fence)
        try:
            fd = self._at(d, lambda dfd: os.open(name, _NOFOLLOW, dir_fd=dfd))
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            return _read_bounded(under(self.root, path), self._fence)
        # the common case inline (a scan reads thousands): one short read is the whole
        # attribute.  Anything else -- empty and not a regular file (a FIFO), would
        # block, a full chunk -- is read again by the general loop, which checks and
        # bounds it.
        try:
            b = os.read(fd, _CHUNK)
            if not b and stat.S_ISREG(os.fstat(fd).st_mode):
                return b  # an empty attribute (an unused decoder's region), not a FIFO
        except BlockingIOError:
            b = b""
        finally:
            os.close(fd)
        if 0 < len(b) < _CHUNK:
            return b
        return _read_bounded(under(self.root, path), self._fence)

    # -- reads ----------------------------------------------------------------------
    def read(self, path: str, *, limit: int = MAX_BYTES, head: bool = False) -> Optional[bytes]:
        """Content of ``path``; None when it is absent; :class:`Unreadable` when it is there but
        cannot be read.  For single reads that must tell the two apart (a knob, a process'
        files, a profile); ``limit`` bounds the size (``head``: its first ``limit`` bytes).
        Not logged and noted: a caller that wants a record uses :meth:`raw`."""
        where = under(self.root, path)
        try:
            if limit == MAX_BYTES and not head:
                return self._read(path)
            return _read_bounded(where, self._fence, limit, head=head)
        except Refused as e:
            raise Unreadable(path, where, e.reason) from None
        except FileNotFoundError:
            if self._dev_gone(path):
                raise Vanished(path) from None
            return None
        except NotADirectoryError:  # a component of the path is a file: no such file
            return None
        except IsADirectoryError:
            raise Unreadable(path, where, "is a directory", errno.EISDIR) from None
        except PermissionError:
            raise Unreadable(path, where, "permission denied", errno.EACCES) from None
        except OSError as e:
            if e.errno in _GONE and self.device is not None:
                raise Vanished(path) from None
            raise Unreadable(path, where, os.strerror(e.errno or 0), e.errno) from None

    def body(self, path: str, *, limit: int = MAX_BYTES, head: bool = False) -> Optional[str]:
        """Decoded text of ``path`` (not stripped: ``environ``, a TOML file), None when absent or
        unreadable (then with a note saying why, as :meth:`raw` leaves)."""
        try:
            b = self.read(path, limit=limit, head=head)
        except Unreadable as e:
            self.notes.append((path, e.reason))
            return None
        return None if b is None else b.decode("utf-8", "replace")

    def raw(self, path: str) -> Optional[bytes]:
        """File content, or None if absent or unreadable (reason kept in notes)."""
        self._touch(path)
        try:
            data = self._read(path)
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

    def attrs(self, d: str, names: Sequence[str]) -> List[Optional[bytes]]:
        """``[raw(d + "/" + n) for n in names]``, the scan's hot path: one handle lookup
        for the directory and, per attribute, one ``openat``, one ``read`` and one
        ``close`` (an empty attribute adds an ``fstat``: a FIFO also reads empty).

        Used for the live host too (a device directory under ``/sys`` is the same
        kind of directory there).  Anything but a plain short file that is there
        -- a link, a FIFO, an unreadable or absent attribute, a full chunk -- and
        any read in recording mode take :meth:`raw`, which keeps every rule (notes,
        :class:`Vanished`, the bound, the access log).
        """
        if self.log is not None:
            return [self.raw(f"{d}/{n}") for n in names]
        dfd = self._dirfds.get(d)
        if dfd is None:
            try:
                dfd = self._dirfd(d)
            except (OSError, Refused):  # raw() says why (note, Vanished, absent)
                return [self.raw(f"{d}/{n}") for n in names]
        out: List[Optional[bytes]] = []
        open_, read, close, flags, chunk = os.open, os.read, os.close, _NOFOLLOW, _CHUNK  # locals: a hot loop
        b: Optional[bytes]
        for n in names:
            if dfd < 0:  # a fallback below dropped the handle
                out.append(self.raw(f"{d}/{n}"))
                continue
            try:
                fd = open_(n, flags, dir_fd=dfd)
            except FileNotFoundError:
                if self._stale(d):
                    out.append(self.raw(f"{d}/{n}"))  # asks through a fresh handle
                    dfd = self._dirfds.get(d, -1)
                else:
                    # absent on this kernel, or the device is gone: confirm() tells, once per device
                    self.absent = self.absent or f"{d}/{n}"
                    out.append(None)
                continue
            except OSError:
                out.append(self.raw(f"{d}/{n}"))
                dfd = self._dirfds.get(d, -1)
                continue
            try:
                b = read(fd, chunk)
                if not b and not stat.S_ISREG(os.fstat(fd).st_mode):
                    b = None  # empty and not a regular file: a FIFO nobody writes to
            except OSError:  # would block (a FIFO with a writer), a directory, an I/O error
                b = None
            finally:
                close(fd)
            if b is not None and len(b) < chunk:
                out.append(b)
            else:
                out.append(self.raw(f"{d}/{n}"))
                dfd = self._dirfds.get(d, -1)
        return out

    def leaves(self, d: str, names: Sequence[str], leaf: str) -> List[Optional[bytes]]:
        """``[raw(f"{d}/{n}/{leaf}") for n in names]`` for many small files of the same name
        in sibling directories: ``statm`` of every process under ``/proc``.

        Ranking a host's processes by RSS reads a thousand ``statm`` files; through
        :meth:`raw` each opens (and fence-checks) a handle of its own directory, which
        costs more than the read.  Here, under a ``--root`` tree, each one is opened
        through the handle of ``d`` (checked once): the entry ``n`` without following a
        link (``O_NOFOLLOW``: a real directory inside a directory inside the root is
        inside the root), then ``leaf`` in it, also without following a link; on the
        live host the path is opened directly (nothing leads out of ``/``).  One short
        read is the whole file.  A file that is gone (a process that exited) or not
        readable is None, without a note.  Anything else -- a link, an odd name, another
        error, an empty or full read (a FIFO, a large file) -- and recording mode take
        :meth:`raw`, which keeps every rule.
        """
        if self.log is not None or "/" in leaf or leaf in _NOT_NAMES:
            return [self.raw(f"{d}/{n}/{leaf}") for n in names]
        open_, read, close, flags, chunk = os.open, os.read, os.close, _NOFOLLOW, _CHUNK
        out: List[Optional[bytes]] = []
        dfd = -1
        host = ""
        if self._fence is None:
            host = under(self.root, d).rstrip("/")
        else:
            try:
                dfd = self._dirfd(d)
            except (OSError, Refused):
                return [self.raw(f"{d}/{n}/{leaf}") for n in names]
        b: Optional[bytes]
        for n in names:
            if "/" in n or n in _NOT_NAMES:
                out.append(self.raw(f"{d}/{n}/{leaf}"))
                continue
            try:
                if dfd < 0:
                    fd = open_(f"{host}/{n}/{leaf}", flags)
                else:
                    sub = open_(n, _SUBDIR_FLAGS, dir_fd=dfd)
                    try:
                        fd = open_(leaf, flags, dir_fd=sub)
                    finally:
                        close(sub)
            except (FileNotFoundError, PermissionError):
                # gone (a process that exited), never there, or not ours to read (/proc mounted with
                # hidepid=1): None without a note each -- a ranking of 1,000 processes skips them
                out.append(None)
                continue
            except OSError:  # a link (ELOOP, ENOTDIR), ...: raw() decides and notes
                out.append(self.raw(f"{d}/{n}/{leaf}"))
                continue
            try:
                b = read(fd, chunk)
            except OSError:
                b = None
            finally:
                close(fd)
            if b and len(b) < chunk:
                out.append(b)
            else:
                out.append(self.raw(f"{d}/{n}/{leaf}"))
        return out

    def text(self, path: str) -> Optional[str]:
        """Stripped text content; None if absent/unreadable."""
        data = self.raw(path)
        if data is None:
            return None
        return data.decode("utf-8", "replace").strip()

    def link(self, path: str) -> Optional[str]:
        """Basename of a symlink's target, or None when there is no link."""
        target = self.readlink(path)
        return None if target is None else target.rstrip("/").rpartition("/")[2]

    def readlink(self, path: str) -> Optional[str]:
        """Target of the link at ``path`` (through its directory's handle, on the live host
        too: a scan reads five links per memdev), None when there is none."""
        self._touch(path)
        try:
            d, _, name = path.rpartition("/")
            if name in _NOT_NAMES:
                return os.readlink(under(self.root, path))
            return self._at(d, lambda dfd: os.readlink(name, dir_fd=dfd))
        except Refused as e:
            self.notes.append((path, e.reason))
            return None
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

    def listdir(self, path: str, accept: Optional[Callable[[str], bool]] = None, *, ordered: bool = True) -> List[str]:
        """Sorted entries of a directory (filtered), [] when it does not exist.

        ``ordered=False`` leaves them in the directory's order, for a caller that
        ranks them itself (1,000 entries of ``/proc``: sorting them cost as much
        as reading their ``statm``).

        Only accepted names are logged: the record then holds what was used, and a
        replay lists exactly those again.
        """
        try:
            names = self._list_kept(path)
            if names is None:
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
        if ordered:
            sort_names(names, self._keys)
        if self.log is not None:
            self.log.add(path)
            for n in names:
                self.log.add(path.rstrip("/") + "/" + n)
        return names

    def _list_kept(self, path: str) -> Optional[List[str]]:
        """Entries of ``path`` through its kept handle (a port listed after its attributes
        were read); None when there is none, or it was not opened for the device being
        read.  The handle was checked to lie inside the root, so the listing needs no
        check of its own, and it lists the very directory checked.  (``/proc/self/fd/N``
        reopens an ``O_PATH`` handle for reading; without /proc mounted, the general
        path lists it.)"""
        fd = self._dirfds.get(path)
        if fd is None or self._stale(path):  # a handle from earlier may be of a replaced directory
            return None
        try:
            return os.listdir(f"{_SELF_FD}/{fd}")
        except OSError:
            return None

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


class Fence:
    """The real directory reads under a ``--root`` must stay inside.

    Checking where a path really leads costs a few system calls, so it is done
    once per directory (cached for the fence's life: one scan) and, for the
    file itself, only when its last component is a link (``O_NOFOLLOW`` says
    so).  A file that is not a link and sits in a directory inside the root is
    inside the root.
    """

    def __init__(self, root: str) -> None:
        #: the root as given (absolute, no trailing slash): host paths start with it
        self.given = os.path.abspath(root).rstrip("/")
        self.real = _real_dir(root)
        self._prefix = self.real.rstrip("/") + "/"
        self._dirs: Dict[str, bool] = {}

    def holds(self, real: str) -> bool:
        return real == self.real or real.startswith(self._prefix)

    def dir_inside(self, host_dir: str) -> bool:
        """Does ``host_dir`` (links followed) lie inside the root?  OSError when it does not exist."""
        ok = self._dirs.get(host_dir)
        if ok is None:
            fd = os.open(host_dir, _DIR_FLAGS)
            try:
                ok = self.holds(_real_of(fd, host_dir))
            finally:
                os.close(fd)
            self._dirs[host_dir] = ok
        return ok

    def open_dir(self, host_dir: str) -> int:
        """An ``O_PATH`` handle on directory ``host_dir`` (links followed), proven inside the root.

        For writers: what they create or replace is then named relative to this
        handle (``openat``, ``mkdirat``, ``renameat``), so it lands in the very
        directory that was checked, even if a link in the path changes in between.
        :class:`Refused` when the directory lies outside; OSError when it does not exist.
        """
        fd = os.open(host_dir, _DIR_FLAGS)
        try:
            inside = self.holds(_real_of(fd, host_dir))
        except BaseException:
            os.close(fd)
            raise
        if not inside:
            os.close(fd)
            raise Refused(_OUTSIDE)
        return fd

    def leading_out(self, host_path: str) -> Tuple[str, str]:
        """(the first component of ``host_path`` that is a link leading out of the root, where it leads).

        For the error message only (a few ``lstat`` calls): ``host_path`` itself and
        its real path when no single component is to blame.
        """
        cur = next((h for h in (self.given, self.real) if host_path.startswith(h + "/")), "")
        for name in host_path[len(cur) :].strip("/").split("/") if cur else ():
            cur = f"{cur}/{name}"
            if os.path.islink(cur):
                real = os.path.realpath(cur)
                if not self.holds(real):
                    return cur, real
        return host_path, os.path.realpath(host_path)


def fence_of(root: str) -> Optional[Fence]:
    """The fence for reads under ``root``; None for ``/`` (nothing escapes it)."""
    return None if os.path.abspath(root) == "/" else Fence(root)


_CHUNK = 65536
_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC
_OUTSIDE = "a link leading out of the root: treated as absent"
_NOFOLLOW = _FLAGS | os.O_NOFOLLOW
#: a subdirectory opened through its parent's handle: never through a link (ENOTDIR)
_SUBDIR_FLAGS = _DIR_FLAGS | os.O_NOFOLLOW
#: last path components that are not a file's own name: left to the general path
_NOT_NAMES = ("", ".", "..")
#: directory handles a reader keeps open (a device's directory and its subdirectories)
_DIRFDS_KEPT = 64


_SELF_FD = "/proc/self/fd"


def _real_of(fd: int, host_path: str) -> str:
    """Real path of the file open as ``fd``: one readlink of ``/proc/self/fd`` (realpath
    would lstat every component); realpath is the fallback where /proc is not mounted."""
    try:
        return os.readlink(f"{_SELF_FD}/{fd}")
    except OSError:
        return os.path.realpath(host_path)


def _real_dir(path: str) -> str:
    """``os.path.realpath(path)`` of a directory: one ``open`` and one ``readlink`` (:func:`_real_of`)
    instead of an ``lstat`` and some Python per component; realpath itself for anything else."""
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError:
        return os.path.realpath(path)
    try:
        return _real_of(fd, path)
    finally:
        os.close(fd)


def _check_type(mode: int, host_path: str) -> None:
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), host_path)
    if not stat.S_ISREG(mode):
        raise Refused("not a regular file (FIFO, device or socket): not read")


def _open_fenced(host_path: str, fence: Fence) -> Tuple[int, int]:
    """(fd, size) of a file inside the fence, else :class:`Refused`/``OSError``; size -1: not looked at.

    A file whose last component is a link is resolved with ``stat`` before it is
    opened, so a link to a device node never opens the device (opening some,
    such as a watchdog, has effects of its own).  Any other file is opened
    ``O_NOFOLLOW|O_NONBLOCK`` without a ``stat`` (a scan reads thousands): the
    read loop checks the type only when the read says "empty" or "would block",
    which is what a FIFO says.
    """
    d = host_path.rpartition("/")[0] or "/"
    if not fence.dir_inside(d):
        raise Refused(_OUTSIDE)
    try:
        return os.open(host_path, _FLAGS | os.O_NOFOLLOW), -1
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
    st = os.stat(host_path)  # the last component is a link: where does it lead?
    _check_type(st.st_mode, host_path)
    fd = os.open(host_path, _FLAGS)
    if not fence.holds(_real_of(fd, host_path)):
        os.close(fd)
        raise Refused(_OUTSIDE)
    return fd, st.st_size


def _size_of_regular(fd: int, host_path: str) -> int:
    try:
        st = os.fstat(fd)
        _check_type(st.st_mode, host_path)
    except BaseException:
        os.close(fd)
        raise
    return st.st_size


def _read_bounded(
    host_path: str, fence: Optional[Fence] = None, limit: int = MAX_BYTES, *, head: bool = False
) -> bytes:
    """Whole file at ``host_path``, at most ``limit`` bytes, never blocking.

    Raw os calls: about half the cost of ``open().read()``, which matters when a
    scan reads thousands of small attributes.  Raises :class:`Refused` for a
    file that is not regular, larger than ``limit`` (unless ``head``: then its
    first ``limit`` bytes are returned), or (when a ``fence`` -- see
    :func:`fence_of` -- is given) reached through a link leading out of it;
    ``OSError`` as ``open`` does.
    """
    if fence is not None:
        fd, size = _open_fenced(host_path, fence)
    else:
        fd = os.open(host_path, _FLAGS)
        size = _size_of_regular(fd, host_path)
    return _read_fd(fd, size, host_path, limit, head)


def _read_fd(fd: int, size: int, host_path: str, limit: int, head: bool) -> bytes:
    """Read open file ``fd`` (``size`` from its stat, -1 when not looked at) and close it."""
    try:
        chunks = []
        total = 0
        while True:
            try:
                b = os.read(fd, _CHUNK)
            except BlockingIOError:  # a FIFO with a writer: never wait for it
                _check_type(os.fstat(fd).st_mode, host_path)
                raise
            if not b:
                if size < 0 and not total:  # empty file, or a FIFO nobody writes to
                    _check_type(os.fstat(fd).st_mode, host_path)
                break
            chunks.append(b)
            total += len(b)
            if total > limit:
                if head:
                    return b"".join(chunks)[:limit]
                raise Refused(f"larger than {limit} bytes: not parsed")
            # when the size is unknown (a file in a --root tree), a short read is the end;
            # sysfs reports every attribute as 4096 bytes and returns it in one read; a
            # file of known size is done when that much arrived; procfs (size 0) reads to EOF
            if size < 0:
                if len(b) < _CHUNK:
                    break
            elif size == 4096 and total < 4096 or 0 < size <= total:
                break
        return b"".join(chunks)
    finally:
        os.close(fd)


def _listdir(host_path: str, fence: Optional[Fence]) -> List[str]:
    """Entries of a directory; refused when it lies outside ``fence`` (if given)."""
    if fence is not None and not fence.dir_inside(host_path):
        raise Refused(_OUTSIDE)
    return os.listdir(host_path)


_DIGITS = "0123456789"
_NO_DIGITS = str.maketrans("", "", _DIGITS)


def natural_key(name: str) -> Tuple[object, ...]:
    """Sort key putting ``mem2`` before ``mem10`` and ``decoder2.1`` before ``decoder10.0``.

    Runs of ASCII digits compare as numbers (``str.isdigit()`` would accept "²",
    which ``int()`` rejects); each element is tagged with its kind so ints and
    strs never get compared directly.
    """
    head = name.rstrip(_DIGITS)
    if len(head.translate(_NO_DIGITS)) == len(head):  # the usual "mem10": text, then digits
        tail = name[len(head) :]
        if not head:
            return ((0, int(tail)),) if tail else ()
        return ((1, head), (0, int(tail))) if tail else ((1, head),)
    if head[-1:] == "." and len(head) < len(name):  # the other usual one, "decoder10.2"
        first = head[:-1].rstrip(_DIGITS)
        if len(first) + 1 < len(head) and len(first.translate(_NO_DIGITS)) == len(first):
            mid, tail = head[len(first) : -1], name[len(head) :]
            if first:
                return ((1, first), (0, int(mid)), (1, "."), (0, int(tail)))
            return ((0, int(mid)), (1, "."), (0, int(tail)))
    out: List[Tuple[int, object]] = []
    i, n = 0, len(name)
    while i < n:  # str methods, not re: see parse.py (start-up cost)
        j = i
        if "0" <= name[i] <= "9":
            while j < n and "0" <= name[j] <= "9":
                j += 1
            out.append((0, int(name[i:j])))
        else:
            while j < n and not "0" <= name[j] <= "9":
                j += 1
            out.append((1, name[i:j]))
        i = j
    return tuple(out)


def _plain_key(name: str) -> Optional[str]:
    """A string that sorts like :func:`natural_key` among names of the usual shapes.

    ``text``, ``textN``, ``N`` and ``textN.M`` (printable ASCII, N and M ASCII
    digits) become: per part a tag (number ``\x02`` < text ``\x03``, as
    natural_key's kinds 0 < 1); a text part then its characters and ``\x01``
    (below any printable one, so ``mem`` < ``memory``); a number part the
    length of its value as one character, then the value's digits (shorter is
    smaller; ``007`` and ``7`` are equal, as in natural_key).  Strings compare
    in C, tuples of tuples element by element: sorting a bus of 6,000 entries
    takes a few milliseconds instead of 20.  Anything else is None, and the
    whole list is sorted by natural_key.
    """
    if not (name.isascii() and name.isprintable()):
        return None
    head = name.rstrip(_DIGITS)
    tail = name[len(head) :]
    mid = ""
    if head[-1:] == "." and tail:  # textN.M
        first = head[:-1].rstrip(_DIGITS)
        mid, head = head[len(first) : -1], first
        if not mid:
            return None
    if len(head.translate(_NO_DIGITS)) != len(head):
        return None
    key = f"\x03{head}\x01" if head else ""
    if mid:
        m = mid.lstrip("0") or "0"  # the value's digits: str(int(mid)) without the conversions
        key += f"\x02{chr(32 + len(m))}{m}\x03.\x01"
    if tail:
        t = tail.lstrip("0") or "0"
        key += f"\x02{chr(32 + len(t))}{t}"
    return key


def sort_names(names: List[str], keys: Optional[Dict[str, str]] = None) -> None:
    """Sort directory entries in place by :func:`natural_key` (``mem2`` before ``mem10``).

    ``keys`` keeps the string keys made (a scan lists each decoder twice: on the
    bus, then in its port's directory).
    """
    if keys is None:
        keys = {}
    for n in names:
        if n not in keys:
            k = _plain_key(n)
            if k is None:  # an odd name: the general key for all
                names.sort(key=natural_key)
                return
            keys[n] = k
    names.sort(key=keys.__getitem__)
