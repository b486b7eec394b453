"""``cxlctl status`` on Linux 7.x's performance data (issue 20): with HMAT and a generic port,
Linux 7.3 computes ``regionN/access0`` (16000 MB/s, 192/292 ns for QEMU's default CDAT) but
gives the CXL node no ``access0`` of its own, and ``status`` printed "-" for that node while
``tune plan`` quoted its 16000 MB/s.  A node whose regions have figures never shows "-".

The tree is the recorded 6.12 single-region tree with the region's ``access0``/``access1`` files the
7.3 guest showed added (a tiny edit for one case: the recorded HMAT trees cover the rest).
"""

from __future__ import annotations

import json
import os
from typing import Any, List

from tests.kit import FIXTURES, cli, copy_fixture

SINGLE = os.path.join(FIXTURES, "linux-6.12", "single-region")
REGION = "sys/devices/platform/ACPI0017:00/root0/decoder0.0/region0"


def _with_region_figures(tmp_path: Any) -> str:
    root = copy_fixture(SINGLE, tmp_path / "tree")
    for cls in ("access0", "access1"):  # the 7.3 guest shows both classes, equal
        acc = os.path.join(root, REGION, cls)
        os.makedirs(acc)
        for name, value in (
            ("read_bandwidth", 16000),
            ("write_bandwidth", 16000),
            ("read_latency", 192),
            ("write_latency", 292),
        ):
            with open(os.path.join(acc, name), "w") as f:
                f.write(f"{value}\n")
    return root


def _node_row(text: str, nid: int) -> List[str]:
    rows = [ln.split() for ln in text.splitlines() if ln.split()[:1] == [str(nid)]]
    assert rows, text
    return rows[-1]


def test_cxl_node_shows_its_regions_figures_not_a_dash(tmp_path: Any) -> None:
    root = _with_region_figures(tmp_path)
    p = cli("--root", root, "status", env={"COLUMNS": "80"}, check=True)
    row = _node_row(p.stdout, 1)
    assert "16000/16000*" in row and "192/292*" in row, p.stdout
    assert "*: the node's CXL region's figures" in p.stdout
    assert all(len(ln) <= 80 for ln in p.stdout.splitlines())
    # --json keeps sysfs as it is: the node has no access0 file, the region has
    d = json.loads(cli("--root", root, "status", "--json", check=True).stdout)
    node = [n for n in d["nodes"] if n["id"] == 1][0]
    assert node["access0"] is None
    region = [r for r in d["regions"] if r["region"] == "region0"][0]
    assert region["access0"]["read_bandwidth"] == 16000 and region["access0"]["write_latency"] == 292


def test_no_figures_anywhere_still_prints_a_dash_without_the_note() -> None:
    p = cli("--root", SINGLE, "status", env={"COLUMNS": "160"}, check=True)
    assert "*: the node's regions'" not in p.stdout and "*" not in "".join(_node_row(p.stdout, 1))


HMAT7 = os.path.join(FIXTURES, "linux-7.x", "hmat2-region")
HMAT612 = os.path.join(FIXTURES, "linux-6.12", "hmat2-region")


def test_recorded_7x_hmat_guest_shows_both_cxl_nodes_figures() -> None:
    """The recorded 7.3 guest with HMAT, two generic ports and two CDAT devices: the kernel wrote
    region0/region1 access0 and no access0 for nodes 2 and 3 (6.12 writes both)."""
    d = json.loads(cli("--root", HMAT7, "status", "--json", check=True).stdout)
    nodes = {n["id"]: n for n in d["nodes"]}
    assert nodes[2]["access0"] is None and nodes[3]["access0"] is None
    regions = {r["region"]: r for r in d["regions"]}
    assert regions["region0"]["access0"]["read_bandwidth"] == 16000
    assert regions["region1"]["access0"]["read_bandwidth"] == 6144
    text = cli("--root", HMAT7, "status", env={"COLUMNS": "80"}, check=True).stdout
    assert "16000/16000*" in _node_row(text, 2) and "192/292*" in _node_row(text, 2)
    assert "6144/6144*" in _node_row(text, 3) and "362/462*" in _node_row(text, 3)
    # 6.12 gives the nodes their own figures: no mark there
    d612 = json.loads(cli("--root", HMAT612, "status", "--json", check=True).stdout)
    assert {n["id"]: (n["access0"] or {}).get("read_bandwidth") for n in d612["nodes"]} == {0: 38912, 2: 16000, 3: 6144}
    text612 = cli("--root", HMAT612, "status", env={"COLUMNS": "80"}, check=True).stdout
    assert "16000/16000" in _node_row(text612, 2) and "*" not in "".join(_node_row(text612, 2))
