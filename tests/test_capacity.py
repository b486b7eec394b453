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
from tests.kit import FIXTURES, cli, copy_fixture, fixture_id, fixture_roots

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
    """switch2-devdax: one region's dax0.0 is devdax (nobody uses it: only the decoder order holds it,
    region1 sits above it on both ports); the recorded process given one mapping of /dev/dax0.0 (the line
    numa_maps prints for it) blocks it too."""
    src = os.path.join(FIXTURES, "linux-7.x/switch2-devdax")
    doc = _json(src)
    dd = next(m for m in doc["memdevs"] if m["dax_devices"] == ["dax0.0"])
    assert (dd["devdax"], dd["nodes"], _codes(doc, dd["memdev"])) == (256 * MiB, [], ["decoder-order"])
    tree = copy_fixture(src, tmp_path / "t")
    line = "7f0000000000 default file=/dev/dax0.0 dirty=512 mapped=512 N1=512 kernelpagesize_kB=4\n"
    pid = _edit_proc(tree, lambda t: t + line)
    doc = _json(tree)
    dd = next(m for m in doc["memdevs"] if m["dax_devices"] == ["dax0.0"])
    assert dd["state"] == "blocked" and dd["releasable"] == 0
    (b,) = [b for b in dd["blockers"] if b["code"] != "decoder-order"]
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
    assert any(x.split()[:1] == ["mem1"] and "blocked" in x for x in lines)
    assert "mem0 is blocked:" in p.stdout and "fix: " in p.stdout
    # mem1's devdax region0 lies below region1 on both ports: it waits for mem0 (decoder order)
    assert "mem1 is blocked:" in p.stdout and "region0 cannot go before region1" in p.stdout


def test_bad_root_is_a_usage_error(tmp_path: Path) -> None:
    p = cli("--root", str(tmp_path / "none"), "capacity", "--json", rc=2)
    assert json.loads(p.stdout)["error"]["exit"] == 2


# ---------------------------------------------------------------------------- capacity release


def _digest(root: str) -> str:
    from tests.test_region_cli import tree_digest

    return tree_digest(root)


def _movable_copy(tmp_path: Path, tree: str = "linux-7.x/single-region") -> str:
    root = copy_fixture(os.path.join(FIXTURES, tree), tmp_path / "t")
    _movable(root)
    return root


@pytest.mark.parametrize(
    "args, code, needle",
    [
        (["mem0"], "zone-normal", "ZONE_NORMAL on node 1"),  # as recorded
        (["mem7"], None, "no memdev mem7 (memdevs: mem0)"),
        ([], None, "name the memdevs to release"),
        (["mem0", "--size", "1G"], None, "not both"),
        (["--size", "1G"], None, "--size 1 GiB: only 0 B can be released now (512 MiB is blocked)"),
        (["--size", "1X"], None, "--size"),
        (["mem0", "mem0"], None, "mem0 is named twice"),
        (["nvme0"], None, "'nvme0' is not a memdev name"),
    ],
)
def test_release_refusals_exit_2_and_write_nothing(tmp_path: Path, args: List[str], code: Any, needle: str) -> None:
    root = copy_fixture(os.path.join(FIXTURES, "linux-7.x/single-region"), tmp_path / "t")
    before = _digest(root)
    p = cli("--root", root, "capacity", "release", *args, rc=2)
    assert needle in p.stderr and "Traceback" not in p.stderr
    assert _digest(root) == before
    assert not os.path.exists(os.path.join(root, "run/cxlctl")), "a refusal takes no lock and writes no journal"


def test_release_refuses_half_an_interleave(tmp_path: Path) -> None:
    root = _movable_copy(tmp_path, "linux-6.12/switch2-region")
    p = cli("--root", root, "capacity", "release", "mem0", rc=2)
    assert "mem0 is interleaved with mem1 in region0" in p.stderr
    assert "`cxlctl capacity release mem0 mem1`" in p.stderr
    d = json.loads(cli("--root", root, "capacity", "release", "mem0", "mem1", "--dry-run", "--json", check=True).stdout)
    (r,) = d["regions"]
    assert (r["region"], r["memdevs"], r["dax"][0]["online_blocks"]) == (
        "region0",
        ["mem1", "mem0"],
        [146, 147, 148, 149],
    )


def test_release_dry_run_shows_the_plan(tmp_path: Path) -> None:
    root = _movable_copy(tmp_path)
    before = _digest(root)
    d = json.loads(cli("--root", root, "capacity", "release", "mem0", "--dry-run", "--json", check=True).stdout)
    assert d["dry_run"] is True and d["offline_bytes"] == 512 * MiB
    assert [(m["memdev"], m["serial"], m["released"]) for m in d["memdevs"]] == [("mem0", 4097, False)]
    (r,) = d["regions"]
    assert (r["root_decoder"], r["size"]) == ("decoder0.0", 512 * MiB)
    assert r["dax"] == [
        {"device": "dax0.0", "mode": "system-ram", "node": 1, "zone": "movable", "online_blocks": list(SINGLE_BLOCKS)}
    ]
    text = cli("--root", root, "capacity", "release", "mem0", "--dry-run", check=True).stdout
    assert "would offline 4 block(s) (512 MiB) of dax0.0 on node 1 (ZONE_MOVABLE)" in text
    assert text.rstrip().endswith("dry run: nothing was changed")
    assert _digest(root) == before


def test_release_by_size_picks_releasable_devices(tmp_path: Path) -> None:
    """switch2-devdax (7.x): the ZONE_NORMAL memdev (mem1, region1) holds the later decoders, so nothing
    goes as recorded; made movable, mem1 goes alone, and mem0's devdax region0 only with it."""
    src = os.path.join(FIXTURES, "linux-7.x/switch2-devdax")
    p = cli("--root", src, "capacity", "release", "--size", "200M", "--dry-run", rc=2)
    assert "only 0 B can be released now (512 MiB is blocked)" in p.stderr
    root = copy_fixture(src, tmp_path / "t")
    _movable(root, (148, 149))
    d = json.loads(
        cli("--root", root, "capacity", "release", "--size", "200M", "--dry-run", "--json", check=True).stdout
    )
    assert [m["memdev"] for m in d["memdevs"]] == ["mem1"] and d["offline_bytes"] == 256 * MiB
    d = json.loads(
        cli("--root", root, "capacity", "release", "--size", "300M", "--dry-run", "--json", check=True).stdout
    )
    assert [m["memdev"] for m in d["memdevs"]] == ["mem0", "mem1"]
    assert [r["region"] for r in d["regions"]] == ["region1", "region0"]  # the highest decoders first
    p = cli("--root", root, "capacity", "release", "--size", "600M", "--dry-run", rc=2)
    assert "only 512 MiB can be released now" in p.stderr


def test_release_rolls_back_when_a_block_refuses(tmp_path: Path, monkeypatch: Any) -> None:
    """The kernel's EBUSY on the third block (an unmovable page): the blocks already offlined go back
    online in ZONE_MOVABLE, nothing is torn down, the journal says rolled-back, exit 1."""
    from cxlctl.capacity import release as rel
    from cxlctl.errors import CxlctlError
    from cxlctl.regions import dax as daxmod

    root = _movable_copy(tmp_path)
    real = daxmod._offline_one
    tried: List[int] = []

    def offline_one(host: Any, bid: int) -> Any:
        tried.append(bid)
        return "EBUSY: Device or resource busy" if bid == 147 else real(host, bid)

    monkeypatch.setattr(daxmod, "_offline_one", offline_one)
    with pytest.raises(CxlctlError) as e:
        rel.release(Host(root), ["mem0"], None, lambda m: None, wait=0)
    assert e.value.code == 1
    assert "memory147 could not be offlined" in str(e.value) and "rolled back" in str(e.value)
    assert tried == [149, 148, 147]  # highest first, as regions.dax offlines
    for b in SINGLE_BLOCKS:
        with open(os.path.join(root, f"sys/devices/system/memory/memory{b}/state")) as f:
            assert f.read().strip() in ("online", "online_movable"), b
    assert os.path.isdir(os.path.join(root, "sys/bus/cxl/devices/region0"))
    j = rel.load(Host(root))
    assert j is not None and j["state"] == rel.ROLLED_BACK and j["steps"] == []
    assert j["regions"][0]["dax"][0]["online"] == list(SINGLE_BLOCKS)
    # a finished (rolled-back) release does not hold the next one up
    assert rel.unfinished(Host(root)) is None


def test_release_refuses_before_the_root_check(tmp_path: Path) -> None:
    """Without root: a blocked memdev is still refused with its blocker (exit 2); a releasable one needs root."""
    from tests.test_region_cli import _as_user

    root = copy_fixture(os.path.join(FIXTURES, "linux-7.x/single-region"), tmp_path / "t")
    p = _as_user("--root", root, "capacity", "release", "mem0")
    assert p.returncode == 2 and "ZONE_NORMAL" in p.stderr, p.stderr
    _movable(root)
    p = _as_user("--root", root, "capacity", "release", "mem0")
    assert p.returncode == 2 and "--sanitize or --no-sanitize" in p.stderr, p.stderr  # a choice, before root
    p = _as_user("--root", root, "capacity", "release", "mem0", "--no-sanitize")
    assert p.returncode == 1 and "capacity release needs root" in p.stderr, p.stderr
    assert _as_user("--root", root, "capacity", "release", "mem0", "--dry-run").returncode == 0


# ------------------------------------------- the hot-add and hot-remove, recorded in the capacity VM test

HOTADD = fixture_roots("linux-*/pool-hotadd")
HOTREMOVED = fixture_roots("linux-*/pool-hotremoved")


def test_the_hotplug_trees_are_recorded() -> None:
    """tests/vm/test_vm_capacity.py records them (scripts/record-fixtures.sh capacity)."""
    assert HOTADD and HOTREMOVED


@pytest.mark.parametrize("root", HOTADD, ids=[fixture_id(r) for r in HOTADD])
def test_a_hot_added_device_is_free(root: str) -> None:
    """Right after QMP's device_add: the new memdev (serial 0x5002) has endpoint and decoders but no
    region: free, the whole device releasable; the boot device's ZONE_NORMAL region stays blocked."""
    doc = _json(root)
    by_serial = {m["serial"]: m for m in doc["memdevs"]}
    hot, boot = by_serial[0x5002], by_serial[0x5001]
    assert (hot["state"], hot["releasable"], hot["regions"], hot["blockers"]) == ("free", 256 * MiB, [], [])
    assert boot["state"] == "blocked" and _codes(doc, boot["memdev"]) == ["zone-normal"]
    st = json.loads(cli("--root", root, "status", "--json", check=True).stdout)
    eps = [d for d in st["decoders"] if d.get("memdev") == hot["memdev"]]
    assert eps and all(not d["region"] and not d["dpa_size"] for d in eps)
    d = json.loads(cli("--root", root, "capacity", "release", hot["memdev"], "--dry-run", "--json", check=True).stdout)
    assert d["regions"] == [] and d["offline_bytes"] == 0


@pytest.mark.parametrize("root", HOTREMOVED, ids=[fixture_id(r) for r in HOTREMOVED])
def test_a_hot_removed_device_is_gone(root: str) -> None:
    """After release and QMP's device_del: only the boot device is left, nothing of the other remains."""
    doc = _json(root)
    assert [m["serial"] for m in doc["memdevs"]] == [0x5001]
    assert doc["totals"]["capacity"] == 256 * MiB
    st = json.loads(cli("--root", root, "status", "--json", check=True).stdout)
    assert [r["region"] for r in st["regions"]] == ["region0"]
    assert len([p for p in st["endpoints"]]) == 1
