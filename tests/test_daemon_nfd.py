"""NFD labels for fleet scheduling: capacity per tier, weighted-interleave mode, tiering engine, health.

On recorded 6.12 and 6.1 trees (copied where a test adds a kdamond's state or
a ``kernel.numa_balancing`` value: the kernel's own files, one line each).
"""

from __future__ import annotations

import os
import re
import time
from typing import Any, Dict

import pytest

from cxlctl.cli import run
from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from cxlctl.k8s import nfd
from cxlctl.ras.health_probe import Health, HealthStatus, MemdevHealth
from tests.daemon_support import config, make_daemon, work_tree
from tests.kit import copy_fixture, fixture_roots

NS = "feature.node.kubernetes.io/"


def _labels(root: str, **kw: Any) -> Dict[str, str]:
    return nfd.labels(scan(Host(root)), None, **kw)


def _set(root: str, path: str, text: str) -> None:
    os.makedirs(os.path.dirname(root + path), exist_ok=True)
    with open(root + path, "w") as f:
        f.write(text)


@pytest.mark.parametrize("root", fixture_roots("linux-6.12/*-region"))
def test_capacity_per_tier_from_the_cxl_nodes(root: str) -> None:
    inv = scan(Host(root))
    lb = _labels(root)
    cxl = [n for n in inv.nodes if n.kind == "cxl" and n.has_memory]
    assert cxl and all(n.tier is not None for n in cxl)
    for rank, tier in enumerate(sorted({n.tier for n in cxl if n.tier is not None}), 1):
        nodes = [n for n in cxl if n.tier == tier]
        assert lb[f"{NS}cxl.tier-rank-{rank}.kernel-tier"] == str(tier)
        assert lb[f"{NS}cxl.tier-rank-{rank}.online-mib"] == str(sum(n.mem_total or 0 for n in nodes) >> 20)
        assert lb[f"{NS}cxl.tier-rank-{rank}.free-mib"] == str(sum(n.mem_free or 0 for n in nodes) >> 20)
    # the recorded regions are 512 MiB / 1 GiB: visible in MiB, where the GiB totals round to 0 or 1
    # (one tier without HMAT, tier 22; the HMAT guest's fast and slow nodes get a tier each)
    ranks = len({n.tier for n in cxl})
    assert sum(int(lb[f"{NS}cxl.tier-rank-{r}.online-mib"]) for r in range(1, ranks + 1)) >= 400
    # no tier label for the DRAM tier, none beyond the tiers holding CXL memory
    assert not [k for k in lb if ".kernel-tier" in k and lb[k] == "4"]
    assert not [k for k in lb if k.startswith(f"{NS}cxl.tier-rank-{ranks + 1}.")]
    assert lb[NS + "cxl.weighted-interleave.mode"] == "manual"  # 6.12: weights, no auto mode (6.16)
    for k, v in lb.items():
        assert nfd.valid_value(v) and re.fullmatch(r"[a-z0-9.-]+/[A-Za-z0-9][-A-Za-z0-9_.]{0,62}", k), (k, v)


def test_no_cxl_node_no_tier_labels_and_old_kernel_mode() -> None:
    lb = _labels(fixture_roots("linux-6.1/single-noregion")[0], tiering="none")
    assert not [k for k in lb if ".tier-" in k]
    assert lb[NS + "cxl.weighted-interleave"] == "false"
    assert lb[NS + "cxl.weighted-interleave.mode"] == "none"
    assert lb[NS + "cxl.tiering"] == "none"
    assert NS + "cxl.health" not in lb


def test_tiering_engine_reads_numa_balancing_and_a_running_kdamond(tmp_path: Any) -> None:
    t = copy_fixture(fixture_roots("linux-6.12/single-region")[0], str(tmp_path / "t"))
    assert nfd.tiering_engine(Host(t)) == "none"  # recorded: numa_balancing without the tiering bit, no DAMON
    kd = "/sys/kernel/mm/damon/admin/kdamonds"
    _set(t, kd + "/nr_kdamonds", "1\n")
    _set(t, kd + "/0/state", "off\n")
    assert nfd.tiering_engine(Host(t)) == "none"  # a kdamond directory that is not running
    _set(t, kd + "/0/state", "on\n")
    assert nfd.tiering_engine(Host(t)) == "damon"
    _set(t, "/proc/sys/kernel/numa_balancing", "2\n")
    assert nfd.tiering_engine(Host(t)) == "damon_numa-balancing"
    _set(t, kd + "/0/state", "off\n")
    _set(t, "/proc/sys/kernel/numa_balancing", "3\n")
    assert nfd.tiering_engine(Host(t)) == "numa-balancing"
    _set(t, "/proc/sys/kernel/numa_balancing", "1\n")  # classic NUMA balancing is not tiering
    assert nfd.tiering_engine(Host(t)) == "none"
    _set(t, "/proc/sys/kernel/numa_balancing", "\u0662\n")  # not ASCII digits: not a value
    assert nfd.tiering_engine(Host(t)) == "none"
    _set(t, "/proc/sys/kernel/numa_balancing", "2" * 5000 + "\n")  # int() raised ValueError on this
    assert nfd.tiering_engine(Host(t)) == "none"


def _health(*statuses: HealthStatus, available: bool = True) -> Health:
    mds = tuple(MemdevHealth(f"mem{i}", s, {}, ()) for i, s in enumerate(statuses))
    return Health(available, "cxl list -M -H", mds, time.time(), 0.01)


def test_health_label_only_from_real_device_data() -> None:
    root = fixture_roots("linux-6.12/single-region")[0]
    assert _labels(root, health=_health("ok", "warning"))[NS + "cxl.health"] == "warning"
    assert _labels(root, health=_health("critical", "ok", "no-data"))[NS + "cxl.health"] == "critical"
    assert _labels(root, health=_health("ok"))[NS + "cxl.health"] == "ok"
    # QEMU's devices answer no Get Health Info; a missing cxl tool: no label, never a guess
    assert NS + "cxl.health" not in _labels(root, health=_health("no-data", "no-data"))
    assert NS + "cxl.health" not in _labels(root, health=_health("ok", available=False))
    assert NS + "cxl.health" not in _labels(root)


def test_daemon_writes_the_new_labels_with_an_expiry(tmp_path: Any) -> None:
    root = work_tree(fixture_roots("linux-6.12/single-region")[0], str(tmp_path / "root"))
    _set(root, "/sys/kernel/mm/damon/admin/kdamonds/0/state", "on\n")
    fdir = root + "/etc/kubernetes/node-feature-discovery/features.d"
    os.makedirs(fdir)
    d, _, _ = make_daemon(root, config(reconcile={"rescan_interval": 60}))
    try:
        d.startup()
    finally:
        d.close()
    with open(fdir + "/cxlctl") as f:
        text = f.read()
    assert re.search(r"^# \+expiry-time=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", text, re.M), text
    assert f"{NS}cxl.tiering=damon\n" in text
    assert f"{NS}cxl.weighted-interleave.mode=manual\n" in text
    assert re.search(rf"^{re.escape(NS)}cxl\.tier-rank-1\.online-mib=\d+$", text, re.M)


def test_record_captures_the_kdamond_state(tmp_path: Any) -> None:
    t = copy_fixture(fixture_roots("linux-6.12/single-region")[0], str(tmp_path / "t"))
    _set(t, "/sys/kernel/mm/damon/admin/kdamonds/0/state", "on\n")
    dest = str(tmp_path / "rec")
    assert run(["--root", t, "record", dest]) == 0
    assert nfd.tiering_engine(Host(dest)) == "damon"


def test_cli_labels_show_the_tiering(capsys: Any) -> None:
    capsys.readouterr()
    assert run(["--root", fixture_roots("linux-6.12/single-region")[0], "daemon", "labels"]) == 0
    out = capsys.readouterr().out
    assert f"{NS}cxl.tiering=none" in out and f"{NS}cxl.tier-rank-1.free-mib=" in out


@pytest.mark.parametrize("series", ["linux-6.12", "linux-7.x"])
def test_recorded_devdax_tree_labels_only_the_numa_tier(series: str) -> None:
    """A devdax region is no NUMA memory: only the system-ram region's 256 MiB count in the tier."""
    lb = _labels(fixture_roots(f"{series}/switch2-devdax")[0])
    assert lb[NS + "cxl.tier-rank-1.online-mib"] == "256"
    assert lb[NS + "cxl.memdevs"] == "2" and lb[NS + "cxl.numa-nodes"] == "1"


def test_a_fleet_shares_label_keys_and_no_capacity_rounds_to_0() -> None:
    """Issue 35 row 9. The recorded single-device host puts its CXL node in memory_tier22; the HMAT
    host (firmware figures, CDAT) in memory_tier33 and memory_tier146. The keys a selector uses are
    the same on both (rank 1 = the fastest tier holding CXL memory), the kernel's id is a value, and
    the 512 MiB device's capacity reads 512 MiB, not 0 GiB."""
    plain = _labels(fixture_roots("linux-6.12/single-region")[0])
    hmat = _labels(fixture_roots("linux-6.12/hmat2-region")[0])
    assert plain[NS + "cxl.tier-rank-1.kernel-tier"] == "22"
    assert (hmat[NS + "cxl.tier-rank-1.kernel-tier"], hmat[NS + "cxl.tier-rank-2.kernel-tier"]) == ("33", "146")
    assert not [k for k in {**plain, **hmat} if re.search(r"\.tier-\d", k)], "no kernel tier id in a key"
    shared = {k for k in plain if ".tier-rank-" in k}
    assert shared and shared <= set(hmat)
    assert plain[NS + "cxl.capacity-mib"] == "512" and plain[NS + "cxl.online-mib"] == "512"
    assert not [k for k in plain if k.endswith("-gib")]
    for lb in (plain, hmat):
        for k, v in lb.items():
            if k.endswith("-mib") and k.split("/")[1].startswith(("cxl.capacity", "cxl.online", "cxl.tier-rank")):
                assert int(v) > 0, (k, v)
