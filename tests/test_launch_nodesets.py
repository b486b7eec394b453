"""Node-set resolution on recorded trees: defaults (GPU socket, DRAM + nearest CXL), explicit lists, bad input."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List

import pytest

from cxlctl.errors import UsageError
from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from cxlctl.launch.nodesets import find_gpus, nearest_cxl, parse_node_spec, resolve, socket_of
from tests.kit import cli, copy_fixture, fixture_id, fixture_roots
from tests.launch_support import add_gpu, add_socket

REGION = fixture_roots("*/*-region")
NOREGION = fixture_roots("*/*-noregion")
ALL = fixture_roots()


def _status(root: str) -> Dict[str, Any]:
    with open(os.path.join(root, "cxlctl-status.json")) as f:
        data: Dict[str, Any] = json.load(f)
    return data


def _dry(root: str, *opts: str, rc: int = 0) -> Dict[str, Any]:
    p = cli("--root", root, "launch", "exec", "--dry-run", "--json", *opts, "--", "true", rc=rc, inprocess=True)
    data: Dict[str, Any] = json.loads(p.stdout)
    return data


def _usage(argv: List[str], *needles: str) -> str:
    """The command fails with exit 2 and one clear line (plus a hint), no traceback."""
    err = cli(*argv, rc=2, inprocess=True).stderr
    assert err.startswith("cxlctl: error: ") and "Traceback" not in err, err
    for n in needles:
        assert n in err, (n, err)
    return err


def test_fixtures_present() -> None:
    assert REGION and NOREGION, "the launcher tests need recorded fixtures with and without a CXL region"


@pytest.mark.parametrize("root", REGION, ids=[fixture_id(r) for r in REGION])
def test_defaults_dram_plus_nearest_cxl(root: str) -> None:
    st = _status(root)
    inv = scan(Host(root))
    ns = resolve(inv, Host(root), cpu_spec=None, mem_spec=None, gpu_spec=None)
    kinds = {n["id"]: n["kind"] for n in st["nodes"]}
    cpu = [n["id"] for n in st["nodes"] if n["cpus"]]
    cxl = [n["id"] for n in st["nodes"] if n["kind"] == "cxl" and n["mem_total"]]
    assert cxl, "a region fixture has a CXL node"
    assert list(ns.cpu_nodes) == cpu
    assert set(ns.cxl) == set(cxl) and all(kinds[n] == "dram" for n in ns.dram)
    assert set(ns.mem_nodes) == set(ns.dram) | set(ns.cxl)
    assert "no NVIDIA GPU" in ns.how[0] and "nearest CXL" in ns.how[1]


@pytest.mark.parametrize("root", NOREGION, ids=[fixture_id(r) for r in NOREGION])
def test_defaults_without_cxl_are_dram_only(root: str, capsys: Any) -> None:
    st = _status(root)
    doc = _dry(root, "--policy", "bind")
    assert doc["nodes"]["cxl"] == [] and doc["nodes"]["memory"] == [n["id"] for n in st["nodes"] if n["kind"] == "dram"]
    assert "no CXL memory node online" in doc["nodes"]["how"][1]
    _usage(["--root", root, "launch", "exec", "--kv-size", "auto", "--dry-run", "--", "true"], "no CXL node")


def _two_sockets(tmp: Any) -> str:
    """single-region plus a second CPU socket (node 2, CPUs 2-3) that is far from the CXL node."""
    root = copy_fixture(fixture_roots("linux-6.12/single-region")[0], str(tmp / "t"))
    add_socket(root, 2, "2-3", distances={0: 21, 1: 30})
    return root


def test_gpu_socket_picks_cpus_and_its_memory(tmp_path: Any, capsys: Any) -> None:
    root = _two_sockets(tmp_path)
    add_gpu(root, "0000:17:00.0", 0)
    add_gpu(root, "0000:b1:00.0", 2, klass="0x030000")
    add_gpu(root, "0000:b2:00.0", 2, vendor="0x1002")  # not NVIDIA: ignored
    gpus = find_gpus(Host(root))
    assert [(g.ordinal, g.bdf, g.numa_node) for g in gpus] == [(0, "0000:17:00.0", 0), (1, "0000:b1:00.0", 2)]
    # every GPU: both sockets
    doc = _dry(root, "--policy", "bind")
    assert doc["nodes"]["cpu"] == [0, 2] and doc["nodes"]["memory"] == [0, 1, 2]
    # GPU 0 → socket 0: its DRAM and the CXL node next to it
    doc = _dry(root, "--policy", "bind", "--gpus", "0")
    assert doc["nodes"]["cpu"] == [0] and doc["nodes"]["memory"] == [0, 1] and doc["nodes"]["cxl"] == [1]
    assert doc["env"]["CUDA_VISIBLE_DEVICES"] == "0" and doc["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert doc["policy"]["cpus"] == [0, 1]
    # GPU 1 by PCI address → socket 2; the only CXL node is the nearest one even at distance 30
    doc = _dry(root, "--policy", "bind", "--gpus", "0000:b1:00.0")
    assert doc["nodes"]["cpu"] == [2] and doc["nodes"]["memory"] == [1, 2] and doc["policy"]["cpus"] == [2, 3]
    assert "socket of GPU 1 (0000:b1:00.0, node 2)" in doc["nodes"]["how"][0]
    # explicit lists win over the GPU default
    doc = _dry(root, "--policy", "bind", "--gpus", "1", "--cpu-nodes", "0", "--mem-nodes", "0-1")
    assert doc["nodes"]["cpu"] == [0] and doc["nodes"]["memory"] == [0, 1]
    # bad GPU selections
    for spec, needle in (
        ("5", "no GPU with index 5"),
        ("0000:99:00.0", "no NVIDIA GPU at"),
        ("x", "--gpus"),
        ("", "--gpus is empty"),
    ):
        _usage(["--root", root, "launch", "exec", "--gpus", spec, "--dry-run", "--", "true"], needle)


def test_gpu_without_numa_node_falls_back_to_every_cpu_node(tmp_path: Any, capsys: Any) -> None:
    root = _two_sockets(tmp_path)
    add_gpu(root, "0000:17:00.0", -1)
    doc = _dry(root, "--policy", "bind")
    assert doc["nodes"]["cpu"] == [0, 2] and "report no NUMA node" in doc["nodes"]["how"][0]


def test_gpus_on_a_host_without_gpus(capsys: Any) -> None:
    root = REGION[0]
    _usage(["--root", root, "launch", "exec", "--gpus", "0", "--dry-run", "--", "true"], "no NVIDIA GPU in sysfs")


def test_socket_and_nearest_cxl_on_a_model_with_two_cxl_nodes() -> None:
    """Pure functions on the model: two sockets, each with its own CXL node."""
    inv = scan(Host(fixture_roots("linux-6.12/single-region")[0]))
    n0, n1 = inv.nodes
    nodes = (
        n0._replace(distance=(10, 20, 21, 30)),
        n1._replace(distance=(20, 10, 30, 40)),
        n0._replace(id=2, cpus=(2, 3), distance=(21, 30, 10, 20)),
        n1._replace(id=3, distance=(30, 40, 20, 10)),
    )
    inv = inv._replace(nodes=nodes)
    assert socket_of(inv, 0) == (0,) and socket_of(inv, 2) == (2,)
    assert nearest_cxl(inv, [0]) == (1,) and nearest_cxl(inv, [2]) == (3,) and nearest_cxl(inv, [0, 2]) == (1, 3)
    # sub-NUMA clusters (distance < 20) are one socket
    snc = inv._replace(
        nodes=(
            nodes[0]._replace(distance=(10, 20, 12, 30)),
            nodes[1],
            nodes[2]._replace(distance=(12, 30, 10, 20)),
            nodes[3],
        )
    )
    assert socket_of(snc, 0) == (0, 2)


@pytest.mark.parametrize(
    "spec,want,ids",
    [
        ("all", "memory", (0, 1)),
        ("0-1", "memory", (0, 1)),
        ("1,0", "memory", (0, 1)),
        ("!0", "memory", (1,)),
        ("+1", "memory", (1,)),
        ("all", "cpu", (0,)),
        ("0", "cpu", (0,)),
    ],
)
def test_node_spec_grammar(spec: str, want: str, ids: tuple) -> None:  # type: ignore[type-arg]
    inv = scan(Host(fixture_roots("linux-6.12/single-region")[0]))
    assert parse_node_spec(spec, "--x", inv, want=want, allowed=(0, 1)) == ids


@pytest.mark.parametrize(
    "opt,spec,needle",
    [
        ("--mem-nodes", "7", "unknown node 7"),
        ("--mem-nodes", "0,9-10", "unknown node 9-10"),
        ("--mem-nodes", "", "--mem-nodes is empty"),
        ("--mem-nodes", "  ", "--mem-nodes is empty"),
        ("--mem-nodes", "0-", "bad element"),
        ("--mem-nodes", "1,,0", "empty element"),
        ("--mem-nodes", "a", "bad element"),
        ("--mem-nodes", "2-1", "end before start"),
        ("--mem-nodes", "!", "empty node list"),
        ("--mem-nodes", "!0-1", "selects no node"),
        ("--mem-nodes", "+5", "relative node 5 is out of range"),
        ("--mem-nodes", "pci:0000:17:00.0", "not supported"),
        ("--mem-nodes", "99999", "out of range"),
        ("--cpu-nodes", "1", "node 1 has no CPUs"),
        ("--cpu-nodes", "", "--cpu-nodes is empty"),
    ],
)
def test_bad_node_lists_exit_2(opt: str, spec: str, needle: str, capsys: Any) -> None:
    root = fixture_roots("linux-6.12/single-region")[0]
    _usage(["--root", root, "launch", "exec", opt, spec, "--dry-run", "--", "true"], needle)


def test_memory_node_without_memory(tmp_path: Any, capsys: Any) -> None:
    root = copy_fixture(fixture_roots("linux-6.12/single-region")[0], str(tmp_path / "t"))
    add_socket(root, 2, "2-3", distances={0: 21, 1: 30}, memory=False)
    _usage(
        ["--root", root, "launch", "exec", "--mem-nodes", "0,2", "--dry-run", "--", "true"],
        "node 2 has no memory online",
    )
    # a memory-less CPU node is fine for CPUs; memory defaults to the DRAM nearest to it
    doc = _dry(root, "--policy", "bind", "--cpu-nodes", "2")
    assert doc["nodes"]["cpu"] == [2] and doc["nodes"]["dram"] == [0] and doc["nodes"]["memory"] == [0, 1]


def test_resolve_raises_usage_errors_directly() -> None:
    inv = scan(Host(fixture_roots("linux-6.12/single-region")[0]))
    with pytest.raises(UsageError):
        parse_node_spec("3", "--mem-nodes", inv, want="memory")


def test_gpu_attributes_take_ascii_digits_only(tmp_path: Any) -> None:
    """A non-ASCII digit in a GPU's numa_node is unknown, not node 1 (int() reads '١' as 1)."""
    root = _two_sockets(tmp_path)
    add_gpu(root, "0000:17:00.0", 0)
    with open(os.path.join(root, "sys/devices/pci0000:00/0000:17:00.0/numa_node"), "w") as f:
        f.write("\u0661\n")
    add_gpu(root, "0000:b1:00.0", 2, vendor="0x\u0661\u0660de")  # not a vendor id at all
    assert [(g.bdf, g.numa_node) for g in find_gpus(Host(root))] == [("0000:17:00.0", None)]
