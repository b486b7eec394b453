"""Node Feature Discovery's labelling, as far as cxlctl's manifests depend on it, following NFD's Go code.

Written from kubernetes-sigs/node-feature-discovery at commit
76e6cc8cc0d54b8bce037098b72611ffdf66ef5a (2026-07-30, master after v0.19.0), read, not copied:

* ``source/pci/utils.go`` ``readSinglePciAttribute``: a sysfs attribute loses its ``0x`` and
  surrounding whitespace, and ``class`` keeps its first four hex digits (``0x050210`` → ``0502``:
  the programming interface is dropped);
* ``source/pci/pci.go`` ``newDefaultConfig``: ``deviceClassWhitelist`` ``["03", "0b40", "12"]``,
  ``deviceLabelFields`` ``["class", "vendor"]``; ``GetLabels``: a device whose class starts with a
  whitelisted prefix gets the label ``<its deviceLabelFields values joined by "_">.present``;
* ``pkg/nfd-worker/nfd-worker.go`` ``GetFeatureLabels``: a built-in source's label without a
  namespace becomes ``feature.node.kubernetes.io/<source>-<label>`` (so ``pci-0502_8086.present``);
  the ``local`` and ``custom`` sources' labels are not changed;
* ``pkg/apis/nfd/nodefeaturerule/rule.go`` ``Execute``: a rule's ``labels`` are set when every
  ``matchFeatures`` entry matches (AND); for an instance feature such as ``pci.device`` an entry
  matches when one instance satisfies all its expressions (``MatchMulti``);
  ``expression.go``: ``In`` matches a value equal to one of ``value`` (non-empty);
* ``pkg/apis/nfd/validate/validate.go`` ``Label``: the key is a qualified name with a namespace
  (an unprefixed key is refused under the DisableAutoPrefix feature gate and auto-prefixed with
  ``feature.node.kubernetes.io/`` before it); ``kubernetes.io`` and ``*.kubernetes.io`` are denied
  except ``feature.node.kubernetes.io``, ``profile.node.kubernetes.io`` and their sub-namespaces;
  the value is a valid label value;
* ``source/local/local.go`` ``parseFeatureFile``: a feature file's ``key=value`` lines become both a
  ``local.feature`` element and a label unless a directive line before it says ``# +no-label`` or
  ``# +no-feature`` (for that one line); ``# +expiry-time=`` drops every line after it once past;
* ``pkg/nfd-master/nfd-master.go`` ``processNodeFeatureRule`` / ``filterExtendedResource`` /
  ``getDynamicValue``: a matching rule's ``extendedResources`` value ``@<domain>.<feature>.<element>``
  is that attribute feature's element (an error when absent: the resource is left out); the name is
  validated by ``validate.ExtendedResource`` (a qualified, prefixed name, no ``kubernetes.io``
  namespace but ``feature.node.kubernetes.io``, a quantity as the value), and
  ``createExtendedResourcePatches`` puts it in the node's ``status.capacity``;
* ``expression.go`` ``Exists``: the element is there (``value`` must be empty).

* ``deployment/base/nfd-crds/nfd-api-crds.yaml`` (last changed in
  4cf8032ac5735030f641b9483b007fe2d45c0385; controller-gen v0.16.3), the
  ``nodefeaturerules.nfd.k8s-sigs.io`` CustomResourceDefinition: group ``nfd.k8s-sigs.io``, version
  ``v1alpha1`` (served, storage), scope ``Cluster``; its ``openAPIV3Schema`` is restated in
  :data:`NODEFEATURERULE_SCHEMA` field by field (types, required fields, the ``op`` enum), without
  the descriptions.  The CRD lists every field of an object, so the API server prunes an unknown
  one silently; the restatement refuses it instead (``additionalProperties: false``), as
  ``kubectl apply --validate=strict`` would.

Only what the manifests use is implemented: another op raises, so a manifest change that needs more
of NFD's semantics fails here instead of passing unchecked.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Sequence

FEATURE_LABEL_NS = "feature.node.kubernetes.io"
PROFILE_LABEL_NS = "profile.node.kubernetes.io"
DEFAULT_CLASS_WHITELIST = ("03", "0b40", "12")
DEFAULT_LABEL_FIELDS = ("class", "vendor")
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUB = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


# ----------------------------------------------------------------------------- the CRD's schema

CRD_GROUP = "nfd.k8s-sigs.io"
CRD_VERSION = "v1alpha1"
MATCH_OPS = [
    "In",
    "NotIn",
    "InRegexp",
    "Exists",
    "DoesNotExist",
    "Gt",
    "Ge",
    "Lt",
    "Le",
    "GtLt",
    "GeLe",
    "IsTrue",
    "IsFalse",
]
_STRINGS: Dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}
_EXPR: Dict[str, Any] = {
    "type": "object",
    "required": ["op"],
    "additionalProperties": False,
    "properties": {
        "op": {"type": "string", "enum": MATCH_OPS},
        "type": {"type": "string"},
        "value": {"type": "array", "items": {"type": "string"}},
    },
}
_MATCH_FEATURES: Dict[str, Any] = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["feature"],
        "additionalProperties": False,
        "properties": {
            "feature": {"type": "string"},
            "matchExpressions": {"type": "object", "additionalProperties": _EXPR},
            "matchName": _EXPR,
        },
    },
}
NODEFEATURERULE_SCHEMA: Dict[str, Any] = {
    "type": "object",
    "required": ["spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"type": "string", "const": f"{CRD_GROUP}/{CRD_VERSION}"},
        "kind": {"type": "string", "const": "NodeFeatureRule"},
        "metadata": {"type": "object"},  # the API server's (cluster-scoped: no namespace)
        "spec": {
            "type": "object",
            "required": ["rules"],
            "additionalProperties": False,
            "properties": {
                "rules": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "additionalProperties": False,
                        "properties": {
                            "name": {"type": "string"},
                            "labels": _STRINGS,
                            "labelsTemplate": {"type": "string"},
                            "annotations": _STRINGS,
                            "extendedResources": _STRINGS,
                            "vars": _STRINGS,
                            "varsTemplate": {"type": "string"},
                            "taints": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["effect", "key"],
                                    "additionalProperties": False,
                                    "properties": {
                                        "effect": {"type": "string"},
                                        "key": {"type": "string"},
                                        "timeAdded": {"type": "string", "format": "date-time"},
                                        "value": {"type": "string"},
                                    },
                                },
                            },
                            "matchFeatures": _MATCH_FEATURES,
                            "matchAny": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["matchFeatures"],
                                    "additionalProperties": False,
                                    "properties": {"matchFeatures": _MATCH_FEATURES},
                                },
                            },
                        },
                    },
                }
            },
        },
    },
}


# ----------------------------------------------------------------------------- the worker and the rules


def pci_attribute(name: str, sysfs_text: str) -> str:
    """A PCI device attribute as nfd-worker reads it (``readSinglePciAttribute``)."""
    v = sysfs_text.strip()
    v = v[2:] if v.startswith("0x") else v
    v = v.strip()
    return v[:4] if name == "class" and len(v) > 4 else v


def pci_labels(
    devices: Sequence[Mapping[str, str]],
    whitelist: Sequence[str] = DEFAULT_CLASS_WHITELIST,
    fields: Sequence[str] = DEFAULT_LABEL_FIELDS,
) -> List[str]:
    """The full label names stock nfd-worker's pci source gives these devices (attributes as read)."""
    out = set()
    for dev in devices:
        for white in whitelist:
            if dev["class"].startswith(white.lower()):
                out.add(f"{FEATURE_LABEL_NS}/pci-" + "_".join(dev[f] for f in fields) + ".present")
                break
    return sorted(out)


def rule_labels(rule: Mapping[str, Any], features: Mapping[str, Sequence[Mapping[str, str]]]) -> Dict[str, str]:
    """The labels one NodeFeatureRule rule sets on a node with these instance features ({} if none)."""
    for matcher in rule.get("matchFeatures") or []:
        instances = features.get(matcher["feature"], ())
        if not any(_all(matcher["matchExpressions"], inst) for inst in instances):
            return {}
    return dict(rule.get("labels") or {})


def _all(exprs: Mapping[str, Mapping[str, Any]], attrs: Mapping[str, str]) -> bool:
    for name, e in exprs.items():
        if e["op"] == "Exists":
            if e.get("value"):
                raise ValueError("invalid expression, 'value' field must be empty for Op Exists")
            if name not in attrs:
                return False
            continue
        if e["op"] != "In":
            raise NotImplementedError(f"op {e['op']} is not modelled here (tests/nfd_rules.py)")
        if not e.get("value"):
            raise ValueError("invalid expression, 'value' field must be non-empty for Op In")
        if attrs.get(name) not in e["value"]:
            return False
    return True


def label_problem(key: str, value: str) -> str:
    """Why nfd-master would refuse this label ("" when it takes it)."""
    ns, sep, name = key.rpartition("/")
    if not sep or not ns:
        return "unprefixed keys are not allowed"
    if len(name) > 63 or not _NAME.match(name) or len(ns) > 253 or not _DNS1123_SUB.match(ns):
        return "not a qualified name"
    if ns == "kubernetes.io" or ns.endswith(".kubernetes.io"):
        allowed = (FEATURE_LABEL_NS, PROFILE_LABEL_NS)
        if ns not in allowed and not ns.endswith(tuple("." + a for a in allowed)):
            return "namespace is not allowed"
    if len(value) > 63 or not _VALUE.match(value):
        return "invalid value"
    return ""


def local_feature_file(text: str) -> Dict[str, Dict[str, str]]:
    """``{"local.feature": elements, "local.label": elements}`` of one feature file, as the local source
    parses it (``parseFeatureFile``; expiry in the past not modelled: the agent writes none)."""
    features: Dict[str, str] = {}
    labels: Dict[str, str] = {}
    skip_label = skip_feature = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if line.startswith("# +"):
                key = line[3:].split("=", 1)[0]
                if key == "no-label":
                    skip_label = True
                elif key == "no-feature":
                    skip_feature = True
                elif key != "expiry-time":
                    raise ValueError(f"unknown feature file directive {key!r}")
            continue
        k, sep, v = line.partition("=")
        val = v if sep else "true"
        if not skip_feature:
            features[k] = val
        if not skip_label:
            labels[k] = val
        skip_label = skip_feature = False
    return {"local.feature": features, "local.label": labels}


def rule_extended_resources(rule: Mapping[str, Any], attributes: Mapping[str, Mapping[str, str]]) -> Dict[str, str]:
    """The extended resources (name -> quantity) one rule gives a node with these attribute features."""
    for matcher in rule.get("matchFeatures") or []:
        if not _all(matcher["matchExpressions"], attributes.get(matcher["feature"], {})):
            return {}
    out = {}
    for name, value in (rule.get("extendedResources") or {}).items():
        if value.startswith("@"):
            parts = value[1:].split(".", 2)
            if len(parts) != 3:
                raise ValueError(f"value {value} is not in the form of '@domain.feature.element'")
            elems = attributes.get(parts[0] + "." + parts[1])
            if elems is None or parts[2] not in elems:
                continue  # nfd-master logs the error and leaves the resource out
            value = elems[parts[2]]
        problem = extended_resource_problem(name, value)
        if problem:
            raise ValueError(f"{name}={value}: {problem}")
        out[name] = value
    return out


def extended_resource_problem(key: str, value: str) -> str:
    """Why nfd-master would refuse this extended resource ("" when it takes it; integer quantities only)."""
    problem = label_problem(key, "x")
    if problem:
        return problem
    if not re.fullmatch(r"[0-9]+", value):
        return "not a quantity (integers only modelled)"
    return ""
