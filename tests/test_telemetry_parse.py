"""Parsers of the telemetry sources: odd lines are skipped, numbers are ASCII, missing is not zero."""

from __future__ import annotations

from typing import Any

import pytest

from cxlctl.errors import UsageError
from cxlctl.hostio.proc import cgroup_of as parse_cgroup_line
from cxlctl.numa_maps import parse_numa_maps
from cxlctl.telemetry.counters import (
    NODE_COUNTERS,
    parse_keyvals,
    parse_numa_stat,
    pick,
    resident_per_node,
)
from cxlctl.telemetry.report import count, size
from cxlctl.telemetry.sample import cgroup_name
from cxlctl.term import clean


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
    assert size(None) == "-" and size(512) == "512 B" and size(6 << 20) == "6.0 MiB" and size(300 << 30) == "300 GiB"
    # IEC units as status prints them, three digits at most: 1000 MiB is 1.0 GiB (7 columns)
    assert size(1000 << 20) == "1.0 GiB" and size(999 << 20) == "999 MiB" and size(44 << 10) == "44 KiB"
    assert count(None) == "n/a" and count(1957) == "1957" and count(0.25) == "0.2" and count(123456) == "123.5k"
    assert clean("evil\x1b[2Jname") == "evil\\x1b[2Jname"


def test_damon_scheme_stats_are_read_and_rated(tmp_path: Any) -> None:
    """A tiny DAMON sysfs tree (one kdamond, one migrate_cold scheme), written here for this parser."""
    from cxlctl.hostio.reader import Reader
    from cxlctl.telemetry.damon_stats import read_schemes
    from cxlctl.telemetry.rates import rates
    from cxlctl.telemetry.report import render_text, to_dict
    from cxlctl.telemetry.sample import read_sample

    d = tmp_path / "sys/kernel/mm/damon/admin/kdamonds/0"
    sd = d / "contexts/0/schemes/0"
    (sd / "stats").mkdir(parents=True)
    (d / "state").write_text("on\n")
    (sd / "action").write_text("migrate_cold\n")
    (sd / "target_nid").write_text("1\n")
    for name, v in (
        ("nr_tried", 10),
        ("sz_tried", 8 << 20),
        ("nr_applied", 4),
        ("sz_applied", 4 << 20),
        ("qt_exceeds", 0),
    ):
        (sd / "stats" / name).write_text(f"{v}\n")
    (d / "contexts/0/schemes/nr_schemes").write_text("1\n")  # not a scheme directory: skipped
    (schemes,) = read_schemes(Reader(str(tmp_path)))
    assert (schemes.key, schemes.state, schemes.action, schemes.target_nid) == ("0/0/0", "on", "migrate_cold", 1)
    assert schemes.stats["sz_applied"] == 4 << 20
    a = read_sample(Reader(str(tmp_path)), {}, now=(10.0, 0.0))
    (sd / "stats" / "sz_applied").write_text(f"{12 << 20}\n")
    b = read_sample(Reader(str(tmp_path)), {}, now=(12.0, 0.0))
    r = rates(a, b)
    assert r.damon["0/0/0"]["sz_applied"] == 4 << 20
    doc = to_dict(b, r, [], 1)
    assert doc["damon"][0]["stats"]["sz_applied"] == 12 << 20 and doc["damon"][0]["rates"]["sz_applied"] == 4 << 20
    assert "damon 0/0/0 (on) migrate_cold -> node 1: applied 4.0 MiB/s" in render_text(b, r, [], 1)
    assert read_schemes(Reader(str(tmp_path / "nothing"))) == []


def test_asked_policy_comes_from_environ_and_record_never_copies_environ(tmp_path: Any) -> None:
    """A process launched by cxlctl carries CXLCTL_POLICY; --pid reads it, the logging reader never sees it."""
    from cxlctl.hostio.reader import Reader
    from cxlctl.telemetry.sample import read_sample

    d = tmp_path / "proc/77"
    d.mkdir(parents=True)
    (d / "environ").write_bytes(b"HOME=/root\0CXLCTL_POLICY=mode=bind nodes=1 cpunodes=0\0SECRET=x\0")
    (d / "numa_maps").write_text("7f00 bind:1 anon=4 N0=3 N1=1 kernelpagesize_kB=4\n7f10 default file=/lib/x N0=9\n")
    (d / "comm").write_text("engine\n")
    r = Reader(str(tmp_path), log=True)
    s = read_sample(r, {}, pids=[77])
    (p,) = s.processes
    assert p.asked == ("bind", (1,)) and p.maps is not None and p.maps.anon == {0: 3, 1: 1}
    assert r.log is not None and not any(x.endswith("/environ") for x in r.log)
    # not asked by PID (the "top" list): no environ read at all
    assert read_sample(Reader(str(tmp_path)), {}, top=5).processes == () or all(
        q.asked is None for q in read_sample(Reader(str(tmp_path)), {}, top=5).processes
    )
