"""``cxlctl stat`` against the kernel's own counters on a real 6.12 kernel with a CXL node (one boot).

The scenario is :mod:`tests.vm.telemetry_guest`: a C helper in cgroup
``/cxltel`` touches memory on the DRAM node, ``memory.reclaim`` on the cgroup
demotes part of it to the CXL node.  Checked here:

* every ``pgdemote_*``/``pgpromote_*`` counter ``stat`` reports for node 0 and
  system-wide equals the kernel's file copied right after the run;
* the cgroup's bytes per node equal ``memory.numa_stat`` (anon + file), and
  the bytes on the CXL node are non-zero after the reclaim;
* the helper's pages per node equal the sum of the ``N<node>=`` fields of its
  ``numa_maps``, and some sit on the CXL node after the reclaim;
* the interval report's ``pgdemote_direct`` rate (``pgdemote_proactive`` on kernels that count
  memory.reclaim apart: 7.x, where dram-too-tight then stays quiet) times the interval equals the
  counter's growth;
* the verdicts change: tiering-off + cxl-idle with tiering off; then
  kv-offload-not-on-cxl with the helper's /dev/shm file on DRAM; dram-too-tight
  once pages were demoted directly;
* promotion with ``numa_balancing=2``: what happened is printed (TCG may not
  promote; the docs say what was tried).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List

from tests.vm.harness import GuestResult, Topology, out_text
from tests.vm.telemetry_guest import CGROUP, PROMOTE_SECONDS, build_helper, script

# no VM test here: the guest side runs in the shared boots (test_vm_linux612.py, test_vm_linux7.py)


def _keyvals(text: str) -> Dict[str, int]:
    out = {}
    for line in text.splitlines():
        k, v = line.split()
        out[k] = int(v)
    return out


def _numa_stat(text: str) -> Dict[int, int]:
    """anon + file bytes per node, parsed here independently of cxlctl."""
    out: Dict[int, int] = {}
    for line in text.splitlines():
        kind, *fields = line.split()
        if kind in ("anon", "file"):
            for f in fields:
                k, v = f.split("=")
                out[int(k[1:])] = out.get(int(k[1:]), 0) + int(v)
    return out


def _numa_maps_pages(text: str) -> Dict[int, int]:
    out: Dict[int, int] = {}
    for line in text.splitlines():
        for f in line.split()[2:]:
            if f.startswith("N") and "=" in f and f[1 : f.index("=")].isdigit():
                k, v = f.split("=")
                out[int(k[1:])] = out.get(int(k[1:]), 0) + int(v)
    return out


def _reports(out: Path, name: str) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in out_text(out, name).splitlines()]


def _tiering(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if k.startswith(("pgdemote_", "pgpromote_", "numa_pages_migrated"))}


def _ids(rep: Dict[str, Any]) -> List[str]:
    return [v["id"] for v in rep["verdicts"]]


def _check_against_kernel(out: Path, label: str, rep: Dict[str, Any], cxl: int, report: List[str]) -> None:
    node0 = next(n for n in rep["nodes"] if n["id"] == 0)
    kernel0 = _keyvals(out_text(out, f"{label}.node0.vmstat"))
    mine = {k: v for k, v in _tiering(node0["counters"]).items() if v is not None}
    assert mine == _tiering(kernel0), (label, mine, _tiering(kernel0))
    assert set(node0["missing"]) == {k for k in node0["counters"] if k not in kernel0}
    system = _keyvals(out_text(out, f"{label}.vmstat"))
    mine = {k: v for k, v in _tiering(rep["system"]["counters"]).items() if v is not None}
    assert mine == _tiering(system), (label, mine, _tiering(system))
    cg = rep["cgroups"][0]
    assert cg["name"] == CGROUP
    kernel_cg = _numa_stat(out_text(out, f"{label}.numa_stat"))
    assert {int(k): v for k, v in cg["bytes_per_node"].items()} == kernel_cg, (label, cg["bytes_per_node"], kernel_cg)
    mstat = _keyvals(out_text(out, f"{label}.memory.stat"))
    assert {k: v for k, v in cg["counters"].items() if v is not None} == {
        k: mstat[k] for k in cg["counters"] if k in mstat
    }
    if rep["processes"]:
        p = rep["processes"][0]
        pages = _numa_maps_pages(out_text(out, f"{label}.numa_maps"))
        assert {int(k): v for k, v in p["pages_per_node"].items()} == pages, (label, p["pages_per_node"], pages)
        report.append(
            f"{label}: node0 pgdemote_direct {node0['counters'].get('pgdemote_direct')}, cgroup N{cxl}="
            f"{kernel_cg.get(cxl, 0)} B, helper pages {pages}, verdicts {_ids(rep)}"
        )
    else:
        report.append(
            f"{label}: node0 pgdemote_direct {node0['counters'].get('pgdemote_direct')}, verdicts {_ids(rep)}"
        )


def guest_script(work: Path, t: Topology) -> str:
    """The guest side of this check on ``t`` (its widest region), tools built under ``work``."""
    region = t.widest
    assert region is not None
    return script(build_helper(work / "tools"), region.create_command(t), promote=True)


def check(res: GuestResult, tmp_path: Path) -> None:
    """The host's assertions on the guest's files; the measured lines go to ``tmp_path/measured.txt``."""
    res.check()
    out = res.outdir
    cxl = int(out_text(out, "cxl-node"))
    report = [f"guest {res.kernel.release}, boot {res.boot_seconds} s, wall {res.wall_seconds} s, CXL node {cxl}"]
    for label in ("A", "B", "D"):
        assert out_text(out, f"{label}.rc").strip() == "0", out_text(out, f"{label}.err", missing_ok=True)

    a = _reports(out, "A.json")[0]
    assert a["since_boot"] and a["settings"]["demotion_enabled"] is False and a["settings"]["numa_balancing"] == 0
    assert {n["id"]: n["kind"] for n in a["nodes"]} == {0: "dram", cxl: "cxl"}
    assert "tiering-off" in _ids(a) and "cxl-idle" in _ids(a)
    assert "dram-too-tight" not in _ids(a)
    _check_against_kernel(out, "A", a, cxl, report)
    text = out_text(out, "A.txt")
    assert max(len(line) for line in text.splitlines()) <= 80 and "tiering-off" in text

    b = _reports(out, "B.json")[0]
    assert b["settings"]["demotion_enabled"] is True
    assert "tiering-off" not in _ids(b) and "kv-offload-not-on-cxl" in _ids(b)
    _check_against_kernel(out, "B", b, cxl, report)
    helper_pid = int(out_text(out, "helper.pid"))
    assert b["processes"][0]["pid"] == helper_pid
    assert set(b["processes"][0]["shm"]) == {"/dev/shm/vllm_offload_cxltel.mmap"}

    # C: stat ran across the reclaim; its second report's rate is the counter's growth over the interval
    assert out_text(out, "C.rc").strip() == "0", out_text(out, "C.err", missing_ok=True)
    c0, c1 = _reports(out, "C.json")
    assert c0["since_boot"] and not c1["since_boot"] and c1["interval"] > 0
    before = next(n for n in c0["nodes"] if n["id"] == 0)["counters"]
    after_node = next(n for n in c1["nodes"] if n["id"] == 0)
    kernel_c1 = _keyvals(out_text(out, "C1.node0.vmstat"))
    # memory.reclaim's demotions: pgdemote_proactive where the kernel has it (7.x), else counted as
    # direct (6.12); only direct demotion is DRAM pressure, so only then does dram-too-tight fire
    demote = "pgdemote_proactive" if "pgdemote_proactive" in kernel_c1 else "pgdemote_direct"
    tight = demote == "pgdemote_direct"
    grew = after_node["counters"][demote] - before[demote]
    assert grew > 0, f"memory.reclaim demoted nothing ({demote})"
    assert abs(after_node["rates"][demote] * c1["interval"] - grew) < 1e-6 * max(grew, 1)
    # the reclaim may still run when report 1 is taken (TCG is slow): the kernel's count only grows after it
    assert after_node["counters"][demote] <= kernel_c1[demote]
    assert ("dram-too-tight" in _ids(c1)) is tight, (demote, _ids(c1))
    report.append(
        f"C: reclaim {out_text(out, 'reclaim.rc').strip()}: node0 {demote} +{grew} pages over {c1['interval']:.2f} s "
        f"= {after_node['rates'][demote]:.1f}/s; verdicts {_ids(c1)}"
    )

    d = _reports(out, "D.json")[0]
    _check_against_kernel(out, "D", d, cxl, report)
    assert d["cgroups"][0]["bytes_per_node"].get(str(cxl), 0) > 0, "the cgroup has nothing on the CXL node"
    assert d["processes"][0]["pages_per_node"].get(str(cxl), 0) > 0, "the helper has no page on the CXL node"
    assert ("dram-too-tight" in _ids(d)) is tight, _ids(d)
    text = out_text(out, "D.txt")
    assert max(len(line) for line in text.splitlines()) <= 80 and f"cgroup {CGROUP}" in text

    # top under a pseudo-terminal: the rich screen with the helper, its cgroup and the verdicts
    assert out_text(out, "top.rc").strip() == "0", out_text(out, "top.err", missing_ok=True)
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out_text(out, "top.pty"))
    assert "cxlctl top" in screen and "tel_helper" in screen and CGROUP in screen, screen[-3000:]
    assert ("dram-too-tight" in screen) is tight and "q quit" in screen
    report.append(f"top on a pty: {screen.count('cxlctl top')} screens drawn")

    # E: the record replays
    assert (out / "record" / "cxlctl-record.json").exists(), out_text(out, "record.log", missing_ok=True)

    # F: promotion (reported; required to be consistent, not to happen: TCG may not promote)
    if (out / "F.json").exists():
        f0, f1 = _reports(out, "F.json")
        sysr = f1["system"]["rates"]
        promoted = f1["system"]["counters"]["pgpromote_success"] - f0["system"]["counters"]["pgpromote_success"]
        p0 = f0["processes"][0]["pages_per_node"]
        p1 = f1["processes"][0]["pages_per_node"]
        report.append(
            f"F: numa_balancing={out_text(out, 'nb2').strip()}, helper touching its pages for {PROMOTE_SECONDS} s: "
            f"hint faults {sysr.get('numa_hint_faults'):.1f}/s, pgpromote_candidate {sysr.get('pgpromote_candidate'):.1f}/s, "
            f"pgpromote_success {sysr.get('pgpromote_success'):.1f}/s ({promoted} pages), numa_pages_migrated "
            f"{sysr.get('numa_pages_migrated'):.1f}/s; helper pages {p0} -> {p1}; verdicts {_ids(f0)} -> {_ids(f1)}"
        )
        node0 = next(n for n in f1["nodes"] if n["id"] == 0)
        # the helper keeps touching after the report: the kernel's count can only have grown since
        assert node0["counters"]["pgpromote_success"] <= _keyvals(out_text(out, "F1.node0.vmstat"))["pgpromote_success"]
        if promoted > 0:  # the promoted pages came off the CXL node (other processes' pages may move too)
            assert p0.get(str(cxl), 0) - p1.get(str(cxl), 0) > 0
            assert "dram-too-tight" not in _ids(f1), "no direct demotion in the promotion interval"
    print("\n".join(report))
    (tmp_path / "measured.txt").write_text("\n".join(report) + "\n")
