"""A short slice of the daemon soak (bench/soak.py; figures of the full run in docs/reliability.md):
uevent bursts, region add/remove, drift injected and repaired, scrapes over real HTTP — no event
lost, every drift repaired, fds and threads flat, the metric series bounded."""

from __future__ import annotations

import importlib.util
import os

from tests.kit import REPO


def test_a_short_soak() -> None:
    spec = importlib.util.spec_from_file_location("soak", os.path.join(REPO, "bench", "soak.py"))
    assert spec is not None and spec.loader is not None
    soak = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(soak)
    res = soak.soak(events=400, reconciles=40, scrapes=80)
    assert res["events_lost"] == 0 and res["events_received"] == 400, res
    assert res["drift_corrections"] == res["drift_injected"] == 8, res
    assert res["reconcile_results"].get("failed", 0) == 0, res
    assert res["end"]["fds"] == res["start"]["fds"] and res["end"]["threads"] == res["start"]["threads"], res
    assert res["series_last"] < 200 and res["journal_bytes"] < 16384, res
    assert res["journal_state"] == "applied"
