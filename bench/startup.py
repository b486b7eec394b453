"""Start-up and scan-cost benchmark for ``cxlctl status`` (issue 10's targets).

* start-up, from a throwaway **non-editable** install (an editable install's
  ``.pth`` import hook runs at every interpreter start and hides part of the
  cost): medians of ``python -c pass``, ``cxlctl --root FIXTURE status --json``,
  the human ``cxlctl --root FIXTURE status`` (COLUMNS=80, piped), ``doctor --json``
  and ``stat --json`` on the largest recorded fixture, runs interleaved so machine
  noise hits all alike.  Goals (issue 19): ``status --json`` within 1.6x of
  ``python -c pass`` (2x at most), the others within 6x.
* scan cost as the tree grows: in-process ``scan()`` on synthetic trees of
  1..1024 memdevs (bench/synth.py), median of repeated runs, and the cost per
  added memdev.  Target: half the cost per memdev measured before issue 10
  on the same machine (0.9 ms where the issue was filed; 0.58-0.61 ms on the
  machine of bench/README.md's figures, so 0.30 ms there).  ``--against DIR``
  measures another checkout (the "before") interleaved with this one, on the
  same trees, and prints the ratio.
* ``--instructions``: the instructions ``python -c pass`` and ``status --json`` execute, counted
  by valgrind's callgrind (user space only; deterministic with ``PYTHONHASHSEED=0``, so unmoved
  by the machine's load, unlike the times).  Skipped with a note when valgrind is not installed.

The venv is built with ``python3 -m venv`` in a temporary directory and
``pip install --no-deps REPO`` plus its dependencies (pip uses whatever indexes
pip.conf names, so it works offline from local ones).  ``--repo`` measures
another checkout (e.g. ``git archive`` of an older commit) with this script.
Run: python bench/startup.py [--quick] [--repo DIR] [--venv DIR] [--no-scan] [--against DIR] [--instructions]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def largest_fixture(repo: str) -> str:
    roots = [os.path.dirname(m) for m in glob.glob(os.path.join(repo, "fixtures", "*", "*", "cxlctl-record.json"))]
    if not roots:
        raise SystemExit("no fixtures found under fixtures/")

    def size(r: str) -> int:
        return sum(len(fs) for _, _, fs in os.walk(r))

    return max(roots, key=size)


def build_venv(repo: str, where: str) -> str:
    """A fresh venv at ``where`` with ``repo`` installed the way users install it (not editable)."""
    subprocess.run([sys.executable, "-m", "venv", where], check=True)
    pip = [os.path.join(where, "bin", "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    # a copy, so the build never writes build/ or *.egg-info into the checkout
    src = os.path.join(where, "src")
    shutil.copytree(repo, src, ignore=shutil.ignore_patterns(".venv", ".git", "fixtures", "__pycache__", "build"))
    subprocess.run([*pip, "--no-deps", src], check=True, stdout=subprocess.DEVNULL)
    deps = ["typer>=0.26,<0.29", "rich>=13", "psutil>=5.9", "pyudev>=0.24"]
    if sys.version_info < (3, 11):
        deps.append("tomli>=2.0")
    p = subprocess.run([*pip, *deps], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode:
        raise SystemExit(p.stderr)
    return where


def _time_once(cmd: List[str], env: Dict[str, str]) -> Tuple[float, float]:
    """(wall ms, CPU ms) of one run; CPU = the child's user + system time, which the other
    processes of a loaded machine disturb far less than the wall time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    # cwd: not the checkout, which `python -c` would put first on sys.path
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd="/")
    wall = (time.perf_counter() - t) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode not in (0, 1):  # doctor exits 1 when a check fails: still a measured run
        raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}")
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return wall, cpu


_ENTRY = "from cxlctl.__main__ import entry; entry()"


def startup(venv: str, fixture: str, runs: int) -> Dict[str, Tuple[float, float]]:
    """Median (wall, CPU) time in ms of each command, the commands interleaved run by run."""
    py = os.path.join(venv, "bin", "python")
    cx = os.path.join(venv, "bin", "cxlctl")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(COLUMNS="80", TERM="dumb", LC_ALL="C.UTF-8")
    cmds = {
        "python -c pass": [py, "-c", "pass"],
        "status --json": [cx, "--root", fixture, "status", "--json"],
        # the same without pip's generated bin/cxlctl, whose first line is `import re`
        # (re, enum, functools, collections: ~6 ms here): what the package itself costs
        "status --json, no wrapper": [py, "-c", _ENTRY, "--root", fixture, "status", "--json"],
        "status (human, 80 cols)": [cx, "--root", fixture, "status"],
        "doctor --json": [cx, "--root", fixture, "doctor", "--json"],
        "stat --json": [cx, "--root", fixture, "stat", "--json"],
    }
    for cmd in cmds.values():  # warm the page cache and write the .pyc files once
        _time_once(cmd, env)
    xs: Dict[str, List[Tuple[float, float]]] = {k: [] for k in cmds}
    for _ in range(runs):
        for k, cmd in cmds.items():
            xs[k].append(_time_once(cmd, env))
    return {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in xs.items()}


def instructions(venv: str, fixture: str) -> Optional[Dict[str, int]]:
    """Instructions (callgrind's ``Ir``) of ``python -c pass`` and ``status --json`` (the installed
    script, run by the venv's python as its shebang would); None without valgrind.

    The same environment as :func:`startup` plus ``PYTHONHASHSEED=0``: with a random hash
    seed, dict and set layouts, and so the counts, vary by ~0.2 % from run to run."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None
    py = os.path.join(venv, "bin", "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(COLUMNS="80", TERM="dumb", LC_ALL="C.UTF-8", PYTHONHASHSEED="0")
    cmds = {
        "python -c pass": [py, "-c", "pass"],
        "status --json": [py, os.path.join(venv, "bin", "cxlctl"), "--root", fixture, "status", "--json"],
    }
    out: Dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k, cmd in cmds.items():
            subprocess.run(cmd, stdout=subprocess.DEVNULL, env=env, cwd="/", check=True)  # .pyc files written
            p = subprocess.run(
                [valgrind, "--tool=callgrind", f"--callgrind-out-file={tmp}/out", *cmd],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                cwd="/",
            )
            counts = [line.split()[-1] for line in p.stderr.splitlines() if "Collected :" in line]
            if p.returncode not in (0, 1) or not counts:
                raise SystemExit(f"callgrind of {' '.join(cmd)} failed: exit {p.returncode}\n{p.stderr[-2000:]}")
            out[k] = int(counts[-1])
    return out


_SCAN_CHILD = r"""
import json, sys, time
repo, runs = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, repo)
import cxlctl
from cxlctl.inventory import scan
try:
    from cxlctl.hostio.host import Host
except ImportError:  # a checkout from before the Host context: scan() took the root string
    Host = str
assert cxlctl.__file__.startswith(repo), (cxlctl.__file__, repo)
out = {}
for root in sys.argv[3:]:
    n = len(scan(Host(root)).memdevs)  # warm: page cache, sort keys, imports
    xs = []
    for _ in range(runs):
        t = time.perf_counter()
        scan(Host(root))
        xs.append(time.perf_counter() - t)
    out[root] = {"memdevs": n, "times": xs}
print(json.dumps(out))
"""


def scan_cost(repos: List[str], quick: bool) -> List[str]:
    """Scan cost of each checkout in ``repos`` on the same synthetic trees.

    Each round runs one fresh interpreter per checkout, in turn, that scans every
    tree a few times: noise on this shared machine then hits all checkouts alike
    (a before/after measured back to back in one run).  Reported: the median of
    all scans of a tree, and the cost per added memdev against the 1-memdev tree.
    """
    sys.path.insert(0, HERE)
    from synth import grow

    src = os.path.join(REPO, "fixtures", "linux-6.12", "single-noregion")
    sizes = [1, 16, 64, 256] if quick else [1, 16, 64, 256, 1024]
    rounds = 3 if quick else 6
    times: Dict[str, Dict[int, List[float]]] = {r: {n: [] for n in sizes} for r in repos}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {n: grow(src, os.path.join(tmp, f"n{n}"), n) for n in sizes}
        for _ in range(rounds):
            for repo in repos:
                p = subprocess.run(
                    [sys.executable, "-c", _SCAN_CHILD, repo, "3", *trees.values()],
                    capture_output=True,
                    text=True,
                    check=True,
                    cwd="/",
                )
                got = json.loads(p.stdout)
                for n, root in trees.items():
                    assert got[root]["memdevs"] == n, (repo, n, got[root]["memdevs"])
                    times[repo][n].extend(got[root]["times"])
    out = [f"scan cost vs memdevs (in-process scan(), median of {rounds * 3} scans over {rounds} interleaved rounds):"]
    per: Dict[str, Dict[int, float]] = {}
    for repo in repos:
        ms = {n: statistics.median(xs) * 1000 for n, xs in times[repo].items()}
        per[repo] = {n: (ms[n] - ms[1]) / (n - 1) for n in sizes if n > 1}
        out.append(f"  {repo}:")
        for n in sizes:
            extra = f"  ({per[repo][n]:.3f} ms per added memdev)" if n > 1 else ""
            out.append(f"    {n:5d} memdevs: {ms[n]:8.1f} ms{extra}")
    if len(repos) > 1:
        new, old = repos[0], repos[1]
        ratios = ", ".join(f"{n}: {per[new][n] / per[old][n]:.2f}" for n in sizes if n >= 256)
        out.append(f"  per added memdev, --repo / --against: {ratios}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="fewer runs and no 1024-memdev tree")
    ap.add_argument("--repo", default=REPO, help="checkout to measure (default: this one)")
    ap.add_argument("--venv", help="reuse (or create) the non-editable venv here instead of a temporary one")
    ap.add_argument("--no-scan", action="store_true", help="start-up only")
    ap.add_argument("--no-startup", action="store_true", help="scan cost only")
    ap.add_argument("--against", help="another checkout whose scan cost is measured interleaved with --repo's")
    ap.add_argument("--instructions", action="store_true", help="also count instructions with callgrind (valgrind)")
    a = ap.parse_args()
    repo = os.path.abspath(a.repo)
    lines: List[str] = []
    if not a.no_startup:
        fx = largest_fixture(repo)
        runs = 10 if a.quick else 30
        with tempfile.TemporaryDirectory() as tmp:
            venv = a.venv or os.path.join(tmp, "venv")
            if not os.path.exists(os.path.join(venv, "bin", "cxlctl")):
                build_venv(repo, venv)
            m = startup(venv, os.path.abspath(fx), runs)
            ir = instructions(venv, os.path.abspath(fx)) if a.instructions else None
        bare, bare_cpu = m["python -c pass"]
        lines.append(f"start-up, non-editable install, {os.path.relpath(fx, repo)}, median of {runs} interleaved runs:")
        lines.append(f"  {'':26s} {'wall':>9s} {'':8s} {'CPU':>9s}  (ratios to python -c pass)")
        for k, (w, c) in m.items():
            lines.append(f"  {k:26s} {w:6.1f} ms ({w / bare:4.2f}x) {c:6.1f} ms ({c / bare_cpu:4.2f}x)")
        lines.append("  goals (issue 19): status --json <= 1.6x python -c pass (at most 2x); the others <= 6x")
        if a.instructions:
            if ir is None:
                lines.append("instructions: skipped (valgrind is not installed)")
            else:
                base = ir["python -c pass"]
                lines.append("instructions (callgrind Ir, user space, PYTHONHASHSEED=0; ratios to python -c pass):")
                for k, n in ir.items():
                    lines.append(f"  {k:26s} {n / 1e6:8.2f} M ({n / base:4.2f}x)")
    if not a.no_scan:
        lines.extend(scan_cost([repo] + ([os.path.abspath(a.against)] if a.against else []), a.quick))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
