"""``cxlctl health`` exits 1 when a device needs action now (critical health or poison).

The health object is what ndctl prints; under ``--root`` ndctl is not consulted, so the
test hands ``collect_health`` ndctl's answer (the field names of ``cxl list -H``) and runs the
rest -- inventory, impact, rendering, exit status -- on the recorded hb2x2 tree.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Tuple

import pytest

from cxlctl.__main__ import main
from cxlctl.ras import health as hmod
from tests.kit import fixture_roots

TREE = [r for r in fixture_roots() if r.endswith("linux-6.12/hb2x2-region")][0]

OK: Dict[str, Any] = {"maintenance_needed": False, "performance_degraded": False, "hw_replacement_needed": False}


def _ndctl(answer: Dict[str, Dict[str, Any]]) -> Any:
    def fake(root: str, memdevs: List[str]) -> Tuple[Dict[str, Any], Dict[str, Any], List[str], str]:
        return {m: answer.get(m, OK) for m in memdevs}, {}, [], ""

    return fake


def test_a_healthy_host_exits_0(monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.setattr(hmod, "_ndctl_health", _ndctl({}))
    assert main(["--root", TREE, "health", "--no-poison"]) == 0
    out = capsys.readouterr().out
    assert "health: ok" in out and "PROBLEM" not in out


@pytest.mark.parametrize("json_out", [False, True])
def test_a_critical_device_exits_1_and_is_named(monkeypatch: Any, capsys: Any, json_out: bool) -> None:
    monkeypatch.setattr(hmod, "_ndctl_health", _ndctl({"mem1": {**OK, "hw_replacement_needed": True}}))
    argv = ["--root", TREE, "health", "--no-poison"] + (["--json"] if json_out else [])
    assert main(argv) == 1
    out = capsys.readouterr().out
    if json_out:
        doc = json.loads(out)
        assert doc["errors"] == ["mem1: health critical (hw_replacement_needed)"]
    else:
        assert "PROBLEM: mem1: health critical (hw_replacement_needed)" in out


def test_a_warning_is_shown_but_is_not_a_failure(monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.setattr(hmod, "_ndctl_health", _ndctl({"mem0": {**OK, "ext_life_used": "warning"}}))
    assert main(["--root", TREE, "health", "--no-poison"]) == 0
    assert "health: warning (ext_life_used=warning)" in capsys.readouterr().out


def test_poison_on_a_list_is_a_problem() -> None:
    none = hmod.Impact((), (), (), ())
    one = hmod.Poison(0x4000, 0x40, None, None, None, None, None)
    md = [
        hmod.MemdevReport("mem2", None, None, None, None, None, None, None, None, (one,), None, none),
        hmod.MemdevReport("mem3", None, None, None, None, None, None, None, None, (), None, none),
    ]
    assert hmod.problems(md) == ["mem2: 1 poisoned range(s)"]


@pytest.mark.parametrize("json_out", [False, True])
def test_no_device_data_says_what_was_looked_for_and_how_to_get_it(capsys: Any, json_out: bool) -> None:
    """Issue 35 row 14: a recorded tree has no device to ask; the memdev's health line names the source
    (`cxl list -M -H`, the device's health log) and the command that reads it on the host."""
    assert main(["--root", TREE, "health", "--no-poison", *(["--json"] if json_out else [])]) == 0
    out = capsys.readouterr().out
    if json_out:
        mds = json.loads(out)["memdevs"]
        assert mds and all(m["health"] is None for m in mds)
        why = {m["health_missing"] for m in mds}
        assert len(why) == 1
        (text,) = why
    else:
        assert "not available (ndctl)" not in out
        text = " ".join(out.split())
        # issue 44: the reason, the same for the four memdevs, is said once after them
        assert text.count("health: no device data (why: below)") == 4 and text.count("looked for") == 1
        assert "no device data for mem0, mem1, mem2, mem3: looked for" in text
    assert "`cxl list -M -H` (ndctl)" in text and "run `sudo cxlctl health` on the host" in text
