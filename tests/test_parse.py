"""Parsers: exact formats seen in sysfs, and strictness on user input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cxlctl.parse import (
    format_nodelist,
    format_size,
    parse_hex,
    parse_int,
    parse_meminfo,
    parse_nodelist,
    parse_size,
)


def test_int_formats_seen_in_sysfs() -> None:
    assert parse_int("0x10000000") == 0x10000000  # ram/size, %#llx
    assert parse_int("0x0") == 0
    assert parse_int("0x0000000010000000") == 0x10000000  # dpa_size, %pa zero-padded
    assert parse_int("-1") == -1  # numa_node
    assert parse_int("8192\n") == 8192
    assert parse_hex("8000000") == 0x8000000  # block_size_bytes has no 0x
    with pytest.raises(ValueError):
        parse_int("garbage")
    with pytest.raises(ValueError):
        parse_hex("")


@given(st.sets(st.integers(min_value=0, max_value=1023), max_size=64))
def test_nodelist_roundtrip(ids: set) -> None:  # type: ignore[type-arg]
    assert parse_nodelist(format_nodelist(ids)) == tuple(sorted(ids))


@pytest.mark.parametrize("text", ["1-", "-1", "1,,2", "a", "3-1", "1 2", "0-1024", "1;2", "0x1", "1-2-3", ","])
def test_nodelist_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_nodelist(text)


def test_nodelist_accepts() -> None:
    assert parse_nodelist("") == ()
    assert parse_nodelist("0-2,5") == (0, 1, 2, 5)
    assert parse_nodelist("5,0-1\n") == (0, 1, 5)


@pytest.mark.parametrize(
    "text,value",
    [
        ("512M", 512 << 20),
        ("4G", 4 << 30),
        ("1T", 1 << 40),
        ("4096", 4096),
        ("4GiB", 4 << 30),
        ("1.5G", 3 << 29),
        ("256m", 256 << 20),
        ("2k", 2048),
        ("10B", 10),
    ],
)
def test_size(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "G", "-1G", "1X", "1.2.3G", "0.3B", "99999999999P", "1 G G", "0x10"])
def test_size_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def test_format_size() -> None:
    assert format_size(512 << 20) == "512 MiB"
    assert format_size(1536 << 20) == "1.50 GiB"
    assert format_size(None) == "-"


def test_meminfo() -> None:
    text = "Node 1 MemTotal:         524288 kB\nNode 1 MemFree:          500000 kB\nNode 1 HugePages_Total:     0\nbroken line\n"
    mi = parse_meminfo(text)
    assert mi["MemTotal"] == 524288 * 1024
    assert mi["MemFree"] == 500000 * 1024
    assert mi["HugePages_Total"] == 0
