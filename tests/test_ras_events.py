"""``cxlctl events`` on event streams real 6.12 and 7.3 kernels wrote in the VM
(``fixtures/linux-{6.12,7.x}/events/``, recorded by ``tests/vm/record_ras_events.py``
together with the sysfs tree ``hb2x2-region-ras`` of the same boot; the same
injections on both, and 7.x's lines carry the fields 6.13+ added).

Each stream is parsed without an error and mapped onto that tree: memdev,
severity, DPA, region, node and memory block as the guest's sysfs (``facts.txt``)
and the kernel's own poison HPAs say.  Plus the CLI on malformed input and on
hosts without tracefs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from cxlctl.ras.collect import Mapper
from cxlctl.ras.events import Event, map_address
from cxlctl.ras.trace import Stream
from tests.kit import cli
from tests.vm.ras_steps import parse_facts

REPO = Path(__file__).resolve().parents[1]
FIX = REPO / "fixtures" / "linux-6.12"
EVENTS = FIX / "events"
TREE = FIX / "hb2x2-region-ras"
#: the kernels whose streams were recorded (same steps, same QEMU devices)
SERIES = ("6.12", "7.x")


@pytest.fixture(params=SERIES)
def rec(request: Any) -> Path:
    """One kernel's recording: ``events/`` and ``hb2x2-region-ras/`` under it."""
    return REPO / "fixtures" / f"linux-{request.param}"


def _facts(fix: Path) -> Dict[str, Any]:
    return parse_facts((fix / "events" / "facts.txt").read_text())


def _events(fix: Path, name: str) -> Tuple[List[Event], Stream]:
    tree = str(fix / "hb2x2-region-ras")
    inv = scan(Host(tree))
    s = Stream()
    evs = list(Mapper(Host(tree), inv).map((fix / "events" / f"{name}.txt").read_text().splitlines(), s))
    return evs, s


def test_every_recorded_stream_parses_cleanly(rec: Path) -> None:
    files = sorted((rec / "events").glob("*.txt"))
    files = [f for f in files if f.name != "facts.txt"]
    assert files, "no recorded streams"
    for f in files:
        s = Stream()
        n = len(list(s.feed(f.read_text().splitlines())))
        assert s.error_count == 0, (f.name, s.errors)
        assert n == s.parsed


def test_media_error_in_a_region_maps_through_the_decoders(rec: Path) -> None:
    """6.12.117 and 7.3.4 print the HPA of media, DRAM and poison events themselves:
    cxlctl takes it as given, and its own decoder translation of the DPA (used where a
    kernel gives no HPA) must land on exactly that HPA, for each of them."""
    f = _facts(rec)
    inv = scan(Host(str(rec / "hb2x2-region-ras")))
    checked = 0
    for name, kind in (
        ("general-media-in-region", "general_media"),
        ("dram-in-region", "dram"),
        ("poison-in-region", "poison"),
    ):
        evs, _ = _events(rec, name)
        for e in [x for x in evs if x.kind == kind]:
            m = e.mapping
            assert m.hpa_source == "kernel" and m.region == f["region"] and m.hpa is not None
            assert m.node == f["node"] and m.memory_block == m.hpa // f["block_size"] and m.block_state == "online"
            assert e.memdev is not None and e.dpa is not None
            mine = map_address(inv, e.memdev, e.dpa, None, None)
            assert mine.hpa_source == "decoder" and mine.region == f["region"]
            assert mine.hpa == m.hpa, (name, e.memdev, hex(e.dpa), mine.hpa, m.hpa)
            assert (mine.node, mine.memory_block) == (m.node, m.memory_block)
            checked += 1
    assert checked == 4  # GM on vmem1, DRAM on vmem0, poison on both


def test_severity_and_device_of_the_media_events(rec: Path) -> None:
    f = _facts(rec)
    (gm,) = [x for x in _events(rec, "general-media-in-region")[0] if x.kind == "general_media"]
    assert gm.memdev == f["memdev"]["cxl-vmem1"] and gm.dpa == 0x4000 and gm.severity == "informational"
    (dr,) = [x for x in _events(rec, "dram-in-region")[0] if x.kind == "dram"]
    assert dr.memdev == f["memdev"]["cxl-vmem0"] and dr.dpa == 0x2040 and dr.severity == "failure"
    assert dr.fields["channel"] == "1" and dr.fields["validity_flags"] == "CHANNEL|RANK"


def test_events_outside_a_region_say_why_they_hit_nothing(rec: Path) -> None:
    f = _facts(rec)
    evs, _ = _events(rec, "general-media-no-region")
    (e,) = [x for x in evs if x.kind == "general_media"]
    assert e.memdev == f["memdev"]["cxl-vmem3"] and e.severity == "failure"
    assert e.mapping.region is None and e.mapping.hpa is None and e.mapping.node is None
    assert e.mapping.why and "no endpoint decoder" in e.mapping.why
    evs, _ = _events(rec, "poison-no-region")
    (p,) = [x for x in evs if x.kind == "poison"]
    assert p.dpa == 0x3000 and p.mapping.hpa is None and p.mapping.region is None


def test_memory_module_event_names_the_device(rec: Path) -> None:
    f = _facts(rec)
    evs, _ = _events(rec, "memory-module-in-region")
    (e,) = [x for x in evs if x.kind == "memory_module"]
    assert e.memdev == f["memdev"]["cxl-vmem0"] and e.severity == "warning"
    assert e.mapping.hpa is None and e.mapping.why == "the event carries no address"


def test_cli_input_json_lines_and_parse_errors(tmp_path: Path) -> None:
    """Real lines with malformed ones between them: every good event printed,
    the bad lines counted in the summary, exit 0, no traceback."""
    good = (EVENTS / "general-media-in-region.txt").read_text().splitlines()
    bad = ["not a trace line", good[0][: len(good[0]) // 2] + " flags='cut", "\x1b[31mred"]
    src = tmp_path / "mixed.txt"
    src.write_text("\n".join([bad[0], *good, bad[1], bad[2]]) + "\n")
    p = cli("--root", str(TREE), "events", "--input", str(src), "--json")
    assert p.returncode == 0, p.stderr
    lines = [json.loads(x) for x in p.stdout.splitlines()]
    assert [x["type"] for x in lines][-1] == "summary"
    summary = lines[-1]
    assert summary["events"] == len(good) and summary["parse_errors"] == 3
    assert [e["line_no"] for e in summary["errors"]] == [1, len(good) + 2, len(good) + 3]
    ev = lines[0]
    assert ev["kind"] == "general_media" and ev["region"] == _facts(FIX)["region"]
    # text: the same, errors counted on stderr, lines within 80 columns, escapes shown
    p = cli("--root", str(TREE), "events", "--input", str(src), env={"COLUMNS": "80"})
    assert p.returncode == 0 and "Traceback" not in p.stderr
    assert "3 line(s) could not be parsed" in p.stderr
    assert max(len(x) for x in p.stdout.splitlines()) <= 80


def test_cli_since_filters_relative_to_the_stream(tmp_path: Path) -> None:
    a = (EVENTS / "general-media-in-region.txt").read_text()
    b = (EVENTS / "memory-module-in-region.txt").read_text()
    src = tmp_path / "two.txt"
    src.write_text(a + b)
    both = cli("--root", str(TREE), "events", "--input", str(src), "--json")
    last = cli("--root", str(TREE), "events", "--input", str(src), "--json", "--since", "0s")
    n_both = json.loads(both.stdout.splitlines()[-1])["events"]
    n_last = json.loads(last.stdout.splitlines()[-1])["events"]
    assert n_both == 2 and n_last == 1
    bad = cli("events", "--since", "yesterday")
    assert bad.returncode == 2 and "not a duration" in bad.stderr


def test_cli_without_tracefs_says_how_to_mount_it(tmp_path: Path) -> None:
    (tmp_path / "sys" / "kernel").mkdir(parents=True)
    p = cli("--root", str(tmp_path), "events")
    assert p.returncode == 1 and "tracefs is not mounted" in p.stderr and "mount -t tracefs" in p.stderr
    assert "Traceback" not in p.stderr


def test_cli_kernel_without_cxl_events(tmp_path: Path) -> None:
    (tmp_path / "sys" / "kernel" / "tracing" / "instances").mkdir(parents=True)
    (tmp_path / "sys" / "kernel" / "tracing" / "events").mkdir()
    p = cli("--root", str(tmp_path), "events", "--follow")
    assert p.returncode == 1 and "no cxl trace events" in p.stderr
    p = cli("--root", str(tmp_path), "events")
    assert p.returncode == 1 and "no cxl trace events" in p.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="checks the message a non-root user gets")
def test_cli_not_root(tmp_path: Path) -> None:
    t = tmp_path / "sys" / "kernel" / "tracing"
    t.mkdir(parents=True)
    t.chmod(0o700 & 0o000)
    try:
        p = cli("--root", str(tmp_path), "events")
    finally:
        t.chmod(0o755)
    assert p.returncode == 1 and "root" in p.stderr


def test_cli_bad_combinations_are_usage_errors() -> None:
    for args in (["--follow", "--stop"], ["--duration", "3"], ["--since", "1m", "--follow"]):
        p = cli("events", *args)
        assert p.returncode == 2, (args, p.stderr)
        assert "Traceback" not in p.stderr


def test_text_says_each_word_once_and_the_seconds_unit(rec: Path) -> None:
    """Issue 35 row 15: a poison event reads ``poison mem3``, not ``poison poison mem3``; the journal
    message likewise; a general-media event keeps its severity; the timestamp says it is seconds."""
    tree = str(rec / "hb2x2-region-ras")
    p = cli("--root", tree, "events", "--input", str(rec / "events" / "poison-in-region.txt"))
    assert p.returncode == 0, p.stderr
    heads = [x for x in p.stdout.splitlines() if x.startswith("[")]
    assert heads and all(" s] poison mem" in h for h in heads), heads
    assert "poison poison" not in p.stdout
    p = cli("--root", tree, "events", "--input", str(rec / "events" / "general-media-in-region.txt"))
    assert " s] general_media informational mem" in p.stdout
    (poison, *_), _ = _events(rec, "poison-in-region")
    assert poison.severity == "poison" and poison.severity_note() == ""


def test_an_empty_recording_says_it_is_empty(tmp_path: Path) -> None:
    """The recorded correctable-error stream is empty (QEMU's AER injection gave no cxl event):
    the message says so, and a file of other trace events says that instead."""
    src = EVENTS / "correctable-error.txt"
    assert src.read_text() == ""
    p = cli("--root", str(TREE), "events", "--input", str(src))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"no CXL events: the recording is empty (source: {src})"
    other = tmp_path / "sched.txt"
    line = (EVENTS / "poison-in-region.txt").read_text().splitlines()[0].replace("cxl_poison:", "sched_switch:")
    other.write_text(line + "\n")
    p = cli("--root", str(TREE), "events", "--input", str(other))
    assert "holds 1 other trace event(s) and 0 unreadable line(s), none from the cxl group" in p.stdout
