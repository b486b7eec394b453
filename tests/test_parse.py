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


@pytest.mark.parametrize("text", ["١", "²", "1_000", " 1 2", "+5", "0x", "0xg", "9" * 400, "0x" + "f" * 17])
def test_int_is_ascii_and_64_bit(text: str) -> None:
    """`isdigit()` accepts '²' (int() does not) and int() accepts '١' and '1_000': sysfs has none."""
    with pytest.raises(ValueError):
        parse_int(text)


@pytest.mark.parametrize("text", ["-80", "-0x80", "١", "8000000000000000" + "0"])
def test_hex_is_never_negative_nor_wider_than_64_bits(text: str) -> None:
    with pytest.raises(ValueError):
        parse_hex(text)


@pytest.mark.parametrize("text", ["١", "1,٢", "٠-٣", "²"])
def test_nodelist_and_size_reject_non_ascii_digits(text: str) -> None:
    with pytest.raises(ValueError):
        parse_nodelist(text)
    with pytest.raises(ValueError):
        parse_size(text + "G")


def test_format_size_never_overflows() -> None:
    assert format_size(10**400).endswith("PiB")  # float(n) would raise OverflowError
    assert format_size(1 << 61) == f"{1 << 11} PiB"
    assert format_size(-(1 << 30)) == "-1 GiB"


def test_meminfo_skips_non_ascii_numbers() -> None:
    assert parse_meminfo("Node 0 MemTotal: ١٢ kB\nNode 0 MemFree: 4 kB\n") == {"MemFree": 4096}


def test_decimal_helpers() -> None:
    from cxlctl.parse import decimal_suffix, is_decimal

    assert is_decimal("0123") and not is_decimal("") and not is_decimal("١") and not is_decimal("²")
    assert decimal_suffix("node12", "node") == 12
    assert decimal_suffix("node²", "node") is None and decimal_suffix("node", "node") is None


def test_name_list_is_strict() -> None:
    from cxlctl.parse import parse_name_list

    assert parse_name_list("mem1, mem0,mem1", "memdev", "mem") == ["mem1", "mem0"]
    for bad in ("mem0,,mem1", "mem0,", "mem١", "mem", "dax0"):
        with pytest.raises(ValueError):
            parse_name_list(bad, "memdev", "mem")


@pytest.mark.parametrize("text", ["-1", "nan", "inf", "-0.5", "", "1e3", "١", "5s"])
def test_seconds_reject(text: str) -> None:
    from cxlctl.parse import parse_seconds

    with pytest.raises(ValueError, match="number of seconds"):
        parse_seconds(text)


def test_seconds_accept() -> None:
    from cxlctl.parse import parse_seconds

    assert parse_seconds("0") == 0 and parse_seconds("5") == 5 and parse_seconds("0.5") == 0.5
