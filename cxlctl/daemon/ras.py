"""The daemon's RAS watcher: CXL trace events → journal, counters, optional action.

Why in the main poll loop: the watcher owns a private trace instance
(``cxlctl-daemon``) and keeps its ``trace_pipe`` open non-blocking; the
descriptor sits in the daemon's ``poll()`` next to the udev monitor, so an
event costs one wake-up and no thread.  Each event is

* mapped with the daemon's latest inventory (region, node, memory block);
* journaled as one structured entry with a stable ``MESSAGE_ID``
  (:data:`MESSAGE_ID_EVENT`) and fields ``CXL_MEMDEV``, ``CXL_EVENT``,
  ``CXL_SEVERITY``, ``CXL_DPA``, ``CXL_HPA``, ``CXL_REGION``, ``CXL_NODE``,
  ``CXL_MEMORY_BLOCK``;
* counted per memdev, kind and severity (``cxlctl_ras_events_total``).

Optional action (``[ras] poison_action = "soft-offline"``, never the default):
poison whose HPA lies in an *online* memory block is soft-offlined — the HPA's
page written to ``/sys/devices/system/memory/soft_offline_page``; the kernel
migrates the page's data and stops using that page.  Each action is journaled
(:data:`MESSAGE_ID_ACTION`) and counted; a page is tried once per daemon run.
"""

from __future__ import annotations

import logging
import os
from typing import Dict, List, Optional, Set, Tuple

from cxlctl.hostio import paths, tracefs
from cxlctl.hostio.host import Host
from cxlctl.model import Inventory
from cxlctl.parse import PAGE_SIZE
from cxlctl.ras.events import Event, to_event
from cxlctl.ras.trace import Stream, split_lines

#: ``journalctl MESSAGE_ID=...`` finds every CXL RAS event the daemon journaled
MESSAGE_ID_EVENT = "5b1f3a0e6c2d4e8f9a7b1c3d5e7f9a2b"
#: ... and every soft-offline action it took (or failed to take)
MESSAGE_ID_ACTION = "8e2c4a6b0d1f43a59c7e9b1d3f5a7c0e"

INSTANCE = paths.TRACE_INSTANCE_PREFIX + "daemon"
PAGE = PAGE_SIZE


class RasStats:
    """Counters for the metrics (monotonic while the daemon lives)."""

    def __init__(self) -> None:
        self.events: Dict[Tuple[str, str, str], int] = {}  # (memdev, kind, severity) → count
        self.parse_errors = 0
        self.lost = 0
        self.actions: Dict[str, int] = {}  # result (offlined | failed | skipped) → count
        self.up = False
        self.reason = ""


class RasWatcher:
    def __init__(
        self, host: Host, log: logging.Logger, poison_action: str = "none", journal: Optional[object] = None
    ) -> None:
        self.host = host
        self.log = log
        self.poison_action = poison_action
        self.stats = RasStats()
        self.stream = Stream()
        self.fd: Optional[int] = None
        self._tf: Optional[str] = None
        self._tail = b""
        self._tried: Set[int] = set()
        self._journal = journal  # a callable(fields) -> bool for tests; None: journald
        self.recent: List[Event] = []

    # -- life cycle ---------------------------------------------------------------------

    def start(self) -> Optional[int]:
        """Create the instance and open its pipe; None (logged once) when tracefs or the
        events are missing, or not root."""
        try:
            tf = tracefs.find_tracefs(self.host.root)
            avail = tracefs.cxl_events(self.host.root, tf)
            if not avail:
                raise tracefs.TracefsError("this kernel has no cxl trace events (CXL drivers not loaded?)")
            inst = tracefs.create_instance(self.host.root, tf, INSTANCE, avail)
            self.fd = os.open(self.host.path(f"{inst}/trace_pipe"), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except (tracefs.TracefsError, OSError) as e:
            self.stats.up, self.stats.reason = False, str(e)
            self.log.warning("RAS events not watched: %s", e)
            return None
        self._tf = tf
        self.stats.up, self.stats.reason = True, ""
        self.log.info("watching %d CXL RAS events in %s", len(avail), inst)
        return self.fd

    def stop(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None
        if self._tf is not None:
            try:
                tracefs.remove_instance(self.host.root, self._tf, INSTANCE)
            except tracefs.TracefsError as e:
                self.log.warning("cannot remove trace instance %s: %s", INSTANCE, e)
            self._tf = None
        self.stats.up = False

    # -- events ---------------------------------------------------------------------------

    def on_readable(self, inv: Optional[Inventory]) -> List[Event]:
        """Read what the pipe holds (never blocks) and handle each complete line."""
        if self.fd is None:
            return []
        chunks = []
        while True:
            try:
                b = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            except OSError as e:
                self.log.error("RAS trace pipe failed (%s); RAS events no longer watched", e)
                self.stop()
                break
            if not b:
                break
            chunks.append(b)
            if len(chunks) > 64:
                break
        lines, self._tail = split_lines(self._tail + b"".join(chunks))
        return self.handle_lines(lines, inv)

    def handle_lines(self, lines: List[str], inv: Optional[Inventory]) -> List[Event]:
        errors0, lost0 = self.stream.error_count, self.stream.lost
        out = []
        for t in self.stream.feed(lines):
            ev = to_event(t, inv)
            out.append(ev)
            # a port's AER events name no memdev: counted under the port (memdev label "port:NAME")
            key = (ev.memdev or (f"port:{ev.port}" if ev.port else "unknown"), ev.kind, ev.severity)
            self.stats.events[key] = self.stats.events.get(key, 0) + 1
            self._journal_event(ev)
            if ev.kind == "poison" and self.poison_action == "soft-offline":
                self._soft_offline(ev)
        new_err = self.stream.error_count - errors0
        if new_err:
            self.stats.parse_errors += new_err
            kept = self.stream.errors[errors0:]  # the stream keeps only its first few for the daemon's life
            first = f" (first: {kept[0].reason}: {kept[0].text!r})" if kept else ""
            self.log.warning("%d CXL trace line(s) could not be parsed%s", new_err, first)
        if self.stream.lost > lost0:
            self.stats.lost += self.stream.lost - lost0
            self.log.warning("the RAS trace buffer dropped %d event(s)", self.stream.lost - lost0)
        self.recent = (self.recent + out)[-100:]
        return out

    def _send(self, fields: Dict[str, object]) -> bool:
        if self._journal is not None:
            return bool(self._journal(fields))  # type: ignore[operator]
        from cxlctl.hostio.journald import send

        return send(fields, self.host.root)

    def _journal_event(self, ev: Event) -> None:
        m = ev.mapping
        where = ", ".join(
            x
            for x in (
                f"DPA {ev.dpa:#x}" if ev.dpa is not None else "",
                f"HPA {m.hpa:#x}" if m.hpa is not None else "",
                m.region or "",
                f"node {m.node}" if m.node is not None else "",
                f"block {m.memory_block}" if m.memory_block is not None else "",
            )
            if x
        )
        on = ev.memdev or (f"port {ev.port}" if ev.port else "?")
        sev = ev.severity_note()
        msg = f"CXL {ev.kind}{f' ({sev})' if sev else ''} on {on}" + (f": {where}" if where else "")
        level = (
            logging.WARNING
            if ev.severity in ("warning", "failure", "fatal", "uncorrectable", "poison")
            else logging.INFO
        )
        fields: Dict[str, object] = {
            "MESSAGE": msg,
            "MESSAGE_ID": MESSAGE_ID_EVENT,
            "PRIORITY": 4 if level == logging.WARNING else 6,
            "SYSLOG_IDENTIFIER": "cxlctl",
            "CXL_EVENT": ev.event,
            "CXL_KIND": ev.kind,
            "CXL_SEVERITY": ev.severity,
            "CXL_MEMDEV": ev.memdev,
            "CXL_SERIAL": ev.serial,
            "CXL_DPA": f"{ev.dpa:#x}" if ev.dpa is not None else None,
            "CXL_HPA": f"{m.hpa:#x}" if m.hpa is not None else None,
            "CXL_HPA_SOURCE": m.hpa_source,
            "CXL_REGION": m.region,
            "CXL_NODE": m.node,
            "CXL_MEMORY_BLOCK": m.memory_block,
        }
        if not self._send(fields):
            self.log.log(level, "%s", msg)

    def _soft_offline(self, ev: Event) -> None:
        """Soft-offline the page of a poisoned HPA in online memory (configured only)."""
        from cxlctl.hostio.write import KnobError, write_knob

        m = ev.mapping
        if m.hpa is None or not (m.block_state or "").startswith("online"):
            why = "no HPA" if m.hpa is None else f"block {m.memory_block} is {m.block_state or 'not online memory'}"
            self._action("skipped", ev, None, f"poison on {ev.memdev} not soft-offlined: {why}")
            return
        page = m.hpa - m.hpa % PAGE
        if page in self._tried:
            return
        self._tried.add(page)
        try:
            write_knob(self.host.root, paths.SOFT_OFFLINE_PAGE, f"{page:#x}\n")
        except KnobError as e:
            self._action("failed", ev, page, f"soft-offline of page {page:#x} ({ev.memdev}) failed: {e.reason}")
            return
        self._action(
            "offlined",
            ev,
            page,
            f"soft-offlined page {page:#x} (poison on {ev.memdev} DPA {ev.dpa or 0:#x}, "
            f"{m.region}, node {m.node}, block {m.memory_block})",
        )

    def _action(self, result: str, ev: Event, page: Optional[int], msg: str) -> None:
        self.stats.actions[result] = self.stats.actions.get(result, 0) + 1
        level = logging.INFO if result == "offlined" else logging.WARNING
        fields: Dict[str, object] = {
            "MESSAGE": msg,
            "MESSAGE_ID": MESSAGE_ID_ACTION,
            "PRIORITY": 5 if result == "offlined" else 4,
            "SYSLOG_IDENTIFIER": "cxlctl",
            "CXL_ACTION": "soft-offline",
            "CXL_ACTION_RESULT": result,
            "CXL_MEMDEV": ev.memdev,
            "CXL_PAGE": f"{page:#x}" if page is not None else None,
            "CXL_REGION": ev.mapping.region,
            "CXL_NODE": ev.mapping.node,
            "CXL_MEMORY_BLOCK": ev.mapping.memory_block,
        }
        self.log.log(level, "%s", msg)  # always in the daemon's own log too
        self._send(fields)
