"""``cxlctl daemon …``: run the service, check its configuration, print its outputs once.

``daemon run`` is what ``systemd/cxlctl.service`` starts (``Type=notify``).
``config``, ``metrics`` and ``labels`` are read-only helpers for operators:
they show what the running daemon would use or publish, without writing
anything (docs/daemon.md).
"""

from __future__ import annotations

import sys
from typing import Optional

import typer

from .common import JSON_OPT, emit_json, group, host
from .params import Command

daemon_app = group("daemon", "The cxlctl service: keep the tuning profile applied as CXL memory comes and goes.")

CONFIG_OPT = typer.Option(
    None, "--config", metavar="FILE", help="Configuration file (default: /etc/cxlctl/cxlctl.toml under --root)."
)


@daemon_app.command("run", cls=Command)
def run_cmd(
    config: Optional[str] = CONFIG_OPT,
    once: bool = typer.Option(False, "--once", help="Scan, reconcile, publish metrics/labels once, then exit."),
    no_udev: bool = typer.Option(
        False, "--no-udev", help="Do not listen to udev (rely on the periodic rescan). Implied by --root other than /."
    ),
) -> None:
    """Run in the foreground (for systemd Type=notify): reconcile on udev events, watch drift, publish metrics.

    As root it first refuses code another user could change (docs/security.md, "Installation")."""
    from cxlctl.daemon.selfcheck import require_own_code_trusted

    require_own_code_trusted()
    from cxlctl import config as cfgmod
    from cxlctl.daemon.loop import Daemon

    h = host()
    cfg = cfgmod.load(h, config, web=True)  # an unusable web configuration stops the start
    d = Daemon(h, cfg, config_path=config, use_udev=not no_udev and h.live)
    rc = d.run(once=once)
    if rc:
        raise typer.Exit(rc)


@daemon_app.command("config", cls=Command)
def config_cmd(config: Optional[str] = CONFIG_OPT, json_out: bool = JSON_OPT) -> None:
    """Validate the configuration and print the effective values as TOML (exit 2 on a bad file)."""
    import os

    from cxlctl import config as cfgmod

    # as root, the web configuration too, as the daemon reads it (a user may not read root's key)
    cfg = cfgmod.load(host(), config, web=os.geteuid() == 0)
    if json_out:
        emit_json(cfgmod.render(cfg))
        return
    sys.stdout.write(cfgmod.to_toml(cfg))


@daemon_app.command("metrics", cls=Command)
def metrics_cmd(
    config: Optional[str] = CONFIG_OPT,
    no_health: bool = typer.Option(False, "--no-health", help="Skip `cxl list -H`."),
    json_out: bool = JSON_OPT,
) -> None:
    """Print the Prometheus metrics the daemon would publish now (one scan; writes nothing)."""
    from cxlctl import config as cfgmod
    from cxlctl.daemon import metrics
    from cxlctl.daemon.oneshot import metrics_view

    h = host()
    view = metrics_view(h, cfgmod.load(h, config), with_health=not no_health)
    if json_out:
        emit_json(metrics.as_json(view))
        return
    sys.stdout.write(metrics.build(view))


@daemon_app.command("labels", cls=Command)
def labels_cmd(config: Optional[str] = CONFIG_OPT, json_out: bool = JSON_OPT) -> None:
    """Print the Node Feature Discovery feature file the daemon would write now (writes nothing)."""
    from cxlctl import config as cfgmod
    from cxlctl.daemon.oneshot import labels
    from cxlctl.k8s import nfd

    h = host()
    lbls = labels(h, cfgmod.load(h, config))
    if json_out:
        emit_json({"labels": lbls})
        return
    sys.stdout.write(nfd.render(lbls))
