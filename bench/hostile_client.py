"""The metrics endpoint of a real `cxlctl daemon run` under a hostile local client (issue 22).

Opens N silent loopback connections and M that drip a byte every 2 s, scrapes every second,
and prints the daemon's threads, RSS and fds and each scrape's latency.

    .venv/bin/python bench/hostile_client.py [--silent 2000] [--drip 500] [--seconds 30]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from typing import List

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _scrape(port: int) -> float:
    from tests.daemon_probe import scrape

    t0 = time.monotonic()
    data = scrape(("127.0.0.1", port))
    assert data.startswith(b"HTTP/1.0 200"), data[:60]
    return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--silent", type=int, default=2000)
    ap.add_argument("--drip", type=int, default=500)
    ap.add_argument("--seconds", type=float, default=30)
    a = ap.parse_args()
    sys.path.insert(0, HERE)
    import resource

    from tests.concurrency_support import daemon_config, start
    from tests.daemon_probe import usage
    from tests.tune_support import work_copy

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, a.silent + a.drip + 256)), hard))
    with tempfile.TemporaryDirectory(prefix="cxlctl-hostile-") as d:
        root = work_copy("linux-6.12/single-region", os.path.join(d, "t"))
        cfg = daemon_config(root)
        with open(cfg) as f:
            port = int(f.read().split('listen = "127.0.0.1:')[1].split('"')[0])
        daemon = start(root, ["daemon", "run", "--no-udev"])
        try:
            for _ in range(300):  # until it answers (start-up on a busy machine)
                try:
                    _scrape(port)
                    break
                except OSError:
                    assert daemon.poll() is None, daemon.communicate()
                    time.sleep(0.1)
            before = usage(daemon.pid)
            held: List[socket.socket] = []
            for _ in range(a.silent):
                held.append(socket.create_connection(("127.0.0.1", port), timeout=10))
            drip = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(a.drip)]
            lat: List[float] = []
            peak = dict(before)
            end = time.monotonic() + a.seconds
            n = 0
            while time.monotonic() < end:
                if n % 2 == 0:
                    for c in drip:
                        try:
                            c.send(b"G")
                        except OSError:
                            pass
                lat.append(_scrape(port))
                now = usage(daemon.pid)
                peak = {k: max(peak[k], now[k]) for k in peak}
                time.sleep(1)
                n += 1
            after = usage(daemon.pid)
            for c in held + drip:
                c.close()
            assert daemon.poll() is None
        finally:
            daemon.terminate()
            daemon.communicate(timeout=30)
    lat.sort()
    res = {
        "silent": a.silent,
        "drip": a.drip,
        "before": before,
        "peak": peak,
        "after": after,
        "scrapes": len(lat),
        "scrape_median_ms": round(lat[len(lat) // 2] * 1000, 1),
        "scrape_max_ms": round(lat[-1] * 1000, 1),
    }
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
