"""A checker for containers/nri-plugins' memory-policy configuration, following the plugin's Go code.

Written from ``cmd/plugins/memory-policy/main.go`` and
``pkg/resmgr/lib/memory/nodes.go`` of containers/nri-plugins at commit
0705acc824ee3c98f66665a5879bbcafae160c9a (2026-08-21; main.go last changed in
09c786a56c82fe1f8fae91017e3d550bc0c3e257), read, not copied:

* ``Config``: ``injectMpolset`` (bool, omitempty), ``classes`` ([]*MemoryPolicyClass);
* ``MemoryPolicyClass``: ``name`` (string), ``policy`` (*MemoryPolicySpec);
* ``MemoryPolicySpec``: ``mode`` (string), ``nodes`` (string), ``flags`` ([]string, omitempty);
* ``setConfig`` rejects a class without name, without policy, or with an empty mode;
* ``ToLinuxMemoryPolicy`` accepts the modes of ``MpolMode_value`` and the flags of
  ``MpolFlag_value``, and nodes ``all``, ``allowed-mems``, ``cpu-packages``,
  ``cpu-nodes``, ``max-dist:<int>``, or a node list starting with a digit parsed by
  ``ParseNodeMask`` (comma-separated ids or ``a-b`` ranges with b >= a, ids <= 63:
  the mask is a uint64); anything else is "invalid nodes";
* ``CreateContainer``: without ``injectMpolset`` the plugin calls
  ``ToMemoryPolicyAdjustment``, which at this commit returns "memory policy
  adjustment is not implemented yet" — so a usable file must set it true.

The plugin unmarshals with sigs.k8s.io/yaml, which ignores unknown fields; this
checker rejects them (a typo would silently drop a setting) and rejects duplicate
class names (the plugin would always pick the first).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Set

MPOL_MODES = {
    "MPOL_DEFAULT": 0,
    "MPOL_PREFERRED": 1,
    "MPOL_BIND": 2,
    "MPOL_INTERLEAVE": 3,
    "MPOL_LOCAL": 4,
    "MPOL_PREFERRED_MANY": 5,
    "MPOL_WEIGHTED_INTERLEAVE": 6,
}
MPOL_FLAGS = {"MPOL_F_STATIC_NODES": 0, "MPOL_F_RELATIVE_NODES": 1, "MPOL_F_NUMA_BALANCING": 2}
MAX_NODE_ID = 63
SYMBOLIC = ("all", "allowed-mems", "cpu-packages", "cpu-nodes")


class SchemaError(ValueError):
    pass


def _go_int(s: str) -> int:
    """strconv.ParseInt(s, 10, 32): optional sign, decimal digits, no spaces."""
    if not re.fullmatch(r"[+-]?[0-9]+", s):
        raise SchemaError(f"not an integer: {s!r}")
    v = int(s)
    if not -(1 << 31) <= v < (1 << 31):
        raise SchemaError(f"out of int32 range: {s!r}")
    return v


def parse_node_mask(text: str) -> Set[int]:
    """ParseNodeMask: the node ids of a list such as ``0-1,3`` (SchemaError when the plugin would fail)."""
    out: Set[int] = set()
    if text == "":
        return out
    for part in text.split(","):
        bounds = part.split("-", 1)
        if len(bounds) == 2:
            beg, end = _go_int(bounds[0]), _go_int(bounds[1])
            if end < beg:
                raise SchemaError(f"invalid range ({beg} - {end}) in node mask {text!r}")
            if end > MAX_NODE_ID:
                raise SchemaError(f"invalid node ID in mask {text!r}")
            out.update(range(beg, end + 1))
        else:
            i = _go_int(bounds[0])
            if i > MAX_NODE_ID:
                raise SchemaError(f"invalid node ID ({i}) in mask {text!r}")
            out.add(i)
    return out


def check_nodes(nodes: Any) -> None:
    if not isinstance(nodes, str):
        raise SchemaError(f"nodes must be a string, not {type(nodes).__name__}")
    if nodes in SYMBOLIC:
        return
    if nodes.startswith("max-dist:"):
        _go_int(nodes[len("max-dist:") :])
        return
    if nodes and nodes[0].isdigit():
        parse_node_mask(nodes)
        return
    # the plugin indexes nodes[0]: an empty string would panic, anything else is "invalid nodes"
    raise SchemaError(f"invalid nodes: {nodes!r}")


def check_config(doc: Any) -> List[Dict[str, Any]]:
    """Validate a parsed configuration document; returns its classes (SchemaError on the first problem)."""
    if not isinstance(doc, dict):
        raise SchemaError("the configuration is not a mapping")
    extra = set(doc) - {"injectMpolset", "classes"}
    if extra:
        raise SchemaError(f"unknown field(s) {sorted(extra)}")
    if doc.get("injectMpolset") is not True:
        raise SchemaError("injectMpolset must be true: the plugin's NRI-native policy path is not implemented")
    classes = doc.get("classes")
    if not isinstance(classes, list):
        raise SchemaError("classes must be a list")
    seen: Set[str] = set()
    for c in classes:
        if not isinstance(c, dict):
            raise SchemaError("a class is not a mapping")
        extra = set(c) - {"name", "policy"}
        if extra:
            raise SchemaError(f"class {c.get('name')!r}: unknown field(s) {sorted(extra)}")
        name = c.get("name")
        if not isinstance(name, str) or not name:
            raise SchemaError("name missing in class definition")
        if name in seen:
            raise SchemaError(f"class {name!r} defined twice")
        seen.add(name)
        pol = c.get("policy")
        if not isinstance(pol, dict):
            raise SchemaError(f"class {name!r} has no policy")
        extra = set(pol) - {"mode", "nodes", "flags"}
        if extra:
            raise SchemaError(f"class {name!r}: unknown policy field(s) {sorted(extra)}")
        mode = pol.get("mode")
        if not isinstance(mode, str) or not mode:
            raise SchemaError(f"class {name!r} has no mode")
        if mode not in MPOL_MODES:
            raise SchemaError(f"invalid memory policy mode {mode!r}")
        check_nodes(pol.get("nodes"))
        flags = pol.get("flags", [])
        if not isinstance(flags, list) or any(f not in MPOL_FLAGS for f in flags):
            raise SchemaError(f"class {name!r}: invalid memory policy flag(s) {flags!r}")
    return classes
