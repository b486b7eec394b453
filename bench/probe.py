"""``cxlctl probe``'s own repeatability and cost, and its figures beside reference tools' (issue 37).

On one CPU node and one memory node (default node 0, every CPU of it), ``--runs`` rounds (5),
each running, interleaved so the machine's noise hits all alike:

* the probe's helper (:mod:`cxlctl.probe.native`, the loops ``cxlctl probe`` runs): read, 2:1 mix
  and latency, with the buffers of a full probe (``--bw-mib`` 1024, ``--lat-mib`` 256) and
  ``--seconds`` per measurement;
* ``likwid-bench -t load_avx -w M0:SIZE:THREADS`` (Debian's ``likwid``): streaming loads with the
  same threads and buffer size, its memory on the domain of node 0 — the read-bandwidth reference;
* ``multichase -s 64 -m SIZE -T SIZE -a -n 3`` (github.com/google/multichase, built from source: not
  packaged by Debian) under ``numactl --membind --physcpubind``: a dependent chase over a random
  permutation of every cache line of the buffer, the average — the latency reference.  Give its
  path with ``--multichase`` (skipped without it);
* once per run, for the table of docs/probe.md: ``stress-ng --stream 1`` (triad MB/s),
  ``mbw -t0`` (memcpy MiB/s) and ``sysbench memory`` (MiB/s), each under ``numactl``, when installed.

Prints one JSON document: each figure's samples, median and coefficient of variation (stdev /
mean over the runs), the probe's ratio to each reference, and the probe's cost (wall and CPU
seconds of a full and a ``--quick`` pair).  Nothing is stored: the helper runs directly.
Run: .venv/bin/python bench/probe.py [--runs 5] [--node 0] [--multichase PATH]
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


def likwid(cpus: List[int], size: int) -> float:
    """MB/s of likwid-bench's load_avx with ``len(cpus)`` threads over ``size`` bytes on domain M0."""
    # likwid's kB are 1000 bytes: the same buffer as the probe's to within a kB
    out = _run(["likwid-bench", "-t", "load_avx", "-w", f"M0:{size // 1000}kB:{len(cpus)}"])
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


def cost(exe: str, pair: measure.Pair, sz: measure.Sizes) -> Dict[str, float]:
    """Wall and CPU seconds (the helper's user + system) of one pair's three measurements."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    measure.measure(exe, pair, sz, None, 0, 3)
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
    ap.add_argument("--bw-mib", type=int, default=1024)
    ap.add_argument("--lat-mib", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--multichase", default=os.environ.get("MULTICHASE"))
    args = ap.parse_args()
    host = Host("/")
    inv = scan(host)
    node = inv.node(args.node)
    if node is None or not node.cpus:
        raise SystemExit(f"node {args.node} has no CPUs here")
    cpus = sorted(set(node.cpus) & os.sched_getaffinity(0))
    exe = native.helper_path()
    bw, lat = args.bw_mib * MiB, args.lat_mib * MiB
    series: Dict[str, List[float]] = {k: [] for k in ("read", "mix", "latency", "likwid_load", "multichase")}
    for i in range(args.runs):
        series["read"].append(float(native.run(exe, "read", args.node, bw, args.seconds, cpus)["median"]))
        series["likwid_load"].append(likwid(cpus, bw))
        series["latency"].append(float(native.run(exe, "latency", args.node, lat, args.seconds, cpus[:1])["median"]))
        if args.multichase:
            series["multichase"].append(multichase(args.multichase, args.node, cpus[0], lat))
        series["mix"].append(float(native.run(exe, "mix", args.node, bw, args.seconds, cpus)["median"]))
        sys.stderr.write(
            f"run {i + 1}/{args.runs}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in series.items() if v) + "\n"
        )
    doc: Dict[str, Any] = {
        "node": args.node,
        "cpus": cpus,
        "bandwidth_buffer_mib": args.bw_mib,
        "latency_buffer_mib": args.lat_mib,
        "seconds_per_measurement": args.seconds,
        "load_average": os.getloadavg(),
        "figures": {k: stats(v) for k, v in series.items() if v},
    }
    f = doc["figures"]
    # each run's probe and reference ran back to back: the median of the per-run ratios is the
    # comparison least moved by the machine's load drifting between runs
    # and, on a shared machine, the best of each (other load only lowers a bandwidth and raises a
    # latency, so the highest bandwidth and the lowest latency are each tool's least disturbed run)
    doc["read_vs_likwid"] = _versus(series, f, "read", "likwid_load", max)
    if "multichase" in f:
        doc["latency_vs_multichase"] = _versus(series, f, "latency", "multichase", min)
    pair = measure.Pair(0, args.node, tuple(cpus))
    llc = measure.llc_bytes(host, cpus[0])
    doc["cost"] = {
        "full_pair": cost(exe, pair, measure.sizes(llc, quick=False, buffer_mib=None)),
        "quick_pair": cost(exe, pair, measure.sizes(llc, quick=True, buffer_mib=None)),
    }
    doc["others_once"] = others(args.node, cpus)
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
