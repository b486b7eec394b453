"""Structured journal entries over systemd-journald's native socket.

Why not a log line: journald only indexes fields it is given as fields; a RAS
event needs ``MESSAGE_ID`` (stable, so ``journalctl MESSAGE_ID=...`` finds every
one of them across versions) and ``CXL_MEMDEV``, ``CXL_REGION``, ``CXL_NODE``,
``CXL_HPA`` fields an operator can filter on.  The native protocol is one
datagram of ``KEY=value`` lines (values with a newline use the binary form:
``KEY\\n`` + little-endian 64-bit length + bytes + ``\\n``); no library needed.

Without journald (the socket is absent, a container, a test) :func:`send`
returns False and the caller logs the MESSAGE text instead.
"""

from __future__ import annotations

import socket
import struct
from typing import Mapping, Optional

from . import paths


def encode(fields: Mapping[str, object]) -> bytes:
    """The datagram for ``fields`` (keys upper-case ASCII letters, digits and ``_``)."""
    out = bytearray()
    for k, v in fields.items():
        if v is None:
            continue
        key = k.upper()
        if not key or not all(c.isascii() and (c.isalnum() or c == "_") for c in key) or key[0] == "_":
            raise ValueError(f"not a journal field name: {k!r}")
        data = str(v).encode("utf-8", "replace")
        if b"\n" in data:
            out += key.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"
        else:
            out += key.encode() + b"=" + data + b"\n"
    return bytes(out)


def send(fields: Mapping[str, object], root: str = "/", sock_path: Optional[str] = None) -> bool:
    """Send one entry; False when journald cannot be reached (nothing raised)."""
    from .root import under

    path = sock_path or under(root, paths.JOURNAL_SOCKET)
    try:
        data = encode(fields)
    except ValueError:
        return False
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    except OSError:
        return False
    try:
        s.sendto(data, path)
        return True
    except OSError:
        return False
    finally:
        s.close()
