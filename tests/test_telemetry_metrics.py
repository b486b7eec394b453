"""The daemon's tiering metrics, the alert rules and the Grafana dashboard.

* the exposition with a telemetry sample parses back strictly (tests/prom.py) and
  ``promtool check metrics`` finds nothing to say;
* counters the kernel lacks are absent series plus ``cxlctl_telemetry_counter_missing``;
* the daemon's loop samples the counters on its own timer, and rates reach the
  interval verdicts;
* ``promtool test rules`` passes the alert-rule tests (deploy/prometheus/);
* every metric the dashboard queries is one the daemon exports.

promtool comes from scripts/install-promtool.sh (CI runs it through scripts/test.sh);
on a machine without it the promtool checks are skipped, except in CI, where that fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from typing import Any, Optional, Set

import pytest

from cxlctl.config import load
from cxlctl.daemon import metrics
from cxlctl.daemon.metrics import Stats, View
from cxlctl.daemon.telemetry import Sampler
from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from cxlctl.telemetry.sample import kinds_of
from cxlctl.telemetry.verdicts import VERDICTS
from tests.daemon_support import config, make_daemon, parse_exposition, step_until, work_tree
from tests.kit import REPO
from tests.tune_support import LIVE, pristine

RULES = os.path.join(REPO, "deploy", "prometheus")
DASHBOARD = os.path.join(REPO, "deploy", "grafana", "cxlctl-tiering.json")


def promtool() -> Optional[str]:
    found = os.environ.get("CXLCTL_PROMTOOL") or shutil.which("promtool")
    cached = "/var/cache/cxlctl-vm/promtool/promtool"
    if not found and os.access(cached, os.X_OK):
        found = cached
    if not found and os.environ.get("CI"):
        pytest.fail("promtool is missing in CI: scripts/test.sh runs scripts/install-promtool.sh")
    return found


def _text(root: str) -> str:
    inv = scan(Host(root))
    tel = Sampler(Host(root)).tick(kinds_of(inv.nodes))
    return metrics.build(View(inv, None, "observing", (), None, Stats(), True, tel))


def _families(text: str) -> Set[str]:
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}


def test_tiering_metrics_parse_back_with_kernel_names_and_verdicts() -> None:
    root = pristine(LIVE)
    text = _text(root)
    ex = parse_exposition(text)
    with open(os.path.join(root, "sys/devices/system/node/node0/vmstat")) as f:
        kernel = dict(line.split() for line in f if len(line.split()) == 2)
    for name in ("pgpromote_success", "pgdemote_kswapd", "pgdemote_direct"):
        if name in kernel:
            assert ex.get(f"cxlctl_node_vmstat_{name}_total", node="0") == int(kernel[name])
            assert ex.types[f"cxlctl_node_vmstat_{name}_total"] == "counter"
    with open(os.path.join(root, "proc/vmstat")) as f:
        system = dict(line.split() for line in f if len(line.split()) == 2)
    assert ex.get("cxlctl_vmstat_numa_hint_faults_total") == int(system["numa_hint_faults"])
    assert {s["verdict"] for s in ex.series("cxlctl_verdict")} == set(VERDICTS)
    assert ex.get("cxlctl_node_memory_by_type_bytes", node="0", type="used") is not None


def test_missing_counters_are_absent_series_and_listed() -> None:
    """A 6.1-style node vmstat without pgdemote_khugepaged: no series, one 'missing' gauge."""
    root = pristine(LIVE)
    inv = scan(Host(root))
    s = Sampler(Host(root)).tick(kinds_of(inv.nodes))
    node0 = s.sample.nodes[0]
    values = dict(node0.vmstat.values, pgdemote_khugepaged=None)
    vm = node0.vmstat._replace(values=values, missing=("pgdemote_khugepaged",))
    sample = s.sample._replace(nodes=(node0._replace(vmstat=vm),) + s.sample.nodes[1:])
    text = metrics.build(View(inv, None, "observing", (), None, Stats(), True, s._replace(sample=sample)))
    ex = parse_exposition(text)
    assert ex.get("cxlctl_node_vmstat_pgdemote_khugepaged_total", node="0") is None
    assert ex.get("cxlctl_telemetry_counter_missing", counter="pgdemote_khugepaged") == 1


def test_promtool_check_metrics_is_clean() -> None:
    tool = promtool()
    if tool is None:
        pytest.skip("promtool not installed (scripts/install-promtool.sh)")
    p = subprocess.run([tool, "check", "metrics"], input=_text(pristine(LIVE)), capture_output=True, text=True)
    assert p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(), (p.stdout, p.stderr)


def test_alert_rules_pass_their_promtool_tests() -> None:
    tool = promtool()
    if tool is None:
        pytest.skip("promtool not installed (scripts/install-promtool.sh)")
    p = subprocess.run([tool, "check", "rules", "cxlctl-tiering.rules.yml"], cwd=RULES, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    p = subprocess.run([tool, "test", "rules", "cxlctl-tiering.tests.yml"], cwd=RULES, capture_output=True, text=True)
    assert p.returncode == 0 and "SUCCESS" in p.stdout, p.stdout + p.stderr


def test_daemon_samples_on_its_timer_and_rates_reach_the_interval_verdicts(tmp_path: Any) -> None:
    root = work_tree(pristine(LIVE), str(tmp_path / "root"))
    d, _, _ = make_daemon(root, config(metrics={"listen": "", "telemetry_interval": 1}))
    try:
        d.startup()
        step_until(d, lambda: d.telemetry is not None)
        first = d.telemetry
        assert first is not None and first.rates is None
        assert parse_exposition(d.metrics_text()).get("cxlctl_telemetry_last_sample_timestamp_seconds") is not None
        step_until(d, lambda: d.telemetry is not first, timeout=5)
        assert d.telemetry is not None and d.telemetry.rates is not None
    finally:
        d.close()


def test_telemetry_interval_zero_turns_sampling_off(tmp_path: Any) -> None:
    root = work_tree(pristine(LIVE), str(tmp_path / "root"))
    d, _, _ = make_daemon(root, config(metrics={"listen": "", "telemetry_interval": 0}))
    try:
        d.startup()
        assert "telemetry" not in d.deadlines
        assert "cxlctl_verdict" not in d.metrics_text()
    finally:
        d.close()


def test_a_reload_that_changes_the_cgroups_makes_a_new_sampler(tmp_path: Any) -> None:
    root = work_tree(pristine(LIVE), str(tmp_path / "root"))
    cfgfile = tmp_path / "cxlctl.toml"
    cfgfile.write_text("[drift]\ninterval = 0\n[health]\nenabled = false\n[metrics]\nlisten = ''\n")
    d, _, _ = make_daemon(root, load(Host(root), str(cfgfile)), config_path=str(cfgfile))
    try:
        d.startup()
        same = d.sampler
        d._do_reload()
        assert d.sampler is same, "an unchanged list keeps the sampler (and the sample rates need)"
        cfgfile.write_text(cfgfile.read_text() + "cgroups = ['/system.slice/x.service']\n")
        d._do_reload()
        assert d.sampler is not same and d.sampler.cgroups == ("/system.slice/x.service",)
    finally:
        d.close()


def test_a_reload_restarts_the_telemetry_timer_with_the_new_interval(tmp_path: Any) -> None:
    root = work_tree(pristine(LIVE), str(tmp_path / "root"))
    cfgfile = tmp_path / "cxlctl.toml"
    body = "[drift]\ninterval = 0\n[health]\nenabled = false\n[metrics]\nlisten = ''\n"
    cfgfile.write_text(body + "telemetry_interval = 3600\n")
    d, _, _ = make_daemon(root, load(Host(root), str(cfgfile)), config_path=str(cfgfile))
    try:
        d.startup()
        assert d.deadlines["telemetry"] > d.clock() + 3000
        cfgfile.write_text(body + "telemetry_interval = 2\n")
        d._do_reload()
        assert d.deadlines["telemetry"] <= d.clock() + 2, "not an hour later, as the old interval said"
    finally:
        d.close()


def test_every_metric_the_dashboard_queries_is_exported() -> None:
    with open(DASHBOARD) as f:
        dash = json.load(f)
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert exprs
    exported = _families(_text(pristine(LIVE)))
    # the per-cgroup families appear once metrics.cgroups names a cgroup; counters of newer kernels may be absent
    optional = {
        "cxlctl_cgroup_memory_bytes",
        "cxlctl_cgroup_pgdemote_kswapd_total",
        "cxlctl_cgroup_pgdemote_direct_total",
        "cxlctl_node_vmstat_pgdemote_proactive_total",
        "cxlctl_node_vmstat_pgdemote_khugepaged_total",
    }
    for e in exprs:
        for name in re.findall(r"\b(cxlctl_[a-z0-9_]+)", e):
            assert name in exported or name in optional, f"dashboard queries {name}, which the daemon does not export"
