"""RAS end to end on a real 6.12 kernel (one boot of ``hb2x2``): device events
injected from the host over QMP while the guest runs, seen by the kernel, by
``cxlctl events`` and by ``cxlctl health``.

The guest (``tests/vm/ras_steps.py``) builds a 2-way region on ``cxl-vmem0`` +
``cxl-vmem1`` (``cxl-vmem3`` stays outside every region), starts a tiny C
program with 1 MiB bound to the region's node, starts ``cxlctl events
--collect`` and a ``--follow --json`` in the background, and keeps its own,
independent trace instance as the kernel's view.  The host injects, step by
step: general media (inside/outside a region), DRAM, memory module
(inside/outside), poison (inside/outside; the guest reads the poison lists),
correctable and uncorrectable protocol errors.

For every step:

* the kernel's own trace output has the event, on the memdev the host aimed at;
* ``--follow`` printed it within a few seconds, with the same memdev, DPA and
  severity, mapped to the region, node and memory block the guest's sysfs
  says; the HPA cxlctl computes for a media/DRAM error at a DPA equals the HPA
  the *kernel* printed for a poison record injected at that same DPA;
* the collection snapshot (``cxlctl events --json``) holds the same events;
* nothing could not be parsed.

Then ``cxlctl health --json``: poison lists mapped like the kernel did, the
fault domain (region, its other device, node, blocks) and the C program among
the processes hit, for the in-region memdevs only.  No ``cxlctl-*`` trace
instance is left behind.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from tests.vm.harness import GuestResult, run_guest
from tests.vm.ras_steps import INSIDE, OUTSIDE, STEPS, TOPOLOGY, guest_session, host_driver

pytestmark = pytest.mark.vm

TOUCH_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* touch MIB PIDFILE: allocate and touch MIB MiB, write our PID, sleep until killed */
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    size_t len = (size_t)atoi(argv[1]) << 20;
    char *p = malloc(len);
    if (!p) return 1;
    memset(p, 1, len);
    FILE *f = fopen(argv[2], "w");
    if (!f) return 1;
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
    for (;;) pause();
}
"""


def _touch_binary() -> Path:
    d = Path(tempfile.mkdtemp(prefix="cxlctl-ras-"))
    (d / "touch.c").write_text(TOUCH_C)
    subprocess.run(["cc", "-O1", "-static", "-o", str(d / "touch"), str(d / "touch.c")], check=True)
    return d / "touch"


def _script(touch: Path) -> str:
    before = f"""
NODE=$(awk '$1=="node"{{print $2; exit}}' "$OUT/facts.txt")
numactl --membind="$NODE" {touch} 1 "$OUT/touch.pid" &
TPID=$!
for i in $(seq 300); do [ -s "$OUT/touch.pid" ] && break; sleep 0.2; done
"""
    after = """
"$PY" -m cxlctl events --json > "$OUT/collect.jsonl" 2> "$OUT/collect.err"
echo $? > "$OUT/collect.rc"
"$PY" -m cxlctl events --json --since 1h > "$OUT/since.jsonl" 2> "$OUT/since.err"
COLUMNS=80 "$PY" -m cxlctl events > "$OUT/events.txt" 2> "$OUT/events.err"
"$PY" -m cxlctl health --json > "$OUT/health.json" 2> "$OUT/health.err"
echo $? > "$OUT/health.rc"
COLUMNS=80 "$PY" -m cxlctl health > "$OUT/health.txt" 2>&1
kill "$TPID"
"$PY" -m cxlctl events --stop > "$OUT/stop.txt" 2>&1
"$PY" -m cxlctl events > "$OUT/after-stop.txt" 2>&1; echo $? >> "$OUT/after-stop.txt"
ls /sys/kernel/tracing/instances/ > "$OUT/instances-after.txt"
"""
    return guest_session(before_steps=before, after_steps=after)


def _facts(r: GuestResult) -> Dict[str, Any]:
    f: Dict[str, Any] = {"memdev": {}}
    for line in r.file("facts.txt").splitlines():
        k, *v = line.split()
        if k == "memdev":
            f["memdev"][v[0]] = v[1]
        elif k in ("region_base", "region_size", "block_size"):
            f[k] = int(v[0], 0)
        elif k == "node":
            f["node"] = int(v[0])
        else:
            f[k] = v[0]
    return f


#: independent of cxlctl's parser: just the event name, memdev, DPA and HPA fields
_KLINE = re.compile(r"\s(cxl_\w+):\s.*?\bmemdev=(mem\d+)")


def _kernel_events(text: str) -> List[Tuple[str, str, Optional[int], Optional[int]]]:
    out = []
    for line in text.splitlines():
        m = _KLINE.search(line)
        if not m:
            continue
        dpa = re.search(r"\bdpa=(?:0x)?([0-9a-fA-F]+)", line)
        hpa = re.search(r"\bhpa=(?:0x)?([0-9a-fA-F]+)", line)
        out.append(
            (
                m.group(1),
                m.group(2),
                int(dpa.group(1), 16) if dpa else None,
                int(hpa.group(1), 16) if hpa else None,
            )
        )
    return out


def _jsonl(text: str, stamped: bool = False) -> List[Dict[str, Any]]:
    out = []
    for line in text.splitlines():
        if stamped:
            t, _, line = line.partition(" ")
        d = json.loads(line)
        if stamped:
            d["_arrived"] = float(t)
        out.append(d)
    return out


def test_ras_events_and_health_end_to_end() -> None:
    r = run_guest(TOPOLOGY, _script(_touch_binary()), kernel="6.12", timeout=1500, qmp=host_driver())
    r.check()
    print(f"\nRAS VM: boot {r.boot_seconds} s, wall {r.wall_seconds} s, $OUT={r.outdir}")
    f = _facts(r)
    memdev = f["memdev"]
    region, node, bs = f["region"], f["node"], f["block_size"]
    follow = [e for e in _jsonl(r.file("follow.jsonl"), stamped=True)]
    fevents = [e for e in follow if e["type"] == "event"]
    collect = _jsonl(r.file("collect.jsonl"))
    assert collect[-1]["type"] == "summary" and collect[-1]["parse_errors"] == 0, collect[-1]
    cevents = [e for e in collect if e["type"] == "event"]
    print(f"kernel has: {r.file('kernel-events.txt').split()}")

    # the kernel's own HPA for each poisoned (memdev, dpa): the oracle for DPA-only events
    poison_hpa: Dict[Tuple[str, int], int] = {}
    for st in STEPS:
        for ev, md, dpa, hpa in _kernel_events(r.file(f"kernel/{st.name}.txt")):
            if ev == "cxl_poison" and dpa is not None and hpa is not None and hpa != (1 << 64) - 1:
                poison_hpa[(md, dpa)] = hpa

    delivered: Dict[str, str] = {}
    for st in STEPS:
        want_md = memdev[st.device]
        kev = [k for k in _kernel_events(r.file(f"kernel/{st.name}.txt")) if k[0] == st.event and k[1] == want_md]
        qmp_err = r.outdir / f"qmp-{st.name}.err"
        if not kev:
            # the kernel did not report it (QEMU or this kernel lacks the path): cxlctl must not invent it
            why = qmp_err.read_text().strip() if qmp_err.exists() else "QEMU accepted it; no trace event in the guest"
            delivered[st.name] = f"not delivered by the kernel ({why})"
            assert not [e for e in fevents if e["event"] == st.event and e["memdev"] == want_md]
            continue
        assert not qmp_err.exists(), qmp_err.read_text()
        t0 = float(r.file(f"t/{st.name}"))
        ours = [
            e
            for e in fevents
            if e["event"] == st.event
            and e["memdev"] == want_md
            and (st.dpa is None or e["dpa"] == st.dpa)
            and e["_arrived"] >= t0 - 1
        ]
        assert ours, f"{st.name}: kernel saw {kev}, cxlctl --follow printed nothing matching"
        e = ours[0]
        lag = e["_arrived"] - t0
        delivered[st.name] = f"{e['kind']}/{e['severity']} {want_md} in {lag:.1f} s"
        assert lag < 10, f"{st.name}: cxlctl printed it {lag:.1f} s after the injection"
        kdpa = kev[0][2]
        if st.dpa is not None:
            assert kdpa == st.dpa == e["dpa"], (st.name, kev, e)
        # the same event in the collection snapshot
        assert any(c["timestamp"] == e["timestamp"] and c["event"] == e["event"] for c in cevents), st.name
        inside = st.device in INSIDE
        if st.dpa is None:  # memory module, AER: no address, no mapping
            assert e["hpa"] is None and e["region"] is None
            continue
        if not inside:
            assert e["region"] is None and e["hpa"] is None and e["node"] is None, e
            assert e["unmapped_reason"] or st.event == "cxl_poison", e
            continue
        assert e["region"] == region, e
        oracle = poison_hpa.get((want_md, st.dpa))
        assert oracle is not None, f"no kernel poison HPA for {want_md} DPA {st.dpa:#x}"
        assert e["hpa"] == oracle, f"{st.name}: cxlctl HPA {e['hpa']:#x}, kernel {oracle:#x}"
        assert e["hpa_source"] == ("kernel" if st.event == "cxl_poison" else "decoder")
        assert f["region_base"] <= e["hpa"] < f["region_base"] + f["region_size"]
        assert e["memory_block"] == e["hpa"] // bs and e["node"] == node, e
        assert e["block_state"] == "online", e
    for k, v in delivered.items():
        print(f"  {k:26} {v}")
    undelivered = [k for k, v in delivered.items() if v.startswith("not delivered")]
    # the device events and poison must all have arrived; only AER may be missing
    assert set(undelivered) <= {"correctable-error", "uncorrectable-error"}, delivered

    # --since keeps them (all within the hour); text fits 80 columns
    since = _jsonl(r.file("since.jsonl"))
    assert since[-1]["events"] == collect[-1]["events"] > 0
    text = r.file("events.txt").splitlines()
    assert text and max(len(x) for x in text) <= 80, [x for x in text if len(x) > 80]

    # health: poison lists mapped, fault domain, the C program among the processes hit
    assert r.file("health.rc").strip() == "0", r.file("health.err")
    health = {m["memdev"]: m for m in json.loads(r.file("health.json"))["memdevs"]}
    pid = int(r.file("touch.pid"))
    for dev in INSIDE:
        h = health[memdev[dev]]
        other = [memdev[d] for d in INSIDE if d != dev]
        assert h["impact"]["regions"] == [region] and h["impact"]["shared_with"] == other, h["impact"]
        assert h["impact"]["nodes"] == [node] and len(h["impact"]["memory_blocks"]) == f["region_size"] // bs
        assert pid in [p["pid"] for p in h["impact"]["processes"]], h["impact"]["processes"]
        for p in h["poison"]:
            assert p["hpa"] == poison_hpa[(memdev[dev], p["dpa"])] and p["region"] == region and p["node"] == node
    assert [p["dpa"] for p in health[memdev["cxl-vmem1"]]["poison"]] == [0x4000]
    out = health[memdev[OUTSIDE]]
    assert out["impact"]["regions"] == [] and out["impact"]["processes"] == []
    assert [(p["dpa"], p["hpa"], p["region"]) for p in out["poison"]] == [(0x3000, None, None)]
    assert out["event_counts"].get("memory_module/warning") == 1, out["event_counts"]

    # cleanup: the follower and the collection removed their instances
    assert r.file("follow.rc").strip() == "0", r.file("follow.err")
    assert not [x for x in r.file("instances-after-follow.txt").split() if x.startswith("cxlctl-follow")]
    assert not [x for x in r.file("instances-after.txt").split() if x.startswith("cxlctl-")]
    assert "no event collection is running" in r.file("after-stop.txt")
