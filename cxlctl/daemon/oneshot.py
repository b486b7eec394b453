"""What the daemon would publish now, computed once without running it (``cxlctl daemon metrics|labels``).

The same pieces the running daemon uses — a :class:`~cxlctl.daemon.reconcile.Reconciler`
scan and drift check, the resolved target, the health probe — wired here once
so the CLI only prints.  Nothing is written: no reconcile, no metrics file.
"""

from __future__ import annotations

import logging
from typing import Dict

from cxlctl.config import Config
from cxlctl.daemon.metrics import Stats, View
from cxlctl.daemon.reconcile import Reconciler, resolve_target
from cxlctl.k8s import nfd
from cxlctl.ras import health_probe as health

#: reconciler target states the metrics name as such; anything else counts as observing
_PUBLISHED_STATES = ("applied", "reverted", "needs-attention")


def metrics_view(root: str, cfg: Config, with_health: bool = True) -> View:
    """One scan + drift check, as the metrics view the daemon would build (not ready: it never reconciled)."""
    from cxlctl.hostio.host import Host

    host = Host(root)
    stats = Stats()
    log = logging.getLogger("cxlctl.daemon.oneshot")
    log.addHandler(logging.NullHandler())
    log.propagate = False
    rec = Reconciler(root, cfg, log, stats)
    inv = rec.scan("oneshot")
    target = resolve_target(root, cfg)
    rec.check_drift()
    h = health.collect(host, cfg.health_command, cfg.health_timeout) if with_health and cfg.health_enabled else None
    state = target.state if target.state in _PUBLISHED_STATES else "observing"
    tel = None
    if cfg.telemetry_interval > 0:  # one sample: counters and the since-boot verdicts, no rates
        from cxlctl.telemetry.sample import kinds_of

        from .telemetry import Sampler

        tel = Sampler(host, cfg.telemetry_cgroups).tick(kinds_of(inv.nodes) if inv is not None else {})
    from .damon_metrics import collect

    damon = collect(root, inv, refresh=False)  # as last refreshed: this command writes nothing
    return View(inv, target.name if target.ref else None, state, rec.drift, h, stats, False, tel, damon)


def labels(root: str, cfg: Config) -> Dict[str, str]:
    """The Node Feature Discovery labels the daemon would write now."""
    from cxlctl.hostio.host import Host
    from cxlctl.inventory import scan

    host = Host(root)
    target = resolve_target(root, cfg)
    h = health.collect(host, cfg.health_command, cfg.health_timeout) if cfg.health_enabled else None
    return nfd.labels(
        scan(host),
        target.name if target.state == "applied" else None,
        cfg.nfd_namespace,
        tiering=nfd.tiering_engine(host),
        health=h,
    )
