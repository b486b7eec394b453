"""The inventory on trees recorded from real kernels (6.12 and 6.1, QEMU CXL topologies).

The expected values are not typed by hand: each fixture carries what the real
`cxl list -vvv`, `daxctl list` and `numactl -H` printed in the same guest at the
same moment (peers/), and the scan must agree with them on every shared fact.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Tuple

import pytest

from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from tests.kit import fixture_id, fixture_roots, status_json
from tests.vm.compare import compare_cxl_list, compare_daxctl, compare_numactl

ROOTS = fixture_roots()
#: trees recorded with the peer tools' output beside them: every recorder writes it (guest-lib.sh's
#: cxlvm_peers), so this is every tree
PEERED = [r for r in ROOTS if os.path.isfile(os.path.join(r, "peers", "cxl-list.json"))]


def test_every_tree_carries_peers() -> None:
    assert sorted(fixture_id(r) for r in ROOTS if r not in PEERED) == []


def _peer(root: str, name: str) -> Any:
    p = os.path.join(root, "peers", name)
    with open(p) as f:
        text = f.read()
    if name.endswith(".json"):
        return json.loads(text) if text.strip() else []
    return text


def test_fixtures_exist_for_both_kernels() -> None:
    kernels = {fixture_id(r).split("/")[0] for r in ROOTS}
    assert {"linux-6.12", "linux-6.1"} <= kernels, kernels


@pytest.mark.parametrize("root", PEERED, ids=[fixture_id(r) for r in PEERED])
def test_agrees_with_real_tools(root: str) -> None:
    st = status_json(root)
    c = compare_cxl_list(st, _peer(root, "cxl-list.json"))
    compare_daxctl(st, _peer(root, "daxctl-list.json"), c)
    compare_numactl(st, _peer(root, "numactl-H.txt"), c)
    assert not c.mismatches, "\n".join(c.mismatches)
    for cat in ("memdev", "decoder", "endpoint", "bus", "node"):
        assert c.facts.get(cat, 0) > 0, f"nothing compared for {cat}"
    if st["regions"]:
        assert c.facts.get("region", 0) > 1 and c.facts.get("dax", 0) > 1


@pytest.mark.parametrize("root", ROOTS, ids=[fixture_id(r) for r in ROOTS])
def test_replay_is_stable(root: str) -> None:
    """Two scans of a recorded tree give the same model (no hidden state, no clocks)."""
    assert scan(Host(root)) == scan(Host(root))


def _all(kind: str) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    for r in ROOTS:
        out.extend(status_json(r)[kind])
    return out


def test_every_object_kind_is_covered() -> None:
    """Across the fixtures the scan meets every object kind it models."""
    decoders = _all("decoders")
    assert {d["kind"] for d in decoders} == {"root", "switch", "endpoint"}
    assert any(p["depth"] >= 2 for p in _all("ports")), "a switch port"
    assert _all("buses") and _all("endpoints") and _all("memdevs")
    assert any(r["interleave_ways"] >= 2 for r in _all("regions"))
    assert any(d["mode"] == "system-ram" for d in _all("dax_devices"))
    assert {"dram", "cxl"} <= {n["kind"] for n in _all("nodes")}


@pytest.mark.parametrize("root", [r for r in ROOTS if fixture_id(r).endswith("-region")] or [None])
def test_region_chain(root: str) -> None:
    """memdev → region → dax → node → tier are linked consistently."""
    if root is None:
        pytest.fail("no region fixtures")
    st = status_json(root)
    for reg in st["regions"]:
        assert reg["decode_state"] == "commit"
        assert len(reg["targets"]) == reg["interleave_ways"]
        for m in reg["targets"]:
            md = next(x for x in st["memdevs"] if x["memdev"] == m)
            assert reg["region"] in md["regions"]
        for dx in reg["dax_devices"]:
            d = next(x for x in st["dax_devices"] if x["chardev"] == dx)
            assert d["region"] == reg["region"] and d["provider"] == "cxl"
            node = next(n for n in st["nodes"] if n["id"] == d["target_node"])
            assert node["kind"] == "cxl" and reg["region"] in node["regions"]
            assert node["tier"] is not None
        # endpoint decoders carry the region and split its size evenly
        eds = [d for d in st["decoders"] if d["kind"] == "endpoint" and d["region"] == reg["region"]]
        assert len(eds) == reg["interleave_ways"]
        assert all(d["dpa_size"] * reg["interleave_ways"] == reg["size"] for d in eds)


def test_kernel_generations_differ_where_the_abi_does() -> None:
    for r in ROOTS:
        st = status_json(r)
        if fixture_id(r).startswith("linux-6.1/"):
            assert st["kernel"].startswith("6.1.")
            assert st["weighted_interleave"]["supported"] is False  # 6.9+
        elif fixture_id(r).startswith("linux-6.12/"):
            assert st["weighted_interleave"]["supported"] is True
            assert st["weighted_interleave"]["auto"] is None  # auto arrived in 6.16


@pytest.mark.parametrize("root", fixture_roots(), ids=[fixture_id(r) for r in fixture_roots()])
def test_port_decoders_are_only_decoder_objects(root: str) -> None:
    """`decoders_committed` is an attribute of the port, not one of its decoders."""
    import re

    data = status_json(root)
    names = {d["decoder"] for d in data["decoders"]}
    for p in data["buses"] + data["ports"] + data["endpoints"]:
        assert p["decoders"], p
        for d in p["decoders"]:
            assert re.fullmatch(r"decoder[0-9]+\.[0-9]+", d), (p, d)
            assert d in names


def _host_bridges_in_cxl_list(o: Any, path: Tuple[str, ...] = ()) -> Dict[str, str]:
    """Port/endpoint name → the depth-1 port above it, read off ``cxl list``'s nesting (bus → port → …)."""
    out: Dict[str, str] = {}
    if isinstance(o, list):
        for v in o:
            out.update(_host_bridges_in_cxl_list(v, path))
    elif isinstance(o, dict):
        name = o.get("port") or o.get("endpoint") or o.get("bus")
        if isinstance(name, str) and name.startswith(("root", "port", "endpoint")):
            path = path + (name,)
            if len(path) >= 2 and not name.startswith("root"):
                out[name] = path[1]
        for v in o.values():
            if isinstance(v, (list, dict)):
                out.update(_host_bridges_in_cxl_list(v, path))
    return out


@pytest.mark.parametrize("root", PEERED, ids=[fixture_id(r) for r in PEERED])
def test_host_bridge_is_the_depth_one_port_above(root: str) -> None:
    """``host_bridge`` names the port under the root that a port or endpoint hangs from, as
    ``cxl list``'s nesting shows it (it was null everywhere while it was computed before the depths)."""
    st = status_json(root)
    want = _host_bridges_in_cxl_list(_peer(root, "cxl-list.json"))
    got = {p["port"]: p["host_bridge"] for p in st["ports"]}
    got.update({e["endpoint"]: e["host_bridge"] for e in st["endpoints"]})
    assert want, "cxl list nests no port"
    assert {n: got.get(n) for n in want} == want
