"""``cxlctl k8s …``: files for Kubernetes components, generated from this host's inventory.

Thin: :mod:`cxlctl.k8s.nri` builds; this module parses options and prints.
Nothing is written on the host; the output goes to stdout (redirect it, or
pipe it to ``kubectl apply -f -`` with ``--configmap``).
"""

from __future__ import annotations

import sys
from typing import Optional

import typer

from .common import JSON_OPT, emit_json, group, host, note
from .params import Command

k8s_app = group("k8s", "Generate configuration for Kubernetes components from this host (NRI memory-policy plugin).")


@k8s_app.command("nri-config", cls=Command)
def nri_config_cmd(
    ratio: Optional[str] = typer.Option(
        None, "--ratio", metavar="D:C", help="Weights DRAM:CXL the interleave class assumes (default: cxlctl's)."
    ),
    prefix: str = typer.Option("cxlctl-", "--prefix", metavar="TEXT", help="Class name prefix."),
    configmap: bool = typer.Option(
        False, "--configmap", help="Wrap it in the ConfigMap the plugin's Helm chart mounts (kubectl apply -f -)."
    ),
    namespace: str = typer.Option(
        "kube-system", "--namespace", metavar="NS", help="With --configmap: the plugin's namespace."
    ),
    json_out: bool = JSON_OPT,
) -> None:
    """The memory-policy plugin's classes for this host: weighted interleave, KV on CXL, DRAM bind (YAML)."""
    from cxlctl.inventory import scan
    from cxlctl.k8s import nri
    from cxlctl.launch.build import _ratio

    h = host()
    r = _ratio(ratio)
    nri.check_prefix(prefix)
    nri.check_namespace(namespace)
    cfg = nri.build(h, scan(h), r, prefix)
    if json_out:
        emit_json(nri.to_json(cfg))
        return
    sys.stdout.write(nri.to_configmap(cfg, namespace) if configmap else nri.to_yaml(cfg))
    note(f"note: {n}" for n in cfg.notes)
    note(f"warning: {w}" for w in cfg.warnings)
