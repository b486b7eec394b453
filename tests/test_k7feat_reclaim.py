"""``cxlctl tune reclaim``: proactive demotion as an operator action (issue 20 section 3).

Trees: the telemetry trees recorded in real 6.12 and 7.3.4 guests (6.12 has no ``nodeN/reclaim``;
their cgroup ``/cxltel`` has the memory controller).  7.x's ``node0/reclaim`` is one file added to
a copy (the kernel's is write-only, so a record cannot hold it; a tree's takes what is written,
so the test reads back exactly what cxlctl wrote).  The 7.x tree holds what the node-reclaim gate
reads (node vmstat and meminfo, ``vm.min_unmapped_ratio``, ``vm.min_slab_ratio``,
``vm.zone_reclaim_mode``) as that kernel had them: the gate was shut there.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict

import pytest

from cxlctl.errors import UsageError
from cxlctl.hostio import write as hw
from cxlctl.hostio.host import Host
from cxlctl.tuning import reclaim as rc
from tests.kit import FIXTURES, cli, copy_fixture

T612 = os.path.join(FIXTURES, "linux-6.12", "single-region-telemetry")
T7X = os.path.join(FIXTURES, "linux-7.x", "single-region-telemetry")
NODE0 = "sys/devices/system/node/node0/reclaim"


def _tree(tmp_path: Any, with_node_reclaim: bool = False, cgroup_reclaim: bool = True, src: str = T612) -> str:
    root = copy_fixture(src, tmp_path / "t")
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
    res = rc.reclaim(Host(root), "512M", cgroup="/cxltel")
    assert _read(root, "sys/fs/cgroup/cxltel/memory.reclaim") == f"{512 << 20}\n"
    assert res.complete and res.target == "cgroup /cxltel"

    def busy(root_: str, path: str, text: str, **kw: Any) -> None:
        raise hw.KnobBusy(path, 11, f"{path}: Resource temporarily unavailable")

    monkeypatch.setattr(hw, "write_knob", busy)
    short = rc.reclaim(Host(root), "512M", cgroup="/cxltel")
    assert not short.complete and "reclaimed less than asked" in rc.describe(short)
    with pytest.raises(UsageError, match="memory.reclaim is absent"):
        rc.reclaim(Host(root), "1G", cgroup="/nosuch")


def _vmstat(root: str) -> Dict[str, int]:
    out = {}
    for line in _read(root, "sys/devices/system/node/node0/vmstat").splitlines():
        k, v = line.split()
        out[k] = int(v)
    return out


def test_7x_node_gate_is_the_kernels_condition_on_the_recorded_tree() -> None:
    """mm/vmscan.c: node reclaim scans only while unmapped, clean page cache exceeds
    min_unmapped_ratio % of the node, or reclaimable slab min_slab_ratio % of it."""
    g = rc.node_gate(Host(T7X).reader, 0)
    assert g is not None
    vm = _vmstat(T7X)
    assert g.reclaimable_page_cache == vm["nr_active_file"] + vm["nr_inactive_file"] - vm["nr_mapped"] - vm["nr_dirty"]
    pages = int(_read(T7X, "sys/devices/system/node/node0/meminfo").split("MemTotal:")[1].split()[0]) * 1024 // 4096
    assert (g.min_unmapped_ratio, g.min_slab_ratio) == (1, 5)  # the kernel's defaults, as recorded
    assert g.min_unmapped_pages == pages // 100 and g.min_slab_pages == pages * 5 // 100
    assert g.slab_reclaimable == vm["nr_slab_reclaimable"]
    assert g.open is False  # the guest's DRAM held mostly anonymous memory, as the VM proof's does


def test_7x_short_node_reclaim_behind_a_shut_gate_says_why_and_what_to_do(tmp_path: Any, monkeypatch: Any) -> None:
    root = _tree(tmp_path, with_node_reclaim=True, src=T7X)

    def busy(root_: str, path: str, text: str, **kw: Any) -> None:
        raise hw.KnobBusy(path, 11, f"{path}: Resource temporarily unavailable")

    monkeypatch.setattr(hw, "write_knob", busy)
    res = rc.reclaim(Host(root), "16M", node=0)
    assert not res.complete and res.scanned_pages == 0 and res.demoted_pages == 0
    assert res.gate is not None and not res.gate.open
    assert res.why_short is not None and "vm.min_unmapped_ratio=1 %" in res.why_short
    assert "anonymous memory does not count" in res.why_short
    text = rc.describe(res)
    assert "--cgroup PATH" in text and "sysctl vm.min_unmapped_ratio=0" in text
    doc = res.as_json()
    assert doc["gate"]["open"] is False and doc["gate"]["min_unmapped_pages"] == res.gate.min_unmapped_pages
    assert json.loads(json.dumps(doc)) == doc


def test_7x_gate_opens_with_the_ratio_at_zero_or_mapped_pages_counted(tmp_path: Any, monkeypatch: Any) -> None:
    """With the gate open a short reclaim is not blamed on it; RECLAIM_UNMAP (zone_reclaim_mode 4)
    counts mapped file pages too, as node_pagecache_reclaimable does."""
    root = _tree(tmp_path, with_node_reclaim=True, src=T7X)
    vm = _vmstat(root)
    with open(os.path.join(root, "proc/sys/vm/zone_reclaim_mode"), "w") as f:
        f.write("4\n")
    g = rc.node_gate(Host(root).reader, 0)
    assert g is not None and g.reclaimable_page_cache == vm["nr_file_pages"] - vm["nr_dirty"]
    with open(os.path.join(root, "proc/sys/vm/zone_reclaim_mode"), "w") as f:
        f.write("0\n")
    with open(os.path.join(root, "proc/sys/vm/min_unmapped_ratio"), "w") as f:
        f.write("0\n")

    def busy(root_: str, path: str, text: str, **kw: Any) -> None:
        raise hw.KnobBusy(path, 11, f"{path}: Resource temporarily unavailable")

    monkeypatch.setattr(hw, "write_knob", busy)
    res = rc.reclaim(Host(root), "16M", node=0)
    assert res.gate is not None and res.gate.open and res.gate.min_unmapped_pages == 0
    assert res.why_short == "the kernel found nothing it could reclaim there"  # a tree's counters stand still
    assert "What to do" not in rc.describe(res)


def test_7x_a_complete_node_reclaim_reports_its_counters(tmp_path: Any) -> None:
    root = _tree(tmp_path, with_node_reclaim=True, src=T7X)
    p = cli("--root", root, "tune", "reclaim", "16M", "--node", "0", "--json", check=True)
    doc = json.loads(p.stdout)["reclaim"]
    assert _read(root, NODE0) == f"{16 << 20}\n"
    assert doc["complete"] is True and doc["why_short"] is None
    assert doc["scanned_pages"] == 0 and doc["demoted_pages"] == 0  # 7.x counts both; a tree stands still
    text = cli("--root", root, "tune", "reclaim", "16M", "--node", "0", env={"COLUMNS": "80"}, check=True).stdout
    assert "scanned 0 page(s) (pgscan_proactive)" in " ".join(text.split())
    assert max(len(x) for x in text.splitlines()) <= 80
