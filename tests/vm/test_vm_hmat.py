"""Firmware performance data in a real guest (issue 20 §2): HMAT, a generic port per CXL host
bridge and a CDAT per device, on Linux 6.12 and 7.x — one boot per kernel.

The ``hmat2`` topology (tests/vm/harness.py) gives DRAM 38912 MB/s/80 ns from HMAT, two host
bridges whose generic ports differ, and a fast and a slow expander (their own CDAT tables,
tests/vm/cdat.py).  In the guest both regions are built; then ``status --json`` must show
each node's and region's access0/access1 figures exactly as sysfs has them, the memory tiers
the kernel made of them, and the human view must never print "-" for a node whose region has
figures.  On 7.x the kernel's ``auto`` weights are read and the plan compares them with
cxlctl's.  With ``CXLCTL_RECORD_FIXTURES=1`` the trees become ``fixtures/linux-<series>/hmat2-*``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional

import pytest

from cxlctl.numa_maps import parse_mappings
from cxlctl.parse import PAGE_SIZE
from cxlctl.telemetry.report import MB
from tests.fixture_status import install
from tests.vm.harness import REPO, TOPOLOGIES, build_c, out_json, out_text, run_guest
from tests.vm.test_vm_launch import TOUCH_C

pytestmark = pytest.mark.vm

T = TOPOLOGIES["hmat2"]
FILES = ("read_bandwidth", "write_bandwidth", "read_latency", "write_latency")

SCRIPT = r"""
cd /tmp
# the trees for fixtures/ only when recording (each cxlctl record costs a minute under TCG), with the
# peer tools' output beside each (guest-lib.sh cxlvm_peers), as every recorded tree has
[ -z "{record}" ] || "$PY" -m cxlctl record --include-process-data "$OUT/hmat2-noregion" > "$OUT/record-noregion.log" 2>&1 || exit 3
[ -z "{record}" ] || cxlvm_peers "$OUT/hmat2-noregion/peers"
{create}
udevadm settle --timeout=30 || true
sleep 2
# a region's access0/access1 groups appear once the kernel has its coordinates: a CI run on 7.x read
# the files while region1's were not there yet, so wait for them (60 s at most; the check says if not)
for r in /sys/bus/cxl/devices/region*; do
  for i in $(seq 600); do [ -e "$r/access0/read_bandwidth" ] && [ -e "$r/access1/read_bandwidth" ] && break; sleep 0.1; done
done
# the kernel's own files, as name=value lines
for f in /sys/devices/system/node/node*/access*/initiators/*_bandwidth /sys/devices/system/node/node*/access*/initiators/*_latency \
         /sys/bus/cxl/devices/region*/access*/*; do
  [ -f "$f" ] && echo "$(readlink -f "$f" | sed 's|^/sys/devices/platform/ACPI0017:00/root0/decoder0\.[0-9]*/||')=$(cat "$f")"
done > "$OUT/perf.txt"
for r in /sys/bus/cxl/devices/region*; do echo "$(basename $r)=$(cat $r/dax_region*/dax*/target_node 2>/dev/null | head -n1)"; done > "$OUT/region-node.txt"
for t in /sys/devices/virtual/memory_tiering/memory_tier*; do echo "$(basename $t)=$(cat $t/nodelist)"; done > "$OUT/tiers.txt"
for w in /sys/kernel/mm/mempolicy/weighted_interleave/*; do echo "$(basename $w)=$(cat $w)"; done > "$OUT/wi.txt"
"$PY" "$REPO/tests/vm/status_guest_driver.py" hmat "$OUT" || exit 4
"$CXLCTL" tune plan inference-bandwidth --json > "$OUT/plan.json" 2> "$OUT/plan.err" || exit 5
[ -z "{record}" ] || "$PY" -m cxlctl record --include-process-data "$OUT/hmat2-region" > "$OUT/record-region.log" 2>&1 || exit 6
[ -z "{record}" ] || cxlvm_peers "$OUT/hmat2-region/peers"
{extra}
"""

#: 7.x: weights (auto on, cxlctl's own with auto off, revert), launched pages, stat/top traffic
#: (tests/vm/hmat_guest_driver.py); its failure is the wi tests', not the status tests'
EXTRA_7X = r"""
mkdir -p "$OUT/p3"
OUT="$OUT/p3" "$PY" "$REPO/tests/vm/hmat_guest_driver.py" {touch} > "$OUT/p3/driver.out" 2>&1
echo $? > "$OUT/p3/driver.rc"
"""


def _kv(path: Path) -> Dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        k, _, v = line.partition("=")
        out[k] = v
    return out


def boot(series: str) -> Dict[str, Any]:
    create = "\n".join(f"{r.create_command(T)} || exit 2" for r in T.regions)
    record = "1" if os.environ.get("CXLCTL_RECORD_FIXTURES") else ""
    extra = ""
    if series == "7.x":
        tools = Path(tempfile.mkdtemp(prefix="cxlctl-hmat-tools-"))
        extra = EXTRA_7X.format(touch=build_c(tools, "touch", TOUCH_C))
    res = run_guest(T, SCRIPT.format(create=create, record=record, extra=extra), kernel=series, timeout=1800)
    sys.stderr.write(f"[hmat2/{series}] boot {res.boot_seconds:.0f} s, wall {res.wall_seconds:.0f} s\n")
    res.check()
    out = res.outdir
    if os.environ.get("CXLCTL_RECORD_FIXTURES"):
        for name in ("hmat2-noregion", "hmat2-region"):
            install(out / name, REPO / "fixtures" / f"linux-{series}" / name)
    return {
        "perf": _kv(out / "perf.txt"),
        "region_node": _kv(out / "region-node.txt"),
        "tiers": _kv(out / "tiers.txt"),
        "wi": _kv(out / "wi.txt"),
        "status": out_json(out, "hmat-status.json"),
        "human": out_text(out, "hmat-status.txt"),
        "plan": out_json(out, "plan.json"),
        "p3": out / "p3",
    }


@pytest.fixture(scope="module", params=["6.12", "7.x"])
def guest(request: Any) -> Dict[str, Any]:
    d = boot(request.param)
    d["series"] = request.param
    return d


def _coords(perf: Dict[str, str], prefix: str) -> Optional[Dict[str, int]]:
    got = {f: int(perf[f"{prefix}/{f}"]) for f in FILES if f"{prefix}/{f}" in perf}
    return got or None


def test_status_shows_the_kernels_figures(guest: Dict[str, Any]) -> None:
    perf, st = guest["perf"], guest["status"]
    assert perf, "the kernel computed no figures at all: HMAT/generic port not in effect"
    for n in st["nodes"]:
        for acc in ("access0", "access1"):
            want = _coords(perf, f"/sys/devices/system/node/node{n['id']}/{acc}/initiators")
            have = n[acc]
            got = {k: have[k] for k in FILES if have.get(k) is not None} if have else None
            assert (got or None) == want, (n["id"], acc, have, want)
    for r in st["regions"]:
        for acc in ("access0", "access1"):
            want = _coords(perf, f"{r['region']}/{acc}")
            have = r[acc]
            assert want is not None, (r["region"], acc, perf)
            assert {k: have[k] for k in FILES} == want, (r["region"], acc)
    # DRAM's HMAT figures are the firmware's
    (dram,) = [n for n in st["nodes"] if n["kind"] == "dram"]
    assert dram["access0"]["read_bandwidth"] == 38912 and dram["access0"]["read_latency"] == 80
    # two regions, a fast and a slow one, each on its own CXL node
    bw = sorted(r["access0"]["read_bandwidth"] for r in st["regions"])
    assert len(bw) == 2 and bw[0] < bw[1], bw


def test_tiers_are_the_kernels(guest: Dict[str, Any]) -> None:
    st = guest["status"]
    for tier, nodelist in guest["tiers"].items():
        tid = int(tier[len("memory_tier") :])
        for n in st["nodes"]:
            if n["has_memory"] and str(n["id"]) in nodelist.replace("-", ",").split(","):
                assert n["tier"] == tid, (n["id"], tier, nodelist)


def test_human_view_never_dashes_a_node_with_figures(guest: Dict[str, Any]) -> None:
    st, text = guest["status"], guest["human"]
    rows = {}
    for line in text.splitlines():
        w = line.split()
        if w and w[0].isdigit():
            rows[int(w[0])] = w  # the last table that lists the node: distances and figures
    for n in st["nodes"]:
        if n["kind"] != "cxl" or not n["regions"]:
            continue
        (r,) = [x for x in st["regions"] if x["region"] in n["regions"]]
        bw = f"{r['access1']['read_bandwidth']}/{r['access1']['write_bandwidth']}"  # the CPU class
        assert any(c.startswith(bw) for c in rows[n["id"]]), (n["id"], rows[n["id"]], text)
        # the figures the kernel took: the node's own access1 where it has one (6.12), else its one region's
        want = n["access1"] if n["access1"] is not None else r["access1"]
        assert n["figures"]["access1"] == want and n["figures"]["undetermined"] is None, (n, r)


def test_plan_uses_the_figures_and_compares_with_auto(guest: Dict[str, Any]) -> None:
    steps = [s for s in guest["plan"]["plan"]["steps"] if s["setting"].startswith("weighted_interleave")]
    assert steps, guest["plan"]
    notes = " ".join(s["note"] for s in steps)
    assert "MB/s" in notes, notes
    if guest["series"] == "7.x":
        assert guest["wi"].get("auto") in ("true", "1", "Y"), guest["wi"]
        (auto,) = [s for s in steps if s["setting"] == "weighted_interleave.auto"]
        assert auto["desired"] == "true"
        assert "the kernel's auto weights now:" in auto["note"], auto["note"]
        # the kernel's weights, as the note quotes them, are the files' values
        for k, v in guest["wi"].items():
            if k.startswith("node") and int(v) > 1:
                assert f"{k}={v} " in auto["note"], (k, v, auto["note"])


# ---------------------------------------------------------------- 7.x: weights, pages, traffic


def _p3(guest: Dict[str, Any]) -> Path:
    if guest["series"] != "7.x":
        pytest.skip("the weights/traffic session runs on 7.x only (docs/testing.md, the matrix)")
    p3: Path = guest["p3"]
    rc = out_text(p3, "driver.rc").strip()
    assert rc == "0", out_text(p3, "driver.log", missing_ok=True) + out_text(p3, "driver.out", missing_ok=True)[-3000:]
    return p3


def _node_weights(wi: Dict[str, str]) -> Dict[int, int]:
    return {int(k[4:]): int(v) for k, v in wi.items() if k.startswith("node") and k[4:].isdigit()}


def test_7x_auto_off_is_a_knob_that_revert_restores(guest: Dict[str, Any]) -> None:
    p3 = _p3(guest)
    boot, auto, own, back = (out_json(p3, f"{x}-wi.json") for x in ("boot", "auto", "own", "reverted"))
    print(f"\n7.x weights: boot {boot}; inference-bandwidth {auto}; vm-bw-own {own}; reverted {back}")
    assert boot["auto"] in ("true", "1", "Y"), boot
    assert out_text(p3, "apply-auto.rc").strip() == "0", out_text(p3, "apply-auto.err", missing_ok=True)
    assert auto == boot, "inference-bandwidth on a kernel with auto keeps the kernel's weights"
    assert out_text(p3, "apply-own.rc").strip() == "0", out_text(p3, "apply-own.err", missing_ok=True)
    assert own["auto"] in ("false", "0", "N"), own
    steps = {s["setting"]: s for s in out_json(p3, "plan-own.json")["plan"]["steps"]}
    for n, w in _node_weights(own).items():
        step = steps.get(f"weighted_interleave.node{n}")
        if step is not None and step["action"] in ("set", "noop"):
            assert step["desired"] == str(w), (n, step, own)
    journal = out_json(p3, "status-own.json")["journal"]
    assert journal["state"] == "applied"
    assert out_text(p3, "revert.rc").strip() == "0", out_text(p3, "revert.err", missing_ok=True)
    assert back == boot, (back, boot)


@pytest.mark.parametrize("label", ["launch-auto", "launch-own"])
def test_7x_launched_pages_land_in_the_weights_ratio(guest: Dict[str, Any], label: str) -> None:
    p3 = _p3(guest)
    assert (p3 / f"{label}.numa_maps").exists(), out_text(p3, f"{label}.err", missing_ok=True)
    weights = _node_weights(out_json(p3, f"{label}-running-wi.json"))
    anon = [m for m in parse_mappings(out_text(p3, f"{label}.numa_maps")) if m.kind == "anon"]
    pages = max(anon, key=lambda m: sum(m.pages.values())).pages
    total, wsum = sum(pages.values()), sum(weights[n] for n in pages)
    assert total == 16 * 256, pages
    lines = []
    for n in sorted(set(pages) | {n for n in weights if n in pages}):
        got, want = pages.get(n, 0) / total, weights[n] / wsum
        lines.append(f"node{n}: {pages.get(n, 0)} pages = {got:.1%} (weight {weights[n]}: {want:.1%})")
        assert abs(got - want) <= 0.05, lines
    print(f"\n{label}: " + "; ".join(lines))


def _kv_text(path: Path) -> Dict[str, int]:
    out = {}
    for line in path.read_text().splitlines():
        k, _, v = line.partition(" ")
        if v.strip().lstrip("-").isdigit():
            out[k] = int(v)
    return out


def _node_reclaim_gate(p3: Path) -> None:
    """``tune reclaim --node 0`` against the kernel's node-reclaim gate: the gate cxlctl read
    before the write is the one the kernel's own counters then show.  Shut (anonymous memory
    only, too little unmapped page cache): nothing scanned, and cxlctl says why and what to do.
    With ``vm.min_unmapped_ratio=0``: open, pages scanned and demoted to CXL."""
    node = out_json(p3, "reclaim-node.json")["reclaim"]
    b, a = _kv_text(p3 / "node-before.node0.vmstat"), _kv_text(p3 / "node-after.node0.vmstat")
    scanned = a.get("pgscan_proactive", 0) - b.get("pgscan_proactive", 0)
    gate = node["gate"]
    print(f"\n7.x hmat2: tune reclaim 16M --node 0: {node}; node0 pgscan_proactive +{scanned}")
    assert gate is not None and node["scanned_pages"] == scanned, (node, scanned)
    want = max(0, b["nr_active_file"] + b["nr_inactive_file"] - b["nr_mapped"] - b["nr_dirty"])
    assert abs(gate["reclaimable_page_cache"] - want) <= 64, (gate, want)  # read a moment apart
    if not gate["open"]:
        assert scanned == 0 and node["complete"] is False, node
        assert "vm.min_unmapped_ratio" in node["why_short"] and "anonymous memory does not count" in node["why_short"]
    opened = out_json(p3, "reclaim-node-open.json")["reclaim"]
    o = _kv_text(p3 / "node-open-after.node0.vmstat")
    print(f"7.x hmat2: the same with vm.min_unmapped_ratio=0: {opened}")
    assert opened["gate"]["open"] is True and opened["gate"]["min_unmapped_pages"] == 0
    assert opened["scanned_pages"] == o["pgscan_proactive"] - a["pgscan_proactive"] > 0, (opened, o, a)
    assert opened["demoted_pages"] == o["pgdemote_proactive"] - a["pgdemote_proactive"] > 0, (opened, o, a)


def test_7x_stat_traffic_and_top_bandwidth_are_the_kernels(guest: Dict[str, Any]) -> None:
    p3 = _p3(guest)
    perf, st = guest["perf"], guest["status"]
    assert out_text(p3, "stat.rc").strip() == "0", out_text(p3, "stat.err", missing_ok=True)
    r0, r1 = [json.loads(x) for x in out_text(p3, "stat.jsonl").splitlines() if x.strip()]
    tr = r1["cxl_traffic"]
    assert tr is not None and r0["cxl_traffic"] is None

    # the CXL nodes' bandwidth: each node's own access1 (CPU class) where the kernel has it, else its region's
    def node_bw(n: Dict[str, Any], f: str) -> int:
        own = perf.get(f"/sys/devices/system/node/node{n['id']}/access1/initiators/{f}")
        if own is not None:
            return int(own)
        (reg,) = n["regions"]
        return int(perf[f"{reg}/access1/{f}"])

    cxl = [n for n in st["nodes"] if n["kind"] == "cxl" and n["has_memory"]]
    assert tr["cxl_read_bandwidth_mbps"] == sum(node_bw(n, "read_bandwidth") for n in cxl), tr
    assert tr["cxl_write_bandwidth_mbps"] == sum(node_bw(n, "write_bandwidth") for n in cxl), tr
    # demotion MB/s: the growth of the pgdemote_* counters over the interval, as pages
    c0, c1 = r0["system"]["counters"], r1["system"]["counters"]
    grew = sum((c1[k] or 0) - (c0[k] or 0) for k in c1 if k.startswith("pgdemote_") and c1[k] is not None)
    want = grew * PAGE_SIZE / MB / r1["interval"]
    assert grew > 0, "tune reclaim demoted nothing"
    assert abs(tr["demote_mbps"] - round(want, 3)) <= 0.0015, (tr, want)
    assert tr["demote_share_of_write_bandwidth"] == round(tr["demote_mbps"] / tr["cxl_write_bandwidth_mbps"], 6)
    # the kernel's counters after the run have only grown past what stat read
    kernel = _kv_text(p3 / "stat-after.vmstat")
    assert all(kernel.get(k, 0) >= (v or 0) for k, v in c1.items() if k.startswith("pgdemote_")), (c1, kernel)
    rec = out_json(p3, "reclaim.json")["reclaim"]
    if (p3 / "reclaim-node.json").exists():
        _node_reclaim_gate(p3)
    print(
        f"\n7.x hmat2: tune reclaim 4M --cgroup /p3hold: {rec}; stat: demoted {grew} pages in {r1['interval']:.2f} s = "
        f"{tr['demote_mbps']} MB/s = {tr['demote_share_of_write_bandwidth']:.6f} of {tr['cxl_write_bandwidth_mbps']} MB/s"
    )
    # top: every node's bandwidth context and the traffic line
    assert out_text(p3, "top.rc").strip() == "0", out_text(p3, "top.err", missing_ok=True)
    text = " ".join(out_text(p3, "top.txt").split())  # folded lines joined
    assert "to/from CXL: promoted" in text and "of CXL bw)" in text, text[-2000:]
    from cxlctl.telemetry.top import bw

    for n in st["nodes"]:
        if n["has_memory"]:
            figure = node_bw(n, "read_bandwidth") if n["kind"] == "cxl" else n["access1"]["read_bandwidth"]
            assert bw(figure) in text, (n["id"], bw(figure), text[-2000:])
