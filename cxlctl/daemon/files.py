"""Atomic replacement of the small files the daemon publishes (metrics textfile, NFD labels).

Readers (node_exporter's textfile collector, NFD's local source) read the
directory at any moment, so a file must never be seen half-written: write a
hidden temporary file in the same directory (both readers skip it: it is a
dot-file, and it does not end in ``.prom``), fsync it, rename it over the old
one.  Not fsyncing the directory is deliberate: these files are regenerated on
every rescan, so losing the rename in a crash costs nothing.
"""

from __future__ import annotations

import os


def atomic_replace(directory: str, name: str, text: str, mode: int = 0o644) -> str:
    """Replace ``directory/name`` with ``text``; returns the path."""
    os.makedirs(directory, mode=0o755, exist_ok=True)
    path = os.path.join(directory, name)
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)  # explicit: the unit's UMask=0077 must not hide metrics from node_exporter
        data = memoryview(text.encode("utf-8"))
        while data:
            data = data[os.write(fd, data) :]
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
    return path
