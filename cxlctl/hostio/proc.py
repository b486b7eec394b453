"""Facts about processes, read from procfs through the bounded reader.

Why here: procfs is a host file system like sysfs; reading it through
:func:`~cxlctl.hostio.reader.read_bounded` gives it the same never-block,
size-bounded rules, and keeps ``/proc`` literals in one package.
"""

from __future__ import annotations

import os
from typing import Optional

from . import paths
from .reader import read_text


def status_field(status: Optional[str], key: str) -> Optional[str]:
    """Value of ``Key:`` in a ``/proc/PID/status`` text."""
    for line in (status or "").splitlines():
        k, sep, v = line.partition(":")
        if sep and k.strip() == key:
            return v.strip()
    return None


def has_cap(bit: int) -> bool:
    """Is capability ``bit`` in this process' effective set?  Falls back to "is euid 0"
    when ``/proc/self/status`` cannot be read or parsed."""
    v = status_field(read_text("/", paths.SELF_STATUS), "CapEff")
    try:
        return bool(int(v or "", 16) >> bit & 1)
    except ValueError:
        return os.geteuid() == 0


def comm(pid: int) -> Optional[str]:
    """Command name of a running process (``/proc/PID/comm``), None if gone or unreadable."""
    text = read_text("/", paths.proc_pid(pid, "comm"))
    return (text or "").strip() or None
