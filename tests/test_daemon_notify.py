"""sd_notify against a real AF_UNIX datagram socket, and from the daemon's loop."""

from __future__ import annotations

import os
import re
import signal
import socket
import time
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from cxlctl.daemon.notify import Notifier, sd_notify
from tests.daemon_support import config, make_daemon, step_until


@pytest.fixture
def sock(tmp_path: Any) -> Iterator[Tuple[socket.socket, str]]:
    path = str(tmp_path / "notify.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    s.settimeout(2)
    yield s, path
    s.close()


def _drain(s: socket.socket) -> List[str]:
    out = []
    s.settimeout(0.05)
    try:
        while True:
            out.append(s.recv(4096).decode())
    except (socket.timeout, BlockingIOError):
        pass
    s.settimeout(2)
    return out


def test_messages_on_a_path_socket(sock: Tuple[socket.socket, str]) -> None:
    s, path = sock
    env: Dict[str, str] = {"NOTIFY_SOCKET": path}
    n = Notifier(env)
    assert n.enabled and "NOTIFY_SOCKET" not in env, "the variable is consumed, children must not inherit it"
    assert n.ready("profile x (applied); 1 CXL node")
    assert s.recv(4096).decode() == "READY=1\nSTATUS=profile x (applied); 1 CXL node"
    assert n.status("busy")
    assert s.recv(4096).decode() == "STATUS=busy"
    assert n.watchdog()
    assert s.recv(4096).decode() == "WATCHDOG=1"
    assert n.reloading()
    msg = s.recv(4096).decode()
    assert re.fullmatch(r"RELOADING=1\nMONOTONIC_USEC=\d+", msg), msg
    assert n.stopping()
    assert s.recv(4096).decode() == "STOPPING=1"
    assert n.sent == 5 and n.last_error is None


def test_abstract_socket() -> None:
    name = f"cxlctl-test-{os.getpid()}-{time.monotonic_ns()}"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind("\0" + name)
    s.settimeout(2)
    try:
        assert sd_notify("READY=1", "@" + name)
        assert s.recv(100) == b"READY=1"
    finally:
        s.close()


def test_no_socket_is_a_no_op() -> None:
    n = Notifier({})
    assert not n.enabled
    assert not n.ready("x") and not n.watchdog() and n.sent == 0 and n.last_error is None
    assert n.watchdog_interval is None


def test_send_errors_are_kept_not_raised(tmp_path: Any) -> None:
    n = Notifier({"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    assert not n.ready() and n.last_error and "No such file" in n.last_error
    bad = Notifier({"NOTIFY_SOCKET": "relative/path"})
    assert not bad.ready() and bad.last_error and "unsupported NOTIFY_SOCKET" in bad.last_error


def test_watchdog_env() -> None:
    env = {"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}
    n = Notifier(env)
    assert n.watchdog_interval == 15.0 and env == {}
    assert Notifier({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}, pid=2).watchdog_interval is None
    assert Notifier({"WATCHDOG_USEC": "30000000"}).watchdog_interval == 15.0
    assert Notifier({"WATCHDOG_USEC": "junk"}).watchdog_interval is None


def test_loop_sends_ready_status_watchdog_and_stopping(sock: Tuple[socket.socket, str], tmp_path: Any) -> None:
    """The daemon's own loop: READY once after the start-up reconcile, WATCHDOG=1 every half
    WATCHDOG_USEC from the main loop, STATUS updates, STOPPING=1 on SIGTERM."""
    from tests.kit import cli

    s, path = sock
    root = str(tmp_path / "live")
    cli("record", root, check=True)
    env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000", "WATCHDOG_PID": str(os.getpid())}
    d, fac, cap = make_daemon(root, config(), env=env, install_signals=True)
    d.startup()
    first = _drain(s)
    assert any(m.startswith("READY=1\nSTATUS=") for m in first), first
    assert sum(1 for m in first if m.startswith("READY=1")) == 1
    t0 = time.monotonic()
    step_until(d, lambda: time.monotonic() - t0 >= 0.55, timeout=3)
    dogs = [m for m in _drain(s) if m == "WATCHDOG=1"]
    # every 0.1 s over 0.55 s: 5, give or take scheduling
    assert 3 <= len(dogs) <= 7, dogs
    d._setup_signals()  # as run() does: SIGTERM reaches the loop through its wake-up pipe
    os.kill(os.getpid(), signal.SIGTERM)  # what systemd sends
    d.step()
    d._shutdown()
    d.close()
    assert "STOPPING=1\nSTATUS=stopping" in _drain(s)
