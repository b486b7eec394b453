"""Facts about processes, read from procfs through the bounded reader.

Why here: procfs is a host file system like sysfs; reading it through
:class:`~cxlctl.hostio.reader.Reader` gives it the same never-block,
size-bounded rules, and keeps ``/proc`` literals in one package.
"""

from __future__ import annotations

import os
from typing import List, Optional

from cxlctl.parse import is_decimal

from . import paths
from .reader import Reader


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
    v = status_field(Reader().body(paths.SELF_STATUS), "CapEff")
    try:
        return bool(int(v or "", 16) >> bit & 1)
    except ValueError:
        return os.geteuid() == 0


def comm(pid: int) -> Optional[str]:
    """Command name of a running process (``/proc/PID/comm``), None if gone or unreadable."""
    text = Reader().body(paths.proc_pid(pid, "comm"))
    return (text or "").strip() or None


def flock_holders(dev: int, ino: int) -> Optional[List[int]]:
    """Pids holding an ``flock`` on the file ``(dev, ino)`` (``/proc/locks``; waiters are not
    holders); None when that cannot be read.  The host's, never a ``--root`` tree's: the lock
    file of a tree is a real file on this host."""
    text = Reader().body(paths.PROC_LOCKS, limit=16 << 20)
    if text is None:
        return None
    want = f"{os.major(dev):02x}:{os.minor(dev):02x}:{ino}"
    out: List[int] = []
    for line in text.splitlines():
        words = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 00:2b:5678 0 EOF"; a waiter has "->" after the number
        if len(words) >= 6 and words[1] == "FLOCK" and words[5] == want and is_decimal(words[4]):
            out.append(int(words[4]))
    return out


def euid_of(pid: int) -> Optional[int]:
    """The effective uid of a running process (``/proc/PID/status``), None if gone or unreadable."""
    uids = (status_field(Reader().body(paths.proc_pid(pid, "status")), "Uid") or "").split()
    return int(uids[1]) if len(uids) > 1 and is_decimal(uids[1]) else None


def pids(r: Reader) -> List[int]:
    """Process ids under the root's ``/proc`` (ASCII-digit names only), ascending; [] when there
    is none (a recorded tree without processes).  The one walk of ``/proc`` by name."""
    return sorted(int(n) for n in r.listdir(paths.PROC, is_decimal, ordered=False))


def cgroup_of(text: Optional[str]) -> Optional[str]:
    """The cgroup v2 path in a ``/proc/PID/cgroup`` text (``0::/system.slice/x.service``).

    The v2 entry is the ``0::`` line, wherever it is: on a hybrid v1/v2 host the
    file starts with the v1 hierarchies (``12:memory:/user.slice``), so the first
    line is not it.  None when there is no v2 entry (a pure v1 host).
    """
    for line in (text or "").splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or "/"
    return None


def cgroup_v1(r: Reader) -> bool:
    """Is the memory controller on a v1 hierarchy (no ``cgroup.controllers`` at the cgroup
    mount, or one without ``memory``)?  Then no cgroup has the v2 ``memory.numa_stat``
    layout: per-cgroup figures are unavailable, and a v1 file must not be parsed as one."""
    text = r.text(paths.CGROUP_DIR + "/cgroup.controllers")
    if text is None:
        return r.isdir(paths.CGROUP_DIR + "/memory")
    return "memory" not in text.split()


def alive(pid: int) -> bool:
    """The process exists (a zombie or another user's process counts): ``kill(pid, 0)``."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
