"""DAMON tiering re-targeted when a CXL node comes or goes (what the daemon's reconcile does).

The daemon re-plans with a fresh scan after each udev burst; these tests give the
transaction that scan.  The tree is the 6.12 recording with one CXL node
(``single-region-damon-idle``); a second CXL node is the recorded node 1 copied
under a new id with memory blocks of its own (an Inventory object built in the test:
the plan reads nodes from the inventory, the DAMON files from the tree), and a node
that goes is node 1 with its blocks offline.  The kernel's side effects of DAMON
writes (EBUSY on ``nr_kdamonds`` while a kdamond runs, directories re-created) come
from :mod:`tests.damon_sysfs`; tests/vm/test_vm_damon_retarget.py does the same on
the real kernel.
"""

from __future__ import annotations

import os
from typing import Any, List, Tuple

import pytest

from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from cxlctl.model import Inventory
from cxlctl.tuning import engine
from cxlctl.tuning import journal as jn
from cxlctl.tuning.transaction import Transaction
from tests import damon_sysfs
from tests.tune_support import diff, journal, snapshot, work_copy

IDLE = "linux-6.12/single-region-damon-idle"
ADMIN = "/sys/kernel/mm/damon/admin/kdamonds"
DAMON_VIEW = ("sys/kernel/mm", "proc/sys", "sys/devices/system/memory")


def _tree(tmp_path: Any, monkeypatch: Any) -> str:
    root = work_copy(IDLE, str(tmp_path / "root"))
    damon_sysfs.install(monkeypatch, root)
    return root


def with_second_cxl(inv: Inventory) -> Inventory:
    """``inv`` plus a CXL node 2 nearer to DRAM node 0 than node 1 is (blocks after every other)."""
    dram = [n for n in inv.nodes if n.kind == "dram"]
    (cxl,) = [n for n in inv.nodes if n.kind == "cxl" and n.has_memory]
    assert len(dram) == 1 and cxl.id == 1 and len(inv.nodes) == 2
    first = 1 + max(b.id for n in inv.nodes for b in n.memory_blocks)
    blocks = tuple(b._replace(id=first + i, node=2) for i, b in enumerate(cxl.memory_blocks))
    d0 = dram[0].distance
    near = (d0[0] + d0[1]) // 2  # between local DRAM and node 1
    nodes = (
        dram[0]._replace(distance=d0 + (near,)),
        cxl._replace(distance=cxl.distance + (d0[1],)),
        cxl._replace(id=2, memory_blocks=blocks, distance=(near, d0[1], d0[0])),
    )
    return inv._replace(nodes=nodes)


def without_cxl(inv: Inventory) -> Inventory:
    """``inv`` with the CXL node's memory offlined (the node stays, without memory)."""
    nodes = tuple(
        n._replace(has_memory=False, memory_blocks=tuple(b._replace(state="offline") for b in n.memory_blocks))
        if n.kind == "cxl"
        else n
        for n in inv.nodes
    )
    return inv._replace(nodes=nodes)


def _read(root: str, rel: str) -> str:
    with open(root + ADMIN + "/" + rel) as f:
        return f.read().strip()


def _layout(root: str) -> List[Tuple[str, str, str, str]]:
    """(state, action, target_nid, first region start) of each kdamond in the tree."""
    n = int(_read(root, "nr_kdamonds"))
    s = "contexts/0/schemes/0"
    return [
        (
            _read(root, f"{k}/state"),
            _read(root, f"{k}/{s}/action"),
            _read(root, f"{k}/{s}/target_nid"),
            _read(root, f"{k}/contexts/0/targets/0/regions/0/start"),
        )
        for k in range(n)
    ]


def test_a_new_cxl_node_restarts_the_running_kdamonds_on_the_new_layout(tmp_path: Any, monkeypatch: Any) -> None:
    root = _tree(tmp_path, monkeypatch)
    before = snapshot(root)
    inv = scan(Host(root))
    bs = inv.memory_block_size
    assert bs and engine.apply(Host(root), "inference-damon").ok
    two = _layout(root)
    assert [(s, a, t) for s, a, t, _ in two] == [("on", "migrate_cold", "1"), ("on", "migrate_hot", "0")]

    grown = with_second_cxl(inv)
    t = Transaction(Host(root), "inference-damon", inventory=grown)
    assert t.plan.refusals == ()
    writes = [(s.setting, s.write) for s in t.plan.writes]
    # stop every running kdamond, then re-create, rewrite and start them (EBUSY otherwise)
    assert writes[:3] == [
        ("damon.kdamond0.state", "off\n"),
        ("damon.kdamond1.state", "off\n"),
        ("damon.nr_kdamonds", "3\n"),
    ]
    assert writes[-3:] == [(f"damon.kdamond{k}.state", "on\n") for k in range(3)]
    res = t.commit()
    assert res.ok, res.error
    n2 = grown.nodes[2]
    assert _layout(root) == [
        ("on", "migrate_cold", "2", two[0][3]),  # DRAM now demotes to the nearer CXL node
        ("on", "migrate_hot", "0", two[1][3]),
        ("on", "migrate_hot", "0", str(n2.memory_blocks[0].id * bs)),
    ]
    assert engine.verify(Host(root)).drift == 0
    assert journal(root).state == jn.APPLIED

    # the node goes again: back to two kdamonds, the DRAM one demoting to node 1
    res = Transaction(Host(root), "inference-damon", inventory=inv).commit()
    assert res.ok, res.error
    assert _layout(root) == two
    assert engine.verify(Host(root)).drift == 0
    st = engine.status(Host(root))
    assert [(r.kdamond, r.owner) for r in st.damon] == [(0, "cxlctl"), (1, "cxlctl")]
    # applying on the same scan again changes nothing (the journal's extra entries are not drift)
    assert Transaction(Host(root), "inference-damon", inventory=inv).plan.writes == ()

    # revert after two re-targets: the pre-apply state, byte for byte
    r = engine.revert(Host(root))
    assert r.ok, r.errors
    assert sorted(os.listdir(root + ADMIN)) == ["nr_kdamonds"]
    assert diff(before, snapshot(root)) == []


def test_the_last_cxl_node_going_stops_and_removes_cxlctls_kdamonds(tmp_path: Any, monkeypatch: Any) -> None:
    root = _tree(tmp_path, monkeypatch)
    before = snapshot(root)
    inv = scan(Host(root))
    assert engine.apply(Host(root), "inference-damon").ok
    running = _layout(root)
    t = Transaction(Host(root), "inference-damon", inventory=without_cxl(inv))
    assert any("stopped and removed until one is back" in w for w in t.plan.warnings)
    res = t.commit()
    assert res.ok, res.error
    assert sorted(os.listdir(root + ADMIN)) == ["nr_kdamonds"] and _read(root, "nr_kdamonds") == "0"
    assert engine.verify(Host(root)).drift == 0
    # the node is back: the kdamonds are created and started again
    res = Transaction(Host(root), "inference-damon", inventory=inv).commit()
    assert res.ok, res.error
    assert _layout(root) == running
    assert engine.revert(Host(root)).ok
    assert diff(before, snapshot(root)) == []


@pytest.mark.parametrize("grow", [True, False], ids=["node-added", "node-removed"])
def test_a_failing_retarget_write_leaves_the_running_layout(tmp_path: Any, monkeypatch: Any, grow: bool) -> None:
    """Every write of a re-target fails in turn (EIO): the kdamonds run as before, as before."""
    root = _tree(tmp_path, monkeypatch)
    inv = scan(Host(root))
    start, target = (inv, with_second_cxl(inv)) if grow else (with_second_cxl(inv), inv)
    assert Transaction(Host(root), "inference-damon", inventory=start).commit().ok
    running = snapshot(root, DAMON_VIEW)
    applied = journal(root)
    n = len(Transaction(Host(root), "inference-damon", inventory=target).plan.writes)
    assert n > 20
    for k in range(1, n + 1):
        monkeypatch.setenv("CXLCTL_TEST_FAULT", f"{k}:EIO")
        res = Transaction(Host(root), "inference-damon", inventory=target).commit()
        assert not res.ok and res.rollback_errors == (), (k, res.error, res.rollback_errors)
        assert diff(running, snapshot(root, DAMON_VIEW)) == [], k
        assert journal(root).entries == applied.entries, k
    monkeypatch.delenv("CXLCTL_TEST_FAULT")
    assert Transaction(Host(root), "inference-damon", inventory=target).commit().ok
    assert engine.verify(Host(root)).drift == 0
    assert engine.revert(Host(root)).ok
    assert sorted(os.listdir(root + ADMIN)) == ["nr_kdamonds"]


def renumbered(inv: Inventory, new_id: int) -> Inventory:
    """``inv`` with its CXL node under id ``new_id`` (node ids 0 and N, as when a CXL window's node
    is the only one online besides DRAM: ``nodeN/distance`` lists the *online* nodes, so it still
    has two entries)."""
    nodes = tuple(
        n._replace(id=new_id, memory_blocks=tuple(b._replace(node=new_id) for b in n.memory_blocks))
        if n.kind == "cxl"
        else n
        for n in inv.nodes
    )
    return inv._replace(nodes=nodes)


def test_distances_are_read_by_position_among_online_nodes(tmp_path: Any, monkeypatch: Any) -> None:
    """Found in the VM (hb2x2: DRAM node 0 and CXL node 3 online): the DRAM kdamond was left out
    because node 0's distance row was indexed by node id instead of by position."""
    root = _tree(tmp_path, monkeypatch)
    inv = renumbered(scan(Host(root)), 3)
    assert [len(n.distance) for n in inv.nodes] == [2, 2]
    t = Transaction(Host(root), "inference-damon", inventory=inv)
    by = {s.setting: s for s in t.plan.steps if s.knob == "damon"}
    assert by["damon.nr_kdamonds"].desired == "2"
    assert (by["damon.kdamond0.scheme0.action"].desired, by["damon.kdamond0.scheme0.target_nid"].desired) == (
        "migrate_cold",
        "3",
    )
    assert (by["damon.kdamond1.scheme0.action"].desired, by["damon.kdamond1.scheme0.target_nid"].desired) == (
        "migrate_hot",
        "0",
    )


def test_sigkill_during_a_retarget_then_revert_restores_the_boot_state(tmp_path: Any, monkeypatch: Any) -> None:
    root = _tree(tmp_path, monkeypatch)
    before = snapshot(root)
    inv = scan(Host(root))
    n = len(Transaction(Host(root), "inference-damon", inventory=with_second_cxl(inv)).plan.writes)
    # after stopping one kdamond, after nr_kdamonds, mid-files, before the last start
    for k in (1, 3, 40, n - 1):
        assert engine.apply(Host(root), "inference-damon").ok
        damon_sysfs.kill_damon_apply_at(root, k, "tests.test_damon_retarget:with_second_cxl")
        assert journal(root).state == jn.APPLYING, k
        res = engine.revert(Host(root))
        assert res.ok, (k, res.errors)
        assert diff(before, snapshot(root)) == [], k
