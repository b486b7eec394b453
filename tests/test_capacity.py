"""``cxlctl capacity`` on recorded trees: releasable and blocked capacity, each blocker named with its fix.

The trees are the guests' own (fixtures/linux-*/); a case the recordings do not hold
(blocks in ZONE_MOVABLE, a process with /dev/dax0.0 mapped, a bind policy, a kernel
without CONFIG_MEMORY_HOTREMOVE) is one small edit of a copied tree, named in the test.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List

import pytest

from cxlctl.capacity.report import gather
from cxlctl.hostio.host import Host
from tests.kit import FIXTURES, cli, copy_fixture

SINGLE = ["linux-6.12/single-region", "linux-7.x/single-region"]
#: the CXL node's memory blocks in the single-region trees (node1: region0's dax0.0)
SINGLE_BLOCKS = (146, 147, 148, 149)
MiB = 1 << 20


def _json(root: str) -> Dict[str, Any]:
    doc = json.loads(cli("--root", root, "capacity", "--json", check=True, inprocess=True).stdout)
    assert isinstance(doc, dict)
    return doc


def _movable(root: str, blocks: Any = SINGLE_BLOCKS) -> None:
    """The one edit: the region's blocks as the kernel shows them onlined with online_movable."""
    for b in blocks:
        p = os.path.join(root, f"sys/devices/system/memory/memory{b}/valid_zones")
        with open(p) as f:
            assert f.read().strip() == "Normal"
        with open(p, "w") as f:
            f.write("Movable\n")


def _codes(doc: Dict[str, Any], memdev: str) -> List[str]:
    return [b["code"] for m in doc["memdevs"] if m["memdev"] == memdev for b in m["blockers"]]


@pytest.mark.parametrize("tree", SINGLE)
def test_recorded_zone_normal_region_is_blocked(tree: str) -> None:
    """As recorded (the kernel's default online, ZONE_NORMAL): nothing releasable, the blocker says why and how."""
    doc = _json(os.path.join(FIXTURES, tree))
    (m,) = doc["memdevs"]
    assert (m["memdev"], m["serial"], m["regions"], m["nodes"]) == ("mem0", 4097, ["region0"], [1])
    assert (m["state"], m["releasable"], m["online"], m["movable"]) == ("blocked", 0, 512 * MiB, 512 * MiB * 0)
    (b,) = m["blockers"]
    assert b["code"] == "zone-normal" and b["subject"] == "dax0.0"
    assert "memory146" in b["message"] and "offline_pages()" in b["message"]
    assert "--zone movable" in b["fix"]
    (n,) = doc["nodes"]
    assert (n["node"], n["online"], n["normal"], n["movable"], n["releasable"]) == (1, 512 * MiB, 512 * MiB, 0, 0)
    assert doc["totals"] == {"capacity": 512 * MiB, "releasable": 0, "blocked": 512 * MiB}


@pytest.mark.parametrize("tree", SINGLE)
def test_movable_region_is_releasable(tree: str, tmp_path: Path) -> None:
    root = copy_fixture(os.path.join(FIXTURES, tree), tmp_path / "t")
    _movable(root)
    doc = _json(root)
    (m,) = doc["memdevs"]
    assert (m["state"], m["releasable"], m["movable"], m["blockers"]) == ("releasable", 512 * MiB, 512 * MiB, [])
    (n,) = doc["nodes"]
    assert (n["movable"], n["normal"], n["releasable"]) == (512 * MiB, 0, 512 * MiB)


def test_memdev_without_region_is_free() -> None:
    doc = _json(os.path.join(FIXTURES, "linux-6.12/single-noregion"))
    (m,) = doc["memdevs"]
    assert (m["state"], m["releasable"], m["regions"], m["blockers"]) == ("free", 512 * MiB, [], [])
    assert doc["nodes"] == []


def test_interleaved_memdevs_go_together() -> None:
    doc = _json(os.path.join(FIXTURES, "linux-6.12/switch2-region"))
    with_ = {m["memdev"]: m["release_with"] for m in doc["memdevs"]}
    assert with_ == {"mem0": ["mem1"], "mem1": ["mem0"]}


def test_devdax_open_by_a_process_blocks(tmp_path: Path) -> None:
    """switch2-devdax: one region's dax0.0 is devdax (releasable while nobody uses it); the
    recorded process given one mapping of /dev/dax0.0 (the line numa_maps prints for it) blocks it."""
    src = os.path.join(FIXTURES, "linux-7.x/switch2-devdax")
    doc = _json(src)
    dd = next(m for m in doc["memdevs"] if m["dax_devices"] == ["dax0.0"])
    assert (dd["state"], dd["devdax"], dd["nodes"]) == ("releasable", 256 * MiB, [])
    tree = copy_fixture(src, tmp_path / "t")
    line = "7f0000000000 default file=/dev/dax0.0 dirty=512 mapped=512 N1=512 kernelpagesize_kB=4\n"
    pid = _edit_proc(tree, lambda t: t + line)
    doc = _json(tree)
    dd = next(m for m in doc["memdevs"] if m["dax_devices"] == ["dax0.0"])
    assert dd["state"] == "blocked" and dd["releasable"] == 0
    (b,) = dd["blockers"]
    assert (b["code"], b["subject"]) == ("devdax-open", "dax0.0") and f"PID {pid}" in b["message"]
    assert f"PID {pid}" in b["fix"]


def _edit_proc(root: str, rewrite: Any) -> int:
    """Rewrite the numa_maps of the recorded process with the most mappings; its PID."""
    procs = [
        p
        for p in os.listdir(os.path.join(root, "proc"))
        if p.isdigit() and os.path.exists(os.path.join(root, f"proc/{p}/numa_maps"))
    ]
    sizes = {int(p): os.path.getsize(os.path.join(root, f"proc/{p}/numa_maps")) for p in procs}
    pid = max(sizes, key=lambda p: sizes[p])
    path = os.path.join(root, f"proc/{pid}/numa_maps")
    with open(path) as f:
        text = f.read()
    os.unlink(path)
    with open(path, "w") as f:
        f.write(rewrite(text))
    return pid


def test_bind_to_the_node_only_blocks(tmp_path: Path) -> None:
    root = copy_fixture(os.path.join(FIXTURES, "linux-7.x/single-region"), tmp_path / "t")
    _movable(root)
    pid = _edit_proc(root, lambda t: t.replace(" default heap ", " bind:1 heap ", 1))
    doc = _json(root)
    assert _codes(doc, "mem0") == ["bind-only"]
    b = doc["memdevs"][0]["blockers"][0]
    assert b["subject"] == f"pid:{pid}" and "node(s) 1 only" in b["message"]
    # a bind that leaves another node is no blocker
    root2 = copy_fixture(os.path.join(FIXTURES, "linux-7.x/single-region"), tmp_path / "t2")
    _movable(root2)
    _edit_proc(root2, lambda t: t.replace(" default heap ", " bind:0-1 heap ", 1))
    assert _codes(_json(root2), "mem0") == []


def test_cxlctl_launched_process_blocks(tmp_path: Path) -> None:
    """A process whose environment holds the CXLCTL_POLICY `cxlctl launch` exports with node 1."""
    from cxlctl.launch.policy import Policy

    root = copy_fixture(os.path.join(FIXTURES, "linux-7.x/single-region"), tmp_path / "t")
    _movable(root)
    pid = _edit_proc(root, lambda t: t)
    env = Policy("preferred", (1,), (0,), (0,)).env_value()
    with open(os.path.join(root, f"proc/{pid}/environ"), "w") as f:
        f.write(f"PATH=/usr/bin\0CXLCTL_POLICY={env}\0")
    doc = _json(root)
    assert _codes(doc, "mem0") == ["cxlctl-launch"]
    assert "--mem-nodes" in doc["memdevs"][0]["blockers"][0]["fix"]


def test_kernel_without_hotremove(tmp_path: Path) -> None:
    """``removable`` is 0 only on a kernel built without CONFIG_MEMORY_HOTREMOVE (removable_show())."""
    root = copy_fixture(os.path.join(FIXTURES, "linux-7.x/single-region"), tmp_path / "t")
    _movable(root)
    for b in SINGLE_BLOCKS:
        with open(os.path.join(root, f"sys/devices/system/memory/memory{b}/removable"), "w") as f:
            f.write("0\n")
    rep = gather(Host(root))
    m = rep.memdev("mem0")
    assert m is not None and [b.code for b in m.blockers] == ["no-hotremove"]


def test_no_room_elsewhere(tmp_path: Path) -> None:
    """The node's used memory must fit into the other nodes' free memory (the kernel migrates it there)."""
    root = copy_fixture(os.path.join(FIXTURES, "linux-7.x/single-region-telemetry"), tmp_path / "t")
    _movable(root)
    p = os.path.join(root, "sys/devices/system/node/node0/meminfo")
    with open(p) as f:
        text = f.read()
    os.unlink(p)
    lines = ["Node 0 MemFree:         1024 kB" if "MemFree" in line else line for line in text.splitlines()]
    with open(p, "w") as f:
        f.write("\n".join(lines) + "\n")
    doc = _json(root)
    assert "no-room" in _codes(doc, "mem0")


def test_human_view_fits_80_columns() -> None:
    p = cli(
        "--root", os.path.join(FIXTURES, "linux-6.12/switch2-devdax"), "capacity", env={"COLUMNS": "80"}, check=True
    )
    lines = p.stdout.splitlines()
    assert max(len(x) for x in lines) <= 80, p.stdout
    assert lines[0].split() == ["memdev", "capacity", "region", "node", "online", "movable", "state", "releasable"]
    assert any(x.split()[:1] == ["mem1"] and "releasable" in x for x in lines)
    assert "mem0 is blocked:" in p.stdout and "fix: " in p.stdout


def test_bad_root_is_a_usage_error(tmp_path: Path) -> None:
    p = cli("--root", str(tmp_path / "none"), "capacity", "--json", rc=2)
    assert json.loads(p.stdout)["error"]["exit"] == 2
