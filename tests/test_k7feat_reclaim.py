"""``cxlctl tune reclaim``: proactive demotion as an operator action (issue 20 section 3).

Trees: the telemetry tree recorded in a real 6.12 guest (no ``nodeN/reclaim`` there: 6.12 has
none; its cgroup ``/cxltel`` has the memory controller).  A newer kernel's ``node0/reclaim`` is
one file added to a copy (the kernel's is write-only; a tree's takes what is written, so the test
reads back exactly what cxlctl wrote).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from cxlctl.errors import UsageError
from cxlctl.hostio import write as hw
from cxlctl.tuning import reclaim as rc
from tests.kit import FIXTURES, cli, copy_fixture

T612 = os.path.join(FIXTURES, "linux-6.12", "single-region-telemetry")
NODE0 = "sys/devices/system/node/node0/reclaim"


def _tree(tmp_path: Any, with_node_reclaim: bool = False, cgroup_reclaim: bool = True) -> str:
    root = copy_fixture(T612, tmp_path / "t")
    if with_node_reclaim:
        open(os.path.join(root, NODE0), "w").close()
    if cgroup_reclaim:
        open(os.path.join(root, "sys/fs/cgroup/cxltel/memory.reclaim"), "w").close()
    return root


def _read(root: str, rel: str) -> str:
    with open(os.path.join(root, rel)) as f:
        return f.read()


def test_6_12_has_no_node_reclaim_and_says_what_to_use(tmp_path: Any) -> None:
    root = _tree(tmp_path)
    p = cli("--root", root, "tune", "reclaim", "1G", "--node", "0")
    assert p.returncode == 2 and "no per-node proactive reclaim" in p.stderr and "--cgroup" in p.stderr
    assert "Traceback" not in p.stderr


def test_node_reclaim_writes_size_and_swappiness(tmp_path: Any) -> None:
    root = _tree(tmp_path, with_node_reclaim=True)
    p = cli("--root", root, "tune", "reclaim", "2G", "--node", "0", "--swappiness", "0", "--json", check=True)
    assert _read(root, NODE0) == "2147483648 swappiness=0\n"
    doc = json.loads(p.stdout)["reclaim"]
    assert doc["target"] == "node 0" and doc["asked"] == 2 << 30 and doc["complete"] is True
    assert doc["demoted_pages"] is None  # 6.12's vmstat has no pgdemote_proactive: not claimed as 0
    assert doc["freed"] == 0  # MemFree read before and after (a tree does not change)


def test_refusals_write_nothing(tmp_path: Any) -> None:
    root = _tree(tmp_path, with_node_reclaim=True)
    cxl = cli("--root", root, "tune", "reclaim", "1G", "--node", "1")
    assert cxl.returncode == 2 and "node 1 is a CXL node" in cxl.stderr
    both = cli("--root", root, "tune", "reclaim", "1G", "--node", "0", "--cgroup", "/cxltel")
    assert both.returncode == 2 and "--node N (a DRAM node) or --cgroup PATH" in both.stderr
    bad = cli("--root", root, "tune", "reclaim", "1G", "--node", "0", "--swappiness", "201")
    assert bad.returncode == 2
    assert _read(root, NODE0) == ""


def test_cgroup_reclaim_and_short_reclaim(tmp_path: Any, monkeypatch: Any) -> None:
    root = _tree(tmp_path)
    res = rc.reclaim(root, "512M", cgroup="/cxltel")
    assert _read(root, "sys/fs/cgroup/cxltel/memory.reclaim") == f"{512 << 20}\n"
    assert res.complete and res.target == "cgroup /cxltel"

    def busy(root_: str, path: str, text: str, **kw: Any) -> None:
        raise hw.KnobBusy(path, 11, f"{path}: Resource temporarily unavailable")

    monkeypatch.setattr(hw, "write_knob", busy)
    short = rc.reclaim(root, "512M", cgroup="/cxltel")
    assert not short.complete and "reclaimed less than asked" in rc.describe(short)
    with pytest.raises(UsageError, match="memory.reclaim is absent"):
        rc.reclaim(root, "1G", cgroup="/nosuch")
