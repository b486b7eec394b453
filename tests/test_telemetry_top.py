"""``cxlctl top``: the view model, plain output on a pipe, the rich screen and keys on a pseudo-terminal."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

from cxlctl.numa_maps import NumaMaps
from cxlctl.telemetry.counters import pick
from cxlctl.telemetry.rates import Rates
from cxlctl.telemetry.sample import CgroupSample, ProcessSample
from cxlctl.telemetry.top import SPARK, History, bar, plain, view
from tests.kit import FIXTURES, REPO, cli
from tests.test_telemetry_verdicts import node, sample

SINGLE = os.path.join(FIXTURES, "linux-6.12", "single-region")
MiB = 1 << 20


def _cg(name: str, per: dict[int, int]) -> CgroupSample:
    return CgroupSample(name, "/sys/fs/cgroup" + name, {"anon": per}, per, pick({}, ["anon"]), True)


def test_view_sorts_cgroups_and_processes_by_cxl_then_dram() -> None:
    s = sample(
        [node(0, "dram"), node(1, "cxl")],
        cgroups=[_cg("/a", {0: 10 * MiB, 1: MiB}), _cg("/b", {0: MiB, 1: 5 * MiB}), _cg("/c", {0: 50 * MiB})],
        procs=[
            ProcessSample(1, "one", None, MiB, NumaMaps({}, {0: 3 * MiB}, {})),
            ProcessSample(2, "two\x1b", None, MiB, NumaMaps({}, {1: MiB}, {})),
            ProcessSample(3, None, None, None, None),  # unreadable: left out
        ],
    )
    v = view(s, None, [], History())
    assert [r.name for r in v.cgroups] == ["/b", "/a", "/c"]
    assert [r.name for r in v.processes] == ["2 two\\x1b", "1 one"]
    assert v.cgroups[0].cxl == 5 * MiB and v.cgroups[0].dram == MiB and v.cgroups[0].total == 6 * MiB
    v = view(s, None, [], History(), sort="dram", rows=2)
    assert [r.name for r in v.cgroups] == ["/c", "/a"]


def test_view_cleans_host_text_for_both_renderers() -> None:
    # the rich screen shows the model's text as it is: an ESC in a cgroup directory's name or in
    # osrelease must not reach the terminal
    s = sample([node(0, "dram")], cgroups=[_cg("/evil\x1b[31m", {0: MiB})])._replace(kernel="6.1\x1b[2J")
    v = view(s, None, [], History())
    assert [r.name for r in v.cgroups] == ["/evil\\x1b[31m"]
    assert "kernel 6.1\\x1b[2J " in v.header and "\x1b" not in plain(v, 80)


def test_history_sparkline_scales_to_the_largest_rate() -> None:
    h = History()
    for x in (0.0, 50.0, 100.0):
        h.add(Rates(1.0, {"pgpromote_success": x, "pgdemote_kswapd": 0.0}, {}, {}))
    assert h.spark("promoted") == SPARK[0] + SPARK[4] + SPARK[-1]
    assert h.spark("demoted") == SPARK[0] * 3
    h.add(None)  # the first report has no rates: nothing added
    assert len(h.values["promoted"]) == 3


def test_bar_and_plain_text_fit_80_columns() -> None:
    assert bar(50, 100, 10) == "[#####.....]" and bar(None, 100, 4) == "[????]"
    s = sample([node(0, "dram"), node(1, "cxl", total=512 * MiB, used=0)], demotion=False, nb=0)
    from cxlctl.telemetry.verdicts import judge

    text = plain(view(s, None, judge(s, None), History()), 80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "node 1   cxl" in text and "tiering-off" in text


def test_top_on_a_pipe_prints_plain_blocks() -> None:
    p = cli("--root", SINGLE, "top", "--count", "2", "--interval", "0.2", env={"COLUMNS": "80"}, check=True)
    blocks = p.stdout.split("\n\n")
    assert len(blocks) == 2 and all(b.startswith("cxlctl top") for b in blocks)
    assert "every" in blocks[1] and ("0.2s" in blocks[1] or "0.3s" in blocks[1])
    assert max(len(line) for line in p.stdout.splitlines()) <= 80


def _read_until(fd: int, want: bytes, timeout: float) -> bytes:
    buf = b""
    end = time.monotonic() + timeout
    while want not in buf and time.monotonic() < end:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                buf += os.read(fd, 65536)
            except OSError:
                break
    return buf


def test_top_on_a_terminal_sorts_on_s_and_quits_on_q() -> None:
    master, slave = pty.openpty()
    env = dict(os.environ, COLUMNS="80", LINES="40", TERM="xterm")
    env.pop("CXLCTL_ROOT", None)
    p = subprocess.Popen(
        [sys.executable, "-m", "cxlctl", "--root", SINGLE, "top", "--interval", "0.5"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=REPO,
    )
    os.close(slave)
    try:
        out = _read_until(master, b"by CXL bytes", 30)
        assert b"by CXL bytes" in out, out[-2000:]
        os.write(master, b"s")
        out = _read_until(master, b"by DRAM bytes", 10)
        assert b"by DRAM bytes" in out, out[-2000:]
        os.write(master, b"q")
        assert p.wait(timeout=10) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)


def test_top_json_is_stat_json_per_refresh() -> None:
    import json

    p = cli("--root", SINGLE, "top", "--json", "--count", "2", "--interval", "0.2", check=True)
    reps = [json.loads(line) for line in p.stdout.splitlines()]
    assert [r["report"] for r in reps] == [0, 1] and reps[0]["since_boot"] and reps[1]["interval"] > 0
    assert {"tiering-off", "cxl-idle"} <= {v["id"] for v in reps[0]["verdicts"]}


def test_top_reuses_a_process_read_less_than_max_age_ago(live_record: str) -> None:
    """numa_maps walks page tables: top re-reads a process at most every few seconds."""
    from cxlctl.hostio.reader import Reader
    from cxlctl.telemetry.sample import read_sample

    cache: dict[int, tuple[float, ProcessSample]] = {}
    a = read_sample(Reader(live_record), {}, top=3, cache=cache, max_age=5.0, now=(100.0, 0.0))
    assert a.processes and set(cache) == {p.pid for p in a.processes}
    b = read_sample(Reader(live_record), {}, top=3, cache=cache, max_age=5.0, now=(104.0, 0.0))
    assert all(x is y for x, y in zip(a.processes, b.processes))
    c = read_sample(Reader(live_record), {}, top=3, cache=cache, max_age=5.0, now=(106.0, 0.0))
    assert all(x is not y and x == y for x, y in zip(a.processes, c.processes))
