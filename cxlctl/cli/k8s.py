"""``cxlctl k8s …``: Kubernetes files from this host (:mod:`cxlctl.k8s.nri`) and its KV pool (``kvpool``).

Thin: the modules build, write and mount; this module parses options and prints.
"""

from __future__ import annotations

import sys
from typing import Optional

import typer

from cxlctl.hostio.paths import NFD_DIR

from .common import JSON_OPT, emit_json, group, host, note
from .params import Command

k8s_app = group("k8s", "Kubernetes from this host: the NRI memory-policy classes, the node's KV pool for pods.")


@k8s_app.command("nri-config", cls=Command)
def nri_config_cmd(
    ratio: Optional[str] = typer.Option(
        None, "--ratio", metavar="D:C", help="Weights DRAM:CXL the interleave class assumes (default: cxlctl's)."
    ),
    prefix: str = typer.Option("cxlctl-", "--prefix", metavar="TEXT", help="Class name prefix."),
    configmap: bool = typer.Option(False, "--configmap", help="As the ConfigMap of a node pool's plugin (--pool)."),
    pool: Optional[str] = typer.Option(None, "--pool", metavar="NAME", help="The node pool it is for (--configmap)."),
    output: Optional[str] = typer.Option(
        None, "--output", metavar="FILE", help="Write the file (per node: the agent)."
    ),
    namespace: str = typer.Option("kube-system", "--namespace", metavar="NS", help="With --configmap: its namespace."),
    json_out: bool = JSON_OPT,
) -> None:
    """The memory-policy plugin's classes for this host: weighted interleave, KV on CXL, DRAM bind (YAML)."""
    from cxlctl.inventory import scan
    from cxlctl.k8s import nri
    from cxlctl.launch.build import _ratio

    h = host()
    r = _ratio(ratio)
    nri.check_options(prefix, namespace, configmap, pool, output)
    cfg = nri.build(h, scan(h), r, prefix)
    if json_out:
        emit_json(nri.to_json(cfg))
    else:
        sys.stdout.write(nri.emit(h, cfg, namespace, pool, output))
    note(f"note: {n}" for n in cfg.notes)
    note(f"warning: {w}" for w in cfg.warnings)


@k8s_app.command("kv-pool", cls=Command)
def kv_pool_cmd(
    size: Optional[str] = typer.Option(None, "--size", metavar="SIZE", help="Pool size (default: free pinnable CXL)."),
    directory: str = typer.Option("/run/cxlctl/kv", "--dir", metavar="DIR", help="Host directory to mount it on."),
    nfd_dir: str = typer.Option(NFD_DIR, "--nfd-dir", metavar="DIR", help="NFD's feature directory."),
    remove: bool = typer.Option(False, "--remove", help="Withdraw the resource and unmount the pool."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the pool; mount nothing."),
    json_out: bool = JSON_OPT,
) -> None:
    """Mount the node's KV pool: a tmpfs bound to its pinnable CXL nodes, for unprivileged pods."""
    from cxlctl.inventory import scan
    from cxlctl.k8s import kvpool
    from cxlctl.launch.kvsize import parse_size_arg

    h = host()
    if remove:
        steps = kvpool.remove(h, directory, nfd_dir, dry_run)
        emit_json({"steps": steps}) if json_out else note(steps)
        return
    pool = kvpool.plan(h, scan(h), parse_size_arg(size, "--size") if size else None, directory)
    done = None if dry_run else kvpool.apply(h, pool, nfd_dir)
    emit_json(kvpool.to_json(pool, done)) if json_out else sys.stdout.write(kvpool.render(pool, done))
