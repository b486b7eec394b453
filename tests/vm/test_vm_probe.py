"""``cxlctl probe`` in real guests (issue 37): one boot per kernel, every CXL node measured.

6.12: ``hb2x2`` with two regions on separate windows (two CXL nodes, no HMAT: the kernel has no
figures, as on a BIOS without them).  7.x: ``hmat2`` (HMAT and CDAT figures that are, for
TCG's emulated memory, wrong by far more than 2x: DRAM 38912 MB/s/80 ns, the expanders 16000
and 6144 MB/s).  Emulated CXL memory is far slower than the guest's DRAM, so only the order
and the formula are checked, not the ratio:

* every CXL node measures below DRAM on bandwidth and above it on latency;
* ``tune plan`` with ``weights = "measured"`` writes the weights the kernel's formula
  (mm/mempolicy.c ``reduce_interleave_weights``) gives for the stored figures; on 6.12
  ``weights = "bandwidth"`` falls back to the same (the kernel has no figures);
* on 7.x ``doctor`` flags the firmware figures that disagree with the measurement;
* the stored record is current (same boot, kernel, memdevs), and gone once its file is removed;
* 7.x boots its two vCPUs as two sockets (``-smp 2,sockets=2``): two L3 instances, and the
  bandwidth buffer is sized from their sum (issue 44 item 6), the chase from one.  With
  ``CXLCTL_RECORD_FIXTURES=1`` (``scripts/record-fixtures.sh probe``) that guest is recorded
  as ``fixtures/linux-7.x/hmat2-2socket`` (the multi-L3 tree the unit
  tests size buffers on).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, Tuple

import pytest

from cxlctl.tuning.weights import kernel_weights
from tests.fixture_status import install
from tests.vm.harness import REPO, TOPOLOGIES, kernels_for, out_json, out_text, run_guest

pytestmark = pytest.mark.vm

SCRIPT = r"""
{create}
udevadm settle --timeout=30 || true
sleep 2
RECORD={record} "$PY" "$REPO/tests/vm/probe_guest_driver.py" > "$OUT/driver.out" 2>&1 || exit 4
"""

#: topology, the regions (indexes into its ``regions``) each kernel's boot builds, extra QEMU args
SETUP: Dict[str, Tuple[str, Tuple[int, ...], Tuple[str, ...]]] = {
    "6.12": ("hb2x2", (2, 3), ()),
    # hmat2's two vCPUs as two sockets: each its own L3 (QEMU gives one per socket), as AMD's CCXs
    "7.x": ("hmat2", (0, 1), ("-smp", "2,sockets=2,cores=1,threads=1")),
}
#: the multi-L3 tree recorded from the 7.x boot (CXLCTL_RECORD_FIXTURES=1)
RECORDED = "hmat2-2socket"


def boot(series: str) -> Dict[str, Any]:
    name, which, qemu = SETUP[series]
    t = TOPOLOGIES[name]
    create = "\n".join(f"{t.regions[i].create_command(t)} || exit 2" for i in which)
    record = RECORDED if os.environ.get("CXLCTL_RECORD_FIXTURES") and qemu else ""
    script = SCRIPT.format(create=create, record=record)
    # two sockets need two vCPUs (hmat2 itself has one: its other checks need no more)
    res = run_guest(t, script, kernel=series, timeout=1200, extra_qemu_args=qemu, cpus=2 if qemu else None)
    sys.stderr.write(f"[probe/{series}] boot {res.boot_seconds:.0f} s, wall {res.wall_seconds:.0f} s\n")
    assert res.returncode == 0, res.stderr[-3000:] + out_text(res.outdir, "driver.out", missing_ok=True)[-3000:]
    out = res.outdir
    if record:
        install(out / record, REPO / "fixtures" / f"linux-{series}" / record)
    docs = {k: out_json(out, f"{k}.json") for k in ("probe", "status", "plan-measured", "plan-bandwidth", "doctor")}
    docs["status-after"] = out_json(out, "status-after.json")
    docs["rc"] = {k: out_text(out, f"{k}.rc").strip() for k in ("probe", "status", "plan-measured", "doctor")}
    docs["series"] = series
    docs["llc"] = out_json(out, "llc.json")
    return docs


# 7.x in CI (kernels_for; CXLCTL_VM_KERNELS=all adds 6.12): the measurement is a userspace program and
# the weights, the fallback and doctor's rule are cxlctl's logic on the figures (tests/test_probe.py runs
# the no-HMAT fallback on a recorded tree); 7.x's boot is the one with HMAT, CDAT and two L3s
@pytest.fixture(scope="module", params=kernels_for("6.12", "7.x", ci=["7.x"]))
def guest(request: Any) -> Dict[str, Any]:
    return boot(request.param)


def _figures(g: Dict[str, Any]) -> Dict[int, Dict[str, Any]]:
    return {n["node"]: n for n in g["status"]["measured"]["nodes"]}


def test_every_cxl_node_ranks_below_dram(guest: Dict[str, Any]) -> None:
    assert guest["rc"]["probe"] == "0", guest["probe"]
    kinds = {n["id"]: n["kind"] for n in guest["status"]["nodes"] if n["has_memory"]}
    figs = _figures(guest)
    assert guest["status"]["measured"]["stale"] == []
    assert guest["probe"]["figures"] == guest["status"]["measured"]["nodes"]
    assert guest["probe"]["stored"] == "/var/lib/cxlctl/probe.json"
    assert set(figs) == set(kinds), (figs, kinds, guest["probe"].get("skipped"))
    (dram,) = [figs[n] for n, k in kinds.items() if k == "dram"]
    cxl = [figs[n] for n, k in kinds.items() if k == "cxl"]
    assert len(cxl) == 2
    for c in cxl:
        assert c["read_mbps"] < dram["read_mbps"] and c["write_mbps"] < dram["write_mbps"], (c, dram)
        assert c["latency_ns"] > dram["latency_ns"], (c, dram)
    assert guest["status-after"].get("measured") is None


def _weights(plan: Dict[str, Any]) -> Dict[int, int]:
    steps = [s for s in plan["plan"]["steps"] if s["setting"].startswith("weighted_interleave.node")]
    return {int(s["setting"].rsplit("node", 1)[1]): int(s["desired"]) for s in steps}


def test_measured_weights_are_the_kernel_formula(guest: Dict[str, Any]) -> None:
    want = kernel_weights({n: f["bandwidth_mbps"] for n, f in _figures(guest).items()})
    assert _weights(guest["plan-measured"]) == want
    # 6.12: no HMAT/CDAT figures, "bandwidth" falls back to the measured ones; 7.x: HMAT and CDAT are
    # far more than 2x off TCG's memory (doctor warns), and "bandwidth" takes the measurement too
    assert _weights(guest["plan-bandwidth"]) == want


def test_doctor_flags_wrong_firmware_figures(guest: Dict[str, Any]) -> None:
    checks = {c["id"]: c for c in guest["doctor"]["checks"]}
    m = checks["firmware.measured"]
    if guest["series"] == "7.x":
        assert m["result"] == "warn" and "disagree with the measurement" in m["message"], m
        assert "node 0 read bandwidth: firmware 38912 MB/s" in m["message"], m
    else:
        assert m["result"] == "note" and "describes no node's performance" in m["message"], m


def test_buffers_are_sized_past_every_last_level_cache_instance(guest: Dict[str, Any]) -> None:
    """The sizing rule on the guest's own caches: the bandwidth run's CPUs' distinct last-level
    instances summed (7.x: two sockets, two L3s), the chase's CPU's own; every pair says so."""
    from cxlctl.probe.measure import _size_bytes

    llc: Dict[str, Tuple[int, str, int]] = {}
    for key, c in guest["llc"].items():
        cpu, size = key.split("/")[0], _size_bytes(c["size"])
        if c["level"].isdigit() and size and (cpu not in llc or int(c["level"]) > llc[cpu][0]):
            llc[cpu] = (int(c["level"]), c["shared_cpu_list"], size)
    distinct = {(lv, shared): size for lv, shared, size in llc.values()}
    if guest["series"] == "7.x":
        assert len(distinct) == 2, guest["llc"]  # two sockets: two L3 instances
    for p in guest["probe"]["pairs"]:
        # --buffer-mib fixes the buffers (emulated CXL is slow); the cache they were judged against is recorded
        assert p["last_level_cache_bytes"] == sum(distinct.values()), (p, distinct)
