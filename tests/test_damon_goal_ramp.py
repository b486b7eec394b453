"""What the kernel does with a DAMON quota goal, and a plan that converges (issue 34 row 8b).

Seen in a 7.3.4 guest: ``dram_max_used = "8%"`` with DRAM at 10.5 % used, ``cold_age = "5s"``, quota
64M per 1s; after 120 s the cold scheme's ``quotas/effective_bytes`` was 26 and after 340 s nothing had
moved.  The kernel's default tuner (``damos_goal_tune_esz_bp_consist`` → ``damon_feed_loop_next_input``,
mm/damon/core.c) starts the goal-tuned quota at 1 byte and multiplies it by 1 + (10000 - score) / 10000
each reset interval: at score 9,728 that is 1.0272^120 ≈ 25 bytes after 120 s, and 1 MiB after ~8.6 min.

The tree is the recorded 7.x idle guest (7.3.4, DAMON sysfs, no kdamond) with node 0's MemFree edited
to that 10.5 %; the 6.19 case is the same tree with the release edited (node goals 6.16+, no
``quotas/goal_tuner`` before 7.1).
"""

from __future__ import annotations

import math
import os
from typing import Any, Dict

from cxlctl.hostio.host import Host
from cxlctl.tuning import engine
from cxlctl.tuning.damon_tiering import consist_ramp_s
from tests.test_tune_damon import _tree, _write_profile

IDLE7 = "linux-7.x/single-region-damon-idle"
NODE0 = "sys/devices/system/node/node0/meminfo"

PROFILE = """
summary = "keep DRAM at most 8 % used"
include = "inference-damon"
[damon]
enabled = true
dram_max_used = "8%"
cold_age = "5s"
quota_size = "64M"
quota_interval = "1s"
"""


def _used(root: str, pct: float) -> None:
    path = os.path.join(root, NODE0)
    with open(path) as f:
        lines = f.read().splitlines()
    total = int(lines[0].split()[3])
    free = round(total * (100 - pct) / 100)
    lines[1] = f"Node 0 MemFree:        {free} kB"
    os.unlink(path)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def _tree7(tmp_path: Any, monkeypatch: Any) -> str:
    """The 7.x idle tree with DAMON_STAT off (the recorded boot runs it, beside which the kernel starts
    no kdamond) and DRAM at 10.5 % used."""
    root = _tree(IDLE7, tmp_path, monkeypatch)
    params = os.path.join(root, "sys/module/damon_stat/parameters")
    for name, value in (("enabled", "N\n"), ("kdamond_pid", "-1\n")):
        os.unlink(os.path.join(params, name))
        with open(os.path.join(params, name), "w") as f:
            f.write(value)
    _used(root, 10.5)
    return root


def _release(root: str, release: str) -> None:
    path = os.path.join(root, "proc/sys/kernel/osrelease")
    os.unlink(path)
    with open(path, "w") as f:
        f.write(release + "\n")


def _writes(plan: Any) -> Dict[str, str]:
    return {s.setting: s.desired for s in plan.steps if s.setting.startswith("damon.kdamond0.scheme0")}


def test_the_ramp_is_the_kernels_arithmetic() -> None:
    # the guest's figures: 26 bytes after 120 one-second intervals at score 9,728
    assert round(1.0272**120) == 25 and math.isclose(consist_ramp_s(9728, 1000, 26), 120, rel_tol=0.02)
    assert 8 * 60 < consist_ramp_s(9728, 1000, 1 << 20) < 9 * 60


def test_7x_picks_temporal_and_says_how_fast(tmp_path: Any, monkeypatch: Any) -> None:
    root = _tree7(tmp_path, monkeypatch)
    _write_profile(root, "dram8", PROFILE)
    p = engine.prepare(Host(root), "dram8").plan
    assert not p.refusals, p.refusals
    w = _writes(p)
    assert w["damon.kdamond0.scheme0.goal0.target_metric"] == "node_mem_free_bp"
    assert w["damon.kdamond0.scheme0.goal0.target_value"] == "9200"
    assert w["damon.kdamond0.scheme0.quota.goal_tuner"] == "temporal"
    text = " ".join(p.warnings)
    assert "goal_tuner temporal" in text and "the full 64 MiB per 1s quota while the goal is unmet" in text
    assert "met now (score 13,1" in text  # the hot scheme: DRAM is over its 8 % already
    assert "score 9,72" in text and "1 MiB after ~9 min" in text, text
    # a stated tuner is kept, and the plan says what it costs
    _write_profile(root, "consist", PROFILE + 'goal_tuner = "consist"\n')
    p = engine.prepare(Host(root), "consist").plan
    assert _writes(p)["damon.kdamond0.scheme0.quota.goal_tuner"] == "consist"
    assert "1 MiB after ~9 min" in " ".join(p.warnings)


def test_before_7_1_a_far_goal_gets_the_fixed_quota(tmp_path: Any, monkeypatch: Any) -> None:
    root = _tree7(tmp_path, monkeypatch)
    _release(root, "6.19.3+deb13-amd64")
    _write_profile(root, "dram8", PROFILE)
    p = engine.prepare(Host(root), "dram8").plan
    assert not p.refusals, p.refusals
    w = _writes(p)
    # the cold scheme acts at once on the fixed quota; its goals are cleared, no tuner is written
    assert w["damon.kdamond0.scheme0.quota.nr_goals"] == "0"
    assert w["damon.kdamond0.scheme0.quota.bytes"] == str(64 << 20)
    assert not any("goal0" in k or "goal_tuner" in k for k in w)
    text = " ".join(p.warnings)
    assert "far from its goal, so the fixed 64 MiB per 1s quota without goals" in text
    assert "1 MiB after ~9 min" in text and "cxlctl tune apply again near the goal" in text
    # the hot scheme's goal (DRAM at most 8 % used) is exceeded: the kernel holds it back, goals kept
    hot = {s.setting: s.desired for s in p.steps if s.setting.startswith("damon.kdamond1.scheme0")}
    assert hot["damon.kdamond1.scheme0.goal0.target_metric"] == "node_mem_used_bp"
    assert "goal is met now" in text
