"""The tuning journal's integrity check (issue 22): a journal cut at any byte offset, or with any
single byte changed, is either recovered (its content is intact) or refused with a message naming
the file and what to do — never a traceback, never a partial revert reported as done.

The journals are real: written by `tune apply` / `tune try` on copies of recorded trees.  Each
case puts the knobs back to their applied values, writes the damaged journal and runs the revert
engine in-process (thousands of cases; a subprocess each would take minutes); a sample of the
cases runs through the command line too, for exit codes and streams.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Tuple

import pytest

from cxlctl.errors import CxlctlError
from cxlctl.tuning import engine
from cxlctl.tuning import journal as jn
from tests.kit import cli
from tests.tune_support import work_copy

#: a tree with a CXL region (weights: the largest journal) and one without
TREES = ("linux-6.12/hb2x2-region", "linux-6.12/single-region")


def _knobs(root: str, paths: List[str]) -> Dict[str, str]:
    out = {}
    for p in paths:
        with open(root + p) as f:
            out[p] = f.read()
    return out


def _put(root: str, values: Dict[str, str]) -> None:
    for p, v in values.items():
        with open(root + p, "w") as f:
            f.write(v)


def _cases(good: bytes) -> List[Tuple[str, bytes]]:
    """Every truncation offset, and every byte position changed three ways (low bit, case bit, all bits)."""
    out = [(f"cut at {i}", good[:i]) for i in range(len(good))]
    for i in range(len(good)):
        for x in (0x01, 0x20, 0xFF):
            b = bytearray(good)
            b[i] ^= x
            out.append((f"byte {i} ^ {x:#x}", bytes(b)))
    return out


def _run_cases(root: str) -> Dict[str, int]:
    """Damage the journal every way; each revert either refuses (nothing changed) or restores every knob."""
    path = root + jn.JOURNAL
    with open(path, "rb") as f:
        good = f.read()
    j = jn.load(root)
    assert j is not None and j.state == jn.APPLIED
    paths = [e.path for e in j.entries]
    applied = _knobs(root, paths)
    boot = {e.path: e.original for e in j.entries}
    assert any(applied[p] != boot[p] for p in paths), "the apply changed nothing: the cases would prove nothing"
    seen = {"refused": 0, "recovered": 0}
    for what, data in _cases(good):
        _put(root, applied)
        with open(path, "wb") as f:
            f.write(data)
        try:
            res = engine.revert(root, wait=0)
        except CxlctlError as e:
            msg = str(e)
            assert path in msg and "nothing was changed" in msg, (what, msg)
            assert "remove" in e.hint and path in e.hint, (what, e.hint)
            assert _knobs(root, paths) == applied, f"{what}: refused, but knobs changed"
            with open(path, "rb") as f:
                assert f.read() == data, f"{what}: a refused journal was rewritten (its boot values lost)"
            seen["refused"] += 1
            continue
        assert res.ok, (what, res.errors)
        assert _knobs(root, paths) == boot, f"{what}: revert reported success but did not restore every knob"
        # accepted only when it says what the good one says (the file without its last newline,
        # or a float's 17th digit that parses to the same double)
        assert json.loads(data) == json.loads(good), f"{what}: a changed journal was accepted"
        seen["recovered"] += 1
    return seen


@pytest.mark.parametrize("tree", TREES)
def test_every_cut_and_changed_byte_is_refused_or_recovered(tree: str, tmp_path: Any) -> None:
    root = work_copy(tree, str(tmp_path / "t"))
    assert engine.apply(root, "inference-capacity").ok
    seen = _run_cases(root)
    # only a journal whose content is intact comes through (checked case by case above)
    assert seen["recovered"] <= 3 and seen["refused"] > 1000, seen
    print(f"journal damage cases on {tree}: {seen}")


def test_a_pending_try_journal_with_its_previous_one(tmp_path: Any) -> None:
    """A `tune try` over an applied profile nests the previous journal: damage anywhere is caught."""
    from cxlctl.tuning.transaction import Transaction

    root = work_copy(TREES[1], str(tmp_path / "t"))
    assert engine.apply(root, "latency-strict").ok
    res = Transaction(root, "inference-capacity").commit(trial_timeout=3600)
    assert res.ok, res.error
    j = jn.load(root)
    assert j is not None and j.trial is not None and j.trial.previous is not None
    seen = _run_cases(root)
    assert seen["recovered"] <= 3 and seen["refused"] > 1000, seen


def test_damaged_journal_through_the_command_line(tmp_path: Any) -> None:
    """The case of the issue: "60" → "61" in an original.  Before the checksum, revert wrote 61 into
    swappiness and said "reverted"; now every command that would act on it refuses (exit 1, the file
    named, no traceback) and the daemon says so instead of applying the persisted profile."""
    root = work_copy(TREES[1], str(tmp_path / "t"))
    cli("--root", root, "tune", "apply", "--persist", "inference-capacity", check=True)
    path = root + jn.JOURNAL
    with open(path) as f:
        text = f.read()
    assert text.count('"original": "60\\n"') == 1
    with open(path, "w") as f:
        f.write(text.replace('"original": "60\\n"', '"original": "61\\n"'))
    before = _knobs(root, ["/proc/sys/vm/swappiness", "/proc/sys/kernel/numa_balancing"])
    for args in (
        ["tune", "revert"],
        ["tune", "apply", "latency-strict"],
        ["tune", "try", "--timeout", "5", "latency-strict"],
        ["tune", "status"],
    ):
        p = cli("--root", root, *args)
        assert p.returncode == 1, (args, p.stdout, p.stderr)
        assert "checksum mismatch" in p.stderr and path in p.stderr and "Traceback" not in p.stderr, args
    p = cli("--root", root, "daemon", "run", "--once")
    assert "Traceback" not in p.stderr and "checksum mismatch" in p.stderr
    assert "no profile (needs-attention)" in p.stderr
    assert _knobs(root, list(before)) == before
    assert open(path).read() != text  # still the damaged one: nothing rewrote it


def test_schema_1_journals_are_still_read(tmp_path: Any) -> None:
    """A journal written by the previous format (no checksum, schema 1) still reverts."""
    root = work_copy(TREES[1], str(tmp_path / "t"))
    assert engine.apply(root, "inference-capacity").ok
    path = root + jn.JOURNAL
    with open(path) as f:
        d = json.load(f)
    assert d["schema"] == 2 and d.pop("checksum").startswith("sha256:")
    d["schema"] = 1
    with open(path, "w") as f:
        json.dump(d, f, indent=2)
    j = jn.load(root)
    assert j is not None and j.state == jn.APPLIED
    res = engine.revert(root)
    assert res.ok and open(root + "/proc/sys/vm/swappiness").read() == "60\n"
    with open(path) as f:
        assert json.load(f)["schema"] == 2  # rewritten in the new format


def test_a_damaged_active_profile_record_is_refused(tmp_path: Any) -> None:
    """``/var/lib/cxlctl/active-profile`` carries a checksum too: the daemon enforces nothing from a
    damaged one (a flipped byte could name another profile) and says why; tune status notes it."""
    root = work_copy(TREES[1], str(tmp_path / "t"))
    cli("--root", root, "tune", "apply", "--persist", "inference-capacity", check=True)
    cli("--root", root, "tune", "revert", check=True)  # knobs back; re-persist without a journal:
    cli("--root", root, "tune", "apply", "--persist", "latency-strict", check=True)
    os.unlink(root + jn.JOURNAL)  # as after a reboot: only the persisted record is left
    rec = root + engine.ACTIVE_PROFILE
    with open(rec) as f:
        text = f.read()
    with open(rec, "w") as f:
        f.write(text.replace("latency-strict", "latency-strict".upper(), 1))
    p = cli("--root", root, "daemon", "run", "--once")
    assert "fails its checksum" in p.stderr and rec in p.stderr and "Traceback" not in p.stderr
    assert not os.path.exists(root + jn.JOURNAL), "the daemon applied a profile from a damaged record"
    p = cli("--root", root, "tune", "status")
    assert "fails its checksum" in p.stdout + p.stderr
