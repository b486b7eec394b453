"""Prometheus metrics: the text exposition format, an HTTP endpoint, a textfile.

Why hand-written: the text format (version 0.0.4) is a few lines of rules —
``# HELP``/``# TYPE`` once per family, ``name{label="value"} number``, label
values escaped (``\\``, ``"``, newline) — and prometheus_client would be a
dependency plus threads for what this renders once per change.

Two outputs, both optional (docs/daemon.md):

* HTTP(S) on a loopback address (``[metrics] listen``), with TLS and basic
  authentication from a Prometheus web configuration file (``[metrics] web_config``,
  :mod:`cxlctl.webconfig`).  The listening socket sits
  in the daemon's main poll loop, so an idle endpoint costs no wake-ups; each
  accepted connection is answered by a short-lived thread with a timeout, so a
  slow client cannot stall the loop (and trip the watchdog).  The body is the
  bytes rendered after the last change, never computed on request.
* A node_exporter textfile (``[metrics] textfile_dir``/``cxlctl.prom``),
  written atomically (temp file + rename) as the collector requires.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Literal, Mapping, NamedTuple, Optional, Tuple

from cxlctl import __version__
from cxlctl.hostio import paths
from cxlctl.hostio.atomic import atomic_write
from cxlctl.model import Inventory
from cxlctl.ras.health_probe import Health

if TYPE_CHECKING:  # the telemetry package is imported where a sample is taken (the daemon loop), not here
    from cxlctl.capacity.report import Report
    from cxlctl.hostio.host import Host
    from cxlctl.probe.store import Stored
    from cxlctl.webconfig import WebConfig

    from .damon_metrics import DamonView
    from .telemetry import Telemetry

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TEXTFILE = "cxlctl.prom"


class Stats:
    """Counters the daemon keeps for its metrics (monotonic while the process lives)."""

    def __init__(self) -> None:
        self.started = time.time()
        self.events: Dict[str, int] = {}  # subsystem → uevents received
        self.rescans: Dict[str, int] = {}  # reason → count
        self.reconciles: Dict[str, int] = {}  # result → count (ok | noop | failed | locked | skipped)
        self.reconcile_seconds_sum = 0.0
        self.reconcile_seconds_count = 0
        self.last_reconcile_seconds: Optional[float] = None
        self.last_reconcile_time: Optional[float] = None
        self.last_event_to_reconciled: Optional[float] = None
        self.changes: Dict[str, int] = {}  # kind → topology changes seen
        self.knob_writes = 0
        self.blocks_onlined = 0
        self.adoptions: Dict[str, int] = {}  # result (ok | failed | skipped) → hot-added memdevs
        self.removals: Dict[str, int] = {}  # clean | surprise → memdevs gone
        self.monitor_rebuilds = 0
        self.monitor_errors = 0
        self.drift_checks = 0
        self.drift_corrections = 0
        self.reloads = 0
        self.reload_failures = 0
        self.last_scan_time: Optional[float] = None
        self.ras: Optional[Any] = None  # cxlctl.daemon.ras.RasStats while RAS events are watched

    def bump(self, table: Dict[str, int], key: str, n: int = 1) -> None:
        table[key] = table.get(key, 0) + n


class DriftCheck(NamedTuple):
    setting: str
    expected: Optional[str]
    actual: Optional[str]
    status: Literal["pass", "drift", "unsupported"]


class View(NamedTuple):
    """Everything the metrics show, gathered by the daemon after each change."""

    inventory: Optional[Inventory]
    profile: Optional[str]  # profile the daemon enforces (None: observing only)
    profile_state: str  # applied | observing | reverted | needs-attention | failed | none
    drift: Tuple[DriftCheck, ...]
    health: Optional[Health]
    stats: Stats
    ready: bool
    #: the last tiering sample, its rates and verdicts (None until the first, or when disabled)
    telemetry: Optional[Telemetry] = None
    #: every kdamond and DAMOS scheme with its stats (None: not collected yet)
    damon: Optional[DamonView] = None
    #: ``cxlctl probe``'s stored figures, judged against the inventory (None: never probed)
    measured: Optional[Stored] = None
    #: ``cxlctl capacity``'s report of the last pass (None: not made)
    capacity: Optional[Report] = None
    #: a running daemon's view (False: ``cxlctl daemon metrics`` computed it once, no daemon runs)
    running: bool = True


# ------------------------------------------------------------------------ text format


def escape_label(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n")


def fmt_value(v: float) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return repr(float(v))


Sample = Tuple[str, Mapping[str, str], float]  # (name suffix, labels, value)


class Family(NamedTuple):
    name: str
    type: str  # gauge | counter | summary | untyped
    help: str
    samples: List[Sample]


class Builder:
    """Collects families in order; ``render()`` gives the exposition text."""

    def __init__(self, prefix: str = "cxlctl_") -> None:
        self.prefix = prefix
        self.families: Dict[str, Family] = {}

    def add(
        self,
        name: str,
        type_: str,
        help_: str,
        value: Optional[float],
        labels: Optional[Mapping[str, str]] = None,
        suffix: str = "",
    ) -> None:
        full = self.prefix + name
        fam = self.families.get(full)
        if fam is None:
            fam = Family(full, type_, help_, [])
            self.families[full] = fam
        if value is not None:
            fam.samples.append((suffix, dict(labels or {}), value))

    def render(self) -> str:
        out: List[str] = []
        for fam in self.families.values():
            out.append(f"# HELP {fam.name} {escape_help(fam.help)}")
            out.append(f"# TYPE {fam.name} {fam.type}")
            for suffix, labels, value in fam.samples:
                lab = ",".join(f'{k}="{escape_label(str(v))}"' for k, v in labels.items())
                out.append(
                    f"{fam.name}{suffix}{{{lab}}} {fmt_value(value)}"
                    if lab
                    else f"{fam.name}{suffix} {fmt_value(value)}"
                )
        return "\n".join(out) + "\n"


# ------------------------------------------------------------------------ the metrics


def build(view: View) -> str:
    """The exposition text for ``view`` (pure: the same view gives the same text)."""
    return collect(view).render()


def as_json(view: View) -> Dict[str, object]:
    """The same metrics as one JSON document (``cxlctl daemon metrics --json``).

    Values that JSON cannot hold (NaN, ±Inf) are given as the exposition's strings.
    """
    fams = []
    for fam in collect(view).families.values():
        samples = [
            {"name": fam.name + suffix, "labels": dict(labels), "value": _json_value(value)}
            for suffix, labels, value in fam.samples
        ]
        fams.append({"name": fam.name, "type": fam.type, "help": fam.help, "samples": samples})
    return {"metrics": fams}


def _json_value(v: float) -> object:
    if isinstance(v, (bool, int)):
        return int(v)
    return v if math.isfinite(v) else fmt_value(v)


def collect(view: View) -> Builder:
    """Every metric family for ``view``, in exposition order."""
    b = Builder()
    _daemon_state(b, view)
    if view.inventory is not None:
        _inventory(b, view.inventory)
    _drift(b, view)
    _activity(b, view.stats)
    _capacity_activity(b, view.stats)
    _health(b, view.health)
    if view.telemetry is not None:
        _telemetry(b, view.telemetry)
    _ras(b, view.stats.ras)
    if view.damon is not None:
        _damon(b, view.damon)
    if view.measured is not None:
        _measured(b, view.measured)
    if view.capacity is not None:
        _capacity(b, view.capacity)
    return b


def _capacity_activity(b: Builder, st: Stats) -> None:
    """What came and went: adoptions by the daemon, memdevs gone."""
    for result in ("ok", "failed", "skipped", "refused"):
        b.add(
            "capacity_adoptions_total",
            "counter",
            "Hot-added memdevs the daemon built into a region ([capacity] adopt), by result",
            st.adoptions.get(result, 0),
            {"result": result},
        )
    for kind in ("clean", "surprise"):
        b.add(
            "capacity_removals_total",
            "counter",
            "Memdevs gone: clean (no region) or surprise (its regions had memory: lost)",
            st.removals.get(kind, 0),
            {"kind": kind},
        )


def _capacity(b: Builder, rep: Report) -> None:
    """Per memdev and per CXL node: capacity and what could be given back now (docs/capacity.md)."""
    b.add(
        "capacity_host_ready",
        "gauge",
        "1: the host may take and give capacity; 0: a surprise removal left memory with nothing behind it, "
        "drain and reboot (docs/capacity.md)",
        1 if rep.host_state == "ready" else 0,
    )
    from cxlctl.capacity.report import STATES

    for m in rep.memdevs:
        lab = {"memdev": m.memdev, "serial": "" if m.serial is None else f"{m.serial:#x}"}
        b.add("capacity_bytes", "gauge", "Capacity of the memdev", m.capacity, lab)
        for state in STATES:  # every state, one of them 1: no series appears or goes as it changes
            b.add(
                "capacity_state",
                "gauge",
                "The memdev's capacity state (free, releasable, blocked): 1 for the one it is in",
                1 if m.state == state else 0,
                {**lab, "state": state},
            )
        b.add(
            "capacity_releasable_bytes",
            "gauge",
            "Bytes of the memdev `cxlctl capacity release` could give back now (the whole device, or 0)",
            m.releasable,
            lab,
        )
        b.add(
            "capacity_blockers",
            "gauge",
            "What keeps the memdev's capacity from being given back, by blocker code",
            None,
        )
        for code in sorted({x.code for x in m.blockers}):
            b.add("capacity_blockers", "gauge", "", sum(1 for x in m.blockers if x.code == code), {**lab, "code": code})
    for n in rep.nodes:
        lab = {"node": str(n.node)}
        b.add("capacity_node_online_bytes", "gauge", "CXL memory online on the node, by zone", n.movable,
              {**lab, "zone": "movable"})  # fmt: skip
        b.add("capacity_node_online_bytes", "gauge", "", n.normal, {**lab, "zone": "normal"})
        b.add(
            "capacity_node_releasable_bytes",
            "gauge",
            "Bytes online on the node whose memdevs could all be given back now",
            n.releasable,
            lab,
        )


def measured_of(host: Host, inv: Optional[Inventory]) -> Optional[Stored]:
    """The stored probe record judged against ``inv`` (None: no record, or no inventory to judge by)."""
    if inv is None or not host.reader.exists(paths.PROBE_RESULTS):
        return None
    from cxlctl.probe.store import load

    return load(host, inv)


def _measured(b: Builder, st: Stored) -> None:
    """``cxlctl probe``'s figures per (CPU node, memory node), and whether they are stale (then not used)."""
    b.add(
        "measured_stale",
        "gauge",
        "1 when the stored probe results describe another boot, kernel or memdevs",
        1 if st.stale else 0,
    )
    for p in st.record.get("pairs") or []:
        if not isinstance(p, dict):
            continue
        lab = {"cpu_node": str(p.get("cpu_node")), "node": str(p.get("mem_node"))}
        for key, name, help_ in (
            (
                "read_mbps",
                "measured_read_bandwidth_bytes_per_second",
                "Sequential read bandwidth measured by cxlctl probe",
            ),
            (
                "write_mbps",
                "measured_write_bandwidth_bytes_per_second",
                "Non-temporal write bandwidth measured by cxlctl probe",
            ),
            ("latency_ns", "measured_latency_seconds", "Idle load-to-use latency measured by cxlctl probe"),
        ):
            v = p.get(key)
            val = None
            if isinstance(v, (int, float)) and not isinstance(v, bool):  # base units: bytes/s and seconds
                val = v / 1e9 if key == "latency_ns" else v * 1e6
            b.add(name, "gauge", help_, val, lab)


def _daemon_state(b: Builder, view: View) -> None:
    """Liveness, readiness, versions and the tuning state."""
    st = view.stats
    inv = view.inventory
    if view.running:  # `cxlctl daemon metrics` computes the view once, without a daemon: no cxlctl_up
        b.add("up", "gauge", "1 while the cxlctl daemon runs; ready says whether its start-up reconcile finished", 1)
    b.add(
        "ready", "gauge", "1 once the start-up scan and reconcile are done (sd_notify READY=1)", 1 if view.ready else 0
    )
    kernel = inv.kernel if inv is not None and inv.kernel else ""
    b.add("info", "gauge", "cxlctl version and the running kernel", 1, {"version": __version__, "kernel": kernel})
    b.add("start_time_seconds", "gauge", "Unix time the daemon started", st.started)
    for state in ("applied", "observing", "reverted", "needs-attention", "failed", "none"):
        b.add(
            "profile_state",
            "gauge",
            "Tuning state: applied (profile enforced), observing (no profile), reverted (by tune revert), "
            "needs-attention (interrupted or failed rollback), failed (last apply failed), none",
            1 if view.profile_state == state else 0,
            {"state": state},
        )
    if view.profile:
        b.add("profile_info", "gauge", "The profile the daemon enforces", 1, {"profile": view.profile})


def _drift(b: Builder, view: View) -> None:
    """Settings that differ from what the applied profile wrote."""
    drifted = [c for c in view.drift if c.status == "drift"]
    b.add("drift_settings", "gauge", "Settings whose current value differs from the applied profile", len(drifted))
    for c in view.drift:
        if c.status == "unsupported":
            continue
        b.add(
            "knob_drift",
            "gauge",
            "1 when the setting differs from what the profile applied (the values: cxlctl tune verify)",
            1 if c.status == "drift" else 0,
            {"setting": c.setting},
        )


def _activity(b: Builder, st: Stats) -> None:
    """What the daemon did: events, rescans, reconciles, writes, reloads."""
    for sub, n in sorted(st.events.items()):
        b.add("uevents_total", "counter", "udev events received, by subsystem", n, {"subsystem": sub})
    b.add("uevents_total", "counter", "udev events received, by subsystem", None)
    for reason, n in sorted(st.rescans.items()):
        b.add("rescans_total", "counter", "Full sysfs rescans, by reason", n, {"reason": reason})
    for result in ("ok", "noop", "failed", "locked", "skipped"):
        b.add(
            "reconciles_total",
            "counter",
            "Reconcile passes, by result",
            st.reconciles.get(result, 0),
            {"result": result},
        )
    b.add(
        "reconcile_duration_seconds",
        "summary",
        "Time from rescan to reconciled (scan, plan, writes)",
        st.reconcile_seconds_sum,
        suffix="_sum",
    )
    b.add("reconcile_duration_seconds", "summary", "", st.reconcile_seconds_count, suffix="_count")
    if st.last_reconcile_seconds is not None:
        b.add("last_reconcile_duration_seconds", "gauge", "Duration of the last reconcile", st.last_reconcile_seconds)
    if st.last_reconcile_time is not None:
        b.add("last_reconcile_timestamp_seconds", "gauge", "Unix time of the last reconcile", st.last_reconcile_time)
    if st.last_event_to_reconciled is not None:
        b.add(
            "last_event_to_reconciled_seconds",
            "gauge",
            "From the first udev event of the last burst to the end of its reconcile",
            st.last_event_to_reconciled,
        )
    if st.last_scan_time is not None:
        b.add("last_scan_timestamp_seconds", "gauge", "Unix time of the last sysfs scan", st.last_scan_time)
    for kind, n in sorted(st.changes.items()):
        b.add(
            "topology_changes_total",
            "counter",
            "Changes found by rescans (node, region, dax, memdev added/removed/changed)",
            n,
            {"kind": kind},
        )
    b.add("knob_writes_total", "counter", "Kernel settings written by the daemon's reconciles", st.knob_writes)
    b.add(
        "memory_blocks_onlined_total",
        "counter",
        "Memory blocks the daemon onlined by the profile's policy",
        st.blocks_onlined,
    )
    b.add("monitor_errors_total", "counter", "udev monitor errors (ENOBUFS, POLLERR)", st.monitor_errors)
    b.add("monitor_rebuilds_total", "counter", "udev monitors rebuilt after an error", st.monitor_rebuilds)
    b.add("drift_checks_total", "counter", "Drift checks run", st.drift_checks)
    b.add(
        "drift_corrections_total",
        "counter",
        "Reconciles that wrote drifted settings back (drift.action = reapply, or new work)",
        st.drift_corrections,
    )
    b.add(
        "reloads_total",
        "counter",
        "Configuration reloads (SIGHUP), by result",
        st.reloads - st.reload_failures,
        {"result": "ok"},
    )
    b.add("reloads_total", "counter", "", st.reload_failures, {"result": "failed"})


def _inventory(b: Builder, inv: Inventory) -> None:
    """Host-wide CXL totals, then per node, tier and device."""
    t = inv.totals
    b.add("cxl_present", "gauge", "1 when the host has a CXL bus or memdevs", 1 if inv.has_cxl else 0)
    b.add("cxl_capacity_bytes", "gauge", "Total capacity of CXL memdevs (RAM + PMEM partitions)", t.cxl_capacity)
    b.add("cxl_region_bytes", "gauge", "CXL capacity assigned to regions", t.cxl_in_regions)
    b.add("cxl_online_bytes", "gauge", "CXL memory online on CXL NUMA nodes", t.cxl_online)
    b.add("cxl_free_bytes", "gauge", "MemFree on CXL NUMA nodes", t.cxl_free)
    b.add("cxl_unassigned_bytes", "gauge", "memdev capacity in no region", t.cxl_unassigned)
    _node_metrics(b, inv)
    _device_metrics(b, inv)


def _node_metrics(b: Builder, inv: Inventory) -> None:
    """Per NUMA node: memory, blocks by state, weighted-interleave weight."""
    bs = inv.memory_block_size or 0
    wi = inv.weighted_interleave
    for n in inv.nodes:
        lab = {"node": str(n.id), "kind": n.kind}  # no tier label: tier ids change with hot-plug
        online = sum(1 for m in n.memory_blocks if (m.state or "").startswith("online"))
        if n.tier is not None:
            b.add(
                "node_memory_tier",
                "gauge",
                "The node's memory tier (memory_tierN: N, the value); a value, not a label, as it changes with hot-plug",
                n.tier,
                lab,
            )
        b.add("node_memory_total_bytes", "gauge", "MemTotal of the NUMA node", n.mem_total, lab)
        b.add("node_memory_free_bytes", "gauge", "MemFree of the NUMA node", n.mem_free, lab)
        b.add(
            "node_memory_online_bytes",
            "gauge",
            "Bytes of online memory blocks in the node",
            online * bs if bs else None,
            lab,
        )
        b.add("node_memory_blocks", "gauge", "Memory blocks of the node, by state", online, {**lab, "state": "online"})
        b.add("node_memory_blocks", "gauge", "", len(n.memory_blocks) - online, {**lab, "state": "offline"})
        if n.id in wi.weights:
            b.add(
                "weighted_interleave_weight",
                "gauge",
                "Weighted-interleave weight of the node (nodeN file)",
                wi.weights[n.id],
                {"node": str(n.id), "kind": n.kind},
            )
    if wi.auto is not None:
        b.add(
            "weighted_interleave_auto",
            "gauge",
            "1 when the kernel computes the weights itself (auto mode)",
            1 if wi.auto else 0,
        )


def _device_metrics(b: Builder, inv: Inventory) -> None:
    """Per memdev, region and system-ram DAX device."""
    for m in inv.memdevs:
        lab = {"memdev": m.name, "serial": "" if m.serial is None else f"{m.serial:#x}"}
        b.add("memdev_ram_bytes", "gauge", "RAM (volatile) capacity of the memdev", m.ram_size, lab)
        b.add("memdev_pmem_bytes", "gauge", "PMEM capacity of the memdev", m.pmem_size, lab)
    for r in inv.regions:
        b.add("region_size_bytes", "gauge", "Size of the CXL region", r.size, {"region": r.name, "mode": r.mode or ""})
    for d in inv.dax_devices:
        if d.total_memblocks is not None:
            lab = {"dax": d.name, "mode": d.mode or "", "node": "" if d.target_node is None else str(d.target_node)}
            b.add(
                "dax_memory_blocks_online",
                "gauge",
                "Online memory blocks of a system-ram dax device",
                d.online_memblocks,
                lab,
            )
            b.add("dax_memory_blocks", "gauge", "Memory blocks of a system-ram dax device", d.total_memblocks, lab)


def _health(b: Builder, h: Optional[Health]) -> None:
    b.add(
        "health_available",
        "gauge",
        "1 when `cxl list -H` ran (ndctl installed, live system)",
        1 if h is not None and h.available else 0,
    )
    if h is None:
        return
    b.add("health_collected_timestamp_seconds", "gauge", "Unix time health was last collected", h.collected)
    for m in h.memdevs:
        for status in ("ok", "warning", "critical", "no-data"):
            b.add(
                "memdev_health",
                "gauge",
                "Device health from Get Health Info, one series per status (no-data: the device gave none)",
                1 if m.status == status else 0,
                {"memdev": m.memdev, "status": status},
            )
        units = {
            "life_used_percent": ("memdev_life_used_ratio", "gauge", "Device life used, 0 to 1"),
            "temperature": ("memdev_temperature_celsius", "gauge", "Device temperature"),
            "dirty_shutdowns": ("memdev_dirty_shutdowns_total", "counter", "Dirty shutdowns counted by the device"),
            "volatile_errors": (
                "memdev_corrected_volatile_errors_total",
                "counter",
                "Corrected volatile memory errors",
            ),
            "pmem_errors": (
                "memdev_corrected_persistent_errors_total",
                "counter",
                "Corrected persistent memory errors",
            ),
        }
        for key, (name, type_, help_) in units.items():
            if key in m.values:
                v = m.values[key]
                ratio = v / 100 if key == "life_used_percent" else v  # base units: a ratio, as node_exporter's
                b.add(name, type_, help_, ratio, {"memdev": m.memdev})


# ------------------------------------------------------------------------ outputs


def write_textfile(host: Host, directory: str, text: str) -> str:
    """Atomically replace ``directory/cxlctl.prom`` (a host path) under ``host``'s root (the
    collector ignores the hidden temp file); returns the file's path under the root."""
    return atomic_write(host.root, os.path.join(directory, TEXTFILE), text, mode=0o644, sync_dir=False)


class MetricsServer:
    """A loopback HTTP endpoint whose listening socket the daemon polls itself.

    ``handle_ready()`` is called by the main loop when the socket is readable:
    it accepts and hands the connection to a thread that reads one request
    and answers ``GET /metrics`` (or ``/``) with ``body()``.

    The bound on a hostile local client is explicit (issue 22): at most
    ``max_clients`` connections are served at once (so at most that many
    threads), and each has ``timeout`` seconds in all to send its request —
    a client dripping a byte every 2 s is cut off like a silent one.  A new
    connection beyond the cap closes the oldest one still waiting for its
    request (never one being answered): a scraper sends its request at once,
    so it is answered however many silent connections are held open, while
    they cost a thread each for at most ``timeout``.

    With a web configuration (``web``), each connection first completes a TLS handshake
    (within the same ``timeout``) and a request without a user and password of its
    ``basic_auth_users`` gets 401 and no metrics.
    """

    MAX_CLIENTS = 32

    def __init__(
        self,
        host: str,
        port: int,
        body: Callable[[], bytes],
        timeout: float = 5.0,
        max_clients: int = MAX_CLIENTS,
        web: Optional[WebConfig] = None,
    ) -> None:
        from cxlctl.webconfig import ssl_context

        self.web = web
        self.tls = ssl_context(web) if web is not None else None  # before the bind: a bad key binds nothing
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((host, port))
            self.sock.listen(64)
        except OSError:
            self.sock.close()
            raise
        self.sock.setblocking(False)
        self.address: Tuple[str, int] = self.sock.getsockname()[:2]
        self.loopback = _is_loopback(self.address[0])
        self.body = body
        self.timeout = timeout
        self.max_clients = max(1, max_clients)
        self.served = 0
        self.refused = 0  # requests answered 401 (no or wrong credentials) or failed TLS handshakes
        self.dropped = 0  # connections closed to keep the cap (silent or slow clients)
        self._lock = threading.Lock()
        #: open connections in accept order → True while still reading the request
        self._clients: Dict[socket.socket, bool] = {}

    def fileno(self) -> int:
        return self.sock.fileno()

    @property
    def clients(self) -> int:
        with self._lock:
            return len(self._clients)

    def handle_ready(self) -> None:
        for _ in range(64):  # accept what is queued; the rest on the next wake-up
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            with self._lock:
                if len(self._clients) >= self.max_clients and not self._evict():
                    conn.close()  # every slot is answering a request: this one retries
                    self.dropped += 1
                    continue
                self._clients[conn] = True
            threading.Thread(target=self._serve, args=(conn,), daemon=True, name="cxlctl-metrics").start()

    def _evict(self) -> bool:
        """Close the oldest connection still sending its request (the lock is held); False when none."""
        for old, reading in self._clients.items():
            if reading:
                del self._clients[old]
                try:
                    old.shutdown(socket.SHUT_RDWR)  # its thread's recv returns at once
                except OSError:
                    pass
                self.dropped += 1
                return True
        return False

    def _handshake(self, conn: socket.socket, deadline: float) -> Optional[socket.socket]:
        """The TLS side of ``conn`` once its handshake is done within the deadline (None: closed).

        The wrapped socket replaces the plain one in ``_clients`` before the handshake, so a
        client that stalls it can be evicted like one that stalls its request."""
        assert self.tls is not None
        conn.settimeout(max(0.001, deadline - time.monotonic()))
        tconn = self.tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        with self._lock:
            if self._clients.pop(conn, None) is None:
                tconn.close()
                return None
            self._clients[tconn] = True
        try:
            tconn.do_handshake()
        except (OSError, ValueError, AttributeError):  # AttributeError: evicted (shut down) mid-handshake
            self.refused += 1
            with self._lock:
                self._clients.pop(tconn, None)
            tconn.close()
            return None
        return tconn

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.setblocking(True)
            deadline = time.monotonic() + self.timeout
            if self.tls is not None:
                tconn = self._handshake(conn, deadline)
                if tconn is None:
                    return
                conn = tconn
            data = b""
            while b"\r\n\r\n" not in data and b"\n\n" not in data and len(data) < 8192:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout("request not sent in time")
                conn.settimeout(left)
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
            with self._lock:
                if conn not in self._clients:
                    return  # evicted while reading
                self._clients[conn] = False
            conn.settimeout(self.timeout)
            line = data.split(b"\n", 1)[0].decode("latin-1").strip()
            parts = line.split()
            if len(parts) < 2:
                self._reply(conn, 400, "text/plain", b"bad request\n")
            elif parts[0] not in ("GET", "HEAD"):
                self._reply(conn, 405, "text/plain", b"only GET\n", extra="Allow: GET, HEAD\r\n")
            elif self.loopback and self.web is None and not _loopback_host(data):
                # an open loopback endpoint answers only requests addressed to the loopback: a web
                # page whose name was rebound to 127.0.0.1 (DNS rebinding) sends its own name
                self.refused += 1
                self._reply(conn, 421, "text/plain", b"misdirected request: use http://127.0.0.1/metrics\n")
            elif self.web is not None and not self._authorized(data):
                self.refused += 1
                self._reply(
                    conn, 401, "text/plain", b"unauthorized\n", extra='WWW-Authenticate: Basic realm="cxlctl"\r\n'
                )
            elif parts[1].split("?", 1)[0] not in ("/metrics", "/"):
                self._reply(conn, 404, "text/plain", b"try /metrics\n")
            else:
                body = self.body()
                self._reply(conn, 200, CONTENT_TYPE, body, head=parts[0] == "HEAD")
                self.served += 1
        except OSError:
            pass
        finally:
            with self._lock:
                self._clients.pop(conn, None)
            conn.close()

    @staticmethod
    def _reply(conn: socket.socket, code: int, ctype: str, body: bytes, *, head: bool = False, extra: str = "") -> None:
        reason = {
            200: "OK",
            400: "Bad Request",
            401: "Unauthorized",
            404: "Not Found",
            405: "Method Not Allowed",
            421: "Misdirected Request",
        }[code]
        hdr = (
            f"HTTP/1.0 {code} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n{extra}\r\n"
        )
        conn.sendall(hdr.encode("latin-1") + (b"" if head else body))

    def set_web(self, web: Optional[WebConfig]) -> None:
        """A new web configuration for the connections accepted from now on (the socket stays bound)."""
        from cxlctl.webconfig import ssl_context

        tls = ssl_context(web) if web is not None else None
        self.web, self.tls = web, tls

    def _authorized(self, head: bytes) -> bool:
        from cxlctl.webconfig import authorized

        assert self.web is not None
        return authorized(self.web, head)

    def close(self) -> None:
        self.sock.close()


def _is_loopback(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host.lower() == "localhost"


def _loopback_host(head: bytes) -> bool:
    """Whether a request's ``Host`` header (if any: HTTP/1.0 may leave it out) names the loopback."""
    for line in head.split(b"\n")[1:]:
        field, sep, value = line.partition(b":")
        if sep and field.strip().lower() == b"host":
            host = value.strip().decode("latin-1")
            if host.startswith("["):
                host = host[1 : host.find("]")] if "]" in host else host
            elif host.count(":") == 1:
                host = host.partition(":")[0]
            return _is_loopback(host)
    return True


def families(text: str) -> Iterable[str]:
    """Family names in an exposition text (for logs and quick checks)."""
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            yield line.split()[2]


# ------------------------------------------------------------------------ tiering telemetry


def _prom_name(kernel_name: str) -> str:
    """A kernel counter name as a metric name part (they are ``[a-z0-9_]`` already; be safe)."""
    return "".join(c if c.isalnum() or c == "_" else "_" for c in kernel_name)


def _telemetry(b: Builder, t: Telemetry) -> None:
    """Tiering counters (the kernel's names, ``_total``), memory by node and cgroup, verdicts.

    Counters the kernel lacks are absent series, and listed in
    ``telemetry_counter_missing`` so a dashboard can say "not available on this
    kernel" instead of showing 0.
    """
    from cxlctl.telemetry.verdicts import VERDICTS

    s = t.sample
    st = s.settings
    b.add("telemetry_last_sample_timestamp_seconds", "gauge", "Unix time of the last tiering sample", s.wall)
    if st.demotion_enabled is not None:
        b.add(
            "demotion_enabled", "gauge", "1 when /sys/kernel/mm/numa/demotion_enabled is true", int(st.demotion_enabled)
        )
    if st.numa_balancing is not None:
        b.add(
            "numa_balancing_mode",
            "gauge",
            "kernel.numa_balancing (1 normal, 2 memory tiering, 3 both)",
            st.numa_balancing,
        )
    if st.promote_rate_limit_mbps is not None:
        b.add(
            "numa_balancing_promote_rate_limit_bytes_per_second",
            "gauge",
            "kernel.numa_balancing_promote_rate_limit_MBps, in bytes per second (MB = 2^20 bytes, as the kernel counts)",
            st.promote_rate_limit_mbps << 20,
        )
    for name, v in s.system.values.items():
        if v is not None:
            b.add(f"vmstat_{_prom_name(name)}_total", "counter", f"{paths.PROC_VMSTAT} {name}", v)
    _telemetry_nodes(b, t)
    missing = sorted(
        {m for n in s.nodes if n.vmstat.readable for m in n.vmstat.missing}
        | set(s.system.missing if s.system.readable else ())
    )
    b.add("telemetry_counter_missing", "gauge", "1 for a tiering counter this kernel does not have", None)
    for name in missing:
        b.add("telemetry_counter_missing", "gauge", "", 1, {"counter": name})
    _telemetry_cgroups(b, t)
    fired = {v.id: v for v in t.verdicts}
    for vid in VERDICTS:
        b.add(
            "verdict",
            "gauge",
            "1 while the tiering verdict holds (docs/telemetry.md#verdicts)",
            1 if vid in fired else 0,
            {"verdict": vid},
        )


def _telemetry_nodes(b: Builder, t: Telemetry) -> None:
    """Per node: its vmstat counters, memory failures and memory by type."""
    for n in t.sample.nodes:
        lab = {"node": str(n.id), "kind": n.kind}
        for name, v in n.vmstat.values.items():
            if v is not None:
                b.add(
                    f"node_vmstat_{_prom_name(name)}_total", "counter", f"nodeN/vmstat {name} (pages or events)", v, lab
                )
        if n.memory_failure is not None:
            for result, v in n.memory_failure.values.items():
                b.add(
                    "node_memory_failure_pages_total",
                    "counter",
                    "nodeN/memory_failure/RESULT: poisoned pages memory_failure() handled (total) and how",
                    v,
                    {**lab, "result": result},
                )
        for kind in ("used", "anon", "file", "shmem"):
            b.add(
                "node_memory_by_type_bytes",
                "gauge",
                "nodeN/meminfo: used (MemUsed), anon (AnonPages), file (FilePages), shmem (Shmem)",
                n.memory.get(kind),
                {**lab, "type": kind},
            )


def _telemetry_cgroups(b: Builder, t: Telemetry) -> None:
    """Per cgroup asked for: its memory by node and its tiering counters."""
    s = t.sample
    kinds = {n.id: n.kind for n in s.nodes}
    for c in s.cgroups:
        if not c.readable:
            continue
        for node, v in sorted(c.bytes_per_node.items()):
            b.add(
                "cgroup_memory_bytes",
                "gauge",
                "memory.numa_stat anon + file of the cgroup on the node",
                v,
                {"cgroup": c.name, "node": str(node), "kind": kinds.get(node, "other")},
            )
        for name, count in c.stat.values.items():
            if count is not None and name.startswith(("pgdemote_", "pgpromote_")):
                b.add(
                    f"cgroup_{_prom_name(name)}_total",
                    "counter",
                    f"memory.stat {name} (pages)",
                    count,
                    {"cgroup": c.name},
                )


def _ras(b: Builder, ras: Any) -> None:
    """CXL RAS events by memdev, kind and severity (docs/ras.md); absent when not watched."""
    if ras is None:
        return
    b.add("ras_watch_up", "gauge", "1 while the daemon watches the CXL RAS trace events", 1 if ras.up else 0)
    b.add("ras_events_total", "counter", "CXL RAS trace events seen, by memdev, kind and severity", None)
    for (memdev, kind, sev), n in sorted(ras.events.items()):
        b.add("ras_events_total", "counter", "", n, {"memdev": memdev, "kind": kind, "severity": sev})
    b.add("ras_parse_errors_total", "counter", "CXL trace lines that could not be parsed", ras.parse_errors)
    b.add("ras_events_lost_total", "counter", "CXL trace events the ring buffer dropped", ras.lost)
    b.add("ras_poison_actions_total", "counter", "soft-offline actions on poison, by result", None)
    for result, n in sorted(ras.actions.items()):
        b.add("ras_poison_actions_total", "counter", "", n, {"result": result})


#: scheme stats file → (metric name, help); counters as the kernel keeps them per scheme
_DAMON_STATS = (
    (
        "nr_tried",
        "damon_scheme_tried_regions_total",
        "DAMON regions the scheme tried to apply its action to (nr_tried)",
    ),
    ("sz_tried", "damon_scheme_tried_bytes_total", "Bytes of the regions the scheme tried (sz_tried)"),
    ("nr_applied", "damon_scheme_applied_regions_total", "DAMON regions the action was applied to (nr_applied)"),
    ("sz_applied", "damon_scheme_applied_bytes_total", "Bytes the action was applied to, e.g. migrated (sz_applied)"),
    ("qt_exceeds", "damon_scheme_quota_exceeds_total", "Times the scheme's quota was exceeded (qt_exceeds)"),
)


def _damon(b: Builder, d: DamonView) -> None:
    """Each kdamond's state and each DAMOS scheme's stats (docs/daemon.md#metrics).

    The kernel zeroes a scheme's stats when its kdamond starts (a re-target restarts
    cxlctl's), which Prometheus' ``rate()`` takes as a counter reset.
    """
    b.add("damon_sysfs", "gauge", "1 when the kernel has the DAMON sysfs interface", 1 if d.sysfs else 0)
    b.add("damon_kdamond_state", "gauge", "1 for the kdamond's state (on or off); owner cxlctl or other", None)
    for k in d.kdamonds:
        for state in ("on", "off"):
            b.add(
                "damon_kdamond_state",
                "gauge",
                "",
                1 if k.state == state else 0,
                {"kdamond": str(k.id), "owner": k.owner, "state": state},
            )
    for field, name, help_ in _DAMON_STATS:
        b.add(name, "counter", help_ + "; labels: kdamond, scheme, action, source/destination node, owner", None)
        for s in d.schemes:
            v = getattr(s.stats, field)
            lab = {
                "kdamond": str(s.kdamond),
                "scheme": str(s.scheme),
                "action": s.action,
                "source_node": s.source,
                "destination_node": s.destination,
                "owner": s.owner,
            }
            b.add(name, "counter", "", v, lab)
