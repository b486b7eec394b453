"""``cxlctl probe``'s figures beside reference tools', its repeatability and cost (issues 37, 44).

On one CPU node and one memory node (default node 0, every CPU of it), ``--runs`` rounds (5),
each running, interleaved so the machine's noise hits all alike:

* the probe's helper (:mod:`cxlctl.probe.native`, the loops ``cxlctl probe`` runs, on the pages it
  advises: base pages for the streams, huge pages for the chase): read,
  non-temporal write and latency, with the buffers a full probe of this node takes
  (:func:`cxlctl.probe.measure.sizes_for`: 8x the CPUs' distinct last-level caches summed, 4x
  the chasing CPU's own; ``--bw-mib``/``--lat-mib`` override) and ``--seconds`` per measurement;
* ``likwid-bench -t load_avx`` and ``-t store_mem_avx`` (Debian's ``likwid``) ``-w M0:SIZE:THREADS``:
  streaming 256-bit loads, and 256-bit non-temporal stores, with the same threads and buffer
  size, memory on the domain of node 0 — the read and write references;
* ``multichase -s 64 -m SIZE -T SIZE -H -a -n 3`` (Google's multichase, built from its source:
  not packaged by Debian) under ``numactl --membind --physcpubind``: a dependent chase over a random
  permutation of every cache line of the buffer, on transparent huge pages as the probe's chase
  is, the average — the latency reference.  Give its path with ``--multichase`` (skipped without it);
* once per run, for the table of docs/probe.md: ``stress-ng --stream 1`` (triad MB/s),
  ``mbw -t0`` (memcpy MiB/s) and ``sysbench memory`` (MiB/s), each under ``numactl``, when installed.

Prints one JSON document: each figure's samples, median and coefficient of variation (stdev /
mean over the runs), the probe's ratio to each reference, whether each is within the goal
(bandwidth ±20 %, latency ±25 % of the reference's median), and the probe's cost (wall and CPU
seconds of a full and a ``--quick`` pair).  Nothing is stored: the helper runs directly.
Run: .venv/bin/python bench/probe.py [--runs 5] [--node 0] [--cpus N] [--multichase PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cxlctl.hostio.host import Host  # noqa: E402
from cxlctl.inventory import scan  # noqa: E402
from cxlctl.probe import measure, native  # noqa: E402

MiB = 1 << 20


def _run(argv: List[str], timeout: float = 600) -> str:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} -> {p.returncode}: {p.stderr[-300:]}")
    return p.stdout + p.stderr


#: the goals: the probe's median within this fraction of the reference's
GOAL = {"read_vs_likwid_load": 0.20, "write_vs_likwid_store": 0.20, "latency_vs_multichase": 0.25}


def likwid(kernel: str, cpus: List[int], size: int) -> float:
    """MB/s of likwid-bench's ``kernel`` with ``len(cpus)`` threads over ``size`` bytes on domain M0."""
    # likwid's kB are 1000 bytes: the same buffer as the probe's to within a kB
    out = _run(["likwid-bench", "-t", kernel, "-w", f"M0:{size // 1000}kB:{len(cpus)}"])
    m = re.search(r"MByte/s:\s+([0-9.]+)", out)
    if not m:
        raise RuntimeError(f"likwid-bench printed no MByte/s: {out[-300:]}")
    return float(m.group(1))


def multichase(exe: str, node: int, cpu: int, size: int) -> float:
    """ns per load of multichase's average over a full-buffer random permutation."""
    mib = f"{size // MiB}m"
    argv = [
        "numactl",
        f"--membind={node}",
        f"--physcpubind={cpu}",
        exe,
        "-s",
        "64",
        "-m",
        mib,
        "-T",
        mib,
        "-H",
        "-a",
        "-n",
        "3",
    ]
    return float(_run(argv).split()[-1])


def others(node: int, cpus: List[int]) -> Dict[str, Optional[float]]:
    """stress-ng's stream triad, mbw's memcpy and sysbench's memory figures (MB/s), where installed."""
    bind = ["numactl", f"--membind={node}", f"--physcpubind={','.join(map(str, cpus))}"]
    out: Dict[str, Optional[float]] = {}
    if shutil.which("stress-ng"):
        t = _run(bind + ["stress-ng", "--stream", str(len(cpus)), "-t", "10", "--metrics-brief"])
        m = re.search(r"stream\s+([0-9.]+) memory read rate", t)
        out["stress-ng --stream triad (MB read/s, geometric mean per instance)"] = float(m.group(1)) if m else None
    if shutil.which("mbw"):
        t = _run(bind + ["mbw", "-q", "-n", "3", "-t0", "256"])
        m = re.search(r"AVG\s+Method: MEMCPY.*Copy: ([0-9.]+) MiB/s", t)
        out["mbw memcpy (MiB/s, 1 thread)"] = float(m.group(1)) if m else None
    if shutil.which("sysbench"):
        argv = ["sysbench", "memory", f"--threads={len(cpus)}", "--memory-block-size=1M", "--memory-total-size=32G"]
        t = _run(bind + argv + ["--memory-oper=read", "run"])
        m = re.search(r"\(([0-9.]+) MiB/sec\)", t)
        out["sysbench memory read (MiB/s)"] = float(m.group(1)) if m else None
    return out


def stats(xs: List[float]) -> Dict[str, Any]:
    mean = statistics.mean(xs)
    cv = statistics.stdev(xs) / mean if len(xs) > 1 and mean else 0.0
    return {
        "samples": [round(x, 3) for x in xs],
        "median": round(statistics.median(xs), 3),
        "min": round(min(xs), 3),
        "max": round(max(xs), 3),
        "cv": round(cv, 3),
    }


def cost(exe: str, pair: measure.Pair) -> Dict[str, float]:
    """Wall and CPU seconds (the helper's user + system) of one pair's measurements."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    measure.measure(exe, pair, None, 0, measure.steps(pair))
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}


def _versus(
    series: Dict[str, List[float]], f: Dict[str, Dict[str, Any]], mine: str, ref: str, best: Callable[..., float]
) -> Dict[str, Any]:
    """The probe's figure ``mine`` against the reference ``ref``: of the medians, of each tool's best run
    (``best``: max for a bandwidth, min for a latency), and the per-run ratios' statistics."""
    per_run = [a / b for a, b in zip(series[mine], series[ref])]
    return {
        "of_medians": round(f[mine]["median"] / f[ref]["median"], 3),
        "of_bests": round(best(series[mine]) / best(series[ref]), 3),
        "per_run": stats(per_run),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--node", type=int, default=0)
    ap.add_argument("--bw-mib", type=int, default=None, help="default: what a full probe takes here")
    ap.add_argument("--lat-mib", type=int, default=None, help="default: what a full probe takes here")
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--multichase", default=os.environ.get("MULTICHASE"))
    ap.add_argument("--cpus", type=int, default=None, help="only the node's first N CPUs (default: all)")
    args = ap.parse_args()
    host = Host("/")
    inv = scan(host)
    node = inv.node(args.node)
    if node is None or not node.cpus:
        raise SystemExit(f"node {args.node} has no CPUs here")
    cpus = sorted(set(node.cpus) & os.sched_getaffinity(0))[: args.cpus]
    full = measure.sizes_for(host.reader, cpus, quick=False, buffer_mib=None)
    exe = native.helper_path()
    bw = args.bw_mib * MiB if args.bw_mib else full.bandwidth
    lat = args.lat_mib * MiB if args.lat_mib else full.latency
    keys = ("read", "likwid_load", "write", "likwid_store", "latency", "multichase")
    series: Dict[str, List[float]] = {k: [] for k in keys}
    how: Dict[str, Any] = {}
    for i in range(args.runs):
        for mode, size, run_cpus in (("read", bw, cpus), ("write", bw, cpus), ("latency", lat, cpus[:1])):
            got = native.run(exe, mode, args.node, size, args.seconds, run_cpus)
            series[mode].append(float(got["median"]))
            how[mode] = {k: got.get(k) for k in ("store", "advice", "advised", "huge_kb") if k in got}
        series["likwid_load"].append(likwid("load_avx", cpus, bw))
        series["likwid_store"].append(likwid("store_mem_avx", cpus, bw))
        if args.multichase:
            series["multichase"].append(multichase(args.multichase, args.node, cpus[0], lat))
        sys.stderr.write(
            f"run {i + 1}/{args.runs}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in series.items() if v) + "\n"
        )
    doc: Dict[str, Any] = {
        "node": args.node,
        "cpus": cpus,
        "last_level_cache_bytes": full.llc,
        "bandwidth_buffer_mib": bw // MiB,
        "latency_buffer_mib": lat // MiB,
        "seconds_per_measurement": args.seconds,
        "load_average": os.getloadavg(),
        "transparent_hugepage": measure.thp_mode(host.reader),
        "how": how,
        "figures": {k: stats(v) for k, v in series.items() if v},
    }
    f = doc["figures"]
    # each run's probe and reference ran back to back: the median of the per-run ratios is the
    # comparison least moved by the machine's load drifting between runs
    # and, on a shared machine, the best of each (other load only lowers a bandwidth and raises a
    # latency, so the highest bandwidth and the lowest latency are each tool's least disturbed run)
    doc["read_vs_likwid_load"] = _versus(series, f, "read", "likwid_load", max)
    doc["write_vs_likwid_store"] = _versus(series, f, "write", "likwid_store", max)
    if "multichase" in f:
        doc["latency_vs_multichase"] = _versus(series, f, "latency", "multichase", min)
    doc["within_goal"] = {k: abs(doc[k]["of_medians"] - 1) <= g for k, g in GOAL.items() if k in doc}
    pair = measure.Pair(0, args.node, tuple(cpus), full)
    quick = measure.sizes_for(host.reader, cpus, quick=True, buffer_mib=None)
    doc["cost"] = {"full_pair": cost(exe, pair), "quick_pair": cost(exe, pair._replace(sizes=quick))}
    doc["others_once"] = others(args.node, cpus)
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
