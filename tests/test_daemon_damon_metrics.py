"""The daemon's DAMON metrics: kdamond state and per-scheme stats as Prometheus counters.

Trees recorded in the 6.12 VM: ``single-region-damon-tiering`` (cxlctl's two kdamonds
after they migrated pages: real, non-zero stats; recorded without a journal, so here
they are someone else's), ``single-region-damon-running`` (a kdamond of another tool)
and ``single-region-damon-idle`` with an apply through the DAMON stand-in
(:mod:`tests.damon_sysfs`).  The stats refresh (``update_schemes_stats``) must go to
cxlctl's running kdamonds only: every write is recorded by a spy on the one write
primitive.  tests/vm/test_vm_damon_retarget.py scrapes the same metrics from a daemon
on the real kernel.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any, List, Tuple

from cxlctl.daemon import damon_metrics as damon_mod
from cxlctl.daemon import metrics
from cxlctl.daemon.metrics import Stats, View
from cxlctl.hostio import write as hw
from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from cxlctl.tuning import engine
from tests import damon_sysfs
from tests.prom import parse_exposition
from tests.test_telemetry_metrics import promtool
from tests.tune_support import diff, snapshot, work_copy

TIERING = "linux-6.12/single-region-damon-tiering"
RUNNING = "linux-6.12/single-region-damon-running"
IDLE = "linux-6.12/single-region-damon-idle"
ADMIN = "sys/kernel/mm/damon/admin/kdamonds"


def _spy(monkeypatch: Any) -> List[Tuple[str, str]]:
    calls: List[Tuple[str, str]] = []
    real = hw.write_knob

    def write_knob(root: str, path: str, text: str, *, index: Any = None) -> None:
        calls.append((root + path, text))
        real(root, path, text, index=index)

    monkeypatch.setattr(hw, "write_knob", write_knob)
    return calls


def _text(root: str) -> str:
    inv = scan(Host(root))
    d = damon_mod.collect(root, inv)
    return metrics.build(View(inv, None, "observing", (), None, Stats(), True, None, d))


def _stat(root: str, k: int, name: str) -> int:
    with open(os.path.join(root, ADMIN, str(k), "contexts/0/schemes/0/stats", name)) as f:
        return int(f.read())


def test_scheme_stats_of_another_tools_kdamonds_are_exported_and_never_refreshed(
    tmp_path: Any, monkeypatch: Any
) -> None:
    root = work_copy(TIERING, str(tmp_path / "root"))
    before = snapshot(root)
    calls = _spy(monkeypatch)
    ex = parse_exposition(_text(root))
    assert calls == [] and diff(before, snapshot(root)) == []  # no journal: not cxlctl's
    assert ex.types["cxlctl_damon_scheme_applied_bytes_total"] == "counter"
    for k, action, src, dst in ((0, "migrate_cold", "0", "1"), (1, "migrate_hot", "1", "0")):
        lab = {"kdamond": str(k), "scheme": "0", "owner": "other"}
        assert ex.get("cxlctl_damon_kdamond_state", kdamond=str(k), state="on") == 1
        for field, name in (
            ("nr_tried", "tried_regions"),
            ("sz_tried", "tried_bytes"),
            ("nr_applied", "applied_regions"),
            ("sz_applied", "applied_bytes"),
            ("qt_exceeds", "quota_exceeds"),
        ):
            series = ex.series(f"cxlctl_damon_scheme_{name}_total")
            (labels,) = [s for s in series if s["kdamond"] == str(k)]
            assert labels == {**lab, "action": action, "source_node": src, "destination_node": dst}
            assert ex.get(f"cxlctl_damon_scheme_{name}_total", kdamond=str(k)) == _stat(root, k, field)
    assert ex.get("cxlctl_damon_scheme_applied_bytes_total", kdamond="0") == 4403200  # recorded: pages moved


def test_only_cxlctls_running_kdamonds_are_refreshed(tmp_path: Any, monkeypatch: Any) -> None:
    root = work_copy(IDLE, str(tmp_path / "root"))
    damon_sysfs.install(monkeypatch, root)
    assert engine.apply(root, "inference-damon").ok
    calls = _spy(monkeypatch)
    ex = parse_exposition(_text(root))
    refreshed = sorted(p[len(root) :] for p, t in calls if t == "update_schemes_stats\n")
    assert refreshed == [f"/{ADMIN}/0/state", f"/{ADMIN}/1/state"] and len(calls) == 2
    assert {s["owner"] for s in ex.series("cxlctl_damon_scheme_tried_regions_total")} == {"cxlctl"}
    assert ex.get("cxlctl_damon_kdamond_state", kdamond="1", owner="cxlctl", state="on") == 1
    # stopped by hand: reported off, and no longer asked to refresh (the kernel would say EINVAL)
    with open(os.path.join(root, ADMIN, "1/state"), "w") as f:
        f.write("off\n")
    calls.clear()
    ex = parse_exposition(_text(root))
    assert ex.get("cxlctl_damon_kdamond_state", kdamond="1", state="off") == 1
    assert [p[len(root) :] for p, _ in calls] == [f"/{ADMIN}/0/state"]


def test_a_kdamond_of_someone_else_beside_an_applied_profile_is_not_written(tmp_path: Any, monkeypatch: Any) -> None:
    root = work_copy(RUNNING, str(tmp_path / "root"))
    damon_sysfs.install(monkeypatch, root)
    assert engine.apply(root, "inference-capacity").ok  # a journal of this boot, without [damon]
    calls = _spy(monkeypatch)
    ex = parse_exposition(_text(root))
    assert calls == []
    assert ex.get("cxlctl_damon_kdamond_state", kdamond="0", owner="other", state="on") == 1
    assert ex.get("cxlctl_damon_scheme_tried_regions_total", action="stat", destination_node="") == 0


def test_promtool_check_metrics_is_clean_with_damon() -> None:
    tool = promtool()
    if tool is None:
        import pytest

        pytest.skip("promtool not installed (scripts/install-promtool.sh)")
    from tests.kit import FIXTURES

    text = _text(os.path.join(FIXTURES, TIERING))
    assert "cxlctl_damon_scheme_applied_bytes_total{" in text
    p = subprocess.run([tool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(), (p.stdout, p.stderr)


def test_the_daemon_exports_them_after_startup(tmp_path: Any, monkeypatch: Any) -> None:
    from tests.daemon_support import config, make_daemon

    root = work_copy(IDLE, str(tmp_path / "root"))
    damon_sysfs.install(monkeypatch, root)
    assert engine.apply(root, "inference-damon").ok
    d, _, _ = make_daemon(root, config(metrics={"listen": "", "telemetry_interval": 0}))
    try:
        d.startup()
        ex = parse_exposition(d.metrics_text())
    finally:
        d.close()
    assert ex.get("cxlctl_damon_kdamond_state", kdamond="0", owner="cxlctl", state="on") == 1
    assert ex.get("cxlctl_damon_scheme_applied_bytes_total", action="migrate_hot", source_node="1") == 0


def test_damon_alert_rules_pass_their_promtool_tests() -> None:
    import pytest

    tool = promtool()
    if tool is None:
        pytest.skip("promtool not installed (scripts/install-promtool.sh)")
    from tests.kit import REPO

    rules = os.path.join(REPO, "deploy", "prometheus")
    p = subprocess.run([tool, "check", "rules", "cxlctl-damon.rules.yml"], cwd=rules, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    p = subprocess.run([tool, "test", "rules", "cxlctl-damon.tests.yml"], cwd=rules, capture_output=True, text=True)
    assert p.returncode == 0 and "SUCCESS" in p.stdout, p.stdout + p.stderr


def test_every_metric_the_damon_dashboard_and_rules_query_is_exported() -> None:
    import json
    import re

    from tests.kit import FIXTURES, REPO

    with open(os.path.join(REPO, "deploy", "grafana", "cxlctl-damon.json")) as f:
        dash = json.load(f)
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    with open(os.path.join(REPO, "deploy", "prometheus", "cxlctl-damon.rules.yml")) as f:
        exprs += re.findall(r"expr: (.*)", f.read())
    assert len(exprs) >= 6
    text = _text(os.path.join(FIXTURES, TIERING))
    exported = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    for e in exprs:
        names = re.findall(r"\b(cxlctl_[a-z0-9_]+)", e)
        assert names, e
        for name in names:
            assert name in exported, f"{name} is queried but not exported"


def test_daemon_metrics_command_shows_them_without_refreshing(tmp_path: Any, monkeypatch: Any, capsys: Any) -> None:
    from cxlctl.cli import run

    root = work_copy(IDLE, str(tmp_path / "root"))
    damon_sysfs.install(monkeypatch, root)
    assert engine.apply(root, "inference-damon").ok
    capsys.readouterr()
    calls = _spy(monkeypatch)
    assert run(["--root", root, "daemon", "metrics", "--no-health"]) == 0
    ex = parse_exposition(capsys.readouterr().out)
    assert calls == []
    assert ex.get("cxlctl_damon_kdamond_state", kdamond="0", owner="cxlctl", state="on") == 1
    assert ex.get("cxlctl_damon_scheme_tried_regions_total", action="migrate_cold") == 0
