"""cxlctl.regions.dax on recorded trees: device and block state agree with the real daxctl.

The writes themselves (kmem bind, onlining, the auto-online hold) need a real
kernel and are exercised in tests/vm/test_vm_region.py; here the reading side
and the policy decisions are checked against what the real tools printed in
the same guest (``peers/daxctl-list.json``).
"""

from __future__ import annotations

import json
import os
from typing import Any, List

import pytest

from cxlctl.errors import CxlctlError
from cxlctl.hostio.host import Host
from cxlctl.hostio.write import write_knob
from cxlctl.regions import dax, region_json
from tests.kit import FIXTURES, copy_fixture

REGION_TREES = [os.path.join(FIXTURES, "linux-6.12", f"{t}-region") for t in ("single", "hb2", "switch2", "hb2x2")]


@pytest.mark.parametrize("root", REGION_TREES, ids=lambda p: os.path.basename(p))
def test_device_state_agrees_with_daxctl(root: str) -> None:
    with open(os.path.join(root, "peers", "daxctl-list.json")) as f:
        peer = [d for r in json.load(f) for d in r.get("devices", [])]
    assert peer, "the fixture should hold one DAX device"
    bs = dax.block_size(Host(root))
    for p in peer:
        st = dax.read_dax(Host(root), p["chardev"])
        mine = region_json.dax_device(st, bs)
        for key in ("chardev", "size", "target_node", "mode", "online_memblocks", "total_memblocks", "movable"):
            assert mine[key] == p[key], (key, mine[key], p[key])
        assert st.resource == p["mappings"][0]["start"]
        assert len(dax.read_dax_blocks(Host(root), p["chardev"])[1]) == p["total_memblocks"]
        assert mine["zones"] == (["Movable"] if p["movable"] else ["Normal"])


def test_unknown_device_is_a_usage_error() -> None:
    with pytest.raises(CxlctlError) as e:
        dax.read_dax(Host(REGION_TREES[0]), "dax3.1")
    assert e.value.code == 2 and "dax0.0" in str(e.value)


def test_policy_zone() -> None:
    assert dax.policy_zone("offline") is None and dax.policy_zone(None) is None
    assert dax.policy_zone("online_movable") == "movable"
    assert dax.policy_zone("online_kernel") == "normal"
    assert dax.policy_zone("online") == "normal"  # the kernel's default zone for a new CXL node
    # zone_for_pfn_range: movable_node sends memory in no zone yet to Movable (default_zone_for_pfn)
    assert dax.policy_zone("online", movable_node=True) == "movable"
    # auto-movable: numa-aware (the default) finds no boot-time kernel memory on a CPU-less node -> Normal;
    # without numa awareness the system-wide ratio decides at online time
    assert dax.policy_zone("online", online_policy="auto-movable", numa_aware="Y") == "normal"
    assert dax.policy_zone("online", online_policy="auto-movable", numa_aware="N") == "either"
    assert dax.policy_zone("online", online_policy="auto-movable", numa_aware="N", ratio="0") == "normal"
    assert dax.policy_zone("online_kernel", movable_node=True) == "normal"


def _edit(root: str, path: str, text: str) -> None:
    os.makedirs(os.path.dirname(root + path), exist_ok=True)
    with open(root + path, "w") as f:
        f.write(text + "\n")


def test_auto_online_zone_on_edited_trees(tmp_path: Any) -> None:
    """The recorded 6.12 guest (auto_online_blocks=online, no movable_node, no memory_hotplug
    parameters recorded) predicts Normal; movable_node on its command line, or auto-movable without
    numa awareness, makes cxlctl hold the policy for a normal onlining instead of letting the kernel
    online Movable and then moving every block (issue 34 row 8)."""
    root = copy_fixture(os.path.join(FIXTURES, "linux-6.12", "single-region-doctor"), str(tmp_path / "t"))
    with open(root + "/proc/cmdline") as f:
        cmdline = f.read().strip()
    assert "movable_node" not in cmdline.split()
    assert dax.auto_online_zone(Host(root)) == "normal" and not dax.needs_hold(Host(root), "system-ram", "normal")
    _edit(root, "/proc/cmdline", cmdline + " movable_node")
    assert dax.auto_online_zone(Host(root)) == "movable"
    assert dax.needs_hold(Host(root), "system-ram", "normal") and not dax.needs_hold(
        Host(root), "system-ram", "movable"
    )
    _edit(root, "/proc/cmdline", cmdline)
    _edit(root, "/sys/module/memory_hotplug/parameters/online_policy", "auto-movable")
    _edit(root, "/sys/module/memory_hotplug/parameters/auto_movable_numa_aware", "N")
    assert dax.auto_online_zone(Host(root)) == "either"
    assert dax.needs_hold(Host(root), "system-ram", "normal") and dax.needs_hold(Host(root), "system-ram", "movable")


@pytest.mark.parametrize(
    "policy, mode, zone, hold",
    [
        ("online", "system-ram", "normal", False),  # the kernel onlines where we want it
        ("online", "system-ram", "movable", True),
        ("online", "devdax", "normal", True),  # nothing may be onlined at all
        ("online_movable", "system-ram", "movable", False),
        ("online_movable", "system-ram", "normal", True),
        ("online_kernel", "system-ram", "movable", True),
        ("offline", "system-ram", "movable", False),  # we online it ourselves
        ("offline", "devdax", "normal", False),
    ],
)
def test_when_the_auto_online_policy_is_held(tmp_path: Any, policy: str, mode: str, zone: str, hold: bool) -> None:
    root = copy_fixture(REGION_TREES[0], str(tmp_path / "t"))
    path = root + dax.AUTO_ONLINE
    write_knob(root, dax.AUTO_ONLINE, policy)
    assert dax.needs_hold(Host(root), mode, zone) is hold
    log: List[str] = []
    with dax.hold_auto_online(Host(root), dax.needs_hold(Host(root), mode, zone), log.append) as old:
        with open(path) as f:
            inside = f.read().strip()
    with open(path) as f:
        after = f.read().strip()
    assert after == policy  # always restored
    assert inside == ("offline" if hold else policy) and (old == policy if hold else old is None)
    assert bool(log) is hold


def test_hold_restores_the_policy_when_the_body_fails(tmp_path: Any) -> None:
    root = copy_fixture(REGION_TREES[0], str(tmp_path / "t"))
    with pytest.raises(RuntimeError):
        with dax.hold_auto_online(Host(root), True, lambda m: None):
            raise RuntimeError("bind failed")
    with open(root + dax.AUTO_ONLINE) as f:
        assert f.read().strip() == "online"


def test_node_in_use(tmp_path: Any) -> None:
    root = REGION_TREES[0]
    used = dax.node_in_use(Host(root), 0)
    assert used is not None and used > 0  # DRAM has the kernel
    assert dax.node_in_use(Host(root), 99) is None and dax.node_in_use(Host(root), None) is None
