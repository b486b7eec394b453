"""sd_notify(3) without libsystemd: one datagram to ``$NOTIFY_SOCKET``.

Why not python-systemd: it is a C extension, and the protocol is small and
guaranteed stable (systemd's ``man/notify-selfcontained-example.c``): the
address is a filesystem path (``/…``) or a Linux abstract socket (``@…``, the
``@`` becomes a NUL byte); the message is ``KEY=VALUE`` lines sent as one
``SOCK_DGRAM`` datagram.  Outside systemd (no ``$NOTIFY_SOCKET``) every call is
a no-op, so the daemon runs the same in a terminal, a container or a test.

Watchdog: systemd sets ``$WATCHDOG_USEC`` (and ``$WATCHDOG_PID``) from
``WatchdogSec=``; sd_watchdog_enabled(3) recommends a keep-alive every half of
it.  The main loop sends it (not a side thread), so a hung reconcile trips it.
"""

from __future__ import annotations

import os
import socket
import time
from typing import MutableMapping, Optional

from cxlctl.parse import is_decimal

#: variables consumed here and hidden from child processes (``cxl list``), which
#: must not talk to the service manager in the daemon's name
_ENV_KEYS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


def _address(addr: str) -> str:
    if addr[0] == "@":
        return "\0" + addr[1:]
    return addr


def sd_notify(state: str, addr: Optional[str]) -> bool:
    """Send ``state`` to the socket ``addr``; False when there is none (not under systemd).

    Raises ``OSError`` when the socket exists but the send fails, and
    ``ValueError`` for an address that is neither a path nor abstract.
    """
    if not addr:
        return False
    if addr[0] not in ("/", "@") or len(addr) < 2:
        raise ValueError(f"unsupported NOTIFY_SOCKET {addr!r} (want /path or @abstract)")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
        s.connect(_address(addr))
        s.sendall(state.encode("utf-8"))
    return True


class Notifier:
    """The daemon's side of the notify protocol, configured once from the environment.

    ``env`` defaults to ``os.environ``; the three variables are removed from it
    (like ``sd_notify(unset_environment=1)``) so subprocesses do not inherit them.
    Send errors are remembered in ``last_error`` and never raised: a daemon must
    not die because its service manager went away.
    """

    def __init__(self, env: Optional[MutableMapping[str, str]] = None, pid: Optional[int] = None) -> None:
        e: MutableMapping[str, str] = os.environ if env is None else env
        self.addr = e.get("NOTIFY_SOCKET") or None
        self.watchdog_usec: Optional[int] = None
        usec = e.get("WATCHDOG_USEC", "")
        wpid = e.get("WATCHDOG_PID", "")
        mine = pid if pid is not None else os.getpid()
        if is_decimal(usec) and int(usec) > 0 and (not wpid or (is_decimal(wpid) and int(wpid) == mine)):
            self.watchdog_usec = int(usec)
        for k in _ENV_KEYS:
            e.pop(k, None)
        self.sent = 0
        self.last_error: Optional[str] = None

    @property
    def enabled(self) -> bool:
        return self.addr is not None

    @property
    def watchdog_interval(self) -> Optional[float]:
        """Seconds between keep-alives: half of ``WATCHDOG_USEC`` (None: no watchdog)."""
        return None if self.watchdog_usec is None else self.watchdog_usec / 2e6

    def send(self, state: str) -> bool:
        try:
            ok = sd_notify(state, self.addr)
        except (OSError, ValueError) as e:
            self.last_error = str(e)
            return False
        if ok:
            self.sent += 1
        return ok

    def ready(self, status: str = "") -> bool:
        return self.send("READY=1" + (f"\nSTATUS={status}" if status else ""))

    def status(self, status: str) -> bool:
        return self.send(f"STATUS={status}")

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def reloading(self) -> bool:
        # MONOTONIC_USEC lets systemd >= 253 (Type=notify-reload) match the reload;
        # older managers ignore the unknown field
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send(f"RELOADING=1\nMONOTONIC_USEC={usec}")

    def stopping(self, status: str = "") -> bool:
        return self.send("STOPPING=1" + (f"\nSTATUS={status}" if status else ""))
