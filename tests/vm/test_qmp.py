"""The QMP client and the harness's ``qmp=`` driver, against a fake QMP server
(no QEMU): greeting, capabilities negotiation, replies, errors, interleaved
asynchronous events, and the driver thread's start/stop/error reporting."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any, Dict, List

import pytest

from tests.vm import harness
from tests.vm.qmp import QmpClient, QmpError, QmpSession, QmpStopped, device_path


class FakeQmp:
    """A one-connection QMP server on a Unix socket that records what it is sent."""

    def __init__(self, path: Path, replies: Dict[str, List[Dict[str, Any]]], greeting: bytes = b"") -> None:
        self.path = path
        self.replies = replies
        self.greeting = greeting or b'{"QMP": {"version": {"qemu": {"major": 10}}, "capabilities": []}}\n'
        self.received: List[Dict[str, Any]] = []
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(str(path))
        self.srv.listen(1)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.srv.accept()
        with conn:
            conn.sendall(self.greeting)
            buf = b""
            while True:
                data = conn.recv(4096)
                if not data:
                    return
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    msg = json.loads(line)
                    self.received.append(msg)
                    for r in self.replies.get(msg["execute"], [{"return": {}}]):
                        conn.sendall(json.dumps(r).encode() + b"\n")

    def close(self) -> None:
        self.srv.close()


def test_client_negotiates_and_returns_values(tmp_path: Path) -> None:
    sock = tmp_path / "q.sock"
    fake = FakeQmp(
        sock,
        {
            "query-status": [
                {"event": "RESET", "data": {}},  # an async event before the reply
                {"return": {"status": "running"}},
            ]
        },
    )
    with QmpClient(str(sock), timeout=5) as c:
        assert c.execute("query-status") == {"status": "running"}
        args = {"path": device_path("cxl-vmem0"), "start": 4096, "length": 64}
        assert c.execute("cxl-inject-poison", args) == {}
        assert [e["event"] for e in c.events] == ["RESET"]
    fake.thread.join(timeout=5)
    assert [m["execute"] for m in fake.received] == ["qmp_capabilities", "query-status", "cxl-inject-poison"]
    assert fake.received[2]["arguments"]["path"] == "/machine/peripheral/cxl-vmem0"
    fake.close()


def test_client_raises_qemu_errors(tmp_path: Path) -> None:
    sock = tmp_path / "q.sock"
    err = {"error": {"class": "GenericError", "desc": "Device not found"}}
    fake = FakeQmp(sock, {"cxl-inject-dram-event": [err]})
    with QmpClient(str(sock), timeout=5) as c:
        with pytest.raises(QmpError, match="cxl-inject-dram-event: Device not found"):
            c.execute("cxl-inject-dram-event", {"path": "/machine/peripheral/nope"})
    fake.close()


def test_client_rejects_a_non_qmp_peer(tmp_path: Path) -> None:
    sock = tmp_path / "q.sock"
    fake = FakeQmp(sock, {}, greeting=b"SSH-2.0-nope\n")
    with pytest.raises(QmpError, match="not JSON"):
        QmpClient(str(sock), timeout=5).connect()
    fake.close()
    with pytest.raises(QmpError, match="cannot connect"):
        QmpClient(str(tmp_path / "missing.sock"), timeout=1).connect()


def test_session_handshake_and_stop(tmp_path: Path) -> None:
    stop = threading.Event()
    s = QmpSession(tmp_path / "q.sock", tmp_path, stop)
    (tmp_path / "ready-x").write_text("go\n")
    assert s.wait_file("ready-x", timeout=5) == "go\n"
    s.signal("done-x", "1")
    assert (tmp_path / "done-x").read_text() == "1"
    stop.set()
    with pytest.raises(QmpStopped):
        s.wait_file("never", timeout=60)


def test_driver_thread_reports_errors_and_stops(tmp_path: Path) -> None:
    """The harness's driver thread waits for the runner, runs the test's
    function, keeps its traceback, and ends when the guest ends."""
    hdir, out = tmp_path / "h", tmp_path / "out"
    hdir.mkdir()
    out.mkdir()
    seen: List[str] = []

    def fails(session: QmpSession) -> None:
        seen.append(str(session.out))
        raise RuntimeError("boom")

    d = harness._QmpDriver(fails, hdir, out)
    (hdir / "uptime-start").write_text("1.0 1.0\n")
    d._thread.join(timeout=5)
    d.finish()
    assert seen == [str(out)]
    assert "RuntimeError: boom" in d.error

    def waits(session: QmpSession) -> None:
        session.wait_file("never", timeout=600)

    d = harness._QmpDriver(waits, hdir, out)
    d.finish()  # the guest ended: the waiting driver stops at once
    assert not d._thread.is_alive()
    assert "QmpStopped" in d.error
