"""The metrics endpoint under a hostile local client (issue 22): the bound is explicit — at most
``max_clients`` connections served at once, each with ``timeout`` seconds in all to send its
request — and a scrape still answers at once while hundreds of silent and dripping connections
are held open.  Real sockets on loopback, the server driven by a poll loop like the daemon's.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from typing import Any, List

from cxlctl.daemon.metrics import MetricsServer
from tests.daemon_probe import ServerLoop, scrape

#: the daemon's use of the server, in a thread (tests/daemon_probe.py)
_Loop = ServerLoop


def _scrape(addr: Any, timeout: float = 5.0) -> bytes:
    return scrape(addr, timeout)


def _metrics_threads(bound: int = 0, settle: float = 2.0) -> int:
    """Live handler threads; with ``bound``, wait up to ``settle`` s for it to be met.

    A handler leaves ``server.clients`` (the enforced cap) in its ``finally`` and is still listed
    by ``threading.enumerate`` for the moment it takes to return: under load that moment showed
    as one thread over the bound (11 for a bound of 10) although ``clients`` was 7.
    """
    end = time.monotonic() + settle
    while True:
        n = sum(1 for t in threading.enumerate() if t.name == "cxlctl-metrics")
        if not bound or n <= bound or time.monotonic() >= end:
            return n
        time.sleep(0.02)


def test_many_silent_and_dripping_clients_cannot_starve_a_scrape() -> None:
    cap = 8
    server = MetricsServer("127.0.0.1", 0, lambda: b"cxlctl_up 1\n", timeout=3.0, max_clients=cap)
    loop = _Loop(server)
    held: List[socket.socket] = []
    try:
        for _ in range(300):  # silent: connect, send nothing
            held.append(socket.create_connection(server.address, timeout=5))
        drip = [socket.create_connection(server.address, timeout=5) for _ in range(50)]
        held += drip
        time.sleep(0.3)
        assert _metrics_threads(cap + 2) <= cap + 2, _metrics_threads()
        for _ in range(5):
            for d in drip:
                try:
                    d.send(b"G")
                except OSError:
                    pass
            t0 = time.monotonic()
            reply = _scrape(server.address)
            took = time.monotonic() - t0
            assert reply.startswith(b"HTTP/1.0 200 OK") and reply.endswith(b"cxlctl_up 1\n"), reply[:80]
            assert took < 1.0, f"a scrape waited {took:.2f} s behind hostile connections"
            assert server.clients <= cap and _metrics_threads(cap + 2) <= cap + 2
        assert server.served == 5 and server.dropped >= 300
    finally:
        for c in held:
            c.close()
        loop.close()


def test_a_dripping_client_is_cut_off_at_the_deadline() -> None:
    """One byte every 0.3 s would keep a per-recv timeout alive forever; the deadline is for the whole request."""
    server = MetricsServer("127.0.0.1", 0, lambda: b"x 1\n", timeout=1.0, max_clients=4)
    loop = _Loop(server)
    try:
        c = socket.create_connection(server.address, timeout=5)
        t0 = time.monotonic()
        closed = False
        while time.monotonic() - t0 < 4.0:
            try:
                c.send(b"G")
            except OSError:
                closed = True
                break
            r, _, _ = select.select([c], [], [], 0.3)
            if r and c.recv(1) == b"":
                closed = True
                break
        assert closed, "the server kept a dripping client past its deadline"
        assert time.monotonic() - t0 < 2.5
        c.close()
    finally:
        loop.close()
