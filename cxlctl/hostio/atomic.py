"""The one atomic file writer: no reader ever sees a half-written file.

Used for the tuning journal, the active-profile record, persisted settings
(sysctl.d, weighted-interleave files) and the daemon's published files
(metrics textfile, NFD labels).  A hidden temporary file in the same directory
(dot-file, ``.tmp`` suffix: node_exporter's collector, NFD and systemd-sysctl
all skip it) is written, fsynced and renamed over the target.  The temporary name is random
and created with ``O_EXCL|O_NOFOLLOW``: a name another user could guess lets them plant a
link or a file of theirs there first (root would write through it, or publish their bytes),
and a destination that is itself a symlink is refused (the rename would replace the link,
but a caller trusting the link's target would be misled; a link there is never ours).  ``sync_dir``
also fsyncs the directory, making the rename itself durable: wanted for the
journal and settings, not for files regenerated on every rescan.

Under a ``--root`` tree every step is fenced like a read (the reader's
:class:`~cxlctl.hostio.reader.Fence`): the directory is made and opened inside
the tree (:func:`~cxlctl.hostio.write.dir_fenced`) and the temporary file, the
rename and an unlink are all relative to that handle, so a link leading out of
the tree is :class:`~cxlctl.hostio.write.OutsideRoot` (exit 2) and nothing
lands outside it.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from typing import Dict, Optional, Union

from cxlctl.errors import CxlctlError
from cxlctl.parse import is_decimal

from .reader import fence_of
from .root import under
from .write import dir_fenced


class StorageError(CxlctlError):
    """A state or settings file cannot be written: full, read-only or failing storage (exit 1).

    Why its own message: an ``OSError`` from a full ``/run`` used to reach the user as
    "internal error", and a read-only ``/etc`` as "run it as root" — to root.  The message
    names the file and the file system's condition; the hint says what fixes it.  ``done``
    says what state that leaves (``nothing was changed``, or what was undone).
    """

    def __init__(self, path: str, err: OSError, done: str = "nothing was changed") -> None:
        code = err.errno
        d = os.path.dirname(path) or "/"
        if code in (errno.ENOSPC, errno.EDQUOT):
            why, hint = "no space left on its file system", f"free space on the file system holding {d} (`df {d}`)"
        elif code == errno.EROFS:
            why, hint = "its file system is read-only", f"remount the file system holding {d} read-write"
        elif code == errno.EIO:
            why = "I/O error"
            hint = f"the storage holding {d} reports I/O errors: check `dmesg` and the disk before trusting files on it"
        else:
            why = err.strerror or str(err)
            hint = f"check {d} (mount, permissions, `dmesg`)"
        super().__init__(f"cannot write {path}: {why}; {done}", hint=hint + ", then run the command again")
        self.path = path
        self.cause = err
        self.errno: Optional[int] = code


def read_only(path: str) -> bool:
    """True when ``path`` (or its nearest existing parent) is on a read-only mount (``ST_RDONLY``).

    Why: ``access(W_OK)`` fails on a read-only file system for root too; the refusal must then
    say "read-only", not "run it as root".
    """
    p = path
    while not os.path.lexists(p) and os.path.dirname(p) != p:
        p = os.path.dirname(p)
    try:
        return bool(os.statvfs(p).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _test_fault(root: str, base: str) -> Optional[int]:
    """The errno to fail the write of ``base`` with (test hook ``CXLCTL_TEST_FAULT_ATOMIC``).

    ``NAME:N:ERRNO`` fails the ``N``-th atomic write of a file named ``NAME`` in this process
    with ``ERRNO`` at its fsync (EIO cannot be made real here without device-mapper).
    """
    from .testhooks import hook

    spec = hook("CXLCTL_TEST_FAULT_ATOMIC", root)
    if not spec:
        return None
    name, _, rest = spec.partition(":")
    n, _, what = rest.partition(":")
    if name != base or not is_decimal(n):
        return None
    _FAULT_COUNT[base] = _FAULT_COUNT.get(base, 0) + 1
    return getattr(errno, what, errno.EIO) if _FAULT_COUNT[base] == int(n) else None


_FAULT_COUNT: Dict[str, int] = {}


def atomic_write(root: str, path: str, data: Union[bytes, str], *, mode: int = 0o600, sync_dir: bool = True) -> str:
    """Replace ``path`` (a host path) under ``root`` with ``data`` (str is UTF-8 encoded).

    Creates the directory; returns the file's path under the root.  ``mode`` is
    set explicitly with fchmod, so a service's ``UMask=0077`` does not hide a
    world-readable file (metrics) from its readers.
    """
    host = under(root, path)
    d = os.path.dirname(host) or "."
    base = os.path.basename(host)
    fence = fence_of(root)
    if fence is None:
        os.makedirs(d, mode=0o755, exist_ok=True)
        dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    else:
        dfd = dir_fenced(fence, d, create=True)
    try:
        _refuse_link(dfd, base, host)
        raw = data.encode("utf-8") if isinstance(data, str) else data
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
        while True:
            tmp = f".{base}.{secrets.token_hex(8)}.tmp"
            try:
                fd = os.open(tmp, flags, mode, dir_fd=dfd)
                break
            except FileExistsError:  # 2**64 names: only someone planting them gets here twice
                continue
        try:
            os.fchmod(fd, mode)
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view) :]
            fault = _test_fault(root, base)
            if fault is not None:
                raise OSError(fault, os.strerror(fault), host)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
            raise
        os.close(fd)
        os.replace(tmp, base, src_dir_fd=dfd, dst_dir_fd=dfd)
        if sync_dir:
            _sync_at(dfd)
    finally:
        os.close(dfd)
    return host


def _refuse_link(dfd: int, base: str, host: str) -> None:
    """Refuse to replace ``base`` (in the directory open as ``dfd``) when it is a symlink.

    Why: no file cxlctl writes is a link; one there was put by someone else, and whoever
    reads the destination next (systemd-sysctl, node_exporter, cxlctl itself) would have
    followed it to a file of their choosing before the write, so the write must not pretend
    it replaced "the" file.  A usage error (exit 2): the fix is removing the link.
    """
    try:
        st = os.stat(base, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        from cxlctl.errors import UsageError

        raise UsageError(
            f"refusing to write {host}: it is a symbolic link, not a file",
            hint=f"remove the link (`rm {host}`) if you did not make it on purpose, then run the command again",
        )


def remove(root: str, path: str, *, sync_dir: bool = True) -> bool:
    """Unlink ``path`` (a host path) under ``root``; False when it was not there.

    The directory is checked like :func:`atomic_write`'s (an unlink through a
    link leading out of the tree would remove a file outside it).
    """
    host = under(root, path)
    d, _, base = host.rpartition("/")
    fence = fence_of(root)
    try:
        if fence is None:
            dfd = os.open(d or "/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        else:
            dfd = dir_fenced(fence, d or "/")
    except FileNotFoundError:
        return False
    try:
        try:
            os.unlink(base, dir_fd=dfd)
        except FileNotFoundError:
            return False
        if sync_dir:
            _sync_at(dfd)
    finally:
        os.close(dfd)
    return True


def _sync_at(dfd: int) -> None:
    """fsync the directory open as ``dfd`` (an ``O_PATH`` handle cannot be fsynced: reopen it)."""
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dfd)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
