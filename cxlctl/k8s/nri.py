"""The configuration of containers/nri-plugins' ``memory-policy`` NRI plugin, from the host inventory.

Why: in Kubernetes a container's memory policy can be set by the runtime
instead of by ``cxlctl launch`` in the entrypoint.  The memory-policy plugin
(``cmd/plugins/memory-policy/main.go`` of containers/nri-plugins) gives each
container the policy of the *class* its pod annotation names
(``class.memory-policy.nri.io: NAME``), by prefixing the container's command
with its ``mpolset`` helper.  This module writes the classes for one host:

* ``<prefix>weighted-interleave`` — ``MPOL_WEIGHTED_INTERLEAVE`` over a socket's
  DRAM and its nearest CXL nodes;
* ``<prefix>kv-cxl`` — ``MPOL_PREFERRED_MANY`` over the nearest CXL nodes (a KV
  cache process: CXL first, DRAM when CXL is full);
* ``<prefix>bind-dram`` — ``MPOL_BIND`` to the socket's DRAM (latency-bound
  processes, kept off CXL).

One set per CPU socket (suffix ``-socketN``) when the host has several,
because the classes name absolute node ids and interleaving across sockets
makes the socket link the bottleneck.

Absolute node ids are one host's: another node's CXL memory may have other
ids (HMAT/CDAT, the order regions were built in), and a class naming node 1
there binds to DRAM or fails.  So the configuration is never cluster-wide:
``--output FILE`` writes it on each node, resolved from that node's own
topology (the cxlctl DaemonSet's agent does, the plugin reads the file from a
hostPath), and ``--configmap`` needs ``--pool NAME``, a node pool whose nodes
share this topology (one plugin release per pool, docs/kubernetes.md).

The plugin's schema, from its Go types (``Config``, ``MemoryPolicyClass``,
``MemoryPolicySpec``; commit in docs/kubernetes.md): ``injectMpolset`` (bool)
and ``classes`` (``name``, ``policy: {mode, nodes, flags}``); modes are the
``MPOL_*`` names of its ``MpolMode_value`` table; ``nodes`` is a list
(``0-1,3``, ids up to 63: its ``NodeMask`` is a uint64) or one of ``all``,
``allowed-mems``, ``cpu-packages``, ``cpu-nodes``, ``max-dist:N``.
``injectMpolset`` is always true: at that commit the plugin's NRI-native path
(``ToMemoryPolicyAdjustment``) returns "not implemented yet".

The plugin has no weights: ``MPOL_WEIGHTED_INTERLEAVE`` interleaves by the
kernel's system-wide table (``/sys/kernel/mm/mempolicy/weighted_interleave``),
which the cxlctl DaemonSet's profile sets.  The weights cxlctl would use are
reported (and written as a comment) so the two can be checked against each
other; nothing on the host is changed.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from cxlctl.errors import CxlctlError, UsageError
from cxlctl.hostio.host import Host
from cxlctl.model import Inventory
from cxlctl.parse import format_nodelist

#: the plugin's NodeMask is a uint64 (pkg/resmgr/lib/memory/nodes.go: MaxNodeID = 63)
MAX_NODE_ID = 63
#: the ConfigMap the plugin's Helm chart mounts as its --config file
CONFIGMAP_NAME = "nri-memory-policy-config.default"
CONFIGMAP_KEY = "config.yaml"
ANNOTATION = "class.memory-policy.nri.io"
#: the label naming the node pool a --configmap was resolved for
POOL_LABEL = "cxlctl.io/node-pool"
#: where the DaemonSet's agent writes this node's configuration (the plugin mounts it as a hostPath)
NODE_FILE = "/etc/cxlctl/nri/memory-policy.yaml"


class NriClass(NamedTuple):
    name: str
    mode: str
    nodes: Tuple[int, ...]
    purpose: str
    socket: Tuple[int, ...]  # the CPU nodes it is meant for


class NriConfig(NamedTuple):
    classes: Tuple[NriClass, ...]
    weights: Dict[int, int]  # node → weight cxlctl would use (system-wide table)
    weights_current: Dict[int, int]
    weights_source: str  # ratio | bandwidth | kernel-auto | current | unsupported
    notes: Tuple[str, ...]
    warnings: Tuple[str, ...]

    def plugin_config(self) -> Dict[str, Any]:
        """The document the plugin unmarshals (its ``Config`` type, JSON field names)."""
        return {
            "injectMpolset": True,
            "classes": [
                {"name": c.name, "policy": {"mode": c.mode, "nodes": format_nodelist(c.nodes)}} for c in self.classes
            ],
        }


def _sockets(inv: Inventory) -> List[Tuple[int, ...]]:
    from cxlctl.launch.nodesets import socket_of

    seen: List[Tuple[int, ...]] = []
    for n in inv.nodes:
        if n.has_cpu:
            s = socket_of(inv, n.id)
            if s not in seen:
                seen.append(s)
    return seen


def build(host: Host, inv: Inventory, ratio: Optional[Tuple[int, int]] = None, prefix: str = "cxlctl-") -> NriConfig:
    """The classes for this host and the weights they assume (reads only)."""
    from cxlctl.launch import sysweights
    from cxlctl.launch.nodesets import resolve

    notes: List[str] = []
    warnings: List[str] = []
    socks = _sockets(inv)
    if not socks:
        raise UsageError("no node with CPUs found", hint="check the tree with cxlctl status (is --root right?)")
    if not any(n.kind == "cxl" and n.has_memory for n in inv.nodes):
        raise CxlctlError(
            "no CXL memory node online: there is nothing for the classes to place on CXL",
            hint="online the CXL memory first (cxlctl region create --online system-ram; cxlctl status)",
        )
    wi = inv.weighted_interleave.supported
    if not wi:
        warnings.append(
            "this kernel has no weighted interleave (6.9+): the interleave class is MPOL_INTERLEAVE (equal shares)"
        )
    classes: List[NriClass] = []
    weights: Dict[int, int] = {}
    current: Dict[int, int] = {}
    source = "unsupported"
    for sock in socks:
        ns = resolve(inv, host, cpu_spec=format_nodelist(sock), mem_spec=None, gpu_spec=None)
        suffix = f"-socket{sock[0]}" if len(socks) > 1 else ""
        where = f"CPU node(s) {format_nodelist(sock)}"
        if not ns.cxl:
            notes.append(f"{where}: no CXL node near these CPUs; only the DRAM class is written")
        if ns.cxl and ns.dram:
            if wi:
                wp = sysweights.plan(host, inv, ns, ns.dram + ns.cxl, ratio)
                weights.update(wp.weights)
                current.update({n: wp.current[n] for n in wp.nodes if n in wp.current})
                source = wp.source
                notes.extend(wp.notes)
                warnings.extend(w for w in wp.warnings if w not in warnings)
            mode = "MPOL_WEIGHTED_INTERLEAVE" if wi else "MPOL_INTERLEAVE"
            classes.append(
                NriClass(
                    f"{prefix}weighted-interleave{suffix}" if wi else f"{prefix}interleave{suffix}",
                    mode,
                    tuple(sorted(ns.dram + ns.cxl)),
                    "DRAM + nearest CXL by the kernel's weights" if wi else "DRAM + nearest CXL, equal shares",
                    sock,
                )
            )
        if ns.cxl:
            classes.append(
                NriClass(
                    f"{prefix}kv-cxl{suffix}",
                    "MPOL_PREFERRED_MANY",
                    ns.cxl,
                    "KV-cache processes: CXL first, other nodes when it is full",
                    sock,
                )
            )
        if ns.dram:
            classes.append(NriClass(f"{prefix}bind-dram{suffix}", "MPOL_BIND", ns.dram, "DRAM only", sock))
    for c in classes:
        if any(n > MAX_NODE_ID for n in c.nodes):
            raise CxlctlError(
                f"class {c.name}: node(s) above {MAX_NODE_ID} cannot be named in the plugin's node mask (a uint64)",
                hint="use the plugin's relative node specs (max-dist:N, cpu-packages) by hand for this host",
            )
    if weights and any(current.get(n) != w for n, w in weights.items()):
        warnings.append(
            "the kernel's weights now ("
            + " ".join(f"node{n}={current.get(n)}" for n in sorted(weights))
            + ") differ from cxlctl's ("
            + " ".join(f"node{n}={w}" for n, w in sorted(weights.items()))
            + "): the plugin interleaves by the kernel's table; set it with the DaemonSet's profile or cxlctl tune apply"
        )
    return NriConfig(tuple(classes), weights, current, source, tuple(notes), tuple(warnings))


# --------------------------------------------------------------------------- rendering


def _q(s: str) -> str:
    """A YAML double-quoted scalar (JSON string syntax is valid YAML)."""
    return json.dumps(s)


def to_yaml(cfg: NriConfig, indent: int = 0) -> str:
    """The plugin's config file: a comment block (weights, classes) and the document."""
    from cxlctl.term import fold_lines

    pad = " " * indent
    text = [
        "memory-policy plugin configuration (containers/nri-plugins), generated by `cxlctl k8s nri-config`.",
        f"Pods pick a class with the annotation {ANNOTATION}: <name>.",
    ]
    if cfg.weights:
        text.append(
            f"MPOL_WEIGHTED_INTERLEAVE uses the kernel's system-wide weights; cxlctl's ({cfg.weights_source}): "
            + " ".join(f"node{n}={w}" for n, w in sorted(cfg.weights.items()))
        )
    lines = [f"# {w}" for t in text for w in fold_lines(t, 76 - indent)]
    for c in cfg.classes:
        lines += [
            f"#   {w}"
            for w in fold_lines(f"{c.name} (CPU node(s) {format_nodelist(c.socket)}): {c.purpose}", 74 - indent)
        ]
    body = ["injectMpolset: true", "classes:"]
    for c in cfg.classes:
        body += [
            f"- name: {_q(c.name)}",
            "  policy:",
            f"    mode: {c.mode}",
            f"    nodes: {_q(format_nodelist(c.nodes))}",
        ]
    return "\n".join(pad + x for x in lines + body) + "\n"


def to_configmap(cfg: NriConfig, namespace: str, pool: str) -> str:
    """The ConfigMap the plugin's Helm chart mounts (``nri-memory-policy-config.default``, key config.yaml),
    for the plugin release of one node pool (label :data:`POOL_LABEL`)."""
    head = [
        "apiVersion: v1",
        "kind: ConfigMap",
        "metadata:",
        f"  name: {CONFIGMAP_NAME}",
        f"  namespace: {_q(namespace)}",
        "  labels:",
        "    app.kubernetes.io/managed-by: cxlctl",
        f"    {POOL_LABEL}: {_q(pool)}",
        "data:",
        f"  {CONFIGMAP_KEY}: |",
    ]
    return "\n".join(head) + "\n" + to_yaml(cfg, indent=4)


def check_options(prefix: str, namespace: str, configmap: bool, pool: Optional[str], output: Optional[str]) -> None:
    """``k8s nri-config``'s options, each refused with exit 2 and the fix before anything is built."""
    check_prefix(prefix)
    check_namespace(namespace)
    check_scope(configmap, pool, output)


def check_scope(configmap: bool, pool: Optional[str], output: Optional[str]) -> None:
    """Refuse a configuration that would reach nodes it was not resolved on (module docstring)."""
    import re

    if configmap and not pool:
        raise UsageError(
            "--configmap: the classes name this host's node ids, and a ConfigMap reaches every node its plugin runs on",
            hint="give --pool NAME (a node pool with this node's topology; one plugin release per pool), or "
            "write the file on each node with --output FILE (the DaemonSet's agent does)",
        )
    if pool is not None and not configmap:
        raise UsageError("--pool names the node pool of a --configmap", hint="add --configmap")
    if pool is not None and not re.match(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$", pool):
        raise UsageError(f"--pool {pool!r} is not a label value", hint="e.g. --pool gpu-cxl-a")
    if output is not None and (configmap or not output.startswith("/")):
        raise UsageError(f"--output {output!r}: an absolute path of the node, without --configmap")


def emit(host: Host, cfg: NriConfig, namespace: str, pool: Optional[str], output: Optional[str]) -> str:
    """What to print: the file, the pool's ConfigMap, or (``output``) a line naming the file written."""
    if output is None:
        return to_configmap(cfg, namespace, pool) if pool else to_yaml(cfg)
    from cxlctl.hostio.atomic import atomic_write

    atomic_write(host.root, output, to_yaml(cfg), mode=0o644, sync_dir=False)
    return f"wrote {output}: {len(cfg.classes)} classes resolved on this node\n"


def to_json(cfg: NriConfig) -> Dict[str, Any]:
    return {
        "plugin": "containers/nri-plugins memory-policy",
        "annotation": ANNOTATION,
        "config": cfg.plugin_config(),
        "classes": [
            {
                "name": c.name,
                "mode": c.mode,
                "nodes": list(c.nodes),
                "purpose": c.purpose,
                "cpu_nodes": list(c.socket),
            }
            for c in cfg.classes
        ],
        "weights": {
            "system_wide": True,
            "source": cfg.weights_source,
            "cxlctl": {str(n): w for n, w in sorted(cfg.weights.items())},
            "current": {str(n): w for n, w in sorted(cfg.weights_current.items())},
        },
        "notes": list(cfg.notes),
        "warnings": list(cfg.warnings),
    }


def check_prefix(prefix: str) -> str:
    import re

    if not re.match(r"^[a-z0-9]([a-z0-9.-]{0,40})?$", prefix):
        raise UsageError(
            f"--prefix {prefix!r}: use lowercase letters, digits, '-' and '.' (up to 41)", hint="e.g. --prefix cxl-"
        )
    return prefix


def check_namespace(ns: str) -> str:
    import re

    if not re.match(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", ns):
        raise UsageError(f"--namespace {ns!r} is not a Kubernetes namespace name", hint="e.g. --namespace kube-system")
    return ns
