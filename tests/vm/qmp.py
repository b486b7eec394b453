"""A small QMP client and the host side of a guest/host handshake.

Why this exists: RAS tests inject CXL device events (``cxl-inject-*``) into a
*running* guest from the host, over QEMU's QMP socket, and check what the
guest's kernel and cxlctl make of them.  The guest script and the host driver
take turns through files in ``$OUT`` (the write-through ``--rwdir`` folder):
the guest writes ``ready-X`` when it listens, the host injects and writes
``done-X``; see :class:`QmpSession`.

Only the standard library: QMP is one JSON object per line over a Unix socket.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional


class QmpError(RuntimeError):
    """QEMU answered with an error, or the conversation broke."""


class QmpStopped(QmpError):
    """The guest ended (or the harness gave up) while the driver was waiting."""


class QmpClient:
    """One QMP connection: the greeting, ``qmp_capabilities``, then commands.

    Asynchronous events QEMU sends between replies are kept in ``events``
    (not lost, not confused with a reply).
    """

    def __init__(self, path: str, timeout: float = 30.0) -> None:
        self.path = path
        self.timeout = timeout
        self.events: List[Dict[str, Any]] = []
        self._sock: Optional[socket.socket] = None
        self._buf = b""
        self.greeting: Dict[str, Any] = {}

    def connect(self) -> QmpClient:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self.path)
        except OSError as e:
            s.close()
            raise QmpError(f"cannot connect to QMP socket {self.path}: {e}") from None
        self._sock = s
        greeting = self._read_message()
        if "QMP" not in greeting:
            raise QmpError(f"not a QMP greeting: {greeting!r}")
        self.greeting = greeting
        self.execute("qmp_capabilities")
        return self

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> QmpClient:
        return self.connect() if self._sock is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def execute(self, command: str, arguments: Optional[Dict[str, Any]] = None) -> Any:
        """Run one command; return its ``return`` value or raise :class:`QmpError`."""
        if self._sock is None:
            raise QmpError("not connected")
        msg: Dict[str, Any] = {"execute": command}
        if arguments:
            msg["arguments"] = arguments
        self._sock.sendall(json.dumps(msg).encode() + b"\n")
        while True:
            reply = self._read_message()
            if "event" in reply:
                self.events.append(reply)
                continue
            if "error" in reply:
                err = reply["error"]
                desc = err.get("desc", err) if isinstance(err, dict) else err
                raise QmpError(f"{command}: {desc}")
            if "return" in reply:
                return reply["return"]
            raise QmpError(f"{command}: unexpected reply {reply!r}")

    def _read_message(self) -> Dict[str, Any]:
        assert self._sock is not None
        while b"\n" not in self._buf:
            try:
                chunk = self._sock.recv(65536)
            except socket.timeout:
                raise QmpError(f"no answer from QEMU within {self.timeout:.0f} s") from None
            if not chunk:
                raise QmpError("QEMU closed the QMP connection")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            obj = json.loads(line)
        except ValueError:
            raise QmpError(f"QMP sent something that is not JSON: {line[:200]!r}") from None
        if not isinstance(obj, dict):
            raise QmpError(f"QMP sent a non-object: {line[:200]!r}")
        return obj


def device_path(device_id: str) -> str:
    """QOM path of a ``-device ...,id=ID`` (what ``cxl-inject-*`` takes as ``path``)."""
    return f"/machine/peripheral/{device_id}"


class QmpSession:
    """What a host-side driver gets while the guest runs: a connected
    :class:`QmpClient` (``client``) and the ``$OUT`` handshake.

    The guest writes ``$OUT/<name>`` when it wants the host to act (use
    :meth:`wait_file`); the host answers with :meth:`signal`, which the guest
    polls for.  Every wait ends early with :class:`QmpStopped` once the guest
    has gone (the harness sets ``stop``), so a failed guest never leaves the
    driver hanging.
    """

    def __init__(self, socket_path: Path, out: Path, stop: threading.Event) -> None:
        self.socket_path = socket_path
        self.out = out
        self.stop = stop
        self._client: Optional[QmpClient] = None

    @property
    def client(self) -> QmpClient:
        if self._client is None:
            self._wait(lambda: self.socket_path.exists(), 120, f"QMP socket {self.socket_path}")
            self._client = QmpClient(str(self.socket_path)).connect()
        return self._client

    def execute(self, command: str, arguments: Optional[Dict[str, Any]] = None) -> Any:
        return self.client.execute(command, arguments)

    def wait_file(self, name: str, timeout: float = 300) -> str:
        """Wait for the guest to write ``$OUT/name``; return its text."""
        p = self.out / name
        self._wait(p.exists, timeout, f"$OUT/{name} from the guest")
        time.sleep(0.1)  # let the writer finish its line
        return p.read_text(errors="replace")

    def signal(self, name: str, text: str = "") -> None:
        """Tell the guest to go on: write ``$OUT/name`` atomically."""
        tmp = self.out / f".{name}.tmp"
        tmp.write_text(text)
        tmp.rename(self.out / name)

    def wait_until(self, cond: Any, timeout: float, what: str) -> None:
        """Wait (bounded, ending early once the guest has gone) until ``cond()`` is true."""
        self._wait(cond, timeout, what)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def _wait(self, cond: Any, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while not cond():
            if self.stop.is_set():
                raise QmpStopped(f"the guest ended while the host waited for {what}")
            if time.monotonic() > end:
                raise QmpError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(0.2)
