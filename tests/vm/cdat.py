"""CDAT tables for QEMU's ``cxl-type3,cdat=FILE``: devices of different speed in one guest.

Without ``cdat=`` every QEMU type-3 device reports the same table (150 ns read, 250 ns write,
16 GB/s), so a guest with two expanders cannot show a fast and a slow one.  The harness writes
one table per device (:func:`write`) and passes it to QEMU.  The layout is the one QEMU builds
by itself for a volatile memory region (hw/mem/cxl_type3.c: a DSMAS, four DSLBIS — read and
write latency and bandwidth — and a DSEMTS marking it EFI_MEMORY_SP), from the CDAT
specification: a 16-byte header (length, revision, checksum so all bytes sum to 0, sequence),
then 24-byte structures.  QEMU checks the structure lengths and the checksum when it loads one.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import NamedTuple

CDAT_REVISION = 2
TYPE_DSMAS, TYPE_DSLBIS, TYPE_DSEMTS = 0, 1, 4
# HMAT data types (ACPI 6.4 table 5.149), as a DSLBIS carries them
READ_LATENCY, WRITE_LATENCY, READ_BANDWIDTH, WRITE_BANDWIDTH = 1, 2, 4, 5
HMAT_MEMORY = 0  # flags: "memory" hierarchy
PS_PER_NS = 1000


class Speed(NamedTuple):
    """What one device reports: latencies in ns, bandwidths in MB/s."""

    read_latency: int
    write_latency: int
    read_bandwidth: int
    write_bandwidth: int


def _dslbis(data_type: int, base_unit: int, value: int) -> bytes:
    # header (type, reserved, length), handle, flags, data type, reserved, base unit, entry[3], reserved
    return struct.pack("<BBHBBBBQHHHH", TYPE_DSLBIS, 0, 24, 0, HMAT_MEMORY, data_type, 0, base_unit, value, 0, 0, 0)


def table(speed: Speed, size: int) -> bytes:
    """The CDAT of a volatile device of ``size`` bytes with ``speed``."""
    body = struct.pack("<BBHBBHQQ", TYPE_DSMAS, 0, 24, 0, 0, 0, 0, size)
    # latencies in picoseconds (base 1000 ps: whole ns), bandwidths in MB/s (base 1)
    body += _dslbis(READ_LATENCY, PS_PER_NS, speed.read_latency)
    body += _dslbis(WRITE_LATENCY, PS_PER_NS, speed.write_latency)
    body += _dslbis(READ_BANDWIDTH, 1, speed.read_bandwidth)
    body += _dslbis(WRITE_BANDWIDTH, 1, speed.write_bandwidth)
    body += struct.pack("<BBHBBHQQ", TYPE_DSEMTS, 0, 24, 0, 1, 0, 0, size)  # 1: EFI_MEMORY_SP
    length = 16 + len(body)
    head = struct.pack("<IBB6sI", length, CDAT_REVISION, 0, bytes(6), 0)
    checksum = (-sum(head + body)) & 0xFF
    head = struct.pack("<IBB6sI", length, CDAT_REVISION, checksum, bytes(6), 0)
    return head + body


def write(path: Path, speed: Speed, size: int) -> Path:
    path.write_bytes(table(speed, size))
    return path
