"""The one atomic file writer: no reader ever sees a half-written file.

Used for the tuning journal, the active-profile record, persisted settings
(sysctl.d, weighted-interleave files) and the daemon's published files
(metrics textfile, NFD labels).  A hidden temporary file in the same directory
(dot-file, ``.tmp`` suffix: node_exporter's collector, NFD and systemd-sysctl
all skip it) is written, fsynced and renamed over the target.  ``sync_dir``
also fsyncs the directory, making the rename itself durable: wanted for the
journal and settings, not for files regenerated on every rescan.
"""

from __future__ import annotations

import os
from typing import Union


def atomic_write(path: str, data: Union[bytes, str], *, mode: int = 0o600, sync_dir: bool = True) -> str:
    """Replace ``path`` with ``data`` (str is UTF-8 encoded); creates the directory; returns ``path``.

    ``mode`` is set explicitly with fchmod, so a service's ``UMask=0077`` does
    not hide a world-readable file (metrics) from its readers.
    """
    d = os.path.dirname(path) or "."
    os.makedirs(d, mode=0o755, exist_ok=True)
    tmp = os.path.join(d, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    os.close(fd)
    os.replace(tmp, path)
    if sync_dir:
        sync_directory(d)
    return path


def sync_directory(d: str) -> None:
    """fsync a directory, so a rename or unlink in it survives a crash."""
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
