"""Parsers of the telemetry sources: odd lines are skipped, numbers are ASCII, missing is not zero."""

from __future__ import annotations

import pytest

from cxlctl.errors import UsageError
from cxlctl.telemetry.counters import (
    NODE_COUNTERS,
    parse_cgroup_line,
    parse_keyvals,
    parse_numa_maps,
    parse_numa_stat,
    pick,
    resident_per_node,
)
from cxlctl.telemetry.report import clean, count, size
from cxlctl.telemetry.sample import cgroup_name


def test_keyvals_skip_odd_lines_and_non_ascii_numbers() -> None:
    text = "pgdemote_direct 1957\nnuma_hit ١٢\nbroken\npgpromote_success 3 extra\npgdemote_kswapd 18446744073709551616\nx 0\n"
    assert parse_keyvals(text) == {"pgdemote_direct": 1957, "x": 0}


def test_pick_lists_missing_counters_as_none_never_zero() -> None:
    c = pick(
        {"pgpromote_success": 4, "pgdemote_kswapd": 0, "pgpromote_candidate_nrl": 9, "nr_free_pages": 1}, NODE_COUNTERS
    )
    assert c.values["pgpromote_success"] == 4 and c.values["pgdemote_kswapd"] == 0
    assert c.values["pgdemote_khugepaged"] is None and "pgdemote_khugepaged" in c.missing
    assert c.values["pgpromote_candidate_nrl"] == 9  # a newer kernel's counter is kept
    assert "nr_free_pages" not in c.values and "pgpromote_success" not in c.missing
    unread = pick(None, NODE_COUNTERS)
    assert not unread.readable and set(unread.missing) == set(NODE_COUNTERS)
    assert all(v is None for v in unread.values.values())


def test_numa_stat_per_type_and_node_and_resident_bytes() -> None:
    text = "anon N0=4096 N1=8003584\nfile N0=12288 N1=0\nshmem N0=4096 N1=0\nbad N0=x\nkernel_stack N0=16384\n"
    ns = parse_numa_stat(text)
    assert ns["anon"] == {0: 4096, 1: 8003584} and "bad" not in ns
    assert resident_per_node(ns) == {0: 16384, 1: 8003584}  # anon + file; shmem is part of file


def test_numa_maps_pages_bytes_and_shm_files() -> None:
    text = (
        "7f0000000000 default anon=4 dirty=4 N0=3 N1=1 kernelpagesize_kB=4\n"
        "7f1000000000 bind:1 file=/dev/shm/vllm_offload_x.mmap dirty=512 N1=500 N0=12 kernelpagesize_kB=4\n"
        "7f2000000000 default anon=1 N0=1 kernelpagesize_kB=2048\n"
        "7f3000000000 default file=/usr/lib/libc.so N0=ab N٣=4 kernelpagesize_kB=4\n"
        "garbage\n"
    )
    m = parse_numa_maps(text)
    assert m.pages == {0: 16, 1: 501}
    assert m.bytes == {0: (3 + 12) * 4096 + 2 * 1024 * 1024, 1: 501 * 4096}
    assert m.shm == {"/dev/shm/vllm_offload_x.mmap": {1: 500, 0: 12}}


def test_cgroup_line_and_names() -> None:
    assert parse_cgroup_line("0::/system.slice/vllm.service\n") == "/system.slice/vllm.service"
    assert parse_cgroup_line("12:cpu:/x\n") is None
    assert parse_cgroup_line("0::\n") == "/"
    assert cgroup_name("/system.slice/vllm.service") == "/system.slice/vllm.service"
    assert cgroup_name("/sys/fs/cgroup/system.slice/vllm.service/") == "/system.slice/vllm.service"
    assert cgroup_name("/sys/fs/cgroup") == "/"
    for bad in ("system.slice", "/a/../b", "/sys/fs/cgroup/../../etc"):
        with pytest.raises(UsageError):
            cgroup_name(bad)


def test_short_numbers_and_clean_names() -> None:
    assert size(None) == "-" and size(512) == "512" and size(6 << 20) == "6.0M" and size(300 << 30) == "300G"
    assert count(None) == "n/a" and count(1957) == "1957" and count(0.25) == "0.2" and count(123456) == "123.5k"
    assert clean("evil\x1b[2Jname") == "evil?[2Jname"
