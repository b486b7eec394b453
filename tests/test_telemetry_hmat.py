"""HMAT/CDAT context in ``stat`` and ``top``: a node's expected bandwidth, and migration as a share of it.

No recorded tree has access coordinates (QEMU's emulated firmware has no HMAT for
the nodes and the kernel computes no ``access0`` for the CXL regions: every
``cxlctl-status.json`` says null), so the trees with them are the recorded
``single-region-telemetry`` tree copied into ``tmp_path`` with the four
``nodeN/access{0,1}/initiators`` attributes written in (equal: the nearest initiator is a
CPU), and region coordinates are set on a scanned inventory's records.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Tuple

from cxlctl.figures import node_figures
from cxlctl.hostio.host import Host
from cxlctl.hostio.reader import Reader
from cxlctl.model import Coordinates, Figures
from cxlctl.parse import PAGE_SIZE
from cxlctl.telemetry.rates import rates
from cxlctl.telemetry.report import MB, render_text, to_dict
from cxlctl.telemetry.sample import (
    NodeInfo,
    cxl_bandwidth,
    node_kinds,
    read_sample,
)
from cxlctl.telemetry.top import History, plain, rich_view, view
from cxlctl.telemetry.verdicts import judge
from tests.kit import FIXTURES, cli, copy_fixture

TREE = os.path.join(FIXTURES, "linux-6.12", "single-region-telemetry")
NODE = "sys/devices/system/node"
#: node -> (read MB/s, write MB/s, read ns, write ns), as a firmware with HMAT would describe them
HMAT: Dict[int, Tuple[int, int, int, int]] = {0: (40960, 30720, 90, 100), 1: (20480, 10240, 250, 300)}


def _with_hmat(tmp_path: Any, nodes: Tuple[int, ...] = (0, 1)) -> str:
    root = copy_fixture(TREE, tmp_path / "tree")
    for nid in nodes:
        for cls in ("access0", "access1"):
            d = os.path.join(root, NODE, f"node{nid}", cls, "initiators")
            os.makedirs(d)
            for name, v in zip(("read_bandwidth", "write_bandwidth", "read_latency", "write_latency"), HMAT[nid]):
                with open(os.path.join(d, name), "w") as f:
                    f.write(f"{v}\n")
    return root


def _bump_vmstat(root: str, nid: int, counter: str, by: int) -> None:
    """Count ``by`` more of ``counter`` on node ``nid`` and in /proc/vmstat, as the kernel would."""
    for path in (os.path.join(root, NODE, f"node{nid}", "vmstat"), os.path.join(root, "proc", "vmstat")):
        _bump(path, counter, by)


def _bump(path: str, counter: str, by: int) -> None:
    with open(path) as f:
        lines = f.read().splitlines()
    out = [f"{counter} {int(line.split()[1]) + by}" if line.split()[0] == counter else line for line in lines]
    assert out != lines, f"{counter} not in {path}"
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def test_recorded_tree_without_hmat_says_null_never_zero() -> None:
    kinds = node_kinds(Host(TREE))
    assert kinds[1].kind == "cxl" and all(i.hmat is None and i.hmat_from is None for i in kinds.values())
    a = read_sample(Reader(TREE), kinds, now=(0.0, 0.0))
    b = read_sample(Reader(TREE), kinds, now=(2.0, 2.0))
    first, second = to_dict(a, None, [], 0), to_dict(b, rates(a, b), [], 1)
    assert [n["hmat"] for n in first["nodes"]] == [None, None]
    assert first["cxl_traffic"] is None  # totals since boot: no interval, no rate
    tr = second["cxl_traffic"]
    assert tr["promote_mbps"] == 0.0 and tr["demote_mbps"] == 0.0
    assert tr["cxl_read_bandwidth_mbps"] is None and tr["promote_share_of_read_bandwidth"] is None
    text = render_text(b, rates(a, b), [], 1, 80)
    assert "expected (HMAT/CDAT)" not in text and "to/from CXL: promoted 0.0 MB/s, demoted 0.0 MB/s" in text


def test_node_access1_is_shown_per_node_and_migration_as_share_of_cxl_bandwidth(tmp_path: Any) -> None:
    root = _with_hmat(tmp_path)
    kinds = node_kinds(Host(root))
    assert kinds[0].hmat_from == "node" and kinds[1].hmat == Coordinates(*HMAT[1])
    a = read_sample(Reader(root), kinds, now=(10.0, 0.0))
    # 2,560 pages demoted by kswapd from DRAM node 0 (to CXL), 512 promoted onto it, over 2 s
    _bump_vmstat(root, 0, "pgdemote_kswapd", 2560)
    _bump_vmstat(root, 0, "pgpromote_success", 512)
    b = read_sample(Reader(root), kinds, now=(12.0, 2.0))
    r = rates(a, b)
    doc = to_dict(b, r, judge(b, r), 1)
    for n in doc["nodes"]:
        rb, wb, rl, wl = HMAT[n["id"]]
        assert n["hmat"] == {
            "read_bandwidth_mbps": rb,
            "write_bandwidth_mbps": wb,
            "read_latency_ns": rl,
            "write_latency_ns": wl,
            "from": "node",
        }
    demote = 2560 * PAGE_SIZE / MB / 2
    promote = 512 * PAGE_SIZE / MB / 2
    tr = doc["cxl_traffic"]
    assert tr["demote_mbps"] == round(demote, 3) and tr["promote_mbps"] == round(promote, 3)
    # demotion writes to the CXL node, promotion reads from it: the CXL node's bandwidths, not DRAM's
    assert tr["cxl_write_bandwidth_mbps"] == 10240 and tr["cxl_read_bandwidth_mbps"] == 20480
    assert tr["demote_share_of_write_bandwidth"] == round(demote / 10240, 6)
    assert tr["promote_share_of_read_bandwidth"] == round(promote / 20480, 6)
    json.dumps(doc)
    text = render_text(b, r, judge(b, r), 1, 80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "expected (HMAT/CDAT): node 0 read 40960 MB/s write 30720 MB/s latency 90 ns" in text
    assert f"demoted {demote:.1f} MB/s ({demote / 10240 * 100:.1f}% of CXL write" in text.replace("\n  ", " ")

    v = view(b, r, judge(b, r), History())
    assert [(nid, bw) for nid, _, _, _, bw in v.nodes] == [(0, 40960), (1, 20480)]
    assert v.traffic is not None and f"demoted {demote:.1f} MB/s" in v.traffic and "% of CXL bw" in v.traffic
    p = plain(v, 80)
    assert "bw 20480 MB/s" in p and max(len(line) for line in p.splitlines()) <= 80
    from rich.console import Console

    for width in (80, 120, 50):
        c = Console(width=width, record=True, file=open(os.devnull, "w"))
        c.print(rich_view(v, width))
        screen = c.export_text()
        assert max(len(line) for line in screen.splitlines()) <= width
        assert ("20480 MB/s" in screen) == (width >= 60) and "to/from CXL" in screen


def test_one_undescribed_cxl_node_leaves_the_share_unknown(tmp_path: Any) -> None:
    root = _with_hmat(tmp_path, nodes=(0,))  # DRAM described, the CXL node not
    kinds = node_kinds(Host(root))
    assert kinds[0].hmat is not None and kinds[1].hmat is None
    assert cxl_bandwidth(kinds) == (None, None)
    two = {1: NodeInfo("cxl", 5, Coordinates(100, 50)), 2: NodeInfo("cxl", 5, None)}
    assert cxl_bandwidth(two) == (None, None)  # a partial sum would overstate the share
    two[2] = NodeInfo("cxl", 5, Coordinates(300, 150))
    assert cxl_bandwidth(two) == (400, 200) and cxl_bandwidth({0: NodeInfo("dram", 4)}) == (None, None)


def test_a_cxl_node_without_hmat_takes_its_regions_cdat_coordinates() -> None:
    from cxlctl.inventory import scan

    inv = scan(Host(os.path.join(FIXTURES, "linux-6.12", "single-region")))
    (cxl,) = [n for n in inv.nodes if n.kind == "cxl"]
    assert cxl.access0 is None and cxl.regions == ("region0",)
    region = inv.regions[0]
    assert node_figures(cxl, inv.regions) == Figures()  # as recorded: the kernel computed none
    fast, near = Coordinates(8192, 4096, 400, 500), Coordinates(9000, 5000, 300, 400)
    described = region._replace(access1=fast, access0=near)
    assert node_figures(cxl, [described]) == Figures(fast, near, "regions", ("region0",))
    # the node's own files win over its regions'
    own = cxl._replace(access1=Coordinates(1, 2, 3, 4))
    assert node_figures(own, [described]) == Figures(Coordinates(1, 2, 3, 4), None, "node")
    # two regions on one node: the kernel took one region's figures, never their sum
    two = cxl._replace(regions=("region0", "region9"))
    same = described._replace(name="region9")
    assert node_figures(two, [described, same]) == Figures(fast, near, "regions", ("region0", "region9"))
    other = described._replace(name="region9", access1=Coordinates(2048, 1024, 600, 700))
    f = node_figures(two, [described, other])
    assert f.cpu is None and f.source == "regions" and f.undetermined is not None
    assert "region0 8192/4096 MB/s, region9 2048/1024 MB/s" in f.undetermined
    # one of them undescribed: the kernel took the figures of whichever was probed first, or none
    bare = described._replace(name="region9", access1=None, access0=None)
    assert node_figures(two, [described, bare]).undetermined is not None


def test_stat_cli_reports_hmat_and_fits_80_columns(tmp_path: Any) -> None:
    root = _with_hmat(tmp_path)
    p = cli("--root", root, "stat", "--json", "--count", "2", "--interval", "0.1", check=True)
    first, second = (json.loads(line) for line in p.stdout.splitlines())
    assert first["nodes"][1]["hmat"]["read_bandwidth_mbps"] == 20480 and first["cxl_traffic"] is None
    assert second["cxl_traffic"]["cxl_write_bandwidth_mbps"] == 10240
    p = cli("--root", root, "stat", "--count", "2", "--interval", "0.1", env={"COLUMNS": "80"}, check=True)
    assert "expected (HMAT/CDAT)" in p.stdout and "of CXL read bandwidth" in p.stdout
    assert max(len(line) for line in p.stdout.splitlines()) <= 80
