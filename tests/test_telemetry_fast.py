"""The cheaper paths of ``stat``/``top`` (issue 11's cost goals) read and count what the plain ones did."""

from __future__ import annotations

import os
from typing import Any

import pytest

from cxlctl.hostio import paths
from cxlctl.hostio.reader import Reader
from cxlctl.numa_maps import parse_numa_maps, parse_numa_maps_lines
from cxlctl.parse import is_decimal
from cxlctl.telemetry import sample as S
from tests.kit import FIXTURES, copy_fixture, fixture_roots

TELEMETRY = fixture_roots("*/*-telemetry")
TREE = os.path.join(FIXTURES, "linux-6.12", "single-region-telemetry")


@pytest.mark.parametrize("root", TELEMETRY, ids=os.path.basename)
def test_leaves_read_what_raw_reads(root: str) -> None:
    r = Reader(root)
    names = r.listdir(paths.PROC, is_decimal) + ["999999", "..", "vmstat"]  # gone, odd, not a directory
    fast = Reader(root).leaves(paths.PROC, names, "statm")
    slow = [Reader(root).raw(f"{paths.PROC}/{n}/statm") for n in names]
    assert fast == slow and any(b for b in fast)


@pytest.mark.parametrize("root", TELEMETRY, ids=os.path.basename)
def test_numa_maps_regex_passes_equal_the_line_parser(root: str) -> None:
    """Every recorded numa_maps (4 kB pages: the fast path) and a huge-page one (the line parser)."""
    seen = 0
    for pid in Reader(root).listdir(paths.PROC, is_decimal):
        text = Reader(root).text(paths.proc_pid(int(pid), "numa_maps"))
        if text:
            assert parse_numa_maps(text) == parse_numa_maps_lines(text)
            seen += 1
    assert seen
    huge = "7f0000000000 default anon=1 N1=1 kernelpagesize_kB=2048\n7f1000000000 default anon=2 N0=2 kernelpagesize_kB=4\n"
    m = parse_numa_maps(huge)
    assert m == parse_numa_maps_lines(huge) and m.bytes == {1: 2 << 20, 0: 8192}


def test_top_pids_ranks_by_statm_and_skips_kernel_threads(tmp_path: Any) -> None:
    root = copy_fixture(TREE, tmp_path / "t")
    r = Reader(root)
    by_rss = sorted(
        ((S._rss(r, int(p)) or 0, int(p)) for p in r.listdir(paths.PROC, is_decimal)), key=lambda t: (-t[0], t[1])
    )
    assert S.top_pids(Reader(root), 3) == [p for v, p in by_rss[:3] if v]
    # a kernel thread (statm all zero), a process that exited (no statm), and a PID directory that is a
    # link leading out of the tree: none is ranked, and the link is not followed
    for pid, statm in (("90001", "0 0 0 0 0 0 0\n"), ("90002", None)):
        os.makedirs(os.path.join(root, "proc", pid))
        if statm:
            with open(os.path.join(root, "proc", pid, "statm"), "w") as f:
                f.write(statm)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "statm").write_text("999999999 999999999 0 0 0 0 0\n")
    os.symlink(str(outside), os.path.join(root, "proc", "90003"))
    r = Reader(root)
    ranked = S.top_pids(r, 1000)
    assert not {90001, 90002, 90003} & set(ranked) and len(ranked) == len([v for v, _ in by_rss if v])
    assert any(p.endswith("/90003/statm") and "out of the root" in why for p, why in r.notes)


def test_a_numa_maps_over_the_bound_is_not_parsed_and_says_so(tmp_path: Any, monkeypatch: Any) -> None:
    root = copy_fixture(TREE, tmp_path / "t")
    pid = S.top_pids(Reader(root), 1)[0]
    path = os.path.join(root, "proc", str(pid), "numa_maps")
    with open(path) as f:
        one = f.read()
    with open(path, "w") as f:  # 1.5 MiB: over the reader's 1 MiB, under the bound: read and parsed
        f.write(one * ((3 << 19) // len(one) + 1))
    s = S.read_sample(Reader(root), {}, pids=[pid])
    assert s.processes[0].maps is not None and not any("numa_maps" in n for n in s.notes)
    monkeypatch.setattr(S, "NUMA_MAPS_LIMIT", 1 << 20)
    s = S.read_sample(Reader(root), {}, pids=[pid], top=1)
    assert s.processes[0].maps is None and len(s.processes) == 1  # asked for: shown unreadable; as "top": left out
    assert any("numa_maps" in n and "bound 1 MiB" in n for n in s.notes)


def test_top_keeps_only_the_resident_types_of_numa_stat() -> None:
    r = Reader(TREE)
    (cg,) = S.list_cgroups(r)
    full, screen = S.read_cgroup(Reader(TREE), cg), S.read_cgroup(Reader(TREE), cg, counters=False)
    assert set(screen.numa_stat) == {"anon", "file"} and len(full.numa_stat) > 2
    assert screen.bytes_per_node == full.bytes_per_node and any(screen.bytes_per_node.values())


def _files(pattern: str) -> list[str]:
    import glob

    return sorted(glob.glob(os.path.join(FIXTURES, "*", "*", pattern), recursive=True))


def test_kernel_layout_fast_paths_equal_the_line_by_line_rules() -> None:
    """Every recorded vmstat, memory.stat, numastat and memory.numa_stat: the whole-file regex path gives
    what the line-by-line parser gives (CRLF line ends are not the kernel's layout: they force the latter)."""
    from cxlctl.telemetry.counters import (
        CGROUP_COUNTERS,
        CGROUP_SIZES,
        NODE_COUNTERS,
        SYSTEM_COUNTERS,
        parse_keyvals,
        parse_numa_stat,
        pick,
        pick_text,
    )

    kv = _files("proc/vmstat") + _files("sys/devices/system/node/node*/vmstat") + _files("sys/fs/cgroup/**/memory.stat")
    kv += _files("sys/devices/system/node/node*/numastat")
    assert len(kv) >= 10
    for path in kv:
        with open(path) as f:
            text = f.read()
        assert parse_keyvals(text) == parse_keyvals(text.replace("\n", "\r\n")) != {}, path
        for wanted, prefixes in (
            (SYSTEM_COUNTERS, ("pgpromote_", "pgdemote_", "numa_")),
            (NODE_COUNTERS, ("pgpromote_", "pgdemote_", "numa_")),
            (CGROUP_COUNTERS + CGROUP_SIZES, ("pgpromote_", "pgdemote_")),
        ):
            assert pick_text(text, wanted, prefixes) == pick(parse_keyvals(text), wanted, prefixes), path
    ns = _files("sys/fs/cgroup/**/memory.numa_stat")
    assert ns
    for path in ns:
        with open(path) as f:
            text = f.read()
        assert parse_numa_stat(text) == parse_numa_stat(text.replace("\n", "\r\n")) != {}, path
    # odd lines: skipped by both paths alike
    odd = "numa_hit 5\nbad line here\nnuma_miss 18446744073709551616\npgdemote_direct 7\n"
    assert parse_keyvals(odd) == {"numa_hit": 5, "pgdemote_direct": 7}
    assert (
        pick_text(odd, NODE_COUNTERS).values["pgdemote_direct"] == 7
        and pick_text(None, NODE_COUNTERS).readable is False
    )


def test_leaves_skip_unreadable_files_without_a_note_each(monkeypatch: Any) -> None:
    """/proc mounted with hidepid=1 (a user's view): other users' statm are EACCES; the ranking skips them quietly."""
    real = os.open
    names = Reader(TREE).listdir(paths.PROC, is_decimal)
    denied = names[0]

    def fake_open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: Any = None) -> int:
        if path == denied and dir_fd is not None:
            raise PermissionError(13, "Permission denied", path)
        return real(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", fake_open)
    r = Reader(TREE)
    got = r.leaves(paths.PROC, names, "statm")
    assert got[0] is None and all(b for b in got[1:]) and r.notes == []
