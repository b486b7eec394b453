"""Goal-driven DAMON tiering (issue 20 section 3): statements an operator makes, the metrics the
kernel's own tree offers, refusals where it lacks them, and the goal files journaled like the rest.

Trees: recorded in real 6.12 guests (idle DAMON, and cxlctl's tiering running).  A newer DAMON
ABI is shown by the files that release adds to a directory the recorded tree already has
(``contexts/C/pause`` 7.2, ``quotas/goal_tuner`` 7.1, ``stats/nr_snapshots`` 7.0), one empty-ish
file each, as the kernel creates them; the release string is left as recorded, so the test also
shows that the tree, not the version, decides.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List

import pytest

from cxlctl.damon import tree as t
from cxlctl.damon.sysfs import abi_level, probe, read_damon
from cxlctl.errors import EXIT_USAGE
from cxlctl.hostio.host import Host
from cxlctl.hostio.reader import Reader
from cxlctl.tuning import engine
from cxlctl.tuning.damon_tiering import validate
from tests.kit import FIXTURES, cli
from tests.test_tune_damon import _tree, _write_profile
from tests.tune_support import diff, snapshot

TIERING = os.path.join(FIXTURES, "linux-6.12", "single-region-damon-tiering")
IDLE = "linux-6.12/single-region-damon-idle"

PROFILE = """
summary = "keep DRAM at most 90 % used and 70 % of the hot set on DRAM"
include = "inference-damon"
[damon]
enabled = true
dram_max_used = "90%"
hot_on_dram = "70%"
"""


def test_statements_validate_into_goals() -> None:
    d = validate({"enabled": True, "dram_max_used": "90%", "hot_on_dram": "70%", "goal_tuner": "temporal"})
    assert (d.dram_used_goal_bp, d.dram_free_goal_bp, d.dram_max_used_bp) == (9000, 1000, 9000)
    assert d.hot_on_dram_bp == 7000 and d.goal_tuner == "temporal"
    # the statement wins over the goals an included profile set
    d = validate({"enabled": True, "dram_max_used": "80%", "dram_used_goal": "99.7%", "dram_free_goal": "0.5%"})
    assert (d.dram_used_goal_bp, d.dram_free_goal_bp) == (8000, 2000)
    with pytest.raises(ValueError, match="goal_tuner must be one of consist, temporal"):
        validate({"enabled": True, "goal_tuner": "fast"})
    with pytest.raises(ValueError, match="hot_on_dram"):
        validate({"enabled": True, "hot_on_dram": "170%"})


def _copy_tiering(tmp_path: Any) -> str:
    from tests.kit import copy_fixture

    return copy_fixture(TIERING, tmp_path / "t")


def _add(root: str, rel: str, text: str) -> None:
    path = os.path.join(root, rel.lstrip("/"))
    with open(path, "w") as f:
        f.write(text)


def _metrics(root: str) -> List[str]:
    r = Reader(root)
    state = read_damon(r)
    return list(probe(state, r.text("/proc/sys/kernel/osrelease"), r).goal_metrics)


def test_the_tree_not_the_release_decides_the_goal_metrics(tmp_path: Any) -> None:
    root = _copy_tiering(tmp_path)
    assert _metrics(root) == []  # 6.12: no node goal metric (6.16+)
    state = read_damon(Reader(root))
    level, ev = abi_level(state, (7, 3))  # a release string claiming 7.3 on this 6.12 tree
    assert level is not None and level < (7, 0)
    assert any("lack stats/nr_snapshots" in e for e in ev) and any("overrules the release 7.3" in e for e in ev)
    k = t.kdamond(0)
    _add(root, t.at(t.context(0, 0), t.PAUSE), "N\n")  # a 7.2 context directory
    _add(root, t.at(t.scheme(0, 0, 0), t.QUOTA_GOAL_TUNER), "consist\n")
    _add(root, t.at(t.scheme(0, 0, 0), t.STATS_NR_SNAPSHOTS), "0\n")
    assert k
    m = _metrics(root)  # the release still says 6.12: a backport is taken for what it offers
    assert "node_eligible_mem_bp" in m and "node_mem_used_bp" in m and "active_mem_bp" in m


def test_6_12_refuses_what_it_lacks_clearly_and_writes_nothing(tmp_path: Any, monkeypatch: Any) -> None:
    root = _tree(IDLE, tmp_path, monkeypatch)
    _write_profile(root, "goals", PROFILE)
    p = engine.prepare(Host(root), "goals").plan
    text = " ".join(p.refusals)
    assert "hot_on_dram needs the DAMON quota goal metric node_eligible_mem_bp, which Linux 7.2 added" in text
    assert "dram_max_used needs the DAMON quota goal metric node_mem_used_bp, which Linux 6.16 added" in text
    assert "takes no node or memory goal metric" in text
    before = snapshot(root)
    r = cli("--root", root, "tune", "apply", "goals")
    assert r.returncode == EXIT_USAGE and "node_eligible_mem_bp" in r.stderr.replace("\n", " ")
    assert diff(before, snapshot(root)) == []


def _as_release(root: str, release: str) -> None:
    path = os.path.join(root, "proc/sys/kernel/osrelease")
    os.unlink(path)
    with open(path, "w") as f:
        f.write(release + "\n")


def _goal_steps(plan: Any) -> Dict[str, str]:
    return {s.setting: s.desired for s in plan.steps if ".goal" in s.setting or "goal_tuner" in s.setting}


def test_7_x_plan_writes_the_statements_as_goals_and_says_which_kernel_has_which(
    tmp_path: Any, monkeypatch: Any
) -> None:
    root = _tree(IDLE, tmp_path, monkeypatch)
    _write_profile(root, "goals", PROFILE)
    _as_release(root, "7.3.4+deb13-amd64")  # an idle host: no directory answers, the release does
    p = engine.prepare(Host(root), "goals").plan
    assert not p.refusals, p.refusals
    g = _goal_steps(p)
    # kdamond0 watches DRAM (migrate_cold), kdamond1 the CXL node (migrate_hot)
    assert g["damon.kdamond0.scheme0.goal0.target_metric"] == "node_mem_free_bp"
    assert g["damon.kdamond0.scheme0.goal0.target_value"] == "1000"
    assert g["damon.kdamond1.scheme0.goal0.target_metric"] == "node_mem_used_bp"
    assert g["damon.kdamond1.scheme0.goal0.target_value"] == "9000"
    assert g["damon.kdamond1.scheme0.goal1.target_metric"] == "node_eligible_mem_bp"
    assert g["damon.kdamond1.scheme0.goal1.target_value"] == "7000"
    assert g["damon.kdamond1.scheme0.goal1.nid"] == "0"
    w = " ".join(p.warnings)
    assert "quota goal metrics on this kernel: node_mem_used_bp" in w and "node_eligible_mem_bp" in w
    # 6.19 takes the node goals but not the hot-set share
    _as_release(root, "6.19.3+deb13-amd64")
    p = engine.prepare(Host(root), "goals").plan
    assert len(p.refusals) == 1 and "node_eligible_mem_bp, which Linux 7.2 added" in p.refusals[0]
    assert "not on it: active_mem_bp (7.0+)" in " ".join(p.warnings)


def _tree_as(release: str, tmp_path: Any, monkeypatch: Any) -> str:
    from tests import damon_sysfs
    from tests.tune_support import work_copy

    root = work_copy(IDLE, str(tmp_path / "root"))
    _as_release(root, release)
    damon_sysfs.install(monkeypatch, root)  # the kernel's side effects as that release has them
    return root


def test_goals_apply_journaled_and_revert(tmp_path: Any, monkeypatch: Any) -> None:
    root = _tree_as("7.3.4+deb13-amd64", tmp_path, monkeypatch)
    _write_profile(
        root, "goals", PROFILE.replace('hot_on_dram = "70%"', 'hot_on_dram = "70%"\ngoal_tuner = "temporal"')
    )
    before = snapshot(root)
    res = engine.apply(Host(root), "goals")
    assert res.ok, res
    g1 = t.entry(t.scheme(1, 0, 0), t.LIST_GOALS, 1)
    with open(os.path.join(root, t.at(g1, t.GOAL_TARGET_METRIC).lstrip("/"))) as f:
        assert f.read().strip() == "node_eligible_mem_bp"
    with open(os.path.join(root, t.at(t.scheme(1, 0, 0), t.QUOTA_GOAL_TUNER).lstrip("/"))) as f:
        assert f.read().strip() == "temporal"
    with open(os.path.join(root, "run/cxlctl/journal.json")) as f:
        assert t.at(g1, t.GOAL_TARGET_VALUE) in f.read()
    # the running tree now answers for itself: its directories show the 7.2+ ABI
    assert "node_eligible_mem_bp" in _metrics(root)
    assert engine.revert(Host(root)).ok
    assert [d for d in diff(before, snapshot(root)) if "/damon/" in d and "kdamonds/0" not in d] == []


def test_hot_on_dram_with_a_scope_says_the_kernel_measures_all_hot_memory(tmp_path: Any, monkeypatch: Any) -> None:
    """The kernel's node_eligible_mem_bp checks the regions' access pattern, not the scheme's
    filters (mm/damon/core.c damos_calc_eligible_bytes; seen in a 7.3.4 guest, where the quota
    fell to 1 B with 38 % of a 2 MiB scoped hot set on DRAM): the plan says so for a scoped profile."""
    root = _tree(IDLE, tmp_path, monkeypatch)
    _as_release(root, "7.3.4+deb13-amd64")
    _write_profile(root, "goals", PROFILE)
    unscoped = " ".join(engine.prepare(Host(root), "goals").plan.warnings)
    assert "measures the share over all memory" not in unscoped
    _write_profile(root, "scoped", PROFILE + 'memcg = "/kv"\nanon_only = true\n')
    w = " ".join(engine.prepare(Host(root), "scoped").plan.warnings)
    assert (
        "hot_on_dram: the kernel measures the share over all memory in the regions DAMON finds hot on both "
        "nodes, not only the memcg /kv and anonymous pages the scope moves" in w
    ), w
