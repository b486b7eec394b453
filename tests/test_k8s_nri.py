"""``cxlctl k8s nri-config`` on recorded trees, its output parsed and checked against the plugin's schema.

The checker (tests/nri_schema.py) follows the memory-policy plugin's Go types and
validation; the generated YAML is parsed with PyYAML (as the plugin's
sigs.k8s.io/yaml would read it) and its classes are checked against the
inventory they came from.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest
import yaml

from cxlctl.cli import run
from tests.kit import cli, copy_fixture, fixture_roots
from tests.launch_support import add_socket
from tests.nri_schema import SchemaError, check_config, parse_node_mask


def _run(argv: List[str], rc: int = 0) -> str:
    p = cli(*argv, rc=rc, inprocess=True)
    return p.stdout if rc == 0 else p.stderr


# the one-CXL-node trees (nodes 0 and 1); the HMAT guest (hmat2, CXL nodes 2 and 3) is not this shape
@pytest.mark.parametrize("root", [r for r in fixture_roots("linux-6.12/*-region") if "/hmat2-" not in r])
def test_generated_config_follows_the_plugin_schema(capsys: Any, root: str) -> None:
    doc = yaml.safe_load(_run(["--root", root, "k8s", "nri-config"]))
    classes = {c["name"]: c["policy"] for c in check_config(doc)}
    assert classes == {
        "cxlctl-weighted-interleave": {"mode": "MPOL_WEIGHTED_INTERLEAVE", "nodes": "0-1"},
        "cxlctl-kv-cxl": {"mode": "MPOL_PREFERRED_MANY", "nodes": "1"},
        "cxlctl-bind-dram": {"mode": "MPOL_BIND", "nodes": "0"},
    }
    # the JSON report carries the same document and says where the weights come from
    rep: Dict[str, Any] = json.loads(_run(["--root", root, "k8s", "nri-config", "--json"]))
    assert rep["config"] == doc
    assert rep["weights"]["source"] == "current" and rep["weights"]["cxlctl"] == {"0": 1, "1": 1}
    assert {c["name"]: c["cpu_nodes"] for c in rep["classes"]}["cxlctl-kv-cxl"] == [0]


def test_ratio_is_reported_not_written(capsys: Any) -> None:
    root = fixture_roots("linux-6.12/single-region")[0]
    capsys.readouterr()
    assert run(["--root", root, "k8s", "nri-config", "--ratio", "3:1"]) == 0
    out = capsys.readouterr()
    assert "# (ratio): node0=3 node1=1" in (out.out)
    assert "differ from cxlctl's (node0=3 node1=1)" in out.err  # the tree's kernel still has 1:1
    check_config(yaml.safe_load(out.out))


def test_configmap_wraps_the_same_file(capsys: Any) -> None:
    root = fixture_roots("linux-6.12/single-region")[0]
    # issue 42: never one host's node ids in a cluster-wide ConfigMap: a ConfigMap is for a named node pool
    err = _run(["--root", root, "k8s", "nri-config", "--configmap", "--namespace", "nri"], rc=2)
    assert "--pool NAME" in err and "--output FILE" in err and "Traceback" not in err
    cm = yaml.safe_load(
        _run(["--root", root, "k8s", "nri-config", "--configmap", "--pool", "gpu-a", "--namespace", "nri"])
    )
    assert cm["metadata"]["labels"]["cxlctl.io/node-pool"] == "gpu-a"
    assert (cm["kind"], cm["metadata"]["name"], cm["metadata"]["namespace"]) == (
        "ConfigMap",
        "nri-memory-policy-config.default",
        "nri",
    )
    plain = yaml.safe_load(_run(["--root", root, "k8s", "nri-config"]))
    assert yaml.safe_load(cm["data"]["config.yaml"]) == plain
    import kubernetes_validate

    kubernetes_validate.validate(cm, "1.33.0", strict=True)


def test_two_sockets_get_one_class_set_each(capsys: Any, tmp_path: Any) -> None:
    t = copy_fixture(fixture_roots("linux-6.12/single-region")[0], str(tmp_path / "t"))
    # a second socket (node 2) farther from the CXL node than socket 0
    add_socket(t, 2, "2-3", distances={0: 21, 1: 30})
    with open(f"{t}/sys/kernel/mm/mempolicy/weighted_interleave/node2", "w") as f:
        f.write("1\n")  # the kernel lists a weight for every node with memory
    doc = yaml.safe_load(_run(["--root", t, "k8s", "nri-config"]))
    classes = {c["name"]: c["policy"]["nodes"] for c in check_config(doc)}
    assert classes["cxlctl-weighted-interleave-socket0"] == "0-1"
    assert classes["cxlctl-kv-cxl-socket0"] == "1"
    assert classes["cxlctl-bind-dram-socket2"] == "2"
    # socket 2's nearest CXL node is still node 1 (the only one): its interleave stays within its own DRAM + 1
    assert classes["cxlctl-weighted-interleave-socket2"] == "1-2"


def test_no_cxl_and_bad_options(capsys: Any) -> None:
    err = _run(["--root", fixture_roots("linux-6.12/single-noregion")[0], "k8s", "nri-config"], rc=1)
    assert "no CXL memory node online" in err and "Traceback" not in err
    root = fixture_roots("linux-6.12/single-region")[0]
    assert "--ratio" in _run(["--root", root, "k8s", "nri-config", "--ratio", "3"], rc=2)
    assert "--prefix" in _run(["--root", root, "k8s", "nri-config", "--prefix", "Bad_"], rc=2)
    assert "--namespace" in _run(
        ["--root", root, "k8s", "nri-config", "--configmap", "--pool", "p", "--namespace", "NS"], rc=2
    )
    assert "--pool" in _run(["--root", root, "k8s", "nri-config", "--configmap", "--pool", "Bad_"], rc=2)
    assert "add --configmap" in _run(["--root", root, "k8s", "nri-config", "--pool", "p"], rc=2)
    assert "--output" in _run(["--root", root, "k8s", "nri-config", "--output", "rel/file"], rc=2)


# --------------------------------------------------------------------------- the checker itself


def test_checker_accepts_the_plugins_own_forms() -> None:
    """The node forms and flags of the plugin's sample and e2e configurations pass."""
    check_config(
        {
            "injectMpolset": True,
            "classes": [
                {"name": "interleave-all", "policy": {"mode": "MPOL_INTERLEAVE", "nodes": "allowed-mems"}},
                {"name": "pkg", "policy": {"mode": "MPOL_INTERLEAVE", "nodes": "cpu-packages"}},
                {
                    "name": "near",
                    "policy": {"mode": "MPOL_INTERLEAVE", "nodes": "max-dist:19", "flags": ["MPOL_F_STATIC_NODES"]},
                },
                {"name": "prefer-all-cxls", "policy": {"mode": "MPOL_PREFERRED_MANY", "nodes": "4,5"}},
                {"name": "bind-hbm", "policy": {"mode": "MPOL_BIND", "nodes": "2-3"}},
            ],
        }
    )
    assert parse_node_mask("0-2,5") == {0, 1, 2, 5}


@pytest.mark.parametrize(
    "policy,why",
    [
        ({"mode": "MPOL_WEIGHTED", "nodes": "0"}, "invalid memory policy mode"),
        ({"mode": "", "nodes": "0"}, "has no mode"),
        ({"mode": "MPOL_BIND", "nodes": "node0"}, "invalid nodes"),
        ({"mode": "MPOL_BIND", "nodes": "64"}, "invalid node ID"),
        ({"mode": "MPOL_BIND", "nodes": "3-1"}, "invalid range"),
        ({"mode": "MPOL_BIND", "nodes": "max-dist:x"}, "not an integer"),
        ({"mode": "MPOL_BIND", "nodes": 1}, "must be a string"),
        ({"mode": "MPOL_BIND", "nodes": "0", "flags": ["MPOL_F_NOPE"]}, "invalid memory policy flag"),
        ({"mode": "MPOL_BIND", "nodes": "0", "weights": "3:1"}, "unknown policy field"),
    ],
)
def test_checker_rejects_what_the_plugin_would(policy: Dict[str, Any], why: str) -> None:
    with pytest.raises(SchemaError, match=why):
        check_config({"injectMpolset": True, "classes": [{"name": "c", "policy": policy}]})


def test_checker_rejects_config_level_mistakes() -> None:
    with pytest.raises(SchemaError, match="injectMpolset must be true"):
        check_config({"classes": []})
    with pytest.raises(SchemaError, match="name missing"):
        check_config({"injectMpolset": True, "classes": [{"policy": {"mode": "MPOL_BIND", "nodes": "0"}}]})
    with pytest.raises(SchemaError, match="defined twice"):
        c = {"name": "a", "policy": {"mode": "MPOL_BIND", "nodes": "0"}}
        check_config({"injectMpolset": True, "classes": [c, c]})
