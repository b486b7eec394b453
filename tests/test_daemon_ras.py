"""The daemon's RAS watcher on event streams a real 6.12 kernel wrote
(``fixtures/linux-6.12/events/``): structured journal entries with stable
MESSAGE_IDs, counters per memdev/kind/severity in the metrics, the optional
soft-offline of poison in online memory (a --root tree's regular file stands
in for ``soft_offline_page``), and the alert rules naming only metrics that exist."""

from __future__ import annotations

import logging
import re
import socket
import struct
from pathlib import Path
from typing import Any, Dict, List

import pytest

from cxlctl.daemon import metrics as metrics_mod
from cxlctl.daemon.metrics import Stats
from cxlctl.daemon.ras import MESSAGE_ID_ACTION, MESSAGE_ID_EVENT, RasWatcher
from cxlctl.hostio import journald as journal
from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from cxlctl.model import Inventory

REPO = Path(__file__).resolve().parents[1]
EVENTS = REPO / "fixtures" / "linux-6.12" / "events"
TREE = REPO / "fixtures" / "linux-6.12" / "hb2x2-region-ras"


@pytest.fixture(scope="module")
def inv() -> Inventory:
    return scan(Host(str(TREE)))


def _watcher(root: str, action: str = "none") -> tuple[RasWatcher, List[Dict[str, object]]]:
    sent: List[Dict[str, object]] = []

    def journal_fn(fields: Dict[str, object]) -> bool:
        sent.append(dict(fields))
        return True

    return RasWatcher(Host(root), logging.getLogger("test-ras"), action, journal=journal_fn), sent


def _lines(*names: str) -> List[str]:
    out: List[str] = []
    for n in names:
        out += (EVENTS / f"{n}.txt").read_text().splitlines()
    return out


def test_events_are_journaled_and_counted(inv: Inventory, tmp_path: Path) -> None:
    w, sent = _watcher(str(tmp_path))
    evs = w.handle_lines(_lines("general-media-in-region", "memory-module-no-region", "poison-in-region"), inv)
    assert {e.kind for e in evs} == {"general_media", "memory_module", "poison"}
    gm = [f for f in sent if f["CXL_KIND"] == "general_media"]
    assert len(gm) == 1 and gm[0]["MESSAGE_ID"] == MESSAGE_ID_EVENT
    e = [x for x in evs if x.kind == "general_media"][0]
    assert gm[0]["CXL_MEMDEV"] == e.memdev and gm[0]["CXL_REGION"] == e.mapping.region
    assert gm[0]["CXL_HPA"] == f"{e.mapping.hpa:#x}" and gm[0]["CXL_NODE"] == e.mapping.node
    assert str(gm[0]["MESSAGE"]).startswith(f"CXL general_media (informational) on {e.memdev}")
    # no action is configured: nothing else was sent, nothing written
    assert all(f["MESSAGE_ID"] == MESSAGE_ID_EVENT for f in sent)
    stats = Stats()
    stats.ras = w.stats
    w.stats.up = True
    text = metrics_mod.collect(metrics_mod.View(inv, None, "none", (), None, stats, True)).render()
    line = f'cxlctl_ras_events_total{{memdev="{e.memdev}",kind="general_media",severity="informational"}} 1'
    assert line in text
    n_poison = sum(1 for x in evs if x.kind == "poison")
    assert n_poison >= 2
    assert 'kind="poison",severity="poison"} ' in text
    assert "cxlctl_ras_watch_up 1" in text and "cxlctl_ras_parse_errors_total 0" in text


def test_parse_errors_are_counted_not_fatal(inv: Inventory, tmp_path: Path) -> None:
    w, sent = _watcher(str(tmp_path))
    lines = ["garbage", *_lines("dram-in-region"), "  x-1 [000] ..... 1.0: cxl_dram: flags='cut"]
    evs = w.handle_lines(lines, inv)
    assert [e.kind for e in evs] == ["dram"] and w.stats.parse_errors == 2


def test_the_parse_error_logged_is_the_batchs_own(tmp_path: Path, caplog: Any) -> None:
    """The warning shows the first bad line of this read, never an older one the stream kept."""
    w, _ = _watcher(str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="test-ras"):
        w.handle_lines(["garbage one", "garbage two"], None)
        w.handle_lines(["garbage" + str(i) for i in range(30)], None)
        w.handle_lines(["garbage late"], None)
    msgs = [r.getMessage() for r in caplog.records]
    assert "2 CXL trace line(s) could not be parsed (first: not a trace event line" in msgs[0]
    assert "'garbage one'" in msgs[0] and "'garbage0'" in msgs[1]
    assert msgs[2] == "1 CXL trace line(s) could not be parsed" and w.stats.parse_errors == 33


def test_soft_offline_writes_the_poisoned_page(inv: Inventory, tmp_path: Path) -> None:
    knob = tmp_path / "sys" / "devices" / "system" / "memory" / "soft_offline_page"
    knob.parent.mkdir(parents=True)
    knob.write_text("")
    w, sent = _watcher(str(tmp_path), "soft-offline")
    evs = w.handle_lines(_lines("poison-in-region", "poison-no-region"), inv)
    inside = [e for e in evs if e.kind == "poison" and e.mapping.hpa is not None]
    outside = [e for e in evs if e.kind == "poison" and e.mapping.hpa is None]
    assert inside and outside
    actions = [f for f in sent if f["MESSAGE_ID"] == MESSAGE_ID_ACTION]
    offlined = [a for a in actions if a["CXL_ACTION_RESULT"] == "offlined"]
    skipped = [a for a in actions if a["CXL_ACTION_RESULT"] == "skipped"]
    pages = sorted({e.mapping.hpa - e.mapping.hpa % 4096 for e in inside if e.mapping.hpa is not None})
    assert sorted(int(str(a["CXL_PAGE"]), 16) for a in offlined) == pages
    # the last write is the last page (a sysfs knob holds one value; the file here keeps the last)
    assert knob.read_text() == f"{pages[-1]:#x}\n" or knob.read_text() == f"{pages[0]:#x}\n"
    assert len(skipped) == len(outside) and "no HPA" in str(skipped[0]["MESSAGE"])
    assert w.stats.actions == {"offlined": len(pages), "skipped": len(outside)}
    # the same page again: tried once per run
    w.handle_lines(_lines("poison-in-region"), inv)
    assert w.stats.actions["offlined"] == len(pages)


def test_soft_offline_failure_is_reported(inv: Inventory, tmp_path: Path) -> None:
    w, sent = _watcher(str(tmp_path), "soft-offline")  # no soft_offline_page in this root
    w.handle_lines(_lines("poison-in-region"), inv)
    assert w.stats.actions.get("failed", 0) >= 1
    failed = [f for f in sent if f.get("CXL_ACTION_RESULT") == "failed"]
    assert failed and "gone" in str(failed[0]["MESSAGE"])


def test_watcher_without_tracefs_says_why(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    w, _ = _watcher(str(tmp_path))
    with caplog.at_level(logging.WARNING):
        assert w.start() is None
    assert not w.stats.up and "holds no tracefs" in w.stats.reason  # a tree (tmp_path): no live trace buffer
    assert "RAS events not watched" in caplog.text


def test_journal_native_protocol(tmp_path: Path) -> None:
    data = journal.encode({"MESSAGE": "a\nb", "CXL_MEMDEV": "mem0", "CXL_NODE": 1, "SKIP": None})
    assert data.startswith(b"MESSAGE\n" + struct.pack("<Q", 3) + b"a\nb\n")
    assert b"CXL_MEMDEV=mem0\n" in data and b"CXL_NODE=1\n" in data and b"SKIP" not in data
    with pytest.raises(ValueError):
        journal.encode({"bad-key": "x"})
    sock = tmp_path / "journal.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    srv.bind(str(sock))
    try:
        assert journal.send({"MESSAGE": "hi", "MESSAGE_ID": MESSAGE_ID_EVENT}, sock_path=str(sock))
        got = srv.recv(4096)
    finally:
        srv.close()
    assert got == b"MESSAGE=hi\nMESSAGE_ID=" + MESSAGE_ID_EVENT.encode() + b"\n"
    assert not journal.send({"MESSAGE": "x"}, sock_path=str(tmp_path / "none.sock"))


def test_alert_rules_name_only_metrics_the_daemon_exports(inv: Inventory, tmp_path: Path) -> None:
    rules = (REPO / "deploy" / "prometheus" / "cxlctl-ras-rules.yaml").read_text()
    used = set(re.findall(r"\b(cxlctl_[a-z_]+)\b", rules))
    assert used
    w, _ = _watcher(str(tmp_path))
    w.handle_lines(_lines("poison-in-region"), inv)
    stats = Stats()
    stats.ras = w.stats
    text = metrics_mod.collect(metrics_mod.View(inv, None, "none", (), None, stats, True)).render()
    exported = set(re.findall(r"^# TYPE (cxlctl_[a-z_]+) ", text, re.M))
    assert used <= exported, used - exported
    for kind in re.findall(r'kind=~?"([a-z_|]+)"', rules):
        for k in kind.split("|"):
            assert k in ("general_media", "dram", "memory_module", "poison", "correctable", "uncorrectable", "overflow")
