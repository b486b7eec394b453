"""``cxlctl stat``: JSON lines, vmstat conventions, bad input, 80 columns, and what ``record`` keeps."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List

import pytest

from tests.kit import FIXTURES, cli

SINGLE = os.path.join(FIXTURES, "linux-6.12", "single-region")


def _lines(out: str) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines()]


def test_one_report_by_default_with_node_kinds_from_the_inventory() -> None:
    p = cli("--root", SINGLE, "stat", "--json", check=True)
    (rep,) = _lines(p.stdout)
    assert rep["schema_version"] == 1 and rep["report"] == 0 and rep["since_boot"] and rep["interval"] is None
    assert [(n["id"], n["kind"]) for n in rep["nodes"]] == [(0, "dram"), (1, "cxl")]
    assert rep["nodes"][1]["memory"]["total"] == 512 << 20


def test_a_tree_without_the_counter_files_says_unreadable_not_zero() -> None:
    """The original fixtures were recorded before stat existed: no vmstat in them."""
    rep = _lines(cli("--root", SINGLE, "stat", "--json", check=True).stdout)[0]
    node = rep["nodes"][0]
    assert node["readable"] is False and all(v is None for v in node["counters"].values())
    assert "pgdemote_direct" in node["missing"] and rep["system"]["readable"] is False
    text = cli("--root", SINGLE, "stat", check=True).stdout
    assert "could not read: node0/vmstat, node1/vmstat, /proc/vmstat" in text
    assert "not available on this kernel" not in text  # unreadable is not "the kernel lacks it"


def test_count_and_interval_give_totals_then_rates() -> None:
    p = cli("--root", SINGLE, "stat", "--json", "--count", "3", "--interval", "0.1", check=True)
    reps = _lines(p.stdout)
    assert [r["report"] for r in reps] == [0, 1, 2]
    assert reps[0]["since_boot"] and reps[0]["nodes"][0]["rates"] is None
    assert not reps[1]["since_boot"] and 0.05 < reps[1]["interval"] < 5
    assert reps[1]["nodes"][0]["rates"] is not None and reps[1]["system"]["rates"] is not None


def test_node_filter() -> None:
    rep = _lines(cli("--root", SINGLE, "stat", "--json", "--node", "1", check=True).stdout)[0]
    assert [n["id"] for n in rep["nodes"]] == [1]


@pytest.mark.parametrize(
    "args, words",
    [
        (["--node", "7"], "no node 7"),
        (["--node", "x"], "--node 'x'"),
        (["--cgroup", "system.slice"], "is not a path"),
        (["--cgroup", "/no/such"], "no cgroup /no/such"),
        (["--cgroup", "/a/../b"], "'..'"),
        (["--interval", "0"], "too short"),
        (["--interval", "abc"], "--interval 'abc'"),
        (["--count", "0"], "--count"),
        (["--pid", "0"], "not a process id"),
        (["--pid", "4242"], "no process with PID 4242"),
    ],
)
def test_bad_input_is_a_usage_error_without_traceback(args: List[str], words: str) -> None:
    p = cli("--root", SINGLE, "stat", *args)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert words in p.stderr and "Traceback" not in p.stderr and p.stdout == ""


def test_text_fits_80_columns() -> None:
    p = cli("--root", SINGLE, "stat", env={"COLUMNS": "80"}, check=True)
    assert max(len(line) for line in p.stdout.splitlines()) <= 80
    assert "tiering-off" in p.stdout and "cxl-idle" in p.stdout


def test_record_keeps_what_stat_reads(live_record: str) -> None:
    """A record of this machine replays stat with the very counters the record copied."""
    rep = _lines(cli("--root", live_record, "stat", "--json", check=True).stdout)[0]
    with open(os.path.join(live_record, "sys/devices/system/node/node0/vmstat")) as f:
        kernel = {k: int(v) for k, v in (line.split() for line in f if len(line.split()) == 2)}
    node0 = rep["nodes"][0]
    assert node0["readable"]
    assert {k: v for k, v in node0["counters"].items() if v is not None} == {
        k: v for k, v in kernel.items() if k in node0["counters"]
    }
    assert os.path.exists(os.path.join(live_record, "proc/vmstat")) and rep["system"]["readable"]
    assert os.path.exists(os.path.join(live_record, "sys/devices/system/node/node0/meminfo"))
