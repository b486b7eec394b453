"""The daemon's main loop: one ``poll()`` in the main thread, no observer threads.

Why this shape (style_reliability.md §B.4): pyudev's ``MonitorObserver`` runs
the monitor in a thread that dies silently on the first ENOBUFS/POLLERR, and
the daemon would then never hear of CXL capacity again.  Here one
``select.poll`` waits on

* the udev monitor (subsystems cxl, dax, memory, node; a large receive
  buffer so a region commit's burst of a dozen uevents does not overflow it),
* a self-pipe that ``signal.set_wakeup_fd`` writes signal numbers into
  (SIGTERM/SIGINT stop, SIGHUP reloads), and
* the metrics endpoint's listening socket,

with a timeout set by the nearest timer: the debounce deadline, the watchdog
keep-alive (half of ``WATCHDOG_USEC``), the safety rescan, the drift check and
the health collection.  Nothing else wakes the process, which is what keeps
idle wake-ups down to the timers.

Events are only a trigger: the first one of a burst starts a debounce window
(extended by each further event, capped at ``max_delay``), and when it closes
the daemon rescans once and reconciles.  A monitor error — ENOBUFS from
``recvmsg``, POLLERR/POLLHUP on the socket — means events were lost: the
monitor is thrown away, a new one built, and a full rescan runs at once.

The monitor comes from an injectable factory, so tests drive the loop with a
pipe-backed fake monitor (and raise ENOBUFS on demand).
"""

from __future__ import annotations

import errno
import logging
import os
import select
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any, Callable, Dict, Optional, Protocol

from cxlctl import config as config_mod
from cxlctl.config import Config
from cxlctl.errors import CxlctlError
from cxlctl.hostio.atomic import atomic_write
from cxlctl.hostio.host import Host
from cxlctl.hostio.write import OutsideRoot
from cxlctl.k8s import nfd as nfd_mod
from cxlctl.ras import health_probe as health_mod

from . import metrics as metrics_mod
from .metrics import MetricsServer, Stats, View
from .notify import Notifier
from .reconcile import Reconciler
from .telemetry import Sampler, Telemetry

SUBSYSTEMS = ("cxl", "dax", "memory", "node")
MAX_DRAIN = 4096  # events read per wake-up before timers get a turn
#: seconds between tries to bind the metrics endpoint while it is down (the port taken, a bad web configuration)
METRICS_RETRY = 5.0
REBUILD_RETRY = 5.0  # seconds between attempts when a new monitor cannot be built
RETRY_AFTER_LOCKED = 2.0


class Monitor(Protocol):
    """What the loop needs from a udev monitor (pyudev.Monitor has all of it)."""

    def fileno(self) -> int: ...

    def poll(self, timeout: Optional[float] = None) -> Any: ...


MonitorFactory = Callable[[], Monitor]


def udev_monitor_factory(receive_buffer: int, log: logging.Logger) -> MonitorFactory:
    """Factory of real pyudev monitors, filtered in the kernel (BPF) on our subsystems."""

    def make() -> Monitor:
        import pyudev  # type: ignore[import-untyped,unused-ignore]  # no stubs; used as a trigger only

        context = pyudev.Context()
        mon = pyudev.Monitor.from_netlink(context, source="udev")
        for sub in SUBSYSTEMS:
            mon.filter_by(subsystem=sub)
        try:
            mon.set_receive_buffer_size(receive_buffer)
        except (OSError, ValueError) as e:  # SO_RCVBUFFORCE needs CAP_NET_ADMIN
            log.warning(
                "cannot set the udev receive buffer to %d MiB (%s); bursts may overflow it, "
                "which costs a rescan each time (grant CAP_NET_ADMIN)",
                receive_buffer >> 20,
                e,
            )
        mon.start()
        m: Monitor = mon
        return m

    return make


# ------------------------------------------------------------------------ logging


class _Formatter(logging.Formatter):
    """sd-daemon(3) ``<N>`` level prefixes under systemd (journald reads them); timestamps otherwise."""

    LEVELS = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}

    def __init__(self, journal: bool) -> None:
        super().__init__()
        self.journal = journal

    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        if self.journal:
            return f"<{self.LEVELS.get(record.levelno, 6)}>{msg}"
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(record.created))
        return f"{ts}.{int(record.msecs):03d} cxlctl-daemon[{os.getpid()}] {record.levelname.lower()}: {msg}"


def make_logger(level: str, stream: Any = None) -> logging.Logger:
    log = logging.getLogger("cxlctl.daemon")
    log.handlers.clear()
    h = logging.StreamHandler(stream or sys.stderr)
    h.setFormatter(_Formatter(bool(os.environ.get("JOURNAL_STREAM") or os.environ.get("INVOCATION_ID"))))
    log.addHandler(h)
    log.setLevel(level.upper())
    log.propagate = False
    return log


# ------------------------------------------------------------------------ the daemon


class Daemon:
    """``Daemon(host, cfg).run()`` until SIGTERM; every collaborator is injectable for tests.

    ``host`` names the root; nothing reads through it directly: each pass takes a fresh
    :class:`Host` (:meth:`Reconciler.pass_host`, :meth:`Host.fresh`), as a reader kept for
    the daemon's life would hold directory handles across hot-plug."""

    def __init__(
        self,
        host: Host,
        cfg: Config,
        *,
        config_path: Optional[str] = None,
        monitor_factory: Optional[MonitorFactory] = None,
        use_udev: bool = True,
        notifier: Optional[Notifier] = None,
        log: Optional[logging.Logger] = None,
        clock: Callable[[], float] = time.monotonic,
        install_signals: bool = True,
        health_collector: Optional[Callable[[], health_mod.Health]] = None,
    ) -> None:
        self.host = host
        self.cfg = cfg
        self.config_path = config_path
        self.log = log or make_logger(cfg.log_level)
        self.notifier = notifier or Notifier()
        self.clock = clock
        self.install_signals = install_signals
        if monitor_factory is None and use_udev:
            monitor_factory = udev_monitor_factory(cfg.receive_buffer, self.log)
        self.monitor_factory = monitor_factory
        self.health_collector = health_collector
        self.stats = Stats()
        self.rec = Reconciler(host, cfg, self.log, self.stats)
        self.monitor: Optional[Monitor] = None
        self.server: Optional[MetricsServer] = None
        self.health: Optional[health_mod.Health] = None
        self.sampler = Sampler(host, cfg.telemetry_cgroups)
        self.telemetry: Optional[Telemetry] = None
        self.damon: Optional[Any] = None  # cxlctl.daemon.damon_metrics.DamonView: kdamonds and scheme stats
        self.ready = False
        #: why the configured metrics endpoint is not serving (bind failed, web configuration): not ready
        self.metrics_error: Optional[str] = None
        self.body = b""
        self.deadlines: Dict[str, float] = {}
        self.first_event: Optional[float] = None
        self.pending_reason: Optional[str] = None
        self._stop = False
        self._reload = False
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._poller = select.poll()
        self._poller.register(self._wake_r, select.POLLIN)
        self._old_handlers: Dict[int, Any] = {}
        self._old_wakeup: Optional[int] = None
        self._lock = threading.Lock()  # guards self.body (read by metrics threads)
        self.exit_code = 0
        self.retry_after = RETRY_AFTER_LOCKED
        self.rebuild_retry = REBUILD_RETRY
        self._said: Dict[str, str] = {}
        self.ras: Optional[Any] = None  # RasWatcher (cxlctl.daemon.ras), when [ras] enabled
        self._ras_fd: Optional[int] = None

    # -- control from outside (signals, tests) ------------------------------------------

    def _on_signal(self, signum: int, frame: Optional[FrameType]) -> None:
        # the C-level wakeup fd already carries the signal number to poll(); nothing to do here
        pass

    def _setup_signals(self) -> None:
        if not self.install_signals or threading.current_thread() is not threading.main_thread():
            return
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            self._old_handlers[s] = signal.signal(s, self._on_signal)
        self._old_wakeup = signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)

    def _restore_signals(self) -> None:
        if self._old_wakeup is not None:
            signal.set_wakeup_fd(self._old_wakeup)
            self._old_wakeup = None
        for s, h in self._old_handlers.items():
            signal.signal(s, h)
        self._old_handlers.clear()

    def _drain_wakeups(self) -> None:
        while True:
            try:
                data = os.read(self._wake_r, 256)
            except BlockingIOError:
                return
            if not data:
                return
            for b in data:
                if b in (signal.SIGTERM, signal.SIGINT):
                    self.log.info("received %s: stopping", signal.Signals(b).name)
                    self._stop = True
                elif b == signal.SIGHUP:
                    self._reload = True

    # -- monitor ------------------------------------------------------------------------

    def _build_monitor(self) -> None:
        if self.monitor_factory is None:
            return
        try:
            mon = self.monitor_factory()
        except Exception as e:  # a broken udev must not kill the daemon: periodic rescans go on
            self.log.error("cannot open the udev monitor (%s); retrying in %g s", e, self.rebuild_retry)
            self.deadlines["monitor"] = self.clock() + self.rebuild_retry
            return
        self.monitor = mon
        self._poller.register(mon.fileno(), select.POLLIN)
        self.deadlines.pop("monitor", None)

    def _drop_monitor(self) -> None:
        mon, self.monitor = self.monitor, None
        if mon is None:
            return
        try:
            self._poller.unregister(mon.fileno())
        except (KeyError, ValueError, OSError):
            pass
        close = getattr(mon, "close", None)
        if callable(close):
            try:
                close()
            except OSError:
                pass

    def _monitor_failed(self, why: str) -> None:
        self.stats.monitor_errors += 1
        self.log.warning("udev monitor error (%s): events may be lost; rebuilding the monitor and rescanning", why)
        self._drop_monitor()
        self._build_monitor()
        if self.monitor is not None:
            self.stats.monitor_rebuilds += 1
        self._schedule_rescan("monitor-error", now=True)

    def _on_monitor(self, mask: int) -> None:
        if mask & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
            names = [
                n
                for n, b in (("POLLERR", select.POLLERR), ("POLLHUP", select.POLLHUP), ("POLLNVAL", select.POLLNVAL))
                if mask & b
            ]
            self._monitor_failed("|".join(names))
            return
        mon = self.monitor
        if mon is None:
            return
        for _ in range(MAX_DRAIN):
            try:
                dev = mon.poll(0)
            except OSError as e:
                self._monitor_failed(errno.errorcode.get(e.errno or 0, str(e)) if e.errno else str(e))
                return
            if dev is None:
                return
            self._event(dev)

    def _event(self, dev: Any) -> None:
        sub = str(getattr(dev, "subsystem", None) or "unknown")
        self.stats.bump(self.stats.events, sub)
        self.log.debug("uevent %s %s %s", getattr(dev, "action", "?"), sub, getattr(dev, "sys_name", "?"))
        now = self.clock()
        if self.first_event is None:
            self.first_event = now
        self._schedule_rescan("event", at=min(now + self.cfg.debounce, self.first_event + self.cfg.max_delay))

    def _schedule_rescan(self, reason: str, *, now: bool = False, at: Optional[float] = None) -> None:
        when = self.clock() if now else (at if at is not None else self.clock())
        # a stronger reason (monitor error, reload) wins over "event"
        if self.pending_reason is None or reason != "event":
            self.pending_reason = reason
        self.deadlines["rescan-now"] = when

    # -- outputs ------------------------------------------------------------------------

    def _view(self) -> View:
        return View(
            self.rec.inventory,
            self.rec.target.name if self.rec.target.ref else None,
            self.rec.state,
            self.rec.drift,
            self.health,
            self.stats,
            self.is_ready,
            self.telemetry,
            self.damon,
            metrics_mod.measured_of(self.rec.host, self.rec.inventory),
            self.rec.capacity,
        )

    def metrics_text(self) -> str:
        return metrics_mod.build(self._view())

    def _body(self) -> bytes:
        with self._lock:
            return self.body

    def publish(self) -> None:
        """Render metrics, write the textfile and NFD labels, update STATUS."""
        text = self.metrics_text()
        with self._lock:
            self.body = text.encode("utf-8")
        cfg = self.cfg
        if cfg.textfile_dir:
            try:
                metrics_mod.write_textfile(self.host, cfg.textfile_dir, text)
            except OSError as e:
                where = self.host.path(cfg.textfile_dir)
                self.log.error("cannot write the metrics textfile in %s: %s", where, e.strerror)
            except OutsideRoot as e:
                self.log.error("cannot write the metrics textfile: %s", e)
        inv = self.rec.inventory
        nfd_dir = self.host.path(cfg.nfd_dir)
        if cfg.nfd_enabled and inv is not None and not os.path.isdir(nfd_dir):
            # not a Kubernetes node (or NFD not deployed): never create /etc/kubernetes here
            self._once_log("nfd", f"no {nfd_dir}: Node Feature Discovery labels not written")
        elif cfg.nfd_enabled and inv is not None:
            lbls = nfd_mod.labels(
                inv,
                self.rec.target.name if self.rec.state == "applied" else None,
                cfg.nfd_namespace,
                tiering=nfd_mod.tiering_engine(self.host),
                health=self.health,
                capacity=self.rec.capacity,
            )
            # labels lapse if the daemon stops refreshing them: 3 rescan periods (or an hour)
            ttl = max(3 * cfg.rescan_interval, 3600.0)
            try:
                nfd_mod.write(self.host, cfg.nfd_dir, nfd_mod.render(lbls, nfd_mod.expiry_after(ttl)))
            except OSError as e:
                self.log.error("cannot write the NFD feature file in %s: %s", nfd_dir, e.strerror)
            except OutsideRoot as e:
                self.log.error("cannot write the NFD feature file: %s", e)
        if self.ready:
            self.notifier.status(self.status_line())

    def _once_log(self, key: str, msg: str) -> None:
        if self._said.get(key) != msg:
            self._said[key] = msg
            self.log.info("%s", msg)

    def status_line(self) -> str:
        inv = self.rec.inventory
        t = self.rec.target
        state = self.rec.state
        what = f"profile {t.name} ({state})" if t.name else f"no profile ({state if state != 'none' else 'observing'})"
        inv_s = "not scanned" if inv is None else _short(inv)
        drift = sum(1 for c in self.rec.drift if c.status == "drift")
        down = f"; metrics endpoint down: {self.metrics_error}" if self.metrics_error else ""
        return f"{what}; {inv_s}; drift {drift}{down}"

    @property
    def is_ready(self) -> bool:
        """Start-up done and the configured metrics endpoint serving.  A port taken by another local
        process first is not a log line only: whoever holds it answers for cxlctl, so the daemon says
        it is not ready (no READY=1, the ready file removed) until it holds the port itself."""
        return self.ready and self.metrics_error is None

    def _announce(self) -> None:
        """Tell the service manager and the ready file whether the daemon is ready."""
        if self.metrics_error is not None:
            self.notifier.status(f"not ready: metrics endpoint down: {self.metrics_error}")
        else:
            self.notifier.ready(self.status_line())
        self._ready_file(self.is_ready)

    def _ready_file(self, ready: bool) -> None:
        path = self.cfg.ready_file
        if path is None:
            return
        try:
            if ready:
                atomic_write(self.host.root, path, "ready\n", mode=0o644, sync_dir=False)
            else:
                os.unlink(self.host.path(path))
        except FileNotFoundError:
            pass
        except OSError as e:
            self._once_log("ready-file", f"cannot {'write' if ready else 'remove'} the ready file {path}: {e.strerror}")
        except OutsideRoot as e:
            self._once_log("ready-file", f"cannot write the ready file: {e}")

    def _start_server(self) -> None:
        self.deadlines.pop("metrics-bind", None)
        if self.cfg.metrics_listen is None:
            self.metrics_error = None
            return
        from cxlctl.webconfig import WebConfigError
        from cxlctl.webconfig import load as load_web

        host, port = self.cfg.metrics_listen
        web = None
        try:
            if self.cfg.metrics_web_config:
                web = load_web(self.host.path(self.cfg.metrics_web_config))
            self.server = MetricsServer(host, port, self._body, web=web)
        except WebConfigError as e:
            self._metrics_down(f"web configuration {self.cfg.metrics_web_config}: {e}")
            return
        except OSError as e:
            self._metrics_down(f"cannot listen on {host}:{port}: {e.strerror}")
            return
        self.metrics_error = None
        self._poller.register(self.server.fileno(), select.POLLIN)
        scheme = "https" if web is not None and web.tls else "http"
        auth = f" ({web.describe()})" if web is not None else ""
        self.log.info("metrics on %s://%s:%d/metrics%s", scheme, *self.server.address, auth)

    def _reload_web(self) -> None:
        from cxlctl.webconfig import WebConfigError
        from cxlctl.webconfig import load as load_web

        assert self.server is not None
        try:
            web = load_web(self.host.path(self.cfg.metrics_web_config)) if self.cfg.metrics_web_config else None
            self.server.set_web(web)
        except WebConfigError as e:  # validated by the reload already: a file changed in between
            self.log.error("web configuration %s: %s; keeping the previous one", self.cfg.metrics_web_config, e)
            return
        self.log.info("metrics endpoint: %s", web.describe() if web is not None else "no web configuration")

    def _metrics_down(self, why: str) -> None:
        """The endpoint is not serving: not ready, and another try every METRICS_RETRY seconds."""
        self.metrics_error = why
        self.log.error("%s; not ready, retrying every %g s", why, METRICS_RETRY)
        self.deadlines["metrics-bind"] = self.clock() + METRICS_RETRY

    def _stop_server(self) -> None:
        if self.server is None:
            return
        try:
            self._poller.unregister(self.server.fileno())
        except (KeyError, ValueError):
            pass
        self.server.close()
        self.server = None

    # -- timers -------------------------------------------------------------------------

    def _arm_periodic(self, now: float) -> None:
        c = self.cfg
        wd = self.notifier.watchdog_interval
        if wd:
            self.deadlines.setdefault("watchdog", now + wd)
        else:
            self.deadlines.pop("watchdog", None)
        for name, every in (("rescan", c.rescan_interval), ("drift", c.drift_interval)):
            if every > 0:
                self.deadlines.setdefault(name, now + every)
            else:
                self.deadlines.pop(name, None)
        if c.telemetry_interval > 0:
            self.deadlines.setdefault("telemetry", now + c.telemetry_interval)
        else:
            self.deadlines.pop("telemetry", None)
            self.telemetry = None
        if c.health_enabled:
            self.deadlines.setdefault("health", now)
        else:
            self.deadlines.pop("health", None)
            self.health = None

    def _reconcile(self, reason: str) -> None:
        first = self.first_event
        self.first_event = None
        self.pending_reason = None
        self.deadlines.pop("rescan-now", None)
        self.deadlines.pop("retry", None)
        try:
            res = self.rec.reconcile(reason)
        except Exception:  # a bug in one pass must not end the daemon; the next pass retries
            self.log.exception("internal error during the %s reconcile; retrying in %g s", reason, self.retry_after)
            self.stats.bump(self.stats.reconciles, "failed")
            self.deadlines["retry"] = self.clock() + self.retry_after
            self.publish()
            return
        now = self.clock()
        if first is not None:
            self.stats.last_event_to_reconciled = now - first
            self.log.info("event-to-reconciled %.3f s (%s)", now - first, res.result)
        if res.result == "locked" or self.rec.retry_wanted:
            self.deadlines["retry"] = now + self.retry_after
        if self.cfg.drift_interval > 0 and (res.written or self.rec.drift):
            # drift metrics must not show what this pass just wrote back
            self.rec.check_drift(count=False)
        if self.cfg.rescan_interval > 0:
            self.deadlines["rescan"] = now + self.cfg.rescan_interval
        self._collect_damon()  # a re-target restarts kdamonds: show the new layout now
        self.publish()

    def _run_timers(self) -> None:
        now = self.clock()
        due = sorted((t, name) for name, t in self.deadlines.items() if t <= now)
        for _, name in due:
            if name == "watchdog":
                self.notifier.watchdog()
                wd = self.notifier.watchdog_interval or 1.0
                self.deadlines["watchdog"] = now + wd
            elif name == "monitor":
                self.deadlines.pop("monitor", None)
                self._build_monitor()
                if self.monitor is not None:
                    self.stats.monitor_rebuilds += 1
                    self._schedule_rescan("monitor-error", now=True)
            elif name in ("rescan-now", "retry", "rescan"):
                if name in self.deadlines and self.deadlines[name] <= self.clock():
                    reason = self.pending_reason or (
                        "retry" if name == "retry" else "periodic" if name == "rescan" else "event"
                    )
                    self._reconcile(reason)
            elif name == "drift":
                self.deadlines["drift"] = now + self.cfg.drift_interval
                drifted = self.rec.check_drift()
                if drifted and self.cfg.drift_action == "reapply":
                    self._reconcile("drift")
                else:
                    self.publish()
            elif name == "health":
                self.deadlines["health"] = now + self.cfg.health_interval
                self._collect_health()
                self.publish()
            elif name == "metrics-bind":
                was = self.metrics_error
                self._start_server()
                if self.ready and was is not None and self.metrics_error is None:
                    self.log.info("metrics endpoint serving again: ready")
                    self.publish()
                    self._announce()
            elif name == "telemetry":
                self.deadlines["telemetry"] = now + self.cfg.telemetry_interval
                self._sample_telemetry()
                self.publish()
            now = self.clock()

    def _sample_telemetry(self) -> None:
        """One tiering sample for the metrics; node kinds from the last reconcile's inventory."""
        from cxlctl.telemetry.sample import kinds_of

        inv = self.rec.inventory
        try:
            self.telemetry = self.sampler.tick(kinds_of(inv.nodes) if inv is not None else {})
        except Exception:  # a bug in the sampler must not end the daemon
            self.log.exception("internal error while sampling tiering counters")
        self._collect_damon()

    def _collect_damon(self) -> None:
        """DAMON kdamonds and scheme stats for the metrics (refreshing only cxlctl's kdamonds)."""
        from . import damon_metrics as damon_mod

        try:
            self.damon = damon_mod.collect(self.host.fresh(), self.rec.inventory, self.log)
        except Exception:  # a bug here must not end the daemon
            self.log.exception("internal error while reading DAMON")

    def _collect_health(self) -> None:
        if self.health_collector is not None:
            h = self.health_collector()
        else:
            h = health_mod.collect(self.host, self.cfg.health_command, min(self.cfg.health_timeout, self._budget()))
        prev = self.health
        if prev is None or prev.available != h.available or (not h.available and prev.reason != h.reason):
            if h.available:
                self.log.info("health: %s", ", ".join(f"{m.memdev} {m.status}" for m in h.memdevs) or "no memdevs")
            else:
                self.log.info("health unavailable: %s", h.reason)
        elif prev is not None:
            before = {m.memdev: m.status for m in prev.memdevs}
            for m in h.memdevs:
                if before.get(m.memdev) != m.status:
                    level = logging.WARNING if m.status in ("warning", "critical") else logging.INFO
                    self.log.log(
                        level,
                        "health: %s is %s%s",
                        m.memdev,
                        m.status,
                        f" ({', '.join(m.reasons)})" if m.reasons else "",
                    )
        self.health = h

    def _budget(self) -> float:
        """Longest a blocking step may take: a quarter of the watchdog, so keep-alives stay on time."""
        wd = self.notifier.watchdog_usec
        return wd / 4e6 if wd else 60.0

    # -- reload / stop --------------------------------------------------------------------

    def _do_reload(self) -> None:
        self._reload = False
        self.stats.reloads += 1
        self.notifier.reloading()
        try:
            new = config_mod.load(self.host, self.config_path, web=True)
        except CxlctlError as e:
            self.stats.reload_failures += 1
            self.log.error("reload failed, keeping the running configuration: %s", e)
            self._announce()
            return
        old, self.cfg = self.cfg, new
        self.rec.cfg = new
        self.log.setLevel(new.log_level.upper())
        self.log.info("configuration reloaded from %s", new.source or "defaults")
        if old.metrics_listen != new.metrics_listen or self.server is None:
            self._stop_server()
            self._start_server()
        elif old.metrics_web_config is not None or new.metrics_web_config is not None:
            # re-read on every reload (new users, renewed certificates), on the socket already held:
            # closing it to bind again would let another process take the port in between
            self._reload_web()
        if old.ready_file != new.ready_file and old.ready_file is not None:
            try:
                os.unlink(self.host.path(old.ready_file))
            except (OSError, OutsideRoot):
                pass
        if old.ras_enabled != new.ras_enabled:
            self._stop_ras()
            self._start_ras()
        elif self.ras is not None:
            self.ras.poison_action = new.ras_poison_action
        if old.telemetry_cgroups != new.telemetry_cgroups:  # a sampler reads the cgroups it was made with
            self.sampler = Sampler(self.host, new.telemetry_cgroups)
        # periodic timers restart from now with the new intervals
        for k in ("rescan", "drift", "health", "telemetry"):
            self.deadlines.pop(k, None)
        self._arm_periodic(self.clock())
        self._reconcile("reload")
        self._announce()

    def _shutdown(self) -> None:
        self.notifier.stopping("stopping")
        if self.cfg.rollback_on_exit:
            from cxlctl.tuning import engine

            try:
                res = engine.revert(self.host.fresh(), wait=self.cfg.lock_wait)
                # the sandbox keeps /etc read-only: persisted files (90-cxlctl.conf) cannot be
                # removed from here, and need not be — the knobs are what a rollback is about
                knob_errors = [e for e in res.errors if not e.startswith(engine.PERSIST_FILES)]
                if res.ok or not knob_errors:
                    self.log.info("shutdown.rollback = true: reverted %s", res.profile or "nothing")
                    for e in res.errors:
                        self.log.warning("shutdown.rollback: persisted file left in place: %s", e)
                else:
                    self.log.error("shutdown.rollback: revert incomplete: %s", "; ".join(knob_errors))
                    self.exit_code = 1
            except CxlctlError as e:
                self.log.error("shutdown.rollback: %s", e)
                self.exit_code = 1
        elif self.rec.state == "applied":
            self.log.info("stopped; tuning left in place (shutdown.rollback = false; `cxlctl tune revert` undoes it)")
        else:
            self.log.info("stopped")

    # -- main ---------------------------------------------------------------------------

    def startup(self) -> None:
        """Monitor first (so changes during the scan are not missed), then scan and reconcile."""
        self._build_monitor()
        if self.monitor is None and self.monitor_factory is None:
            self.log.info("no udev monitor (--root or --no-udev): relying on the periodic rescan")
        self._start_server()
        self._reconcile("startup")
        if self.cfg.telemetry_interval > 0:  # the first sample before READY=1, not in the event loop
            self._sample_telemetry()
        self._start_ras()
        self.ready = True
        self._arm_periodic(self.clock())
        self.publish()
        self._announce()
        if self.metrics_error is None:
            self.log.info("ready: %s", self.status_line())
        else:
            self.log.error("not ready: %s", self.status_line())

    def step(self) -> None:
        """One poll and whatever it and the due timers call for."""
        now = self.clock()
        timeout_ms: Optional[int] = None
        if self.deadlines:
            nearest = min(self.deadlines.values())
            timeout_ms = max(0, int((nearest - now) * 1000 + 0.999))
        try:
            events = self._poller.poll(timeout_ms)
        except InterruptedError:  # pragma: no cover - PEP 475 retries poll
            events = []
        for fd, mask in events:
            if fd == self._wake_r:
                self._drain_wakeups()
            elif self.monitor is not None and fd == self.monitor.fileno():
                self._on_monitor(mask)
            elif self.server is not None and fd == self.server.fileno():
                self.server.handle_ready()
            elif self._ras_fd is not None and fd == self._ras_fd:
                self._on_ras(mask)
        if self._stop:
            return
        if self._reload:
            self._do_reload()
        self._run_timers()

    def run(self, once: bool = False) -> int:
        instance = None
        if not once:
            from cxlctl.hostio.atomic import StorageError
            from cxlctl.hostio.lock import DaemonLock

            instance = DaemonLock(self.host.root)
            try:
                instance.acquire()  # a second daemon refuses here (exit 4), before touching anything
            except StorageError as e:  # a read-only /run: still observe and publish
                self.log.warning("running without the one-daemon check: %s", e)
                instance = None
        self._setup_signals()
        try:
            self.startup()
            if once:
                if self.cfg.health_enabled:
                    self._collect_health()
                    self.publish()
                if self.rec.state == "failed":
                    # a one-shot run that could not enforce its profile failed: say so in the exit code
                    self.log.error("--once: profile %s could not be enforced (see above)", self.rec.target.name)
                    return self.exit_code or 1
                return self.exit_code
            while not self._stop:
                self.step()
            self._shutdown()
            return self.exit_code
        finally:
            self.close()
            if instance is not None:
                instance.release()

    # -- RAS events (docs/ras.md) ---------------------------------------------------------

    def _start_ras(self) -> None:
        if not self.cfg.ras_enabled or self.ras is not None:
            return
        from .ras import RasWatcher

        self.ras = RasWatcher(self.host, self.log, self.cfg.ras_poison_action)
        self.stats.ras = self.ras.stats
        fd = self.ras.start()
        if fd is not None:
            self._ras_fd = fd
            self._poller.register(fd, select.POLLIN)

    def _stop_ras(self) -> None:
        if self._ras_fd is not None:
            try:
                self._poller.unregister(self._ras_fd)
            except (KeyError, ValueError):
                pass
            self._ras_fd = None
        if self.ras is not None:
            self.ras.stop()
            self.ras = None

    def _on_ras(self, mask: int) -> None:
        assert self.ras is not None
        if self.ras.on_readable(self.rec.inventory):
            self.publish()
        if self.ras.fd is None:  # the pipe failed and the watcher gave up
            self._stop_ras()

    def close(self) -> None:
        """Release the endpoint, the monitor, the signal handlers and the wake-up pipe."""
        self._stop_ras()
        self._stop_server()
        if self.ready:
            self._ready_file(False)
        self._drop_monitor()
        self._restore_signals()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._wake_r = self._wake_w = -1


def _short(inv: Any) -> str:
    cxl = [n for n in inv.nodes if n.kind == "cxl" and n.has_memory]
    if not inv.has_cxl:
        return "no CXL"
    if not cxl:
        return "no CXL memory online"
    gib = inv.totals.cxl_online / (1 << 30)
    return f"CXL node(s) {','.join(str(n.id) for n in cxl)}, {gib:.1f} GiB online"
