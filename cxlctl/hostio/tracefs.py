"""cxlctl's private tracefs instances: find tracefs, create, enable, read, remove.

Why instances: the global trace buffer belongs to whoever else traces the host
(perf, trace-cmd, rasdaemon, a developer); enabling events there or consuming
``trace_pipe`` would steal or mix their data.  A tracefs *instance*
(``instances/<name>``, made by ``mkdir``) has its own buffer and its own event
switches, so cxlctl enables the ``cxl`` event group only there and removes the
instance when done.  cxlctl only ever creates, writes and removes instances
named ``cxlctl-*``.

Every path is mapped under the ``--root`` (a recorded tree may hold a
``sys/kernel/tracing`` with a ``trace`` file to replay); writes use the
single-write knob primitive (:func:`cxlctl.hostio.write.write_knob`).
"""

from __future__ import annotations

import errno
import os
import select
import time
from typing import Iterator, List, Optional

from . import paths
from .reader import Reader, Unreadable
from .root import cxlctl_command, under
from .write import KnobError, OutsideRoot, check_inside, write_knob

#: the most of one ``trace`` snapshot read (the buffer is 1.4 MiB per CPU by default)
MAX_TRACE_BYTES = 64 << 20


class TracefsError(Exception):
    """Tracefs cannot be used: the message says why, the hint how to fix it."""

    def __init__(self, message: str, hint: str = "", code: str = "tracefs") -> None:
        super().__init__(message)
        self.hint = hint
        self.code = code


def find_tracefs(root: str) -> str:
    """The tracefs mount (a host path) under ``root``; raises :class:`TracefsError`
    with the fix when it is not mounted or not readable."""
    for cand in (paths.TRACEFS, paths.TRACEFS_DEBUGFS):
        host = under(root, cand)
        try:
            os.listdir(host)
        except PermissionError:
            raise TracefsError(
                f"{host} is readable by root only",
                hint="run cxlctl events/health as root (sudo)",
                code="not_root",
            ) from None
        except OSError:
            continue
        if os.path.isdir(os.path.join(host, "instances")) or os.path.exists(os.path.join(host, "trace")):
            return cand
    if root != "/":  # a recorded tree: no kernel to mount tracefs for; saved trace lines are the way
        raise TracefsError(
            f"{under(root, paths.TRACEFS)} holds no tracefs: a recorded tree has no live trace buffer",
            hint=f"read saved trace lines with {cxlctl_command(root, 'events --input FILE')} "
            f"(FILE: a copy of {paths.TRACEFS}/trace from the host, or - for stdin)",
            code="no_tracefs",
        )
    raise TracefsError(
        f"tracefs is not mounted (looked at {paths.TRACEFS} and {paths.TRACEFS_DEBUGFS})",
        hint=f"mount it: mount -t tracefs nodev {paths.TRACEFS}",
        code="no_tracefs",
    )


def cxl_events(root: str, tracefs: str) -> List[str]:
    """Names of the ``cxl`` trace events this kernel has (empty: none)."""
    try:
        names = os.listdir(under(root, f"{tracefs}/events/cxl"))
    except OSError:
        return []
    return sorted(n for n in names if n.startswith("cxl_") and os.path.isdir(under(root, f"{tracefs}/events/cxl/{n}")))


def instance_path(tracefs: str, name: str) -> str:
    if not name.startswith(paths.TRACE_INSTANCE_PREFIX) or "/" in name or name in (".", ".."):
        raise ValueError(f"not a cxlctl trace instance name: {name!r}")
    return f"{tracefs}/instances/{name}"


def instance_exists(root: str, tracefs: str, name: str) -> bool:
    return os.path.isdir(under(root, instance_path(tracefs, name)))


def create_instance(root: str, tracefs: str, name: str, events: List[str], buffer_kb: Optional[int] = None) -> str:
    """Create instance ``name`` (if missing) and enable ``events`` in it; returns its path.

    Enables the named events one by one (not ``events/cxl/enable``), so an
    event added by a later kernel is not switched on unasked and the list of
    what is traced is the one cxlctl reports.
    """
    inst = instance_path(tracefs, name)
    host = under(root, inst)
    _inside(root, inst)
    try:
        os.mkdir(host)
    except FileExistsError:
        pass
    except PermissionError:
        raise TracefsError(f"cannot create {host}: permission denied", hint="run as root", code="not_root") from None
    except OSError as e:
        raise TracefsError(f"cannot create {host}: {os.strerror(e.errno or 0)}") from None
    try:
        if buffer_kb:
            write_knob(root, f"{inst}/buffer_size_kb", f"{buffer_kb}\n")
        for ev in events:
            write_knob(root, f"{inst}/events/cxl/{ev}/enable", "1\n")
    except KnobError as e:
        remove_instance(root, tracefs, name)
        raise TracefsError(f"cannot enable the cxl events in {host}: {e}") from None
    return inst


def _inside(root: str, inst: str) -> None:
    """Refuse to make or remove an instance through a link leading out of the ``--root`` tree."""
    try:
        check_inside(root, [inst])
    except OutsideRoot as e:
        raise TracefsError(str(e), hint=e.hint) from None


def remove_instance(root: str, tracefs: str, name: str) -> bool:
    """Disable and remove instance ``name``; False when it was not there."""
    inst = instance_path(tracefs, name)
    host = under(root, inst)
    if not os.path.isdir(host):
        return False
    _inside(root, inst)
    try:
        write_knob(root, f"{inst}/events/enable", "0\n")
    except KnobError:
        pass  # rmdir below disables everything anyway
    for _ in range(50):
        try:
            os.rmdir(host)
            return True
        except FileNotFoundError:
            return True
        except OSError as e:
            if e.errno != errno.EBUSY:  # busy while a reader still holds trace_pipe
                raise TracefsError(f"cannot remove {host}: {os.strerror(e.errno or 0)}") from None
            time.sleep(0.1)
    raise TracefsError(f"cannot remove {host}: still busy", hint=f"rmdir {host} once no reader holds it")


def stale_follow_instances(root: str, tracefs: str) -> List[str]:
    """``cxlctl-follow-<pid>`` instances whose process is gone (killed before it
    could clean up): safe to remove."""
    try:
        names = os.listdir(under(root, f"{tracefs}/instances"))
    except OSError:
        return []
    out = []
    for n in names:
        tail = n[len(paths.TRACE_INSTANCE_PREFIX + "follow-") :]
        if n.startswith(paths.TRACE_INSTANCE_PREFIX + "follow-") and tail.isascii() and tail.isdigit():
            if not os.path.exists(under(root, paths.proc_pid(int(tail), "stat"))):
                out.append(n)
    return out


def read_trace(root: str, inst: str) -> bytes:
    """The instance's ``trace`` file: a non-consuming snapshot of its buffer."""
    try:
        b = Reader(root).read(f"{inst}/trace", limit=MAX_TRACE_BYTES, head=True)
    except Unreadable as e:
        raise TracefsError(f"cannot read {inst}/trace: {e.reason}") from None
    if b is None:
        raise TracefsError(f"cannot read {inst}/trace: no such file")
    return b


def follow_pipe(root: str, inst: str, stop: Optional[List[bool]] = None, poll_s: float = 0.5) -> Iterator[bytes]:
    """Chunks from the instance's ``trace_pipe`` as they come (consuming: only
    cxlctl's own instance is ever read this way).  Never blocks for longer
    than ``poll_s`` so a caller can stop (``stop[0] = True``) or time out."""
    host = under(root, f"{inst}/trace_pipe")
    try:
        fd = os.open(host, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise TracefsError(f"cannot open {inst}/trace_pipe: {os.strerror(e.errno or 0)}") from None
    try:
        while not (stop and stop[0]):
            r, _, _ = select.select([fd], [], [], poll_s)
            if not r:
                yield b""
                continue
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                yield b""
                continue
            if not data:
                # a regular file in a --root tree ends; the real pipe never does
                if not os.path.exists(host) or os.path.isfile(host):
                    return
                time.sleep(poll_s)
                yield b""
                continue
            yield data
    finally:
        os.close(fd)
