"""DAMON weighted multi-destination demotion (6.17+ ``schemes/<S>/dests/``).

The tree is the 6.12 recording with one CXL node (``single-region-damon-idle``); a
"6.17" host is that work copy with its ``proc/sys/kernel/osrelease`` rewritten (the one
file the probe and the DAMON stand-in read to tell kernels apart: :mod:`tests.damon_sysfs`
then gives new scheme directories a ``dests/`` directory and goals a ``nid``, as 6.17 does).
A second CXL node is the recorded node 1 copied under id 2, in the same memory tier and at
the same distance, with three times its memory blocks (an Inventory object built here, as
tests/test_damon_retarget.py does: the plan reads nodes from the inventory, DAMON files from
the tree).  No VM here runs 6.17 (the guests are Debian's 6.12 and 6.1), so there is no
VM test of this; the kernel side is the stand-in's model of ``mm/damon/sysfs-schemes.c``.
"""

from __future__ import annotations

import errno
import json
import os
from typing import Any, Dict, List, Optional

import pytest

from cxlctl.damon.sysfs import probe_host, read_damon
from cxlctl.hostio import write as hw
from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from cxlctl.model import Coordinates, Inventory
from cxlctl.tuning import engine
from cxlctl.tuning import journal as jn
from cxlctl.tuning.damon_tiering import validate
from cxlctl.tuning.transaction import Transaction
from tests import damon_sysfs
from tests.tune_support import diff, journal, snapshot, work_copy

IDLE = "linux-6.12/single-region-damon-idle"
TIERING = "linux-6.12/single-region-damon-tiering"
ADMIN = "/sys/kernel/mm/damon/admin/kdamonds"
DAMON_VIEW = ("sys/kernel/mm", "proc/sys", "sys/devices/system/memory")
R617 = "6.17.8+deb14-amd64"
S0 = "contexts/0/schemes/0"
NR = "damon.kdamond0.scheme0.nr_dests"


def _tree(tmp_path: Any, monkeypatch: Any, release: Optional[str] = R617, source: str = IDLE) -> str:
    root = work_copy(source, str(tmp_path / "root"))
    if release:
        damon_sysfs.as_kernel(root, release)
    damon_sysfs.install(monkeypatch, root)
    return root


def with_two_cxl(inv: Inventory, bandwidth: Optional[Dict[int, Optional[int]]] = None) -> Inventory:
    """``inv`` plus CXL node 2: node 1's twin (same tier, same distance from DRAM) with three
    times its memory blocks; ``bandwidth`` puts HMAT/CDAT write bandwidth on nodes 1/2 (access1)."""
    dram = [n for n in inv.nodes if n.kind == "dram"]
    (cxl,) = [n for n in inv.nodes if n.kind == "cxl" and n.has_memory]
    assert len(dram) == 1 and cxl.id == 1 and len(inv.nodes) == 2 and cxl.tier is not None
    first = 1 + max(b.id for n in inv.nodes for b in n.memory_blocks)
    blocks = tuple(b._replace(id=first + i, node=2) for i, b in enumerate(cxl.memory_blocks * 3) if b.state == "online")
    d0 = dram[0].distance
    bw = bandwidth or {}

    def acc(nid: int) -> Optional[Coordinates]:
        v = bw.get(nid)
        return Coordinates(read_bandwidth=v, write_bandwidth=v) if v else None

    nodes = (
        dram[0]._replace(distance=d0 + (d0[1],)),
        cxl._replace(distance=cxl.distance + (d0[0],), access1=acc(1)),
        cxl._replace(id=2, memory_blocks=blocks, distance=(d0[1], d0[0], d0[0]), access1=acc(2)),
    )
    return inv._replace(nodes=nodes)


def _read(root: str, rel: str) -> str:
    with open(root + ADMIN + "/" + rel) as f:
        return f.read().strip()


def _steps(t: Transaction) -> Dict[str, Any]:
    return {s.setting: s for s in t.plan.steps if s.knob == "damon"}


def _dests(root: str, k: int = 0) -> List[tuple]:  # type: ignore[type-arg]
    n = int(_read(root, f"{k}/{S0}/dests/nr_dests"))
    return [(_read(root, f"{k}/{S0}/dests/{i}/id"), _read(root, f"{k}/{S0}/dests/{i}/weight")) for i in range(n)]


# ---------------------------------------------------------------------------- probe


def test_probe_learns_dests_from_the_release_then_from_a_scheme_directory(tmp_path: Any, monkeypatch: Any) -> None:
    root612 = work_copy(IDLE, str(tmp_path / "a"))
    _, caps = probe_host(Host(root612))
    assert not caps.dests
    root = _tree(tmp_path, monkeypatch)
    _, caps = probe_host(Host(root))
    assert caps.dests and caps.node_goals
    assert any("dests/ present (6.17+)" in e for e in caps.evidence)
    # a scheme directory is better evidence than the release: one without dests/ says no ...
    old = work_copy(TIERING, str(tmp_path / "b"))
    damon_sysfs.as_kernel(old, R617)
    state, caps = probe_host(Host(old))
    assert state.kdamonds and not caps.dests
    assert any("lack dests/" in e for e in caps.evidence)
    # ... and one the 6.17 stand-in made says yes, and is read with its destinations
    assert Transaction(Host(root), "inference-damon", inventory=with_two_cxl(scan(Host(root)))).commit().ok
    state, caps = probe_host(Host(root))
    assert caps.dests and any("have dests/" in e for e in caps.evidence)
    k0 = state.kdamond(0)
    assert k0 is not None
    assert [(d.node, d.weight) for d in k0.schemes[0].dests] == [(1, 1), (2, 3)]


# ---------------------------------------------------------------------------- plan


def test_plan_on_617_spreads_demotion_over_the_tier_by_capacity(tmp_path: Any, monkeypatch: Any) -> None:
    root = _tree(tmp_path, monkeypatch)
    two = with_two_cxl(scan(Host(root)))
    t = Transaction(Host(root), "inference-damon", inventory=two)
    assert t.plan.refusals == ()
    by = _steps(t)
    assert by["damon.kdamond0.scheme0.action"].desired == "migrate_cold"
    assert by["damon.kdamond0.scheme0.target_nid"].desired == "1"  # the nearest, for kernels that read it
    assert by["damon.kdamond0.scheme0.nr_dests"].desired == "2"
    got = [(by[f"damon.kdamond0.scheme0.dest{i}.{f}"].desired) for i in (0, 1) for f in ("id", "weight")]
    assert got == ["1", "1", "2", "3"]  # node 2 has three times node 1's online blocks
    note = by["damon.nr_kdamonds"].note
    assert "node0→nodes 1,2 weights 1:3 migrate_cold (6.17 destinations by online capacity;" in note
    assert "node1 alone where paddr ignores them)" in note
    # the CXL kdamonds promote to DRAM as before: no dests/ files of theirs are written
    assert not [s for s in by if s.startswith(("damon.kdamond1.scheme0.", "damon.kdamond2.scheme0.")) and "dest" in s]
    # the count comes before the destinations it creates
    names = [s.setting for s in t.plan.steps if s.knob == "damon"]
    assert names.index("damon.kdamond0.scheme0.nr_dests") < names.index("damon.kdamond0.scheme0.dest0.id")


def test_weights_follow_write_bandwidth_when_every_node_has_it(tmp_path: Any, monkeypatch: Any) -> None:
    root = _tree(tmp_path, monkeypatch)
    inv = scan(Host(root))
    by = _steps(Transaction(Host(root), "inference-damon", inventory=with_two_cxl(inv, {1: 24000, 2: 8000})))
    assert [by[f"damon.kdamond0.scheme0.dest{i}.weight"].desired for i in (0, 1)] == ["3", "1"]
    assert "weights 3:1 migrate_cold (6.17 destinations by write bandwidth (access1, HMAT/CDAT);" in (
        by["damon.nr_kdamonds"].note
    )
    # one node without performance data: capacity, never a mix
    by = _steps(Transaction(Host(root), "inference-damon", inventory=with_two_cxl(inv, {1: 24000, 2: None})))
    assert [by[f"damon.kdamond0.scheme0.dest{i}.weight"].desired for i in (0, 1)] == ["1", "3"]
    # numbers too large for a readable ratio are scaled to at most 1000
    by = _steps(Transaction(Host(root), "inference-damon", inventory=with_two_cxl(inv, {1: 30011, 2: 10007})))
    assert [by[f"damon.kdamond0.scheme0.dest{i}.weight"].desired for i in (0, 1)] == ["1000", "333"]


def test_612_plans_exactly_as_before_with_two_cxl_nodes(tmp_path: Any, monkeypatch: Any) -> None:
    root = _tree(tmp_path, monkeypatch, release=None)
    by = _steps(Transaction(Host(root), "inference-damon", inventory=with_two_cxl(scan(Host(root)))))
    assert not [s for s in by if "dest" in s]
    assert by["damon.nr_kdamonds"].note.startswith("node0→node1 migrate_cold, node1→node0 migrate_hot")


def test_one_cxl_node_on_617_demotes_to_target_nid_alone(tmp_path: Any, monkeypatch: Any) -> None:
    """One CXL node: today's layout; the only addition on a 6.17 kernel is ``nr_dests`` 0, which says
    "target_nid alone" explicitly (a committed running kdamond would otherwise keep old destinations)."""
    root = _tree(tmp_path, monkeypatch)
    t = Transaction(Host(root), "inference-damon", inventory=scan(Host(root)))
    by = _steps(t)
    assert by["damon.kdamond0.scheme0.nr_dests"].desired == "0"
    assert not [s for s in by if ".dest" in s]
    assert (
        "node0→node1 migrate_cold" in by["damon.nr_kdamonds"].note
        and "destinations" not in by["damon.nr_kdamonds"].note
    )
    ref = _steps(Transaction(Host(work_copy(IDLE, str(tmp_path / "612"))), "inference-damon"))
    # against the 6.12 plan: the same files but nr_dests (and the 6.16+ quota goals)
    assert {s for s in set(by) ^ set(ref) if "goal" not in s} == {"damon.kdamond0.scheme0.nr_dests"}


def test_multi_dest_false_keeps_one_destination(tmp_path: Any, monkeypatch: Any) -> None:
    from tests.test_tune_damon import _write_profile

    root = _tree(tmp_path, monkeypatch)
    _write_profile(
        root, "one", 'summary = "x"\ninclude = "inference-damon"\n[damon]\nenabled = true\nmulti_dest = false\n'
    )
    by = _steps(Transaction(Host(root), "one", inventory=with_two_cxl(scan(Host(root)))))
    assert by["damon.kdamond0.scheme0.nr_dests"].desired == "0"
    assert by["damon.nr_kdamonds"].note.startswith("node0→node1 migrate_cold,")


@pytest.mark.parametrize("value", ["no", 1, "false"])
def test_multi_dest_is_validated(value: Any) -> None:
    with pytest.raises(ValueError, match="multi_dest must be true or false"):
        validate({"enabled": True, "multi_dest": value})
    assert validate({"enabled": True}).multi_dest and not validate({"enabled": True, "multi_dest": False}).multi_dest


# ---------------------------------------------------------------------------- apply / verify / revert


def test_apply_retarget_verify_drift_revert_on_617(tmp_path: Any, monkeypatch: Any) -> None:
    root = _tree(tmp_path, monkeypatch)
    before = snapshot(root)
    inv = scan(Host(root))
    assert engine.apply(Host(root), "inference-damon").ok
    assert _dests(root) == []
    # a second CXL node comes (the daemon's re-target): stop, re-create with destinations, start
    res = Transaction(Host(root), "inference-damon", inventory=with_two_cxl(inv)).commit()
    assert res.ok, res.error
    assert _dests(root) == [("1", "1"), ("2", "3")] and _read(root, f"0/{S0}/target_nid") == "1"
    assert [_read(root, f"{k}/state") for k in range(3)] == ["on", "on", "on"]
    assert engine.verify(Host(root)).drift == 0
    # a weight changed by hand: drift on exactly that file; re-applying commits it back
    with open(root + f"{ADMIN}/0/{S0}/dests/1/weight", "w") as f:
        f.write("7\n")
    v = engine.verify(Host(root))
    assert [c.setting for c in v.checks if c.status == "drift"] == ["damon.kdamond0.scheme0.dest1.weight"]
    t = Transaction(Host(root), "inference-damon", inventory=with_two_cxl(inv))
    assert [(s.setting, s.write) for s in t.plan.writes] == [
        ("damon.kdamond0.scheme0.dest1.weight", "3\n"),
        ("damon.kdamond0.state", "commit\n"),
    ]
    assert t.commit().ok and engine.verify(Host(root)).drift == 0
    # the node goes: back to one destination
    assert Transaction(Host(root), "inference-damon", inventory=inv).commit().ok
    assert _dests(root) == [] and _read(root, "nr_kdamonds") == "2"
    assert engine.verify(Host(root)).drift == 0
    r = engine.revert(Host(root))
    assert r.ok, r.errors
    assert sorted(os.listdir(root + ADMIN)) == ["nr_kdamonds"]
    assert diff(before, snapshot(root)) == []


def test_turning_multi_dest_off_on_a_running_kdamond_clears_its_destinations(tmp_path: Any, monkeypatch: Any) -> None:
    from tests.test_tune_damon import _write_profile

    root = _tree(tmp_path, monkeypatch)
    _write_profile(
        root, "one", 'summary = "x"\ninclude = "inference-damon"\n[damon]\nenabled = true\nmulti_dest = false\n'
    )
    before = snapshot(root)
    two = with_two_cxl(scan(Host(root)))
    assert Transaction(Host(root), "inference-damon", inventory=two).commit().ok
    t = Transaction(Host(root), "one", inventory=two)
    assert [(s.setting, s.write) for s in t.plan.writes] == [
        ("damon.kdamond0.scheme0.nr_dests", "0\n"),
        ("damon.kdamond0.state", "commit\n"),
    ]
    assert t.commit().ok
    assert _dests(root) == [] and engine.verify(Host(root)).drift == 0
    assert engine.revert(Host(root)).ok
    assert diff(before, snapshot(root)) == []


@pytest.mark.parametrize("fault", ["EINVAL", "EIO"])
def test_a_failing_dests_write_leaves_the_host_as_it_was(tmp_path: Any, monkeypatch: Any, fault: str) -> None:
    """Each new write (nr_dests, every id and weight) fails in turn, on a fresh apply and on a
    re-target of running kdamonds: DAMON (and every knob) is exactly as before."""
    root = _tree(tmp_path, monkeypatch)
    inv = scan(Host(root))
    two = with_two_cxl(inv)
    before = snapshot(root, DAMON_VIEW)
    writes = Transaction(Host(root), "inference-damon", inventory=two).plan.writes
    new = [i for i, s in enumerate(writes, 1) if ".nr_dests" in s.setting or ".dest" in s.setting]
    assert len(new) == 5
    for k in new:
        monkeypatch.setenv("CXLCTL_TEST_FAULT", f"{k}:{fault}")
        res = Transaction(Host(root), "inference-damon", inventory=two).commit()
        assert not res.ok and res.rollback_errors == (), (k, res.error)
        assert diff(before, snapshot(root, DAMON_VIEW)) == [], k
        assert journal(root).state == jn.ROLLED_BACK
    monkeypatch.delenv("CXLCTL_TEST_FAULT")
    # running on one CXL node, a second one comes: the re-target's dests writes fail in turn
    assert Transaction(Host(root), "inference-damon", inventory=inv).commit().ok
    running = snapshot(root, DAMON_VIEW)
    applied = journal(root)
    writes = Transaction(Host(root), "inference-damon", inventory=two).plan.writes
    new = [i for i, s in enumerate(writes, 1) if ".nr_dests" in s.setting or ".dest" in s.setting]
    assert new
    for k in new:
        monkeypatch.setenv("CXLCTL_TEST_FAULT", f"{k}:{fault}")
        res = Transaction(Host(root), "inference-damon", inventory=two).commit()
        assert not res.ok and res.rollback_errors == (), (k, res.error)
        assert diff(running, snapshot(root, DAMON_VIEW)) == [], k
        assert journal(root).entries == applied.entries, k
    monkeypatch.delenv("CXLCTL_TEST_FAULT")
    assert Transaction(Host(root), "inference-damon", inventory=two).commit().ok
    assert engine.revert(Host(root)).ok


# ---------------------------------------------------------------------------- the stand-in


def test_stand_in_models_617_dests_as_the_kernel_does(tmp_path: Any, monkeypatch: Any) -> None:
    """What tests above rely on: 6.17 scheme directories have dests/, nr_dests creates its
    children (also while the kdamond runs), and bad numbers are refused with EINVAL."""
    root = _tree(tmp_path, monkeypatch)

    def w(host_path: str, text: str) -> None:
        hw.write_knob(root, host_path[len(root) :], text)

    w(root + ADMIN + "/nr_kdamonds", "1")
    for rel, v in (("0/contexts/nr_contexts", "1"), ("0/contexts/0/schemes/nr_schemes", "1")):
        w(root + f"{ADMIN}/{rel}", v)
    d = root + f"{ADMIN}/0/{S0}/dests"
    assert os.listdir(d) == ["nr_dests"]
    w(d + "/nr_dests", "2")
    assert sorted(os.listdir(d)) == ["0", "1", "nr_dests"] and _read(root, f"0/{S0}/dests/1/weight") == "0"
    for path, bad in ((d + "/nr_dests", "-1"), (d + "/nr_dests", "two"), (d + "/0/id", "-3"), (d + "/1/weight", "x")):
        with pytest.raises(hw.KnobRejected) as e:
            w(path, bad)
        assert e.value.errno == errno.EINVAL, (path, bad)
    w(root + f"{ADMIN}/0/state", "on")
    w(d + "/nr_dests", "1")  # no EBUSY while running (only nr_kdamonds has that)
    assert sorted(os.listdir(d)) == ["0", "nr_dests"]
    state = read_damon(Host(root).reader)
    k0 = state.kdamond(0)
    assert k0 is not None and [(x.node, x.weight) for x in k0.schemes[0].dests] == [(0, 0)]


def test_sigkill_amid_the_dests_writes_then_revert_restores(tmp_path: Any, monkeypatch: Any) -> None:
    root = _tree(tmp_path, monkeypatch)
    before = snapshot(root)
    writes = Transaction(Host(root), "inference-damon", inventory=with_two_cxl(scan(Host(root)))).plan.writes
    new = [i for i, s in enumerate(writes, 1) if ".nr_dests" in s.setting or ".dest" in s.setting]
    # after nr_dests (its children exist, still 0), mid-destinations, after the last weight
    for k in (new[0], new[2], new[-1]):
        damon_sysfs.kill_damon_apply_at(root, k, "tests.test_damon_dests:with_two_cxl")
        assert journal(root).state == jn.APPLYING, k
        assert os.path.isdir(root + f"{ADMIN}/0/{S0}/dests/1"), k
        res = engine.revert(Host(root))
        assert res.ok, (k, res.errors)
        assert diff(before, snapshot(root)) == [], k


def test_status_shows_the_destinations(tmp_path: Any, monkeypatch: Any, capsys: Any) -> None:
    from cxlctl.cli import run

    root = _tree(tmp_path, monkeypatch)
    assert Transaction(Host(root), "inference-damon", inventory=with_two_cxl(scan(Host(root)))).commit().ok
    rows = engine.status(Host(root)).damon
    assert [(r.kdamond, r.target_nid, r.dests) for r in rows] == [(0, 1, ((1, 1), (2, 3))), (1, 0, ()), (2, 0, ())]
    capsys.readouterr()
    monkeypatch.setenv("COLUMNS", "80")
    assert run(["--root", root, "tune", "status"]) == 0
    out = capsys.readouterr().out
    assert " 1,2 (1:3) " in out  # whole in its column at 80 (it was folded there: "1,2" / "(1:3)")
    assert max(len(line) for line in out.splitlines()) <= 80
    assert run(["--root", root, "tune", "status", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["dests"] for r in doc["damon"]] == [[[1, 1], [2, 3]], [], []]


def test_destinations_are_the_nearest_nodes_tier_or_else_its_distance(tmp_path: Any, monkeypatch: Any) -> None:
    root = _tree(tmp_path, monkeypatch)
    two = with_two_cxl(scan(Host(root)))

    def dest_ids(inv: Inventory) -> List[str]:
        by = _steps(Transaction(Host(root), "inference-damon", inventory=inv))
        return [by[f"damon.kdamond0.scheme0.dest{i}.id"].desired for i in range(int(by[NR].desired))]

    def node2(inv: Inventory, **kw: Any) -> Inventory:
        return inv._replace(nodes=tuple(n._replace(**kw) if n.id == 2 else n for n in inv.nodes))

    def untiered(inv: Inventory) -> Inventory:
        return inv._replace(nodes=tuple(n._replace(tier=None) for n in inv.nodes))

    assert dest_ids(two) == ["1", "2"]
    assert dest_ids(node2(two, tier=23)) == []  # another (slower) tier: not a peer of node 1
    assert dest_ids(untiered(two)) == ["1", "2"]  # no tiers: the same distance from node 0
    d0 = two.nodes[0].distance
    farther = two.nodes[0]._replace(distance=d0[:2] + (d0[2] + 10,))
    assert dest_ids(untiered(two._replace(nodes=(farther,) + two.nodes[1:]))) == []
    # a peer without an online memory block has nothing to place pages on
    offline = tuple(b._replace(state="offline") for b in two.nodes[2].memory_blocks)
    assert dest_ids(node2(two, memory_blocks=offline)) == []
