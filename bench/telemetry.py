"""Cost of one ``cxlctl stat`` report and of ``cxlctl top``'s refreshes (issue 11).

Three figures, each the median of repeated in-process runs (start-up is
bench/startup.py's business):

* **stat, largest recorded tree** -- one report (sample, verdicts, JSON) on the
  recorded telemetry fixture with the most files, all its cgroups and processes asked for;
* **stat, this host** -- the same on the live host, processes listed by psutil;
* **stat, synthetic host** -- the telemetry fixture grown to 1,000 processes and
  64 cgroups (copies of the recorded helper's ``numa_maps`` / ``statm`` and of
  its cgroup's ``memory.numa_stat`` / ``memory.stat``): a report with every
  cgroup, and one with ``--top 20`` (what ``top`` reads per refresh);
* **top, CPU per refresh** -- what ``cxlctl top`` does per refresh on the
  synthetic host (sample, rates, verdicts, the rich view rendered at 80
  columns), as CPU seconds; at ``--interval 1`` that is the share of one core.

Usage: ``.venv/bin/python bench/telemetry.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from cxlctl.hostio.host import Host  # noqa: E402
from cxlctl.hostio.reader import Reader  # noqa: E402
from cxlctl.telemetry.rates import rates  # noqa: E402
from cxlctl.telemetry.report import to_dict  # noqa: E402
from cxlctl.telemetry.sample import ProcessSample, list_cgroups, node_kinds, read_sample, top_pids  # noqa: E402
from cxlctl.telemetry.verdicts import judge  # noqa: E402

PROCESSES = 1000
CGROUPS = 64


def _files(root: str) -> int:
    return sum(len(fs) for _, _, fs in os.walk(root))


def largest_fixture() -> str:
    """The recorded tree with the most files among those holding telemetry (the ``*-telemetry`` trees)."""
    pattern = os.path.join(REPO, "fixtures", "*", "*-telemetry", "cxlctl-record.json")
    roots = [os.path.dirname(m) for m in glob.glob(pattern)]
    return max(roots, key=_files)


def telemetry_fixture() -> str:
    found = sorted(glob.glob(os.path.join(REPO, "fixtures", "linux-6.12", "*-telemetry")))
    if not found:
        raise SystemExit("no fixtures/linux-6.12/*-telemetry tree: record it (tests/vm/record_telemetry_fixtures.py)")
    return found[0]


def grow(src: str, dest: str) -> str:
    """The telemetry tree with PROCESSES processes and CGROUPS cgroups (copies of the recorded ones)."""
    shutil.copytree(src, dest, symlinks=True)
    procs = [d for d in os.listdir(os.path.join(dest, "proc")) if d.isdigit()]
    helper = max(procs, key=lambda p: os.path.getsize(os.path.join(dest, "proc", p, "numa_maps")))
    cg_root = os.path.join(dest, "sys/fs/cgroup")
    cg_src = next(
        os.path.join(cg_root, d)
        for d in os.listdir(cg_root)
        if os.path.exists(os.path.join(cg_root, d, "memory.numa_stat"))
    )
    for i in range(CGROUPS):
        d = os.path.join(cg_root, f"bench{i}.service")
        os.makedirs(d, exist_ok=True)
        for f in ("memory.numa_stat", "memory.stat"):
            shutil.copy(os.path.join(cg_src, f), d)
    for k in range(PROCESSES):
        pid = str(100000 + k)
        d = os.path.join(dest, "proc", pid)
        os.makedirs(d, exist_ok=True)
        for f in ("numa_maps", "statm", "comm"):
            shutil.copy(os.path.join(dest, "proc", helper, f), d)
        with open(os.path.join(d, "cgroup"), "w") as fh:
            fh.write(f"0::/bench{k % CGROUPS}.service\n")
    return dest


def median_ms(fn: Callable[[], object], runs: int) -> float:
    fn()  # warm the page cache
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def report(root: str, cgroups: List[str], top: int, pids: List[int]) -> Callable[[], str]:
    kinds = node_kinds(Host(root))

    def one() -> str:
        s = read_sample(Reader(root), kinds, cgroups=cgroups, pids=pids, top=top)
        return json.dumps(to_dict(s, None, judge(s, None), 0))

    return one


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--no-live", action="store_true", help="leave out the live host's top CPU measurement")
    ap.add_argument("--tree", help="base of the synthetic host (default: fixtures/linux-6.12/*-telemetry)")
    a = ap.parse_args()
    out: List[str] = []
    big = largest_fixture()
    r = Reader(big)
    cgs = list_cgroups(r)
    pids = [int(p) for p in top_pids(r, 1000)]
    ms = median_ms(report(big, cgs, 0, pids), a.runs)
    out.append(
        f"stat, largest recorded tree ({os.path.relpath(big, REPO)}, {_files(big)} files, "
        f"{len(cgs)} cgroups, {len(pids)} processes): {ms:.2f} ms"
    )
    if not a.no_live:
        r = Reader("/")
        cgs = list_cgroups(r, limit=64)
        ms = median_ms(report("/", cgs, 20, []), a.runs)
        out.append(f"stat, this host (psutil lists the processes): {len(cgs)} cgroups and --top 20: {ms:.2f} ms")
    with tempfile.TemporaryDirectory() as tmp:
        root = grow(a.tree or telemetry_fixture(), os.path.join(tmp, "host"))
        r = Reader(root)
        cgs = list_cgroups(r)
        ms_cg = median_ms(report(root, cgs, 0, []), a.runs)
        ms_top = median_ms(report(root, cgs, 20, []), a.runs)
        out.append(f"stat, synthetic host ({PROCESSES} processes, {len(cgs)} cgroups): every cgroup {ms_cg:.2f} ms")
        out.append(f"stat, synthetic host, every cgroup and --top 20 (listing {PROCESSES} processes): {ms_top:.2f} ms")

        from rich.console import Console

        from cxlctl.telemetry.live import PROCESS_BUDGET_S, PROCESS_MAX_AGE_S, TOP_CGROUPS, TOP_PROCESSES
        from cxlctl.telemetry.top import History, rich_view, view

        kinds = node_kinds(Host(root))
        hist = History()
        prev = read_sample(Reader(root), kinds, cgroups=cgs, top=TOP_PROCESSES)
        cpu = []
        # as cxlctl top keeps them: the ranking and each numa_maps are re-read every 5 s, not per refresh
        cache: Dict[int, Tuple[float, ProcessSample]] = {}
        ranked = top_pids(Reader(root), TOP_PROCESSES)
        listed = list_cgroups(Reader(root), limit=TOP_CGROUPS)  # as cxlctl top: every 5 s, with the ranking
        for _ in range(a.runs):
            time.sleep(1.0 / a.runs)  # the cache's clock: spread the refreshes over about a second each run
            c0 = time.process_time()
            s = read_sample(
                Reader(root),
                kinds,
                cgroups=listed,
                top=TOP_PROCESSES,
                budget_s=PROCESS_BUDGET_S,
                cache=cache,
                max_age=PROCESS_MAX_AGE_S,
                ranked=ranked,
                cgroup_counters=False,
            )
            rt = rates(prev, s)
            hist.add(rt)
            buf = io.StringIO()
            Console(file=buf, width=80, force_terminal=True).print(rich_view(view(s, rt, judge(s, rt), hist), 80))
            cpu.append(time.process_time() - c0)
            prev = s
        per = statistics.median(cpu)
        out.append(
            f"top, one refresh on the synthetic host (sample + rich view at 80 columns): {per * 1000:.1f} ms CPU "
            f"= {per * 100:.1f} % of one core at --interval 1"
        )
    if not a.no_live:
        out.append(live_top_cpu())
    print("\n".join(out))


def _top_cpu(count: int) -> float:
    """CPU seconds (user + system) of ``cxlctl top --interval 1 --count N`` on this host, on a pseudo-terminal."""
    import pty
    import resource
    import subprocess

    master, slave = pty.openpty()
    env = dict(os.environ, COLUMNS="80", LINES="30", TERM="xterm")
    env.pop("CXLCTL_ROOT", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.Popen(
        [sys.executable, "-m", "cxlctl", "top", "--interval", "1", "--count", str(count)],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=REPO,
    )
    os.close(slave)
    try:
        while p.poll() is None:
            try:
                os.read(master, 65536)
            except OSError:
                break
        p.wait()
    finally:
        os.close(master)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def live_top_cpu() -> str:
    """``top`` at ``--interval 1`` on this host: (CPU of 11 refreshes - CPU of 1) / 10 s, median of 3."""
    shares = []
    for _ in range(3):
        one = _top_cpu(1)
        eleven = _top_cpu(11)
        shares.append((eleven - one) / 10)
    return (
        f"top --interval 1 on this host (rich screen on a pty, 20 largest processes, all cgroups): "
        f"{statistics.median(shares) * 100:.1f} % of one core (median of 3; start-up subtracted)"
    )


if __name__ == "__main__":
    main()
