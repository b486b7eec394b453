"""Issue 20 section 3 on the trees recorded in a real Debian 7.3.4 guest (fixtures/linux-7.x).

What the kernel itself shows there, against what cxlctl makes of it: the counters 6.12 lacks
(``pgpromote_candidate_nrl``, ``pgdemote_proactive``) read and not listed missing; DAMON_STAT's
kdamond from boot (``/sys/module/damon_stat/parameters``) noted by doctor and not refused by
DAMON tiering; Debian's config without EDAC scrub / CXL Features / fwctl reported as "not built
into this kernel"; weighted_interleave/nodeN for the memory nodes only; and the goal statements
planned on a kernel that takes every goal metric.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict

from cxlctl.doctor.gather import gather
from cxlctl.doctor.report import run
from cxlctl.hostio.host import Host
from cxlctl.tuning import engine
from tests.kit import FIXTURES, cli
from tests.test_k7feat_goals import PROFILE
from tests.test_tune_damon import _tree, _write_profile

T73 = os.path.join(FIXTURES, "linux-7.x", "single-region")


def _keyvals(path: str) -> Dict[str, int]:
    with open(path) as f:
        return {k: int(v) for k, v in (ln.split() for ln in f if len(ln.split()) == 2)}


def test_7_x_counters_are_read_not_missing() -> None:
    rep: Dict[str, Any] = json.loads(cli("--root", T73, "stat", "--json", check=True).stdout)
    kernel = _keyvals(os.path.join(T73, "proc/vmstat"))
    for name in ("pgpromote_candidate_nrl", "pgdemote_proactive"):
        assert name in kernel, name  # what the recorded 7.3 has
        assert name not in rep["system"]["missing"]
        assert rep["system"]["counters"][name] == kernel[name]


def test_7_x_doctor_notes_damon_stat_ras_builds_and_wi_nodes() -> None:
    with open(os.path.join(T73, "sys/module/damon_stat/parameters/kdamond_pid")) as f:
        pid = f.read().strip()
    checks = {c.id: c for c in run(gather(Host(T73)))}
    ds = checks["kernel.damon.damon_stat"]
    assert ds.result == "note" and f"pid {pid}" in ds.message
    ras = checks["kernel.ras-features"]  # the config: Debian 13 keeps it in /usr/lib/modules/VER/config
    assert ras.result == "note" and "not built into this kernel: EDAC_SCRUB" in ras.message
    assert "FWCTL" in ras.message and "CXL_FEATURES" in ras.message
    wi = checks["kernel.weighted-interleave.nodes"]
    assert wi.result == "ok", wi.message
    assert not [c for c in checks.values() if c.result == "fail" and ("EDAC" in c.message or "FWCTL" in c.message)]


def test_7_x_damon_tiering_with_goal_statements_once_damon_stat_is_off(tmp_path: Any, monkeypatch: Any) -> None:
    root = _tree("linux-7.x/single-region", tmp_path, monkeypatch)
    _write_profile(root, "goals", PROFILE)
    # the recorded 7.3.4 boot runs DAMON_STAT, beside which the kernel starts no kdamond (EBUSY)
    (why,) = engine.prepare(Host(root), "goals").plan.refusals
    assert "damon_stat (kdamond pid 55)" in why and "echo N > /sys/module/damon_stat/parameters/enabled" in why
    params = os.path.join(root, "sys/module/damon_stat/parameters")
    for name, value in (("enabled", "N\n"), ("kdamond_pid", "-1\n")):
        os.unlink(os.path.join(params, name))
        with open(os.path.join(params, name), "w") as f:
            f.write(value)
    p = engine.prepare(Host(root), "goals").plan
    assert not p.refusals, p.refusals
    # node_eligible_mem_bp is measured over the kdamond's own regions: the CXL node's kdamond (1)
    # watches DRAM's ranges too, or the share reads 0 for ever (the 7.3.4 guest showed it)
    desired = {s.setting: str(s.desired) for s in p.steps}
    dram = [
        (int(desired[f"damon.kdamond0.region{i}.start"]), int(desired[f"damon.kdamond0.region{i}.end"]))
        for i in range(int(desired["damon.kdamond0.nr_regions"]))
    ]
    cxl = [
        (int(desired[f"damon.kdamond1.region{i}.start"]), int(desired[f"damon.kdamond1.region{i}.end"]))
        for i in range(int(desired["damon.kdamond1.nr_regions"]))
    ]
    assert set(dram) < set(cxl) and cxl == sorted(cxl), (dram, cxl)
    goals = {s.setting: s.desired for s in p.steps if ".goal" in s.setting}
    assert "node_eligible_mem_bp" in goals.values() and "node_mem_used_bp" in goals.values()


RATIO = """
summary = "weights 3:1 on a 7.x host without bandwidth figures"
include = "inference-capacity"
[knobs.weighted_interleave]
weights = "3:1"
nodes = ["dram", "cxl"]
"""


def test_7_x_revert_without_figures_leaves_auto_off_and_says_why(tmp_path: Any, monkeypatch: Any) -> None:
    """Found in a 7.3.4 guest (``single``, no HMAT): ``auto`` reads true at boot, but once a weight was
    written the kernel refuses ``auto = true`` with ENODEV (no bandwidth figures).  Revert puts the
    weights back, leaves ``auto`` false, says why, and succeeds: the revert is not left failed."""
    import errno

    from cxlctl.hostio import write as w
    from cxlctl.tuning import journal as jn
    from tests.tune_support import journal

    root = _tree("linux-7.x/single-region", tmp_path, monkeypatch)
    _write_profile(root, "ratio", RATIO)
    wi = os.path.join(root, "sys/kernel/mm/mempolicy/weighted_interleave")
    boot = {n: open(os.path.join(wi, n)).read() for n in sorted(os.listdir(wi))}
    assert boot["auto"].strip() == "true"
    assert engine.apply(Host(root), "ratio").ok
    assert open(os.path.join(wi, "auto")).read().strip() == "false"
    real = w.write_knob

    def kernel_without_figures(r: str, path: str, text: str, *, index: Any = None) -> None:
        if path.endswith("/weighted_interleave/auto") and text.strip() == "true":
            raise w.KnobGone(r + path, errno.ENODEV, "No such device", "gone (No such device)")
        real(r, path, text, index=index)

    monkeypatch.setattr(w, "write_knob", kernel_without_figures)
    res = engine.revert(Host(root))
    assert res.ok, res.errors
    assert any("ENODEV" in m and "auto stays false" in m for m in res.messages), res.messages
    assert journal(root).state == jn.REVERTED
    now = {n: open(os.path.join(wi, n)).read() for n in sorted(os.listdir(wi))}
    assert now == {**boot, "auto": "false\n"}, now
    r = cli("--root", root, "tune", "status")
    assert r.returncode == 0 and "Traceback" not in r.stderr
