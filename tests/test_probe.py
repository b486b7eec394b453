"""``cxlctl probe``: the native helper on this machine, the stored record, and its users
(weights = "measured", the bandwidth fallback, status, doctor, the daemon's metrics).

The helper tests run the real compiled loops on node 0 with small buffers; the users are
tested on copies of recorded QEMU trees with a record written by :func:`cxlctl.probe.store.record`
for that tree (its boot id, kernel and memdevs), so staleness is judged as on a host.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Sequence

import pytest

from cxlctl.errors import CxlctlError
from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from cxlctl.probe import measure, native, store
from cxlctl.probe.measure import Result, Sizes, Skipped
from cxlctl.tuning.weights import kernel_weights
from tests.kit import FIXTURES, cli, copy_fixture

SIZES = Sizes(64 << 20, 64 << 20, 0.3, 32 << 20)


@pytest.fixture(scope="module")
def helper(tmp_path_factory: Any) -> str:
    os.environ["CXLCTL_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    try:
        return native.helper_path()
    finally:
        del os.environ["CXLCTL_CACHE_DIR"]


def _tree(tmp_path: Any, name: str, pairs: Sequence[Result], skipped: Sequence[Skipped] = ()) -> str:
    root = copy_fixture(os.path.join(FIXTURES, name), tmp_path / "root")
    host = Host(root)
    store.save(host, store.record(host, scan(host), [*pairs, *skipped], "test"))
    return root


def _profile(root: str, weights: str) -> None:
    os.makedirs(f"{root}/etc/cxlctl/profiles", exist_ok=True)
    with open(f"{root}/etc/cxlctl/profiles/wm.toml", "w") as f:
        f.write(f'summary = "t"\n[knobs.weighted_interleave]\nweights = "{weights}"\nprefer_auto = true\n')


def _wi_steps(root: str, profile: str) -> Dict[str, Any]:
    doc = json.loads(cli("--root", root, "tune", "plan", profile, "--json", inprocess=True).stdout)
    return {s["setting"]: s for s in doc["plan"]["steps"] if s["knob"] == "weighted_interleave"}


# -- the kernel's formula ------------------------------------------------------------------


def test_kernel_weights_follow_reduce_interleave_weights() -> None:
    # 32*14000/17000 = 26.35 -> 26, 32*3000/17000 = 5.6 -> 5; gcd 1
    assert kernel_weights({0: 14000, 1: 3000}) == {0: 26, 1: 5}
    # 24:8 reduced by the gcd to 3:1
    assert kernel_weights({0: 90000, 1: 30000}) == {0: 3, 1: 1}
    # a node below 1/32 of the total gets the minimum weight 1 (sum_bw >= scaling_factor)
    assert kernel_weights({0: 1000000, 1: 1000}) == {0: 31, 1: 1}
    assert kernel_weights({0: 1, 1: 31}) == {0: 1, 1: 31}


def test_kernel_weights_sum_over_every_memory_node() -> None:
    """reduce_interleave_weights sums over for_each_node_state(nid, N_MEMORY), not the nodes a
    policy uses: a node without a figure still weighs 1 (and joins the gcd), one with a figure
    enlarges the total."""
    assert kernel_weights({0: 14000, 1: 3000}, memory_nodes=(0, 1, 2)) == {0: 26, 1: 5, 2: 1}
    assert kernel_weights({0: 90000, 1: 30000}) == {0: 3, 1: 1}
    assert kernel_weights({0: 90000, 1: 30000, 2: 40000}) == {0: 9, 1: 3, 2: 4}


# -- the helper, on this machine -----------------------------------------------------------


def test_helper_measures_node0_and_checks_where_the_pages_are(helper: str) -> None:
    cpus = os.sched_getaffinity(0)
    got = native.run(helper, "read", 0, 32 << 20, 0.3, sorted(cpus))
    assert float(got["median"]) > 100  # MB/s: any real memory streams faster than this
    assert got["pages_on_node"] == got["pages_checked"] and int(got["pages_checked"]) > 0
    lat = native.run(helper, "latency", 0, 32 << 20, 0.3, [min(cpus)])
    assert 1 < float(lat["median"]) < 10000  # ns
    assert len(lat["samples"].split(",")) == measure.WINDOWS


def test_the_chase_asks_for_huge_pages_the_streams_for_base_pages_and_each_says_what_it_got(helper: str) -> None:
    """Issue 44 item 6: idle latency without TLB misses (as Intel MLC measures it): the chase buffer
    is advised MADV_HUGEPAGE; the bandwidth buffers MADV_NOHUGEPAGE (as STREAM and likwid-bench run,
    whatever the host's THP mode).  What the kernel gave is reported (AnonHugePages of the mapping
    in /proc/self/smaps), beside the host's THP mode in the record."""
    mode = measure.thp_mode(Host("/").reader)
    cpu = min(os.sched_getaffinity(0))
    chase = native.run(helper, "latency", 0, 64 << 20, 0.2, [cpu])
    stream = native.run(helper, "read", 0, 64 << 20, 0.2, [cpu])
    assert (chase["advice"], stream["advice"]) == ("huge", "base")
    huge = int(chase["huge_kb"])
    if chase["advised"] == "1" and mode["enabled"] in ("always", "madvise"):
        assert huge > 0, chase  # 64 MiB aligned to 2 MiB: the kernel backs at least some with huge pages
    if stream["advised"] == "1":
        assert stream["huge_kb"] == "0", stream  # MADV_NOHUGEPAGE holds even under THP "always"
    how = measure._how(chase)
    assert how["pages"] == "huge" and how["huge_pct"] == round(100 * huge / (64 << 10), 1)


def test_write_bandwidth_uses_non_temporal_stores(helper: str) -> None:
    """The write figure is non-temporal stores (no read-for-ownership, as STREAM and MLC write), and
    the helper says which stores it used (plain ones only where the CPU has no streaming store)."""
    import platform

    got = native.run(helper, "write", 0, 32 << 20, 0.2, sorted(os.sched_getaffinity(0)))
    assert float(got["median"]) > 100
    want = ("nt-avx", "nt-sse2") if platform.machine() in ("x86_64", "i686") else ("plain",)
    assert got["store"] in want


def test_each_figure_keeps_its_spread_and_the_loaded_point(helper: str) -> None:
    """The record keeps min/median/max of every figure's windows, and with two CPUs a loaded-latency
    point (the chase while the other CPUs read)."""
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    pair = measure.Pair(0, 0, cpus, Sizes(32 << 20, 32 << 20, 0.3, None))
    res = measure.measure(helper, pair, None, 0, measure.steps(pair))
    doc = store.pair_doc(res)
    for key, mode in (("read_mbps", "read"), ("write_mbps", "write"), ("latency_ns", "latency")):
        sp = doc["spread"][key]
        assert sp["min"] <= sp["median"] <= sp["max"] and len(res.samples[mode]) == measure.WINDOWS
    assert doc["spread"]["latency_ns"]["median"] == res.latency_ns
    if len(cpus) > 1:
        assert doc["loaded"]["latency_ns"] > 0 and doc["loaded"]["load_mbps"] > 0
        assert doc["loaded"]["load_cpus"] == len(cpus) - 1
    else:
        assert doc["loaded"] is None


def test_helper_refuses_a_node_it_cannot_bind(helper: str) -> None:
    with pytest.raises(CxlctlError, match="mbind to node 1000"):
        native.run(helper, "read", 1000, 32 << 20, 0.1, [0])


def test_pairs_skip_nodes_without_the_free_memory() -> None:
    inv = scan(Host(os.path.join(FIXTURES, "linux-6.12", "single-region")))
    big = Sizes(600 << 20, 600 << 20, 1.0, None)  # node 1 has 512 MiB
    planned = measure.plan(inv, {0: big}, mem_nodes=None, mems_allowed=None, cpus_allowed=None)
    assert [type(p).__name__ for p in planned] == ["Pair", "Skipped"]
    assert "node 1 has 512 MiB free; the measurement needs 664 MiB" in planned[1].reason  # type: ignore[union-attr]
    planned = measure.plan(inv, {0: SIZES}, mem_nodes=None, mems_allowed=(0,), cpus_allowed=None)
    assert "Mems_allowed_list" in planned[1].reason  # type: ignore[union-attr]


def test_a_live_measurement_is_stored_and_read_back(helper: str, tmp_path: Any) -> None:
    live = Host("/")
    inv = scan(live)
    pair = measure.Pair(0, 0, tuple(sorted(os.sched_getaffinity(0))), Sizes(32 << 20, 32 << 20, 0.3, None))
    res = measure.measure(helper, pair, None, 0, 3)
    assert res.read_mbps > 0 and res.write_mbps > 0 and res.latency_ns > 0
    doc = store.record(live, inv, [res], "test", measure.thp_mode(live.reader))
    st = store.judge(doc, live.boot_id, inv)
    assert st.stale == () and st.usable[0].bandwidth == min(res.read_mbps, res.write_mbps)
    assert "measured in another boot" in store.judge(doc, "another", inv).stale


# -- buffer sizes: every last-level cache of the measuring CPUs ---------------------------

#: a QEMU guest with two sockets, one L3 each, both CPUs on node 0, recorded after a probe ran
#: in it (tests/vm/test_vm_probe.py, scripts/record-fixtures.sh probe)
TWO_L3 = os.path.join(FIXTURES, "linux-7.x", "hmat2-2socket")


def test_buffers_are_sized_past_the_sum_of_distinct_last_level_caches() -> None:
    """Issue 44 item 6: cpu0's L3 alone sized the buffers, while the bandwidth run uses every CPU
    of the node (AMD: one L3 per CCX, 12 x 96 MiB on a Genoa-X).  On the recorded two-socket guest
    the two CPUs of node 0 have one L3 each: the bandwidth buffer is sized from both, the chase from
    the chasing CPU's own (the probe that ran in that guest stored the same sum: tests/vm/test_vm_probe.py)."""
    host = Host(TWO_L3)
    cpus = scan(host).node(0).cpus  # type: ignore[union-attr]
    assert tuple(cpus) == (0, 1)
    l0, l1 = (measure.last_level(host.reader, c) for c in cpus)
    assert l0 is not None and l1 is not None
    assert l0[0] == l1[0] == 3 and l0[1] != l1[1], (l0, l1)  # two L3 instances
    assert measure.llc_bytes(host.reader, cpus) == l0[2] + l1[2]
    assert measure.llc_bytes(host.reader, cpus[:1]) == l0[2]
    sz = measure.sizes_for(host.reader, cpus, quick=False, buffer_mib=None)
    assert sz.llc == l0[2] + l1[2]
    assert sz.bandwidth == max(8 * (l0[2] + l1[2]), 512 << 20) and sz.latency == max(4 * l0[2], 256 << 20)
    quick = measure.sizes_for(host.reader, cpus, quick=True, buffer_mib=None)
    assert quick.llc == l0[2] + l1[2] and quick.latency == max(2 * l0[2], 64 << 20)


def test_cpus_sharing_one_last_level_cache_count_it_once(tmp_path: Any) -> None:
    """The edge the recorded trees do not show: CPUs that list the same ``shared_cpu_list`` share
    one instance (a tiny tree: two CPUs, one 32 MiB L3, L2s of their own)."""
    for cpu in (0, 1):
        for idx, (level, size, shared) in enumerate((("2", "1024K", str(cpu)), ("3", "32768K", "0-1"))):
            d = tmp_path / f"sys/devices/system/cpu/cpu{cpu}/cache/index{idx}"
            d.mkdir(parents=True)
            for name, text in (("level", level), ("size", size), ("shared_cpu_list", shared)):
                (d / name).write_text(text + "\n")
    reader = Host(str(tmp_path)).reader
    assert measure.llc_bytes(reader, (0, 1)) == 32 << 20


# -- the command line ----------------------------------------------------------------------


def test_probe_refuses_a_recorded_tree_and_bad_nodes() -> None:
    root = os.path.join(FIXTURES, "linux-6.12", "single-region")
    p = cli("--root", root, "probe", rc=2)
    assert "probe measures the running machine" in p.stderr
    for bad in ("1,,2", "١", "x"):
        assert "--nodes" in cli("probe", "--nodes", bad, rc=2).stderr
    assert "no memory node 99" in cli("probe", "--nodes", "99", rc=2).stderr
    assert cli("probe", "--buffer-mib", "2", rc=2).returncode == 2


# -- its users -----------------------------------------------------------------------------

FIG = [Result(0, 0, (0, 1), 16000, 14000, 100.0, {}), Result(0, 1, (0, 1), 4000, 3000, 300.0, {})]


def test_measured_weights_are_the_kernel_formula_of_the_stored_figures(tmp_path: Any) -> None:
    # 7.x: the kernel has auto mode (and CDAT figures for the region); "measured" writes the weights anyway
    root = _tree(tmp_path, "linux-7.x/single-region", FIG)
    _profile(root, "measured")
    steps = _wi_steps(root, "wm")
    assert steps["weighted_interleave.node0"]["desired"] == "26"
    assert steps["weighted_interleave.node1"]["desired"] == "5"
    assert "node0 14000 MB/s, node1 3000 MB/s" in steps["weighted_interleave.node0"]["note"]
    assert steps["weighted_interleave.auto"]["desired"] == "false"


def test_bandwidth_falls_back_to_measured_figures_when_the_kernel_has_none(tmp_path: Any) -> None:
    root = _tree(tmp_path, "linux-6.12/single-region", FIG)
    steps = _wi_steps(root, "inference-bandwidth")
    assert steps["weighted_interleave.node0"]["desired"] == "26"
    assert "no bandwidth data (HMAT/CDAT) for node(s) 0, 1" in steps["weighted_interleave.node0"]["note"]


def test_bandwidth_uses_the_measurement_where_the_firmware_is_2x_off_and_firmware_keeps_it(tmp_path: Any) -> None:
    """Issue 44 item 5: the firmware says DRAM 38912 MB/s, the devices 16000 and 6144; the probe measured
    14000, 12000 and 3000.  The default profiles' ``weights = "bandwidth"`` then takes the measurement
    (doctor warns of the same disagreement), ``weights = "firmware"`` keeps the firmware's."""
    hm = [
        Result(0, 0, (0, 1), 14000, 12000, 85.0, {}),
        Result(0, 2, (0, 1), 12000, 11000, 200.0, {}),
        Result(0, 3, (0, 1), 3000, 2500, 400.0, {}),
    ]
    root = _tree(tmp_path, "linux-6.12/hmat2-region", hm)
    steps = _wi_steps(root, "inference-bandwidth")
    want = kernel_weights({0: 12000, 2: 11000, 3: 2500})
    assert {int(k.rsplit("node", 1)[1]): int(v["desired"]) for k, v in steps.items() if "node" in k} == want
    note = steps["weighted_interleave.node0"]["note"]
    assert "disagree with cxlctl probe's by more than 2x (node0 firmware 38912 MB/s, measured 14000 MB/s" in note
    assert 'weights = "firmware" keeps' in note
    _profile(root, "firmware")
    fw = _wi_steps(root, "wm")
    assert "measured" not in fw["weighted_interleave.node0"]["note"]
    assert {int(k.rsplit("node", 1)[1]): int(v["desired"]) for k, v in fw.items() if "node" in k} != want


def test_measured_weights_count_every_memory_node_as_the_kernel_does(tmp_path: Any) -> None:
    """Weights for the CXL nodes 2 and 3 only: the kernel's total still holds DRAM node 0's
    bandwidth (reduce_interleave_weights runs over every N_MEMORY node), so 11000 and 2500 MB/s
    of 25500 give 13 and 3, not the 26 and 5 of their own 13500."""
    hm = [
        Result(0, 0, (0, 1), 14000, 12000, 85.0, {}),
        Result(0, 2, (0, 1), 12000, 11000, 200.0, {}),
        Result(0, 3, (0, 1), 3000, 2500, 400.0, {}),
    ]
    root = _tree(tmp_path, "linux-6.12/hmat2-region", hm)
    os.makedirs(f"{root}/etc/cxlctl/profiles", exist_ok=True)
    with open(f"{root}/etc/cxlctl/profiles/cx.toml", "w") as f:
        f.write('summary = "t"\n[knobs.weighted_interleave]\nweights = "measured"\nnodes = ["cxl"]\n')
    steps = _wi_steps(root, "cx")
    got = {int(k.rsplit("node", 1)[1]): int(v["desired"]) for k, v in steps.items() if "node" in k}
    assert got == {2: 13, 3: 3} == {n: w for n, w in kernel_weights({0: 12000, 2: 11000, 3: 2500}).items() if n > 0}
    assert "the kernel's total also counts node(s) 0" in steps["weighted_interleave.node2"]["note"]


def test_stale_figures_are_shown_as_stale_and_never_used(tmp_path: Any) -> None:
    root = _tree(tmp_path, "linux-6.12/single-region", FIG)
    path = f"{root}/var/lib/cxlctl/probe.json"
    with open(path) as f:
        doc = json.load(f)
    doc["nodes"]["1"]["memdevs"][0]["serial"] = 1
    with open(path, "w") as f:
        json.dump(doc, f)
    _profile(root, "measured")
    (step,) = _wi_steps(root, "wm").values()
    assert step["action"] == "skip" and "stale (node 1's memdevs changed)" in step["reason"] + step["note"]
    out = cli("--root", root, "status", inprocess=True).stdout
    assert "stale, not used: node 1's memdevs changed" in out
    js = json.loads(cli("--root", root, "status", "--json").stdout)
    assert js["measured"]["stale"] == ["node 1's memdevs changed"]


def test_status_shows_measured_beside_firmware(tmp_path: Any) -> None:
    windows = {
        "read": [14000.0, 15000.0, 16500.0],
        "write": [12000.0, 11000.0, 12500.0],
        "latency": [199.0, 200.0, 230.5],
    }
    hm = [Result(0, 0, (0, 1), 38000, 30000, 85.0, {}), Result(0, 2, (0, 1), 15000, 12000, 200.0, windows)]
    root = _tree(tmp_path, "linux-6.12/hmat2-region", hm, [Skipped(0, 3, "node 3 has 1 MiB free")])
    for args in (("status",), ("status", "--json")):
        assert cli("--root", root, *args, check=True).stdout == cli("--root", root, *args, inprocess=True).stdout
    out = cli("--root", root, "status").stdout
    assert "   2     0      15000       12000   200.0     16000/16000        192/292" in out
    # the spread of each figure over its windows (issue 44 item 6: three samples and no spread shown)
    assert "node 2 from 0: read 14000-16500 MB/s, write 11000-12500 MB/s, latency 199.0-230.5 ns" in out
    spread = json.loads(cli("--root", root, "status", "--json").stdout)["measured"]["pairs"][1]["spread"]
    assert spread["latency_ns"] == {"min": 199.0, "median": 200.0, "max": 230.5}
    assert "skipped node 3 from node 0: node 3 has 1 MiB free" in out
    js = json.loads(cli("--root", root, "status", "--json").stdout)["measured"]
    assert js["nodes"][1] == {
        "node": 2,
        "cpu_node": 0,
        "read_mbps": 15000,
        "write_mbps": 12000,
        "latency_ns": 200.0,
        "bandwidth_mbps": 12000,
    }


def _doctor(root: str) -> Dict[str, Any]:
    """doctor's checks of the measurement, by id."""
    doc = json.loads(cli("--root", root, "doctor", "--json").stdout)
    ids = ("firmware.measured", "firmware.tier-order", "firmware.tier-collapsed")
    return {c["id"]: c for c in doc["checks"] if c["id"] in ids}


def test_doctor_flags_firmware_figures_that_disagree_with_the_measurement(tmp_path: Any) -> None:
    # hmat2's firmware: node 0 38912 MB/s 80 ns, node 2 16000 MB/s 192 ns (tier 33), node 3 6144 MB/s 362 ns (tier 146)
    hm = [
        Result(0, 0, (0, 1), 38000, 30000, 85.0, {}),
        Result(0, 2, (0, 1), 5000, 4000, 190.0, {}),
        Result(0, 3, (0, 1), 6000, 5000, 150.0, {}),
    ]
    checks = _doctor(_tree(tmp_path, "linux-6.12/hmat2-region", hm))
    m = checks["firmware.measured"]
    assert m["result"] == "warn"
    assert "node 2 read bandwidth: firmware 16000 MB/s, measured 5000 MB/s" in m["message"]
    assert "node 3 read latency: firmware 362 ns, measured 150 ns" in m["message"]
    assert "node 0" not in m["message"]
    order = checks["firmware.tier-order"]["message"]
    assert "node 2 (memory_tier33) measures 190 ns, slower than node 3 (memory_tier146) at 150 ns" in order


def test_doctor_agrees_when_the_figures_match_and_flags_a_collapsed_tier(tmp_path: Any) -> None:
    hm = [
        Result(0, 0, (0, 1), 38000, 30000, 85.0, {}),
        Result(0, 2, (0, 1), 15000, 14000, 190.0, {}),
        Result(0, 3, (0, 1), 6000, 5000, 350.0, {}),
    ]
    root = _tree(tmp_path, "linux-6.12/hmat2-region", hm)
    checks = _doctor(root)
    assert checks["firmware.measured"]["result"] == "ok" and "firmware.tier-order" not in checks
    # the same two CXL nodes in one tier (a tiny edit of the copied tree: what a missing HMAT does)
    tiers = f"{root}/sys/devices/virtual/memory_tiering"
    os.unlink(f"{tiers}/memory_tier33/nodelist")
    with open(f"{tiers}/memory_tier33/nodelist", "w") as f:
        f.write("2-3\n")
    os.unlink(f"{tiers}/memory_tier146/nodelist")
    with open(f"{tiers}/memory_tier146/nodelist", "w") as f:
        f.write("\n")
    coll = _doctor(root)["firmware.tier-collapsed"]
    assert (
        coll["result"] == "warn"
        and "memory_tier33 holds CXL node(s) 2-3 of different measured speed" in coll["message"]
    )


def test_daemon_metrics_export_the_stored_figures(tmp_path: Any) -> None:
    root = _tree(tmp_path, "linux-6.12/single-region", FIG)
    out = cli("--root", root, "daemon", "metrics", inprocess=True).stdout
    # base units (issue 44): MB/s as bytes per second, ns as seconds
    assert 'cxlctl_measured_read_bandwidth_bytes_per_second{cpu_node="0",node="1"} 4000000000' in out
    assert 'cxlctl_measured_latency_seconds{cpu_node="0",node="0"} 1e-07' in out
    assert "cxlctl_measured_stale 0" in out


def _refused_unwritable(stderr: str) -> None:
    # the nearest existing directory is named: /var/lib/cxlctl where it exists, else /var/lib (a fresh machine)
    assert "/var/lib/cxlctl/probe.json, and /var/lib" in stderr
    assert "is not writable here; nothing was measured" in stderr
    assert "sudo cxlctl probe" in stderr


def test_probe_refuses_before_measuring_where_it_cannot_store(monkeypatch: Any) -> None:
    """The state directory not writable (what a user without root meets): refused, exit 1, before any
    measurement (the helper is never built or run)."""
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if mode & os.W_OK else real(p, mode, **kw))
    monkeypatch.setattr(
        native, "helper_path", lambda *a, **kw: pytest.fail("built the helper although nothing could be stored")
    )
    monkeypatch.setattr(native, "run", lambda *a, **kw: pytest.fail("measured although nothing could be stored"))
    p = cli("probe", "--quick", inprocess=True, rc=1)
    _refused_unwritable(p.stderr)


def test_probe_without_root_refuses_before_measuring() -> None:
    """The same as a real user without root (kit.nobody_python: also where this checkout is private)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to become uid 65534")
    p = cli("probe", "--quick", nobody=True, rc=1)
    _refused_unwritable(p.stderr)
