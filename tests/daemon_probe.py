"""What the reliability tests and benches ask of a running daemon: a raw ``/metrics`` scrape,
and the process' fds, threads and RSS (from ``/proc``), written once for all of them."""

from __future__ import annotations

import os
import socket
import time
from typing import Any, Dict, List, Union


def scrape(addr: Any, timeout: float = 10.0, request: bytes = b"GET /metrics HTTP/1.0\r\n\r\n") -> bytes:
    """The whole HTTP/1.0 answer of ``request`` (``GET /metrics``) at ``addr`` (host, port), headers included."""
    with socket.create_connection(addr, timeout=timeout) as c:
        c.sendall(request)
        data = b""
        while True:
            chunk = c.recv(65536)
            if not chunk:
                return data
            data += chunk


def _look(pid: Union[int, str]) -> Dict[str, int]:
    """One look at ``pid``'s open fds, threads and RSS (KiB)."""
    out = {"fds": len(os.listdir(f"/proc/{pid}/fd"))}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k == "Threads":
                out["threads"] = int(v)
            elif k == "VmRSS":
                out["rss_kib"] = int(v.split()[0])
    return out


def usage(pid: Union[int, str] = "self", looks: int = 1) -> Dict[str, int]:
    """Open fds, threads and RSS (KiB) of process ``pid`` (default: this one).

    With ``looks`` > 1, fds and threads are the least of that many looks 50 ms apart: a metrics
    thread closes its socket just after the client has read the answer, so one look can count a
    connection that is gone a moment later, while a leak stays in every look.  In this process the
    cycle collector runs first: files that earlier code (another test) left to it are not the
    daemon's, and closing them mid-run made the end count lower than the start."""
    if pid == "self":
        import gc

        gc.collect()
    seen: List[Dict[str, int]] = []
    for i in range(max(1, looks)):
        if i:
            time.sleep(0.05)
        seen.append(_look(pid))
    out = dict(seen[-1])  # RSS as last seen
    for k in ("fds", "threads"):
        out[k] = min(x[k] for x in seen)
    return out


def procstat(text: str) -> Dict[str, Dict[str, float]]:
    """A guest's ``procstat.txt``: ``label NAME`` lines, each followed by ``key: value`` lines
    (the daemon's RSS, fds and threads at one moment), as {NAME: {key: value}}."""
    out: Dict[str, Dict[str, float]] = {}
    cur: Dict[str, float] = {}
    for ln in text.splitlines():
        parts = ln.replace(":", " ").split()
        if not parts:
            continue
        if parts[0] == "label":
            cur = out.setdefault(parts[1], {})
        else:
            cur[parts[0]] = float(parts[1])
    return out


class ServerLoop:
    """The daemon's use of a :class:`~cxlctl.daemon.metrics.MetricsServer` in a thread: poll the
    listening socket, call ``handle_ready()``; ``close()`` stops it and closes the server."""

    def __init__(self, server: Any) -> None:
        import threading

        self.server = server
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import select

        p = select.poll()
        p.register(self.server.fileno(), select.POLLIN)
        while not self.stop:
            if p.poll(50):
                self.server.handle_ready()

    def close(self) -> None:
        self.stop = True
        self.thread.join()
        self.server.close()
