"""A compressed soak of the daemon on a copy of a recorded tree (issue 22).

The real :class:`~cxlctl.daemon.loop.Daemon` runs in this process and its own loop drives it
(``step()``). The tree is ``linux-6.12/hmat2-noregion`` (it has DAMON's sysfs); the daemon
enforces ``inference-damon`` (DAMON tiering), with the kernel's side effects of DAMON writes
from :mod:`tests.damon_sysfs`. It gets a pipe-backed udev monitor (tests/daemon_support.py),
its real metrics endpoint on loopback and its real RAS watcher, whose private trace instance's
``trace_pipe`` is a FIFO in the tree. Each round:

* a burst of uevents (memory, dax, cxl, node; add/remove), ``--events`` in all, debounced into one
  reconcile (``--reconciles`` in all);
* every 10th round (not a drift round), the recorded regions appear or go (the device part of the tree is swapped
  between ``hmat2-noregion`` and ``hmat2-region``): the reconcile re-targets DAMON (three kdamonds
  for DRAM and the two CXL nodes, or none), checked against DAMON's files after the round;
* every 5th round, a knob is changed behind the daemon's back and a drift check repairs it;
* every ``--ras-every`` round, one of the event streams the 6.12 kernel wrote in the RAS VM proof
  (fixtures/linux-6.12/events) goes into the trace pipe, now and then cut mid-line across two
  writes;
* ``--scrapes`` HTTP scrapes spread over the rounds, from a child process (so the client's buffers
  are not counted in the daemon's RSS).

Measured: RSS, fds and threads after a warm-up and at the end, the size of cxlctl's state files,
the metric series count (first and last scrape), events received against sent (uevents and RAS
events, per memdev/kind/severity: none lost, none counted twice), the re-targets and write passes
(one per change, no more), and CPU per event. The unit tier runs a short slice
(tests/test_reliab_soak.py).

    .venv/bin/python bench/soak.py [--events 100000 --reconciles 10000 --scrapes 20000]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import resource
import select
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Tuple

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from cxlctl.hostio.host import Host  # noqa: E402

SUBSYSTEMS = (("memory", "memory{}"), ("dax", "dax{}.0"), ("cxl", "region{}"), ("node", "node{}"))
TREE = "linux-6.12/hmat2"
PROFILE = "inference-damon"
KDAMONDS = "/sys/kernel/mm/damon/admin/kdamonds"
#: cxlctl's own files (what must stay bounded): the tuning journal, state, persisted profile
STATE_DIRS = ("run/cxlctl", "var/lib/cxlctl")

#: the scraping child: one ``GET /metrics`` per line on stdin, the series count (or an error) out
SCRAPER = """
import sys
from tests.daemon_probe import scrape
addr = (sys.argv[1], int(sys.argv[2]))
for _ in sys.stdin:
    data = scrape(addr)
    head, _, body = data.partition(b"\\r\\n\\r\\n")
    if not head.startswith(b"HTTP/1.0 200"):
        print("error", head[:80], flush=True)
        continue
    print(sum(1 for ln in body.decode().splitlines() if ln and not ln.startswith("#")), flush=True)
"""


class Scraper:
    """Scrapes from a child process while the daemon's own loop accepts and answers them."""

    def __init__(self, addr: Tuple[str, int]) -> None:
        self.p = subprocess.Popen(
            [sys.executable, "-c", SCRAPER, addr[0], str(addr[1])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=HERE,
        )
        assert self.p.stdin is not None and self.p.stdout is not None
        self.stdin, self.stdout = self.p.stdin, self.p.stdout

    def scrape(self, daemon: Any, step_until: Callable[..., float]) -> int:
        self.stdin.write(b"\n")
        self.stdin.flush()
        fd = self.stdout.fileno()
        step_until(daemon, lambda: bool(select.select([fd], [], [], 0)[0]), timeout=30)
        line = self.stdout.readline().decode().strip()
        if not line.isdigit():
            raise AssertionError(f"scrape failed: {line!r}")
        return int(line)

    def close(self) -> None:
        self.stdin.close()
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.stdout.close()


def _state_bytes(root: str) -> int:
    n = 0
    for d in STATE_DIRS:
        for dirpath, _, files in os.walk(os.path.join(root, d)):
            n += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files)
    return n


def _kdamonds(root: str) -> List[str]:
    """The ``state`` of each kdamond in the tree's DAMON sysfs."""
    base = root + KDAMONDS
    with open(os.path.join(base, "nr_kdamonds")) as f:
        n = int(f.read())
    out = []
    for k in range(n):
        with open(os.path.join(base, str(k), "state")) as f:
            out.append(f.read().strip())
    return out


class _Patch:
    """What :func:`tests.damon_sysfs.install` needs of pytest's ``monkeypatch`` (without importing
    pytest into the process whose RSS is measured), and its undo."""

    def __init__(self) -> None:
        self.saved: List[Tuple[Any, str, Any]] = []

    def setattr(self, obj: Any, name: str, value: Any) -> None:
        self.saved.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    def undo(self) -> None:
        while self.saved:
            obj, name, value = self.saved.pop()
            setattr(obj, name, value)


def soak(
    events: int,
    reconciles: int,
    scrapes: int,
    seed: int = 22,
    ras_every: int = 2,
    log: Any = None,
) -> Dict[str, Any]:
    from cxlctl.ras.events import to_event
    from cxlctl.ras.trace import Stream, split_lines
    from cxlctl.tuning import engine
    from cxlctl.tuning import journal as jn
    from tests import damon_sysfs
    from tests.daemon_probe import usage
    from tests.daemon_support import (
        config,
        make_daemon,
        pairs,
        ras_streams,
        read,
        step_until,
        swap_in,
        trace_pipe,
        work_tree,
        write,
    )

    rng = random.Random(seed)
    nor, reg = [p for p in pairs() if p[1].endswith(TREE + "-region")][0]
    streams = sorted(ras_streams().items())
    # what each stream must add to the watcher's counters: (memdev or port, kind, severity) → n
    per_stream: Dict[str, collections.Counter[Tuple[str, str, str]]] = {}
    for name, data in streams:
        lines, tail = split_lines(data)
        assert tail == b""
        keys = [to_event(t, None) for t in Stream().feed(lines)]
        per_stream[name] = collections.Counter(
            (e.memdev or (f"port:{e.port}" if e.port else "unknown"), e.kind, e.severity) for e in keys
        )
        assert sum(per_stream[name].values()) == len(lines), name  # one event per recorded line
    mp = _Patch()
    # undone in reverse order, also when a check fails (the CI slice runs in pytest's process)
    with contextlib.ExitStack() as undo:
        d = undo.enter_context(tempfile.TemporaryDirectory(prefix="cxlctl-soak-"))
        root = work_tree(nor, os.path.join(d, "t"))
        undo.callback(mp.undo)
        damon_sysfs.install(mp, root)
        from cxlctl.daemon.ras import INSTANCE

        pipe = trace_pipe(root, INSTANCE)
        assert engine.apply(Host(root), PROFILE).ok
        cfg = config(
            reconcile={"debounce_ms": 10, "max_delay_ms": 50},
            drift={"interval": 0, "action": "reapply"},
            metrics={"listen": "127.0.0.1:0", "telemetry_interval": 0},
            ras={"enabled": True},
            nfd={"enabled": False},
        )
        daemon, fac, _cap = make_daemon(root, cfg)
        undo.callback(daemon.close)
        daemon.startup()
        assert daemon.server is not None and daemon.ras is not None and daemon.ras.stats.up, _cap.lines
        ras_w = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        undo.callback(os.close, ras_w)
        scraper = Scraper(daemon.server.address)
        undo.callback(scraper.close)

        def done() -> int:
            return sum(daemon.stats.reconciles.values())

        def ras_seen() -> int:
            return sum(daemon.ras.stats.events.values()) if daemon.ras is not None else -1

        per_round = max(1, events // reconciles)
        scrape_every = reconciles / max(1, scrapes)
        sent = scraped = drifts = swaps = retargets = ras_writes = ras_cut = 0
        ras_sent: collections.Counter[Tuple[str, str, str]] = collections.Counter()
        first_series = last_series = max_series = 0
        region = False
        warm = max(1, reconciles // 50)
        start: Dict[str, int] = {}
        state0 = 0
        cpu0 = t0 = 0.0
        debt = 0.0
        ok0 = 0
        for i in range(reconciles):
            if i == warm:
                start = usage(looks=10)
                state0 = _state_bytes(root)
                r = resource.getrusage(resource.RUSAGE_SELF)
                cpu0, t0 = r.ru_utime + r.ru_stime, time.monotonic()
            swap = i % 10 == 7  # not a drift round: a re-target is a write pass of its own
            if swap:
                swap_in(root, nor if region else reg)
                region = not region
                swaps += 1
            if i % 5 == 4:
                write(root, "/proc/sys/vm/swappiness", "77")
                drifts += 1
            # the test logger keeps every line in a StringIO: empty it, or it is the growth measured
            _cap.stream.seek(0)
            _cap.stream.truncate()
            target = done() + 1
            ok0 = daemon.stats.reconciles.get("ok", 0)
            for _ in range(per_round):
                sub, fmt = rng.choice(SUBSYSTEMS)
                fac.current.trigger(
                    rng.choice(("add", "remove", "change", "online")), sub, fmt.format(rng.randint(0, 64))
                )
                sent += 1
            step_until(daemon, lambda t=target: done() >= t, timeout=30)  # type: ignore[misc]
            if i % 5 == 4:
                daemon.rec.check_drift()
                if daemon.rec.drift and any(c.status == "drift" for c in daemon.rec.drift):
                    daemon._reconcile("drift")  # what the drift timer does with action = reapply
                assert read(root, "/proc/sys/vm/swappiness") == "10", "drift not repaired"
            # one write pass per change (a drift, a re-target), none for a burst that changed nothing
            writes = daemon.stats.reconciles.get("ok", 0) - ok0
            assert writes == (1 if swap or i % 5 == 4 else 0), (i, dict(daemon.stats.reconciles), _cap.lines[-20:])
            if swap:
                layout = _kdamonds(root)
                assert layout == (["on"] * 3 if region else []), (i, layout, _cap.lines[-20:])
                retargets += 1
            if ras_every and i % ras_every == 0:
                name, data = streams[ras_writes % len(streams)]
                want = ras_seen() + sum(per_stream[name].values())
                if rng.random() < 0.25:  # a line cut across two reads of the pipe
                    cut = rng.randint(1, len(data) - 1)
                    os.write(ras_w, data[:cut])
                    daemon.step()
                    os.write(ras_w, data[cut:])
                    ras_cut += 1
                else:
                    os.write(ras_w, data)
                step_until(daemon, lambda w=want: ras_seen() >= w, timeout=30)  # type: ignore[misc]
                ras_sent.update(per_stream[name])
                ras_writes += 1
            debt += 1 / scrape_every
            while debt >= 1:
                n = scraper.scrape(daemon, step_until)
                scraped += 1
                debt -= 1
                first_series = first_series or n
                last_series = n
                max_series = max(max_series, n)
            if log is not None and (i + 1) % max(1, reconciles // 20) == 0:
                log(f"{i + 1}/{reconciles} reconciles, {sent} events, {scraped} scrapes, {usage()}")
        r = resource.getrusage(resource.RUSAGE_SELF)
        cpu = r.ru_utime + r.ru_stime - cpu0
        wall = time.monotonic() - t0
        end = usage(looks=10)
        received = sum(daemon.stats.events.values())
        assert daemon.ras is not None
        ras = daemon.ras.stats
        ras_got = collections.Counter(ras.events)
        ras_info = {"parse_errors": ras.parse_errors, "lost": ras.lost, "up": ras.up}
        jsize = os.path.getsize(root + jn.JOURNAL)
        state1 = _state_bytes(root)
        j = jn.load(Host(root))
    counted = sent - warm * per_round
    return {
        "events_sent": sent,
        "events_received": received,
        "events_lost": sent - received,
        "reconciles": done(),
        "reconcile_results": dict(daemon.stats.reconciles),
        "scrapes": scraped,
        "region_swaps": swaps,
        "damon_retargets": retargets,
        "drift_injected": drifts,
        "drift_corrections": daemon.stats.drift_corrections,
        "ras_writes": ras_writes,
        "ras_writes_cut": ras_cut,
        "ras_events_sent": sum(ras_sent.values()),
        "ras_events_received": sum(ras_got.values()),
        "ras_events_mismatched": sum(((ras_sent - ras_got) + (ras_got - ras_sent)).values()),
        **{f"ras_{k}": v for k, v in ras_info.items()},
        "start": start,
        "end": end,
        "rss_growth_kib": end["rss_kib"] - start["rss_kib"],
        "series_first": first_series,
        "series_last": last_series,
        "series_max": max_series,
        "journal_bytes": jsize,
        "state_bytes_start": state0,
        "state_bytes_end": state1,
        "journal_state": None if j is None else j.state,
        "cpu_seconds": round(cpu, 2),
        "wall_seconds": round(wall, 2),
        "cpu_us_per_event": round(cpu / max(1, counted) * 1e6, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--reconciles", type=int, default=10_000)
    ap.add_argument("--scrapes", type=int, default=20_000)
    ap.add_argument("--ras-every", type=int, default=2, help="a recorded RAS event stream every N rounds (0: none)")
    ap.add_argument("--seed", type=int, default=22)
    a = ap.parse_args()
    res = soak(
        a.events,
        a.reconciles,
        a.scrapes,
        a.seed,
        a.ras_every,
        log=lambda m: print(m, file=sys.stderr, flush=True),
    )
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
