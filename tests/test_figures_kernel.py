"""The figures cxlctl shows and acts on are the ones the kernel uses (issue 34, rows 3 and 4).

Row 3: the kernel weights and tiers by the CPU access class only — ``node_set_perf_attrs`` and
``node_update_perf_attrs`` hand ``ACCESS_COORDINATE_CPU`` (``access1``) to
``mempolicy_set_node_perf``; ``hmat_calculate_adistance`` and ``cxl_region_calculate_adistance``
read ``coord[ACCESS_COORDINATE_CPU]``.  ``access0`` is the nearest initiator's (a GPU or
accelerator in SRAT can be nearer than any CPU), so the recorded trees get an ``access0`` that
differs from ``access1``, as on such a host: the status columns, the weights, the rate limit
and the DAMON destinations must keep the ``access1`` figure.

Row 4: ``cxl_region_perf_attrs_callback`` takes *one* region's figures when the node gets its
first memory (7.x: ``NODE_ADDED_FIRST_MEMORY`` and ``nodemask_region_seen``); a second region in
the node changes nothing, so a node's figures are never the sum of its regions'.  The recorded
7.3 HMAT tree has one region per node; the edit moves region1's DAX device and memory blocks
into node 2, as two regions carved from one window are.  With equal figures cxlctl shows one
region's; with differing figures it says the kernel's choice is undetermined.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any, Dict, List, Tuple

from tests.kit import FIXTURES, cli, copy_fixture

HMAT7 = os.path.join(FIXTURES, "linux-7.x", "hmat2-region")
HMAT612 = os.path.join(FIXTURES, "linux-6.12", "hmat2-region")
ROOT0 = "sys/devices/platform/ACPI0017:00/root0"
REGION0 = f"{ROOT0}/decoder0.0/region0"
REGION1 = f"{ROOT0}/decoder0.1/region1"
NODES = "sys/devices/system/node"

Coords = Tuple[int, int, int, int]  # read/write bandwidth MB/s, read/write latency ns


def _write_coords(d: str, c: Coords) -> None:
    os.makedirs(d, exist_ok=True)
    for name, v in zip(("read_bandwidth", "write_bandwidth", "read_latency", "write_latency"), c):
        with open(os.path.join(d, name), "w") as f:
            f.write(f"{v}\n")


def _write(root: str, rel: str, text: str) -> None:
    with open(os.path.join(root, rel), "w") as f:
        f.write(text)


def _one_node(root: str) -> None:
    """Region1's DAX device and memory blocks in node 2 beside region0's: node 3 is gone."""
    dax = f"{REGION1}/dax_region1/dax1.0"
    _write(root, f"{dax}/target_node", "2\n")
    _write(root, f"{dax}/numa_node", "2\n")
    for blk in os.listdir(os.path.join(root, NODES, "node3")):
        if blk.startswith("memory") and blk[6:].isdigit():
            os.rename(os.path.join(root, NODES, "node3", blk), os.path.join(root, NODES, "node2", blk))
    shutil.rmtree(os.path.join(root, NODES, "node3"))
    _write(root, f"{NODES}/has_memory", "0,2\n")
    tiers = os.path.join(root, "sys/devices/virtual/memory_tiering")
    for t in os.listdir(tiers):
        nl = os.path.join(tiers, t, "nodelist")
        if os.path.isfile(nl) and open(nl).read().strip() == "3":
            shutil.rmtree(os.path.join(tiers, t))


def _status(root: str) -> Tuple[str, Dict[int, Any]]:
    text = cli("--root", root, "status", env={"COLUMNS": "80"}, check=True).stdout
    d = json.loads(cli("--root", root, "status", "--json", check=True).stdout)
    return text, {n["id"]: n for n in d["nodes"]}


def _row(text: str, nid: int) -> List[str]:
    rows = [ln.split() for ln in text.splitlines() if ln.split()[:1] == [str(nid)]]
    assert rows, text
    return rows[-1]


def _plan(root: str, profile: str) -> Dict[str, Any]:
    plan = json.loads(cli("--root", root, "tune", "plan", profile, "--json", check=True).stdout)
    return {s["setting"]: s for s in plan["plan"]["steps"]}


# -- row 3: access1, not access0 -----------------------------------------------------------------


def _nearer_initiator_7x(tmp_path: Any) -> str:
    """The 7.3 tree with a generic initiator nearer than the CPUs to each CXL region: its
    ``access0`` is faster than ``access1`` (which stays as the kernel recorded it)."""
    root = copy_fixture(HMAT7, tmp_path / "t7")
    _write_coords(os.path.join(root, REGION0, "access0"), (32000, 30000, 100, 120))
    _write_coords(os.path.join(root, REGION1, "access0"), (12288, 12000, 200, 220))
    return root


def test_status_columns_are_access1_and_access0_is_named_where_it_differs(tmp_path: Any) -> None:
    text, nodes = _status(_nearer_initiator_7x(tmp_path))
    assert "16000/16000*" in _row(text, 2) and "192/292*" in _row(text, 2), text
    assert "6144/6144*" in _row(text, 3) and "362/462*" in _row(text, 3), text
    flat = " ".join(text.split())
    assert "node 2's nearest initiator (access0): BW 32000/30000 MB/s, LAT 100/120 ns" in flat, text
    assert "BW, LAT: HMAT/CDAT access1 (CPU initiators" in flat
    assert all(len(ln) <= 80 for ln in text.splitlines())
    f2 = nodes[2]["figures"]
    assert f2["access1"]["read_bandwidth"] == 16000 and f2["access0"]["read_bandwidth"] == 32000
    assert f2["from"] == "regions" and f2["regions"] == ["region0"] and f2["undetermined"] is None
    assert nodes[2]["access1"] is None  # the raw node files stay as sysfs has them: none on 7.x


def test_weights_rate_limit_and_damon_destinations_use_access1(tmp_path: Any) -> None:
    root = _nearer_initiator_7x(tmp_path)
    wi = _plan(root, "inference-bandwidth")["weighted_interleave.auto"]
    assert "node0 38912 MB/s, node2 16000 MB/s, node3 6144 MB/s" in wi["note"], wi
    rate = _plan(root, "inference-capacity")["kernel.numa_balancing_promote_rate_limit_MBps"]
    assert rate["desired"] == "614" and "6144 MB/s" in rate["note"], rate  # 0.1 x access1 write, not 12000

    from cxlctl.hostio.host import Host
    from cxlctl.inventory import scan
    from cxlctl.tuning.damon_tiering import dest_weights

    inv = scan(Host(root))
    cxl = [n for n in inv.nodes if n.id in (2, 3)]
    assert dest_weights(inv, cxl) == ((125, 48), "write bandwidth (access1, HMAT/CDAT)")


def test_612_node_files_access1_not_access0(tmp_path: Any) -> None:
    """6.12 gives every node files of its own; a DRAM node whose nearest initiator is not a CPU
    has a different ``access0`` (60000 here): the weights stay 19:8:3 from ``access1``."""
    root = copy_fixture(HMAT612, tmp_path / "t612")
    _write_coords(os.path.join(root, NODES, "node0", "access0", "initiators"), (60000, 60000, 40, 40))
    steps = _plan(root, "inference-bandwidth")
    got = {k: v["desired"] for k, v in steps.items() if k.startswith("weighted_interleave.node")}
    assert got == {
        "weighted_interleave.node0": "19",
        "weighted_interleave.node2": "8",
        "weighted_interleave.node3": "3",
    }
    text, nodes = _status(root)
    assert "38912/38912" in _row(text, 0) and "80/80" in _row(text, 0), text
    assert "node 0's nearest initiator (access0): BW 60000/60000 MB/s" in " ".join(text.split())
    assert nodes[0]["figures"]["from"] == "node" and nodes[0]["figures"]["access1"]["read_bandwidth"] == 38912


def test_only_a_nearest_initiator_figure_is_no_figure_for_the_weights(tmp_path: Any) -> None:
    """A region with ``access0`` and no ``access1`` (no CPU-class figure): the kernel's auto mode
    has nothing for it (``mempolicy_set_node_perf`` is never called), so cxlctl has no bandwidth."""
    root = copy_fixture(HMAT7, tmp_path / "t")
    shutil.rmtree(os.path.join(root, REGION1, "access1"))
    from cxlctl.hostio.host import Host
    from cxlctl.inventory import scan
    from cxlctl.tuning.weights import bandwidth_gaps, node_bandwidth

    inv = scan(Host(root))
    n3 = [n for n in inv.nodes if n.id == 3][0]
    assert node_bandwidth(inv, n3) is None
    assert "nearest initiator only (access0)" in bandwidth_gaps(inv, [n3])
    text, _ = _status(root)
    assert _row(text, 3)[-2:] == ["-", "-"], text


# -- row 4: one region's figures, never a sum ----------------------------------------------------


def test_two_equal_regions_in_one_node_give_one_regions_figures_not_their_sum(tmp_path: Any) -> None:
    root = copy_fixture(HMAT7, tmp_path / "t")
    _one_node(root)
    for cls in ("access0", "access1"):  # region1 as fast as region0: the same device type twice
        _write_coords(os.path.join(root, REGION1, cls), (16000, 16000, 192, 292))
    text, nodes = _status(root)
    assert "16000/16000*" in _row(text, 2) and "192/292*" in _row(text, 2), text
    assert "32000" not in text
    f2 = nodes[2]["figures"]
    assert f2["access1"]["read_bandwidth"] == 16000 and f2["regions"] == ["region0", "region1"]
    wi = _plan(root, "inference-bandwidth")["weighted_interleave.auto"]
    assert "node0 38912 MB/s, node2 16000 MB/s" in wi["note"], wi


def _move_tier(root: str, nid: int, to: str) -> None:
    """Node ``nid`` in ``memory_tier<to>`` (made if missing) and in no other tier."""
    tiers = os.path.join(root, "sys/devices/virtual/memory_tiering")
    for t in os.listdir(tiers):
        nl = os.path.join(tiers, t, "nodelist")
        if os.path.isfile(nl) and open(nl).read().strip() == str(nid):
            shutil.rmtree(os.path.join(tiers, t))
    os.makedirs(os.path.join(tiers, f"memory_tier{to}"), exist_ok=True)
    _write(root, f"sys/devices/virtual/memory_tiering/memory_tier{to}/nodelist", f"{nid}\n")


def test_two_differing_regions_in_one_node_the_tier_tells_which_the_kernel_took(tmp_path: Any) -> None:
    """region0 (16000 MB/s) and region1 (6144 MB/s) in node 2: its recorded memory_tier33 is the one
    region0's figures give (576 x 484 // 160 x 77824 // 32000 = 4236, >> 7 = 33), region1's give 146.
    The kernel's tier and weights come from the same region (the first probed), so node 2's figures
    are region0's, never 22144 (the sum).  Moved to memory_tier146, they are region1's."""
    root = copy_fixture(HMAT7, tmp_path / "t")
    _one_node(root)
    text, nodes = _status(root)
    flat = " ".join(text.split())
    assert "16000/16000*" in _row(text, 2) and "192/292*" in _row(text, 2), text
    assert "22144" not in flat
    assert "its memory_tier33 is the one region0's figures give (mt_perf_to_adistance)" in flat, text
    f2 = nodes[2]["figures"]
    assert f2["access1"]["read_bandwidth"] == 16000 and f2["regions"] == ["region0"] and f2["undetermined"] is None
    wi = _plan(root, "inference-bandwidth")["weighted_interleave.auto"]
    assert "node0 38912 MB/s, node2 16000 MB/s" in wi["note"], wi

    _move_tier(root, 2, "146")
    text, nodes = _status(root)
    assert "6144/6144*" in _row(text, 2) and "362/462*" in _row(text, 2), text
    assert nodes[2]["figures"]["regions"] == ["region1"]


def test_two_differing_regions_in_one_tier_are_undetermined_not_summed(tmp_path: Any) -> None:
    """region1 a little slower than region0 (15000 MB/s, 180/280 ns): both give memory_tier33
    (4236 and 4295 >> 7), so neither the files nor the tier show which one the kernel took."""
    root = copy_fixture(HMAT7, tmp_path / "t")
    _one_node(root)
    for cls in ("access0", "access1"):
        _write_coords(os.path.join(root, REGION1, cls), (15000, 15000, 180, 280))
    text, nodes = _status(root)
    assert _row(text, 2)[-2:] == ["?", "?"], text
    flat = " ".join(text.split())
    assert "31000" not in flat
    assert "?: node 2's regions differ (region0 16000/16000 MB/s, region1 15000/15000 MB/s)" in flat, text
    assert "cxl_region_perf_attrs_callback" in flat
    f2 = nodes[2]["figures"]
    assert f2["access1"] is None and f2["from"] == "regions" and "differ" in f2["undetermined"]
    # the kernel has one figure for the node (the region it took): its auto mode still weights it
    wi = _plan(root, "inference-bandwidth")["weighted_interleave.auto"]
    assert wi["desired"] == "true" and "node 2's regions differ" in wi["note"], wi
    # cxlctl's own rate limit has no CXL write bandwidth to start from, and says why
    rate = _plan(root, "inference-capacity")["kernel.numa_balancing_promote_rate_limit_MBps"]
    assert "node 2's regions differ" in rate["note"] and "fallback" in rate["note"], rate
    d = json.loads(cli("--root", root, "stat", "--json", check=True).stdout)
    hm = {n["id"]: n["hmat"] for n in d["nodes"]}
    assert hm[2] is None and hm[0]["read_bandwidth_mbps"] == 38912


def test_recorded_tiers_are_what_the_figures_give() -> None:
    """On both recorded HMAT guests each CXL node's memory tier is what ``mt_perf_to_adistance``
    makes of the figures cxlctl reports for it (6.12: the node's files; 7.3: its region's): the
    figures are the ones the kernel used."""
    from cxlctl.figures import dram_reference, memory_tier, node_figures
    from cxlctl.hostio.host import Host
    from cxlctl.inventory import scan

    for tree, want in ((HMAT612, "node"), (HMAT7, "regions")):
        inv = scan(Host(tree))
        ref = dram_reference(inv.nodes)
        assert ref is not None and ref.read_bandwidth == 38912
        got = {}
        for n in inv.nodes:
            if n.kind == "cxl":
                f = node_figures(n, inv.regions, inv.nodes)
                assert f.source == want and f.cpu is not None
                got[n.id] = (memory_tier(f.cpu, ref), n.tier)
        assert got == {2: (33, 33), 3: (146, 146)}, (tree, got)


def test_612_two_regions_keep_the_nodes_own_files(tmp_path: Any) -> None:
    """6.12 writes the node's files (``node_set_perf_attrs`` from the callback): they are what the
    kernel holds, so two differing regions leave the node's figure known, with no mark."""
    root = copy_fixture(HMAT612, tmp_path / "t")
    _one_node(root)
    text, nodes = _status(root)
    assert "16000/16000" in _row(text, 2) and "*" not in "".join(_row(text, 2)), text
    assert nodes[2]["figures"]["from"] == "node" and nodes[2]["figures"]["undetermined"] is None


def test_dram_reference_is_the_kernels_and_refuses_a_mismatch() -> None:
    """``mt_set_default_dram_perf``: the lowest CPU node is the reference; another DRAM node more than 10 %
    off makes the kernel rank nothing by figures, so the tier tells cxlctl nothing either."""
    from cxlctl.figures import dram_reference, memory_tier
    from cxlctl.hostio.host import Host
    from cxlctl.inventory import scan
    from cxlctl.model import Coordinates

    inv = scan(Host(HMAT7))
    (n0,) = [n for n in inv.nodes if n.id == 0]
    ref = Coordinates(38912, 38912, 80, 80)
    near = n0._replace(id=1, access1=Coordinates(38000, 38912, 84, 80))  # within 10 %
    far = n0._replace(id=1, access1=Coordinates(30000, 38912, 80, 80))  # 23 % less read bandwidth
    assert dram_reference([n0]) == ref and dram_reference([near, n0]) == ref
    assert dram_reference([n0, far]) is None
    assert dram_reference([n0._replace(access1=None)]) is None
    assert memory_tier(Coordinates(16000, 16000, 192, 292), ref) == 33
    assert memory_tier(Coordinates(16000, 16000, None, None), ref) is None  # mt_perf_to_adistance: -EINVAL
