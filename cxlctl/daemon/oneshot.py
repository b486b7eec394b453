"""What the daemon would publish now, computed once without running it (``cxlctl daemon metrics|labels``).

The same pieces the running daemon uses — a :class:`~cxlctl.daemon.reconcile.Reconciler`
scan and drift check, the resolved target, the health probe — wired here once
so the CLI only prints.  Nothing is written: no reconcile, no metrics file.
"""

from __future__ import annotations

import logging
from typing import Dict

from cxlctl.config import Config
from cxlctl.daemon.metrics import Stats, View, measured_of
from cxlctl.daemon.reconcile import Reconciler, resolve_target
from cxlctl.hostio.host import Host
from cxlctl.k8s import nfd
from cxlctl.ras import health_probe as health

#: reconciler target states the metrics name as such; anything else counts as observing
_PUBLISHED_STATES = ("applied", "reverted", "needs-attention")


def metrics_view(host: Host, cfg: Config, with_health: bool = True) -> View:
    """One scan + drift check, as the metrics view the daemon would build (not ready: it never reconciled)."""
    stats = Stats()
    log = logging.getLogger("cxlctl.daemon.oneshot")
    log.addHandler(logging.NullHandler())
    log.propagate = False
    rec = Reconciler(host, cfg, log, stats)
    inv = rec.scan("oneshot")
    target = resolve_target(rec.host, cfg)
    rec.check_drift()
    h = health.collect(host, cfg.health_command, cfg.health_timeout) if with_health and cfg.health_enabled else None
    state = target.state if target.state in _PUBLISHED_STATES else "observing"
    tel = None
    if cfg.telemetry_interval > 0:  # one sample: counters and the since-boot verdicts, no rates
        from cxlctl.telemetry.sample import kinds_of

        from .telemetry import Sampler

        tel = Sampler(host, cfg.telemetry_cgroups).tick(kinds_of(inv.nodes) if inv is not None else {})
    from .damon_metrics import collect

    damon = collect(rec.host, inv, refresh=False)  # as last refreshed: this command writes nothing
    measured = measured_of(rec.host, inv)
    rec.inventory = inv
    cap = rec.capacity_report()
    profile = target.name if target.ref else None
    return View(inv, profile, state, rec.drift, h, stats, False, tel, damon, measured, cap, running=False)


def labels(host: Host, cfg: Config) -> Dict[str, str]:
    """The Node Feature Discovery labels the daemon would write now."""
    from cxlctl.capacity.extra import gather_for
    from cxlctl.inventory import scan

    target = resolve_target(host, cfg)
    h = health.collect(host, cfg.health_command, cfg.health_timeout) if cfg.health_enabled else None
    inv = scan(host)
    return nfd.labels(
        inv,
        target.name if target.state == "applied" else None,
        cfg.nfd_namespace,
        tiering=nfd.tiering_engine(host),
        health=h,
        capacity=gather_for(host, inv),
    )
