"""``cxlctl daemon …``: run the service, check its configuration, print its outputs once.

``daemon run`` is what ``systemd/cxlctl.service`` starts (``Type=notify``).
``config``, ``metrics`` and ``labels`` are read-only helpers for operators:
they show what the running daemon would use or publish, without writing
anything (docs/daemon.md).
"""

from __future__ import annotations

import json
import sys
from typing import Optional

import typer

daemon_app = typer.Typer(
    name="daemon",
    help="The cxlctl service: keep the tuning profile applied as CXL memory comes and goes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

CONFIG_OPT = typer.Option(
    None, "--config", metavar="FILE", help="Configuration file (default: /etc/cxlctl/cxlctl.toml under --root)."
)


def _root() -> str:
    from .cli import STATE

    return STATE.root


@daemon_app.command("run")
def run_cmd(
    config: Optional[str] = CONFIG_OPT,
    once: bool = typer.Option(False, "--once", help="Scan, reconcile, publish metrics/labels once, then exit."),
    no_udev: bool = typer.Option(
        False, "--no-udev", help="Do not listen to udev (rely on the periodic rescan). Implied by --root other than /."
    ),
) -> None:
    """Run in the foreground (for systemd Type=notify): reconcile on udev events, watch drift, publish metrics."""
    from .daemon import config as cfgmod
    from .daemon.loop import Daemon

    root = _root()
    cfg = cfgmod.load(root, config)
    d = Daemon(root, cfg, config_path=config, use_udev=not no_udev and root == "/")
    rc = d.run(once=once)
    if rc:
        raise typer.Exit(rc)


@daemon_app.command("config")
def config_cmd(
    config: Optional[str] = CONFIG_OPT, json_out: bool = typer.Option(False, "--json", help="JSON output.")
) -> None:
    """Validate the configuration and print the effective values (exit 2 on a bad file)."""
    from .daemon import config as cfgmod

    cfg = cfgmod.load(_root(), config)
    doc = cfgmod.render(cfg)
    if json_out:
        sys.stdout.write(json.dumps({"schema_version": 1, **doc}, indent=2) + "\n")
        return
    for k, v in doc.items():
        typer.echo(f"{k} = {v}")


@daemon_app.command("metrics")
def metrics_cmd(
    config: Optional[str] = CONFIG_OPT,
    no_health: bool = typer.Option(False, "--no-health", help="Skip `cxl list -H`."),
) -> None:
    """Print the Prometheus metrics the daemon would publish now (one scan; writes nothing)."""
    import logging

    from .daemon import config as cfgmod
    from .daemon import health, metrics
    from .daemon.metrics import Stats, View
    from .daemon.reconcile import Reconciler, resolve_target

    root = _root()
    cfg = cfgmod.load(root, config)
    stats = Stats()
    log = logging.getLogger("cxlctl.daemon.oneshot")
    log.addHandler(logging.NullHandler())
    log.propagate = False
    rec = Reconciler(root, cfg, log, stats)
    inv = rec.scan("oneshot")
    target = resolve_target(root, cfg)
    rec.check_drift()
    h = None if no_health or not cfg.health_enabled else health.collect(root, cfg.health_command, cfg.health_timeout)
    state = {"applied": "applied", "reverted": "reverted", "needs-attention": "needs-attention"}.get(
        target.state, "observing"
    )
    view = View(inv, target.name if target.ref else None, state, rec.drift, h, stats, False)
    sys.stdout.write(metrics.build(view))


@daemon_app.command("labels")
def labels_cmd(config: Optional[str] = CONFIG_OPT) -> None:
    """Print the Node Feature Discovery feature file the daemon would write now (writes nothing)."""
    from .daemon import config as cfgmod
    from .daemon import nfd
    from .daemon.reconcile import resolve_target
    from .inventory import scan

    root = _root()
    cfg = cfgmod.load(root, config)
    target = resolve_target(root, cfg)
    inv = scan(root)
    sys.stdout.write(nfd.render(nfd.labels(inv, target.name if target.state == "applied" else None, cfg.nfd_namespace)))
