"""The host's split (issue 42 item 1): one setting, ``[capacity] pinnable``, one decision
(capacity/pinnable.py ``zone_for``), read by region create, capacity adopt, the daemon's adoption,
``capacity``, ``launch`` and doctor.

On copies of recorded trees: ``pool-hotadd`` (6.12 and 7.x: mem0's region online in ZONE_NORMAL on
node 1, 256 MiB; mem1 just bound, free) for the zone a new region gets, and ``hmat2-region`` (7.x: two
256 MiB regions on nodes 2 and 3, recorded in ZONE_NORMAL) with one node's blocks set to Movable in the
copy, for a host with both pinnable and lendable CXL memory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List

import pytest

from cxlctl import config
from cxlctl.capacity import pinnable
from cxlctl.hostio import toml
from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from tests.kit import FIXTURES, cli, copy_fixture
from tests.launch_support import dry
from tests.test_capacity_adopt import _Build, _daemon, _hotadd, _hotremoved
from tests.test_launch_kvpin import _zone

KERNELS = ["linux-6.12", "linux-7.x"]
MiB = 1 << 20


def _conf(root: str, text: str) -> None:
    os.makedirs(os.path.join(root, "etc/cxlctl"), exist_ok=True)
    with open(os.path.join(root, "etc/cxlctl/cxlctl.toml"), "w") as f:
        f.write(text)


def _pool(kernel: str, tmp_path: Path, target: str = "") -> str:
    root = copy_fixture(_hotadd(kernel), tmp_path / "t")
    if target:
        _conf(root, f'[capacity]\npinnable = "{target}"\n')
    return root


@pytest.fixture
def split(tmp_path: Path) -> str:
    """hmat2-region (7.x) with node 2 all Movable: 256 MiB lendable on node 2, 256 MiB pinnable on node 3."""
    root = copy_fixture(os.path.join(FIXTURES, "linux-7.x/hmat2-region"), tmp_path / "h")
    _zone(root, 2, "Movable")
    return root


# ----------------------------------------------------------------------------- the setting


def test_the_setting_is_a_size_and_excludes_zone(tmp_path: Path) -> None:
    cfg = config.validate("f", {"capacity": {"pinnable": "16G"}})
    assert cfg.pinnable_target == 16 << 30 and config.defaults().pinnable_target is None
    again = config.validate("f", toml.loads(config.to_toml(cfg)))  # the effective file reads back
    assert again.pinnable_target == 16 << 30
    root = _pool("linux-7.x", tmp_path)
    _conf(root, '[capacity]\nzone = "movable"\npinnable = "1G"\n')
    p = cli("--root", root, "daemon", "config", rc=2)
    assert "capacity.zone: pinnable is set" in p.stderr and "drop zone" in p.stderr and "Traceback" not in p.stderr
    _conf(root, '[capacity]\npinnable = "lots"\n')
    p = cli("--root", root, "region", "create", "--memdevs", "mem1", "--dry-run", rc=2)
    assert "capacity.pinnable: must be a size" in p.stderr and "Traceback" not in p.stderr


# ----------------------------------------------------------------------------- one decision: the zone


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize(
    "target,create,adopt",
    [("", "normal", "movable"), ("512M", "normal", "normal"), ("256M", "movable", "movable")],
)
def test_region_create_and_adopt_take_the_zone_the_split_decides(
    kernel: str, target: str, create: str, adopt: str, tmp_path: Path
) -> None:
    """Node 1 holds 256 MiB in ZONE_NORMAL: below a 512 MiB target both build mem1 in the kernel zone, at a
    256 MiB target both lend it; without the setting each keeps its own default (by hand: normal, adopted: movable)."""
    root = _pool(kernel, tmp_path, target)
    rc = json.loads(cli("--root", root, "region", "create", "-m", "mem1", "--dry-run", "--json", inprocess=True).stdout)
    assert rc["zone"] == create
    want = {"": "is not set", "512M": "is below [capacity] pinnable = 512 MiB", "256M": "meets"}[target]
    assert want in rc["zone_decided_by"], rc
    ad = json.loads(cli("--root", root, "capacity", "adopt", "mem1", "--dry-run", "--json", inprocess=True).stdout)
    assert ad["zone"] == adopt and ad["memdevs"][0]["zone"] == adopt, ad
    # --zone still chooses
    rc = json.loads(
        cli("--root", root, "region", "create", "-m", "mem1", "--zone", "movable", "--dry-run", "--json").stdout
    )
    assert rc["zone"] == "movable" and rc["zone_decided_by"] is None


@pytest.mark.parametrize("target,zone", [("512M", "normal"), ("256M", "movable"), (None, "movable")])
def test_the_daemon_adopts_in_the_zone_the_split_decides(
    target: Any, zone: str, tmp_path: Path, monkeypatch: Any
) -> None:
    from tests.daemon_support import swap_in

    build = _Build()
    monkeypatch.setattr("cxlctl.regions.batch.create_regions", build)
    root, d, cap = _daemon(tmp_path, _hotremoved("linux-7.x"), **({"pinnable": target} if target else {}))
    try:
        swap_in(root, _hotadd("linux-7.x"))
        d.rec.reconcile("event")
        (call,) = build.calls
        assert call["zone"] == zone, call
    finally:
        d.close()


# ----------------------------------------------------------------------------- capacity, doctor, launch


def test_capacity_shows_the_target_against_the_host(split: str) -> None:
    _conf(split, '[capacity]\npinnable = "512M"\n')
    doc = json.loads(cli("--root", split, "capacity", "--json", inprocess=True).stdout)
    sh = doc["pinnable_share"]
    assert (sh["target"], sh["pinnable"], sh["lendable"], sh["shortfall"]) == (
        512 * MiB,
        256 * MiB,
        256 * MiB,
        256 * MiB,
    )
    assert sh["next_zone"] == sh["next_adopt_zone"] == "normal"
    nodes = {n["node"]: n for n in doc["nodes"]}
    assert (nodes[3]["pinnable"], nodes[3]["lendable"], nodes[3]["releasable"]) == (256 * MiB, 0, 0)
    text = cli("--root", split, "capacity", env={"COLUMNS": "80"}, inprocess=True).stdout
    assert "split: 256 MiB pinnable (kernel zone: pinned KV, not lendable), 256 MiB" in text
    assert "short by 256 MiB" in text and "next adopted capacity:" in text


def _doctor(root: str) -> Dict[str, Dict[str, Any]]:
    doc = json.loads(cli("--root", root, "doctor", "--json").stdout)
    return {c["id"]: c for c in doc["checks"]}


def test_zone_normal_blocker_names_the_split_before_its_way_out(split: str) -> None:
    """Node 3's ZONE_NORMAL memory is the pinned KV's share once the split is set: the blocker's fix says so
    (and lowering the target comes first); without the setting the fix is the plain way out."""

    def fixes() -> List[str]:
        doc = json.loads(cli("--root", split, "capacity", "--json", inprocess=True).stdout)
        return [b["fix"] for m in doc["memdevs"] for b in m["blockers"] if b["code"] == "zone-normal"]

    plain = fixes()
    assert plain and not any("pinnable" in f for f in plain), plain
    _conf(split, '[capacity]\npinnable = "256M"\n')
    split_fixes = fixes()
    assert split_fixes and all(
        f.startswith("[capacity] pinnable = 256 MiB") and "lower it first" in f for f in split_fixes
    ), split_fixes


def test_doctor_judges_each_device_by_the_split(split: str) -> None:
    """With a config file the host lends (adopt defaults to system-ram): a ZONE_NORMAL device used to be a
    lending mistake; inside the pinnable share it is what the split asks for, and a shortfall is the warning."""
    _conf(split, '[capacity]\npinnable = "512M"\n')
    c = _doctor(split)
    assert c["devices.pinnable-share"]["result"] == "warn" and "256 MiB short" in c["devices.pinnable-share"]["message"]
    normal = [v for k, v in c.items() if k.endswith(".zone") and "ZONE_NORMAL" in v["message"]]
    assert normal and all(v["result"] == "ok" and "pinnable share" in v["message"] for v in normal), normal
    _conf(split, '[capacity]\npinnable = "256M"\n')
    assert _doctor(split)["devices.pinnable-share"]["result"] == "ok"


def test_a_pinned_offload_binds_to_the_pinnable_node(split: str) -> None:
    """node 2 (first by id) is Movable, node 3 ZONE_NORMAL: the pinned offload's /dev/shm binds to node 3 only,
    so the pin moves nothing and node 2 stays lendable."""
    doc = dry(split, "exec", ["--pinned", "--kv-size", "64M", "--allow-root"], ["/bin/true"])
    ko = doc["kv_offload"]
    assert doc["tmpfs"]["nodes"] == [3] and ko["on_cxl"] and ko["expected_bytes_per_node"] == {"3": 64 * MiB}, ko
    assert ko["pin_moved_bytes_per_node"] == {}
    un = dry(split, "exec", ["--kv-size", "64M", "--allow-root"], ["/bin/true"])  # unpinned: every CXL node
    assert un["tmpfs"]["nodes"] == [2, 3]


def test_launch_warns_when_a_pinned_offload_outgrows_the_share(split: str) -> None:
    _conf(split, '[capacity]\npinnable = "32M"\n')
    doc = dry(split, "exec", ["--pinned", "--kv-size", "64M", "--allow-root"], ["/bin/true"])
    assert any("more than [capacity] pinnable = 32 MiB" in w for w in doc["warnings"]), doc["warnings"]


def test_one_decision(split: str) -> None:
    """zone_for of the same host and target is what every caller reports."""
    inv = scan(Host(split))
    sh = pinnable.share(inv, config.validate("f", {"capacity": {"pinnable": "256M"}}))
    assert (sh.pinnable, sh.lendable, sh.shortfall) == (256 * MiB, 256 * MiB, 0)
    assert pinnable.zone_for(sh, pinnable.CREATE)[0] == pinnable.zone_for(sh, pinnable.ADOPT)[0] == "movable"
    assert pinnable.pinnable_nodes(inv, [2, 3]) == [3]


def test_the_pin_moves_a_movable_page_along_the_source_nodes_zonelist(split: str) -> None:
    """--mem-nodes 2 (Movable) asks for the lendable node; the pin migrates each page to a kernel zone on node 2's
    zonelist (mm/page_alloc.c find_next_best_node(): all distances are 20 here, node 0 has CPUs, so CPU-less node 3
    comes first): the offload ends on node 3, still CXL, not on DRAM (the guests measured it: pinkv_check step 4)."""
    doc = dry(split, "exec", ["--pinned", "--kv-size", "64M", "--mem-nodes", "2", "--allow-root"], ["/bin/true"])
    ko = doc["kv_offload"]
    assert ko["before_pin_bytes_per_node"] == {"2": 64 * MiB} and ko["expected_bytes_per_node"] == {"3": 64 * MiB}, ko
    assert ko["on_cxl"] is True and ko["pin_moved_bytes_per_node"] == {"2": 64 * MiB}
    inv = scan(Host(split))
    assert pinnable.zonelist_order(inv, 2, [0, 3], lambda i, a, b: 20) == [3, 0]
    assert pinnable.zonelist_order(inv, 3, [0, 2], lambda i, a, b: 20) == [2, 0]  # below it: +1, CPUs: +1
