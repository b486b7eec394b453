"""Where ``cxlctl events`` gets its lines from, and the mapped result.

Three sources, one parser:

* the long-lived collection instance ``cxlctl-events`` (``--collect`` makes it,
  ``--stop`` removes it): ``cxlctl events`` reads its ``trace`` file, which is
  a snapshot that does not consume the buffer, so every run sees the history
  the buffer still holds;
* ``--follow``: a short-lived instance ``cxlctl-follow-<pid>`` read through
  ``trace_pipe`` and removed on exit (also on Ctrl-C and SIGTERM); instances
  left by a killed follower are removed by the next one;
* ``--input FILE``: lines saved earlier (a recorded stream, ``trace`` output
  pasted into a bug report).

The inventory is scanned once per run (and again when an event names a memdev
or region the scan did not see, as after a hot-plug during ``--follow``).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Iterable, Iterator, List, Literal, NamedTuple, Optional, Tuple

from cxlctl.hostio import paths, tracefs
from cxlctl.hostio.host import Host
from cxlctl.model import Inventory

from .events import Event, to_event
from .trace import Stream, split_lines


class Source(NamedTuple):
    """What was read: the instance (or file), the events the kernel offers."""

    kind: Literal["collect", "follow", "file"]
    where: str
    available: List[str]


def parse_since(text: str) -> float:
    """``--since``: a duration back from now (``90``, ``90s``, ``15m``, ``2h``, ``1d``).

    Raises ValueError naming the problem.  Trace timestamps count seconds
    since boot, so "since" is turned into a boot-relative time by the caller.
    """
    t = text.strip().lower()
    mult = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    unit = 1
    if t and t[-1] in mult:
        unit, t = mult[t[-1]], t[:-1]
    from cxlctl.parse import parse_seconds

    try:
        return parse_seconds(t) * unit
    except ValueError:
        raise ValueError(f"{text!r} is not a duration (e.g. 90s, 15m, 2h, 1d)") from None


def uptime(host: Host) -> Optional[float]:
    t = host.reader.body(paths.UPTIME)
    try:
        return float(t.split()[0]) if t else None
    except ValueError:
        return None


class Mapper:
    """Turns parsed lines into mapped events with one inventory scan, rescanning
    when an event names a memdev the scan did not know (hot-plug while following)."""

    def __init__(self, host: Host, inv: Optional[Inventory] = None, scan: bool = True) -> None:
        self.host = host
        self._scan = scan
        self.inv = inv
        self._rescanned = -1e9

    def _inventory(self) -> Optional[Inventory]:
        if self.inv is None and self._scan:
            from cxlctl.inventory import scan

            self.inv = scan(self.host)
        return self.inv

    def map(self, lines: Iterable[str], stream: Stream) -> Iterator[Event]:
        for t in stream.feed(lines):
            inv = self._inventory()
            ev = to_event(t, inv)
            if inv is not None and ev.memdev and inv.memdev(ev.memdev) is None and self._scan:
                # a memdev the scan did not know: hot-added since (rescan, at most once
                # a minute), or an event from another host (--input)
                import time

                now = time.monotonic()
                if now - self._rescanned >= 60:
                    from cxlctl.inventory import scan

                    self._rescanned = now
                    self.inv = scan(self.host)
                    ev = to_event(t, self.inv)
            yield ev


class Stored(NamedTuple):
    """The stored events of one ``cxlctl events`` run (a collection or a saved file)."""

    where: str  # the trace instance or the file
    events: List[Event]  # mapped, in the ``--since`` window when one was given
    stream: Stream  # parse counts and the first errors, for the summary

    def summary_json(self) -> Dict[str, Any]:
        return summary_json(self.stream, self.where, len(self.events))


def summary_json(stream: Stream, where: str, printed: int) -> Dict[str, Any]:
    """The ``events --json`` summary object that ends a run (stored or ``--follow``)."""
    return {"type": "summary", "source": where, "events": printed, **stream.summary()}


def since_window(events: List[Event], since: Optional[float], now: Optional[float]) -> List[Event]:
    """The events of the last ``since`` seconds (all when None).

    Trace timestamps count seconds since boot, so ``now`` is the host's uptime;
    a saved file has no clock of its own (None), and then "now" is its newest event.
    """
    if since is None or not events:
        return events
    end = now if now is not None else max(e.timestamp for e in events)
    return [e for e in events if e.timestamp >= end - since]


def stored_events(
    host: Host,
    *,
    lines: Optional[List[str]] = None,
    where: str = "",
    collect: bool = False,
    since: Optional[float] = None,
) -> Stored:
    """The events of the collection (started first when ``collect``) or of saved ``lines``
    (named ``where``), mapped to regions, nodes and blocks and cut to ``since`` seconds."""
    now: Optional[float] = None
    if lines is None:
        if collect:
            open_collection(host)
        src, data = read_collection(host)
        lines, where, now = data.decode("utf-8", "replace").splitlines(), src.where, uptime(host)
    stream = Stream()
    events = list(Mapper(host).map(lines, stream))
    return Stored(where, since_window(events, since, now), stream)


def open_collection(host: Host) -> Source:
    """Start (or keep) the long-lived collection instance."""
    tf = tracefs.find_tracefs(host.root)
    avail = _require_events(host, tf)
    inst = tracefs.create_instance(host.root, tf, paths.TRACE_COLLECT_INSTANCE, avail)
    return Source("collect", inst, avail)


def stop_collection(host: Host) -> bool:
    tf = tracefs.find_tracefs(host.root)
    return tracefs.remove_instance(host.root, tf, paths.TRACE_COLLECT_INSTANCE)


def _require_events(host: Host, tf: str) -> List[str]:
    avail = tracefs.cxl_events(host.root, tf)
    if not avail:
        raise tracefs.TracefsError(
            f"this kernel has no cxl trace events ({host.path(tf + '/events/cxl')} is missing)",
            hint="the events come with the cxl_core module (CONFIG_CXL_BUS); load the CXL drivers "
            "(modprobe cxl_pci cxl_mem) or use a kernel with CXL support (6.3+ for device events)",
            code="no_events",
        )
    return avail


def read_collection(host: Host) -> Tuple[Source, bytes]:
    """The collection instance's snapshot; TracefsError with the fix when none runs."""
    tf = tracefs.find_tracefs(host.root)
    inst = tracefs.instance_path(tf, paths.TRACE_COLLECT_INSTANCE)
    if not tracefs.instance_exists(host.root, tf, paths.TRACE_COLLECT_INSTANCE):
        avail = _require_events(host, tf)
        raise tracefs.TracefsError(
            f"no event collection is running ({host.path(inst)} does not exist); this kernel has {len(avail)} cxl events",
            hint="start one with `cxlctl events --collect` (or watch live with `cxlctl events --follow`)",
            code="not_collecting",
        )
    avail = tracefs.cxl_events(host.root, tf)
    return Source("collect", inst, avail), tracefs.read_trace(host.root, inst)


def follow(
    host: Host,
    on_line: Callable[[str], None],
    stop: List[bool],
    on_ready: Optional[Callable[[Source], None]] = None,
    duration: Optional[float] = None,
) -> Source:
    """Create ``cxlctl-follow-<pid>``, pass every complete line to ``on_line``
    until ``stop[0]`` is set (or ``duration`` seconds passed), then remove it."""
    import time

    tf = tracefs.find_tracefs(host.root)
    avail = _require_events(host, tf)
    for stale in tracefs.stale_follow_instances(host.root, tf):
        tracefs.remove_instance(host.root, tf, stale)
    name = f"{paths.TRACE_INSTANCE_PREFIX}follow-{os.getpid()}"
    inst = tracefs.create_instance(host.root, tf, name, avail)
    src = Source("follow", inst, avail)
    end = None if duration is None else time.monotonic() + duration
    try:
        if on_ready is not None:
            on_ready(src)
        tail = b""
        for chunk in tracefs.follow_pipe(host.root, inst, stop):
            if chunk:
                lines, tail = split_lines(tail + chunk)
                for line in lines:
                    on_line(line)
            if end is not None and time.monotonic() >= end:
                break
        if tail:
            on_line(tail.decode("utf-8", "replace"))
    finally:
        tracefs.remove_instance(host.root, tf, name)
    return src
