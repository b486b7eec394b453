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
from pathlib import Path
from typing import Any, Dict, Optional

import pytest

from tests.fixture_status import install
from tests.vm.harness import REPO, TOPOLOGIES, run_guest

pytestmark = pytest.mark.vm

T = TOPOLOGIES["hmat2"]
FILES = ("read_bandwidth", "write_bandwidth", "read_latency", "write_latency")

SCRIPT = r"""
cd /tmp
# the trees for fixtures/ only when recording: each cxlctl record costs a minute under TCG
[ -z "{record}" ] || "$PY" -m cxlctl record "$OUT/hmat2-noregion" > "$OUT/record-noregion.log" 2>&1 || exit 3
{create}
udevadm settle --timeout=30 || true
sleep 2
# the kernel's own files, as name=value lines
for f in /sys/devices/system/node/node*/access*/initiators/*_bandwidth /sys/devices/system/node/node*/access*/initiators/*_latency \
         /sys/bus/cxl/devices/region*/access*/*; do
  [ -f "$f" ] && echo "$(readlink -f "$f" | sed 's|^/sys/devices/platform/ACPI0017:00/root0/decoder0\.[0-9]*/||')=$(cat "$f")"
done > "$OUT/perf.txt"
for r in /sys/bus/cxl/devices/region*; do echo "$(basename $r)=$(cat $r/dax_region*/dax*/target_node 2>/dev/null | head -n1)"; done > "$OUT/region-node.txt"
for t in /sys/devices/virtual/memory_tiering/memory_tier*; do echo "$(basename $t)=$(cat $t/nodelist)"; done > "$OUT/tiers.txt"
for w in /sys/kernel/mm/mempolicy/weighted_interleave/*; do echo "$(basename $w)=$(cat $w)"; done > "$OUT/wi.txt"
"$PY" "$REPO/tests/vm/status_guest_driver.py" hmat "$OUT" || exit 4
"$PY" -m cxlctl tune plan inference-bandwidth --json > "$OUT/plan.json" 2> "$OUT/plan.err" || exit 5
[ -z "{record}" ] || "$PY" -m cxlctl record "$OUT/hmat2-region" > "$OUT/record-region.log" 2>&1 || exit 6
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
    res = run_guest(T, SCRIPT.format(create=create, record=record), kernel=series, timeout=1500)
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
        "status": json.loads((out / "hmat-status.json").read_text()),
        "human": (out / "hmat-status.txt").read_text(),
        "plan": json.loads((out / "plan.json").read_text()),
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
        bw = f"{r['access0']['read_bandwidth']}/{r['access0']['write_bandwidth']}"
        assert any(c.startswith(bw) for c in rows[n["id"]]), (n["id"], rows[n["id"]], text)


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
