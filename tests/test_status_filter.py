"""``status --memdev/-m, --region/-r, --decoder/-d, --node`` (issue 35 row 16), as ``cxl list`` filters.

On the recorded 6.12 ``hb2x2-region`` tree: root0 has windows decoder0.0 (both host bridges),
decoder0.1 (bridge port2 only) and decoder0.2 (bridge port1 only); mem0 and mem1 sit below port2,
mem2 and mem3 below port1; region0 (under decoder0.0) interleaves all four and is online as node 1.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest

from tests.kit import cli, fixture_roots

TREE = fixture_roots("linux-6.12/hb2x2-region")[0]


def _json(*args: str) -> Dict[str, Any]:
    p = cli("--root", TREE, "status", "--json", *args)
    assert p.returncode == 0, p.stderr
    doc: Dict[str, Any] = json.loads(p.stdout)
    return doc


def _names(doc: Dict[str, Any], key: str, field: str = "name") -> List[Any]:
    return [x[field] for x in doc[key]]


def _kept(doc: Dict[str, Any]) -> Dict[str, List[Any]]:
    return {
        "memdevs": _names(doc, "memdevs", "memdev"),
        "regions": _names(doc, "regions", "region"),
        "decoders": _names(doc, "decoders", "decoder"),
        "nodes": _names(doc, "nodes", "id"),
        "dax": _names(doc, "dax_devices", "chardev"),
    }


def test_the_unfiltered_document_is_unchanged() -> None:
    with open(TREE + "/cxlctl-status.json") as f:
        assert _json() == json.load(f)


def test_memdev_keeps_what_routes_to_it() -> None:
    k = _kept(_json("-m", "mem0"))
    assert k["memdevs"] == ["mem0"]
    assert k["regions"] == ["region0"] and k["nodes"] == [1] and k["dax"] == ["dax0.0"]
    # decoder0.2 routes only to bridge port1 (mem2, mem3); port1's decoders and the other endpoints' go
    assert "decoder0.2" not in k["decoders"]
    assert {"decoder0.0", "decoder0.1", "decoder2.0", "decoder3.0"} <= set(k["decoders"])
    assert not [d for d in k["decoders"] if d.startswith(("decoder1.", "decoder4.", "decoder5.", "decoder6."))]


def test_region_keeps_its_memdevs_decoders_node() -> None:
    doc = _json("--region", "region0")
    k = _kept(doc)
    assert k["memdevs"] == ["mem0", "mem1", "mem2", "mem3"]
    assert k["regions"] == ["region0"] and k["nodes"] == [1]
    assert set(k["decoders"]) == {
        "decoder0.0",
        "decoder1.0",
        "decoder2.0",
        "decoder3.0",
        "decoder4.0",
        "decoder5.0",
        "decoder6.0",
    }
    assert [t["tier"] for t in doc["tiers"]] == [22]


def test_decoder_window_keeps_the_memdevs_behind_it() -> None:
    k = _kept(_json("-d", "decoder0.2"))
    assert k["memdevs"] == ["mem2", "mem3"] and k["decoders"] == ["decoder0.2"]
    assert k["regions"] == [] and k["nodes"] == []  # region0 lives in decoder0.0, not here


def test_node_and_combined_filters() -> None:
    assert _kept(_json("--node", "1"))["memdevs"] == ["mem0", "mem1", "mem2", "mem3"]
    dram = _kept(_json("--node", "0"))
    assert dram["nodes"] == [0] and dram["memdevs"] == [] and dram["regions"] == []
    both = _kept(_json("-m", "mem0,mem3", "-r", "region0"))
    assert both["memdevs"] == ["mem0", "mem3"] and both["regions"] == ["region0"]
    assert _kept(_json("-m", "mem0", "-m", "mem1"))["memdevs"] == ["mem0", "mem1"]
    assert _kept(_json("-m", "mem0", "-d", "decoder0.2"))["memdevs"] == []  # mem0 is not behind it
    doc = _json("-m", "mem0")
    assert doc["totals"]["cxl_capacity"] == 256 << 20  # the totals are the kept memdev's


def test_human_view_says_what_it_shows_and_keeps_relations() -> None:
    p = cli("--root", TREE, "status", "-m", "mem0", env={"COLUMNS": "80"})
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[1] == "only memdev mem0 and what relates to it"
    assert "mem0 ram 256 MiB" in p.stdout and "mem1 " not in p.stdout and "mem2 " not in p.stdout
    assert "decoder0.2" not in p.stdout
    assert "CXL 256 MiB:" in p.stdout
    p = cli("--root", TREE, "status", "-d", "decoder0.1", env={"COLUMNS": "80"})
    assert "mem0 ram 256 MiB  serial 0x4001  pci 0000:0d:00.0  (region0)" in p.stdout  # its own region
    p = cli("--root", TREE, "status", "--node", "0", env={"COLUMNS": "80"})
    assert "No CXL device relates to it." in p.stdout and "No CXL devices on this host" not in p.stdout


@pytest.mark.parametrize(
    "args,message",
    [
        (["-m", "mem9"], "--memdev: no memdev mem9 on this host (memdevs: mem0, mem1, mem2, mem3)"),
        (["-r", "region7"], "--region: no region region7 on this host (regions: region0)"),
        (["-d", "decoder9.9"], "--decoder: no decoder decoder9.9 on this host (decoders: decoder0.0, "),
        (["--node", "7"], "--node: no node 7 on this host (nodes: 0, 1)"),
        (["--node", "x"], "--node 'x' is not a node number"),
        (["-m", "mem0,,mem1"], "--memdev: empty name in 'mem0,,mem1'"),
    ],
)
def test_a_name_that_is_not_there_is_exit_2_naming_what_is(args: List[str], message: str) -> None:
    p = cli("--root", TREE, "status", *args)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith("cxlctl: error: " + message), p.stderr
    p = cli("--root", TREE, "status", "--json", *args)
    assert p.returncode == 2
    assert json.loads(p.stdout)["error"]["message"].startswith(message)
