"""A compressed soak of the daemon on a copy of a recorded tree (issue 22).

The real :class:`~cxlctl.daemon.loop.Daemon` runs in this process and its own loop drives it
(``step()``). It gets a pipe-backed udev monitor (tests/daemon_support.py) and its real metrics
endpoint on loopback, and enforces ``inference-capacity``. Each round:

* a burst of uevents (memory, dax, cxl, node; add/remove), ``--events`` in all, debounced into one
  reconcile (``--reconciles`` in all);
* every 10th round, the recorded region appears or goes (the device part of the tree is swapped
  between ``hb2-noregion`` and ``hb2-region``);
* every 5th round, a knob is changed behind the daemon's back and a drift check repairs it;
* ``--scrapes`` HTTP scrapes spread over the rounds.

Measured: RSS, fds and threads after a warm-up and at the end, the journal's size, the metric
series count (first and last scrape), events received against sent (none lost) and CPU per event.
The unit tier runs a short slice (tests/test_reliab_soak.py).

    .venv/bin/python bench/soak.py [--events 100000 --reconciles 10000 --scrapes 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import tempfile
import threading
import time
from typing import Any, Dict, Tuple

from cxlctl.hostio.host import Host

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUBSYSTEMS = (("memory", "memory{}"), ("dax", "dax{}.0"), ("cxl", "region{}"), ("node", "node{}"))


def _scrape(addr: Tuple[str, int]) -> bytes:
    from tests.daemon_probe import scrape

    data = scrape(addr)
    assert data.startswith(b"HTTP/1.0 200"), data[:80]
    return data


def _scrape_via(daemon: Any, addr: Tuple[str, int], step_until: Any) -> bytes:
    """Scrape from a thread while the daemon's own loop accepts and answers it."""
    got: Dict[str, bytes] = {}
    th = threading.Thread(target=lambda: got.setdefault("body", _scrape(addr)))
    th.start()
    step_until(daemon, lambda: "body" in got or not th.is_alive(), timeout=30)
    th.join()
    return got["body"]


def _series(body: bytes) -> int:
    text = body.split(b"\r\n\r\n", 1)[1].decode()
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def soak(events: int, reconciles: int, scrapes: int, seed: int = 22, log: Any = None) -> Dict[str, Any]:
    sys.path.insert(0, HERE)
    from cxlctl.tuning import engine
    from cxlctl.tuning import journal as jn
    from tests.daemon_probe import usage
    from tests.daemon_support import config, make_daemon, pairs, read, step_until, swap_in, work_tree, write

    rng = random.Random(seed)
    nor, reg = [p for p in pairs() if p[1].endswith("linux-6.12/hb2-region")][0]
    with tempfile.TemporaryDirectory(prefix="cxlctl-soak-") as d:
        root = work_tree(nor, os.path.join(d, "t"))
        assert engine.apply(Host(root), "inference-capacity").ok
        cfg = config(
            reconcile={"debounce_ms": 10, "max_delay_ms": 50},
            drift={"interval": 0, "action": "reapply"},
            metrics={"listen": "127.0.0.1:0", "telemetry_interval": 0},
            ras={"enabled": False},
            nfd={"enabled": False},
        )
        daemon, fac, _cap = make_daemon(root, cfg)
        daemon.startup()
        assert daemon.server is not None
        addr = daemon.server.address

        def done() -> int:
            return sum(daemon.stats.reconciles.values())

        per_round = max(1, events // reconciles)
        scrape_every = reconciles / max(1, scrapes)
        sent = scraped = drifts = swaps = 0
        first_series = last_series = 0
        region = False
        warm = max(1, reconciles // 50)
        start: Dict[str, int] = {}
        cpu0 = t0 = 0.0
        debt = 0.0
        for i in range(reconciles):
            if i == warm:
                start = usage()
                r = resource.getrusage(resource.RUSAGE_SELF)
                cpu0, t0 = r.ru_utime + r.ru_stime, time.monotonic()
            if i % 10 == 9:
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
            debt += 1 / scrape_every
            while debt >= 1:
                body = _scrape_via(daemon, addr, step_until)
                scraped += 1
                debt -= 1
                n = _series(body)
                first_series = first_series or n
                last_series = n
            if log is not None and (i + 1) % max(1, reconciles // 20) == 0:
                log(f"{i + 1}/{reconciles} reconciles, {sent} events, {scraped} scrapes, {usage()}")
        r = resource.getrusage(resource.RUSAGE_SELF)
        cpu = r.ru_utime + r.ru_stime - cpu0
        wall = time.monotonic() - t0
        end = usage()
        received = sum(daemon.stats.events.values())
        jsize = os.path.getsize(root + jn.JOURNAL)
        j = jn.load(Host(root))
        daemon.close()
    counted = sent - warm * per_round
    return {
        "events_sent": sent,
        "events_received": received,
        "events_lost": sent - received,
        "reconciles": done(),
        "reconcile_results": dict(daemon.stats.reconciles),
        "scrapes": scraped,
        "region_swaps": swaps,
        "drift_injected": drifts,
        "drift_corrections": daemon.stats.drift_corrections,
        "start": start,
        "end": end,
        "rss_growth_kib": end["rss_kib"] - start["rss_kib"],
        "series_first": first_series,
        "series_last": last_series,
        "journal_bytes": jsize,
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
    ap.add_argument("--seed", type=int, default=22)
    a = ap.parse_args()
    res = soak(a.events, a.reconciles, a.scrapes, a.seed, log=lambda m: print(m, file=sys.stderr, flush=True))
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
