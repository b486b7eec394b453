"""Prometheus text format (parsed back strictly), the textfile, NFD labels and health parsing."""

from __future__ import annotations

import datetime
import glob
import json
import os
import re
import stat
from typing import Any, Dict, List, Tuple

import pytest

from cxlctl.daemon import metrics
from cxlctl.daemon.metrics import DriftCheck, Stats, View
from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from cxlctl.k8s import nfd
from cxlctl.ras import health_probe as health
from tests.daemon_support import FIXTURE_DIR, config, make_daemon, parse_exposition, step_until, work_tree
from tests.kit import fixture_roots
from tests.tune_support import LIVE, pristine


def _roots() -> List[str]:
    found = sorted(os.path.dirname(m) for m in glob.glob(os.path.join(FIXTURE_DIR, "*", "*", "cxlctl-record.json")))
    return found or fixture_roots()


ROOTS = _roots() + [LIVE]


def _root(src: str) -> str:
    return pristine(LIVE) if src == LIVE else src


@pytest.mark.parametrize("src", ROOTS, ids=[os.path.relpath(r, FIXTURE_DIR) if r != LIVE else r for r in ROOTS])
def test_exposition_parses_back_and_matches_the_inventory(src: str) -> None:
    inv = scan(Host(_root(src)))
    st = Stats()
    st.bump(st.events, "cxl", 12)
    st.bump(st.rescans, "event")
    st.bump(st.reconciles, "ok")
    st.reconcile_seconds_sum, st.reconcile_seconds_count, st.last_reconcile_seconds = 0.25, 1, 0.25
    drift = (DriftCheck("vm.swappiness", "10", "77", "drift"), DriftCheck("demotion_enabled", "true", "true", "pass"))
    text = metrics.build(View(inv, "inference-capacity", "applied", drift, None, st, True))
    ex = parse_exposition(text)
    # every family has HELP and TYPE; names are cxlctl_*
    assert ex.types and set(ex.types) == set(ex.helps)
    assert all(n.startswith("cxlctl_") for n in ex.types)
    assert all(ex.types[n] == "counter" for n in ex.types if n.endswith("_total"))
    assert ex.get("cxlctl_cxl_present") == (1 if inv.has_cxl else 0)
    assert ex.get("cxlctl_cxl_capacity_bytes") == inv.totals.cxl_capacity
    assert ex.get("cxlctl_cxl_online_bytes") == inv.totals.cxl_online
    for n in inv.nodes:
        if n.mem_total is not None:
            assert ex.get("cxlctl_node_memory_total_bytes", node=str(n.id)) == n.mem_total
        assert ex.get("cxlctl_node_memory_blocks", node=str(n.id), state="online") == sum(
            1 for b in n.memory_blocks if (b.state or "").startswith("online")
        )
        if n.id in inv.weighted_interleave.weights:
            assert ex.get("cxlctl_weighted_interleave_weight", node=str(n.id)) == inv.weighted_interleave.weights[n.id]
    # issue 44: a node's tier is a value (tier ids change with hot-plug: no label of theirs churns a series)
    for n in inv.nodes:
        if n.tier is not None:
            assert ex.get("cxlctl_node_memory_tier", node=str(n.id)) == n.tier
    assert not ex.series("cxlctl_tier_memory_total_bytes")
    assert not [s for s in ex.series("cxlctl_node_memory_total_bytes") if "tier" in s]
    for m in inv.memdevs:
        assert ex.get("cxlctl_memdev_ram_bytes", memdev=m.name) == m.ram_size
    assert (
        ex.get("cxlctl_profile_state", state="applied") == 1 and ex.get("cxlctl_profile_state", state="observing") == 0
    )
    assert ex.get("cxlctl_knob_drift", setting="vm.swappiness") == 1
    assert set(ex.series("cxlctl_knob_drift")[0]) == {"setting"}  # no value as a label: it would churn
    assert ex.get("cxlctl_drift_settings") == 1
    assert ex.get("cxlctl_uevents_total", subsystem="cxl") == 12
    assert (
        ex.get("cxlctl_reconciles_total", result="ok") == 1 and ex.get("cxlctl_reconciles_total", result="failed") == 0
    )
    assert (
        ex.get("cxlctl_reconcile_duration_seconds_sum") == 0.25
        and ex.get("cxlctl_reconcile_duration_seconds_count") == 1
    )
    assert ex.types["cxlctl_reconcile_duration_seconds"] == "summary"
    assert ex.get("cxlctl_health_available") == 0


def test_label_values_are_escaped() -> None:
    nasty = 'a"b\\c\nd'
    text = metrics.build(View(None, nasty, "applied", (DriftCheck(nasty, "10", "", "drift"),), None, Stats(), False))
    ex = parse_exposition(text)
    assert ex.get("cxlctl_profile_info", profile=nasty) == 1
    assert ex.get("cxlctl_knob_drift", setting=nasty) == 1
    assert '\\"' in text and "\\n" in text and "\\\\" in text


def test_value_formatting() -> None:
    assert [metrics.fmt_value(v) for v in (1, 2.0, 0.125, float("inf"), float("nan"), True)] == [
        "1",
        "2",
        "0.125",
        "+Inf",
        "NaN",
        "1",
    ]


# a Get Health Info record as ndctl prints it (cxl-list(1) example), for one sick and one healthy device
HEALTH_DOC = [
    {
        "memdev": "mem0",
        "health": {
            "maintenance_needed": True,
            "performance_degraded": True,
            "hw_replacement_needed": True,
            "media_normal": False,
            "media_not_ready": False,
            "media_persistence_lost": False,
            "media_data_lost": True,
            "ext_life_used": "normal",
            "ext_temperature": "critical",
            "ext_corrected_volatile": "warning",
            "ext_corrected_persistent": "normal",
            "life_used_percent": 15,
            "temperature": 25,
            "dirty_shutdowns": 10,
            "volatile_errors": 20,
            "pmem_errors": 30,
        },
    },
    {
        "memdev": "mem1",
        "health": {"media_normal": True, "ext_temperature": "normal", "life_used_percent": 1, "temperature": 30},
    },
    {"memdev": "mem10"},
]


def test_health_parsing_and_metrics() -> None:
    got = health.parse(HEALTH_DOC)
    assert [(m.memdev, m.status) for m in got] == [("mem0", "critical"), ("mem1", "ok"), ("mem10", "no-data")]
    assert got[0].values == {
        "life_used_percent": 15,
        "temperature": 25,
        "dirty_shutdowns": 10,
        "volatile_errors": 20,
        "pmem_errors": 30,
    }
    assert "hw_replacement_needed" in got[0].reasons and "ext_temperature=critical" in got[0].reasons
    # nested like `cxl list -vvv`
    assert [
        m.memdev
        for m in health.parse([{"bus": "root0", "ports:root0": [{"endpoints:port1": [{"memdev": HEALTH_DOC[1]}]}]}])
    ] == ["mem1"]
    h = health.Health(True, "cxl list -M -H", got, 1.7e9, 0.1)
    ex = parse_exposition(metrics.build(View(None, None, "observing", (), h, Stats(), True)))
    assert ex.get("cxlctl_health_available") == 1
    assert ex.get("cxlctl_memdev_health", memdev="mem0", status="critical") == 1
    assert ex.get("cxlctl_memdev_health", memdev="mem0", status="ok") == 0
    assert ex.get("cxlctl_memdev_health", memdev="mem10", status="no-data") == 1
    assert ex.get("cxlctl_memdev_corrected_volatile_errors_total", memdev="mem0") == 20
    assert ex.get("cxlctl_memdev_temperature_celsius", memdev="mem1") == 30


def test_health_unavailable(tmp_path: Any) -> None:
    h = health.collect(Host(str(tmp_path)))
    assert not h.available and "reads the live system, not --root" in h.reason
    h = health.collect(Host("/"), command=str(tmp_path / "no-such-cxl"))
    assert not h.available and "is not installed" in h.reason
    fake = tmp_path / "cxl"
    fake.write_text("#!/bin/sh\necho 'cxl: oops' >&2\nexit 3\n")
    fake.chmod(0o755)
    h = health.collect(Host("/"), command=str(fake))
    assert not h.available and h.reason.endswith("exited 3: cxl: oops")


def test_health_from_the_real_cxl_tool() -> None:
    """ndctl's cxl on this host (no CXL devices here): it runs and reports no memdevs."""
    import shutil

    if shutil.which("cxl") is None:
        pytest.skip("ndctl's cxl is not installed")
    h = health.collect(Host("/"))
    assert h.available, h.reason
    assert all(m.memdev.startswith("mem") for m in h.memdevs)


def test_textfile_and_nfd_outputs(tmp_path: Any) -> None:
    src = _roots()[-1] if _roots() else pristine(LIVE)
    root = work_tree(src, str(tmp_path / "root"))
    os.makedirs(root + "/etc/kubernetes/node-feature-discovery/features.d")
    d, _, cap = make_daemon(
        root, config(metrics={"textfile_dir": "/var/lib/node_exporter"}, reconcile={"rescan_interval": 60})
    )
    try:
        d.startup()
    finally:
        d.close()
    tdir = root + "/var/lib/node_exporter"
    assert os.listdir(tdir) == ["cxlctl.prom"], "no temporary files left behind"
    st = os.stat(tdir + "/cxlctl.prom")
    assert stat.S_IMODE(st.st_mode) == 0o644
    with open(tdir + "/cxlctl.prom") as f:
        ex = parse_exposition(f.read())
    assert ex.get("cxlctl_ready") == 1
    fdir = root + "/etc/kubernetes/node-feature-discovery/features.d"
    assert os.listdir(fdir) == ["cxlctl"]
    with open(fdir + "/cxlctl") as f:
        text = f.read()
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    labels = dict(ln.split("=", 1) for ln in lines)
    inv = scan(Host(root))
    ns = "feature.node.kubernetes.io/"
    assert labels[ns + "cxl.present"] == ("true" if inv.has_cxl else "false")
    assert labels[ns + "cxl.memdevs"] == str(len(inv.memdevs))
    assert labels[ns + "cxl.capacity-mib"] == str(inv.totals.cxl_capacity >> 20)
    cxl = sorted(n.id for n in inv.nodes if n.kind == "cxl" and n.has_memory)
    assert labels[ns + "cxl.numa-nodes"] == ("_".join(map(str, cxl)) if cxl else "none")
    for k, v in labels.items():
        assert k.startswith(ns) and nfd.valid_value(v), (k, v)
        assert re.fullmatch(r"[a-z0-9.-]+/[A-Za-z0-9][-A-Za-z0-9_.]{0,62}", k), k
    m = re.search(r"^# \+expiry-time=(\S+)$", text, re.M)
    assert m, text
    exp = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    left = (exp - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
    assert 3500 < left <= 3600  # max(3 x 60 s rescan, 1 h)


def test_nfd_directory_is_never_created(tmp_path: Any) -> None:
    root = work_tree(pristine(LIVE), str(tmp_path / "root"))
    d, _, cap = make_daemon(root)
    try:
        d.startup()
    finally:
        d.close()
    assert not os.path.exists(root + "/etc/kubernetes")
    assert cap.grep("Node Feature Discovery labels not written")


def test_cli_metrics_and_labels_write_nothing(tmp_path: Any, capsys: Any) -> None:
    from cxlctl.cli import run

    root = work_tree(pristine(LIVE), str(tmp_path / "root"))
    assert run(["--root", root, "daemon", "metrics", "--no-health"]) == 0
    ex = parse_exposition(capsys.readouterr().out)
    assert ex.get("cxlctl_profile_state", state="observing") == 1 and ex.get("cxlctl_ready") == 0
    assert run(["--root", root, "daemon", "labels"]) == 0
    out = capsys.readouterr().out
    assert "feature.node.kubernetes.io/cxl.present=" in out
    assert not os.path.exists(root + "/run/cxlctl")


def test_status_line_and_metrics_after_a_real_startup(tmp_path: Any) -> None:
    root = work_tree(pristine(LIVE), str(tmp_path / "root"))
    d, fac, _ = make_daemon(root)
    try:
        d.startup()
        fac.current.trigger()
        step_until(d, lambda: d.stats.rescans.get("event", 0) == 1)
        ex = parse_exposition(d.metrics_text())
        assert ex.get("cxlctl_rescans_total", reason="event") == 1
        assert ex.get("cxlctl_uevents_total", subsystem="memory") == 1
        assert (ex.get("cxlctl_last_event_to_reconciled_seconds") or 0) > 0
        assert "no profile (observing)" in d.status_line()
    finally:
        d.close()
    assert json.dumps(d.stats.rescans)  # plain data


# -- issue 44 item 9: node_exporter's conventions -------------------------------------------------


@pytest.mark.parametrize(
    "tree", ["linux-7.x/hmat2-region", "linux-7.x/hb2x2-region-ras", "linux-7.x/single-region-damon-tiering"]
)
def test_one_shot_metrics_follow_node_exporters_conventions(tree: str) -> None:
    """``cxlctl daemon metrics`` runs no daemon: no ``cxlctl_up 1``.  Base units in every name; no
    label that churns: tier ids, node lists, states or values as labels of one series."""
    from tests.kit import FIXTURES, cli

    text = cli("--root", os.path.join(FIXTURES, tree), "daemon", "metrics", check=True).stdout
    ex = parse_exposition(text)
    assert not ex.series("cxlctl_up") and ex.get("cxlctl_ready") == 0
    names = {n for n, _ in ex.samples}
    bad_units = [n for n in names if re.search(r"_(mbps|ms|ns|us|kb|kib|mb|mib|percent|pages_per_second)(_|$)", n)]
    assert not bad_units, bad_units
    churn = {lab for _, labs in ex.samples for lab, _ in labs} & {"tier", "nodes", "expected", "actual"}
    assert not churn, churn
    for name in ("cxlctl_capacity_state", "cxlctl_profile_state", "cxlctl_damon_kdamond_state"):
        by_obj: Dict[Tuple[Tuple[str, str], ...], List[float]] = {}
        for n, labs in ex.samples:
            if n == name:
                key = tuple(sorted((k, v) for k, v in labs if k != "state"))
                by_obj.setdefault(key, []).append(ex.samples[(n, labs)])
        assert all(sum(v) <= 1 and len(v) > 1 for v in by_obj.values()), (name, by_obj)  # every state a series
