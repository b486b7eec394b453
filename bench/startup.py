"""Start-up and scan-cost benchmark for `cxlctl status --json` (issue 2's targets).

* start-up: median wall time of `python -m cxlctl --root FIXTURE status --json` on the
  largest recorded fixture vs a bare `python -c pass` (target: within 3x);
* scan cost as the tree grows: in-process `scan()` on synthetic trees of 1..1024
  memdevs (bench/synth.py), median of repeated runs, with per-memdev cost (target:
  no worse than linear).

Bytecode is compiled first and PYTHONDONTWRITEBYTECODE is cleared: an installed
cxlctl runs from .pyc files, and timing the compiler would measure the wrong thing.
Run: python bench/startup.py [--quick]
"""

from __future__ import annotations

import compileall
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def _median_ms(cmd: list, runs: int, env: dict) -> float:  # type: ignore[type-arg]
    xs = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
        xs.append(time.perf_counter() - t)
    return statistics.median(xs) * 1000


def largest_fixture() -> str:
    roots = [os.path.dirname(m) for m in glob.glob(os.path.join(REPO, "fixtures", "*", "*", "cxlctl-record.json"))]
    if not roots:
        raise SystemExit("no fixtures found under fixtures/")

    def size(r: str) -> int:
        return sum(len(fs) for _, _, fs in os.walk(r))

    return max(roots, key=size)


def main() -> None:
    quick = "--quick" in sys.argv
    runs = 7 if quick else 21
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = REPO
    compileall.compile_dir(os.path.join(REPO, "cxlctl"), quiet=1)
    fx = largest_fixture()
    py = sys.executable
    # interleave the two measurements so machine noise hits both alike
    bare, cx = [], []
    for _ in range(3):
        bare.append(_median_ms([py, "-c", "pass"], runs // 3 or 1, env))
        cx.append(_median_ms([py, "-m", "cxlctl", "--root", fx, "status", "--json"], runs // 3 or 1, env))
    b, c = statistics.median(bare), statistics.median(cx)
    print(f"fixture: {os.path.relpath(fx, REPO)}")
    print(f"start-up: python -c pass {b:.1f} ms; cxlctl status --json {c:.1f} ms; ratio {c / b:.2f}x (target <= 3x)")

    from synth import grow

    from cxlctl.inventory import scan

    src = os.path.join(REPO, "fixtures", "linux-6.12", "single-noregion")
    sizes = [1, 16, 64, 256] if quick else [1, 16, 64, 256, 1024]
    print("scan cost vs memdevs (in-process scan(), median):")
    base = None
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            root = grow(src, os.path.join(tmp, f"n{n}"), n)
            inv = scan(root)
            assert len(inv.memdevs) == n, (n, len(inv.memdevs))
            xs = []
            for _ in range(3 if n >= 256 else 7):
                t = time.perf_counter()
                scan(root)
                xs.append(time.perf_counter() - t)
            ms = statistics.median(xs) * 1000
            per = (ms - (base or 0)) / max(n - 1, 1) if base is not None else 0.0
            if base is None:
                base = ms
            print(f"  {n:5d} memdevs: {ms:8.1f} ms" + (f"  ({per:.3f} ms per added memdev)" if n > 1 else ""))


if __name__ == "__main__":
    main()
