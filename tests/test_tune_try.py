"""`cxlctl tune try` / `tune confirm`: apply, keep only when confirmed in time, else revert exactly.

The try runs as a real process (``python -m cxlctl``) so that its stdin, its
signals and a confirmation from *another* process are the real thing.  Every
scenario compares the whole tree byte for byte with its state before the try.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, List, Optional

import pytest

from cxlctl.cli import run
from cxlctl.errors import EXIT_FAILURE, EXIT_LOCKED, EXIT_USAGE
from cxlctl.tuning import journal as jn
from tests.kit import REPO, cli
from tests.tune_support import diff, journal, plan_writes, representative, snapshot, work_copy

#: a recorded tree (not the live record: a real kernel's tree, the same on every machine)
SOURCE = [s for s in representative() if s != "live-host"][0]
TRIED = "t-everything"  # every scalar knob plus the weights
BASE = "latency-strict"


def _root(tmp_path: Any, base: Optional[str] = BASE) -> str:
    root = work_copy(SOURCE, str(tmp_path / "root"))
    if base is not None:
        assert run(["--root", root, "tune", "apply", base]) == 0
    assert plan_writes(root, TRIED) > 0
    return root


def _start(root: str, *extra: str, stdin: Any = subprocess.PIPE) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.pop("CXLCTL_ROOT", None)
    return subprocess.Popen(
        [sys.executable, "-m", "cxlctl", "--root", root, "tune", "try", TRIED, *extra],
        cwd=REPO,
        env=env,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_pending(root: str, proc: subprocess.Popen[str], limit: float = 30.0) -> jn.Journal:
    """Until the try has applied and waits (its journal holds a pending trial)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        j = jn.load(root)
        if j is not None and j.trial is not None and j.trial.pending and j.profile == TRIED:
            return j
        if proc.poll() is not None:
            raise AssertionError(f"try exited {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.05)
    raise AssertionError("the try never started waiting")


def _finish(proc: subprocess.Popen[str], limit: float = 30.0, eof: bool = False) -> subprocess.CompletedProcess[str]:
    """Wait for the try to end; its stdin stays open (no EOF) unless ``eof``."""
    if not eof:
        proc.wait(timeout=limit)
    out, err = proc.communicate(timeout=limit)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_timeout_reverts_to_the_exact_previous_values_and_profile(tmp_path: Any) -> None:
    root = _root(tmp_path)
    before, j_before = snapshot(root), journal(root)
    proc = _start(root, "--timeout", "1.5", "--json")
    j = _wait_pending(root, proc)
    assert diff(before, snapshot(root)) != [], "the try must have changed knobs while it waits"
    assert j.trial is not None and j.trial.previous == j_before
    p = _finish(proc)
    assert p.returncode == EXIT_FAILURE, p.stderr
    assert "no confirmation within 1.5 s: reverted t-everything to the previous values" in p.stderr
    assert f"({BASE} is in effect again)" in p.stderr
    doc = json.loads(p.stdout)
    assert doc["outcome"] == "timeout" and not doc["ok"] and doc["apply"]["ok"]
    assert doc["reverted"]["ok"] and doc["reverted"]["back_to"] == BASE
    assert any(r["status"] == "restored" for r in doc["reverted"]["results"])
    assert diff(before, snapshot(root)) == []
    assert journal(root) == j_before, "the journal the try replaced is in effect again"


def test_confirm_from_another_process_keeps_it(tmp_path: Any) -> None:
    root = _root(tmp_path)
    before = snapshot(root)
    proc = _start(root, "--timeout", "60")
    _wait_pending(root, proc)
    st = json.loads(cli("--root", root, "tune", "status", "--json", check=True).stdout)
    assert st["try"]["profile"] == TRIED and st["try"]["waiting"] and 0 < st["try"]["seconds_left"] <= 60
    c = cli("--root", root, "tune", "confirm", "--json")
    assert c.returncode == 0, c.stderr
    doc = json.loads(c.stdout)
    assert doc["ok"] and doc["profile"] == TRIED and doc["waiting_pid"] == proc.pid
    p = _finish(proc)
    assert p.returncode == 0, p.stderr
    assert "kept t-everything (confirmed)" in p.stderr
    j = journal(root)
    assert j.state == jn.APPLIED and j.profile == TRIED and j.trial is not None and j.trial.confirmed
    assert diff(before, snapshot(root)) != []
    assert cli("--root", root, "tune", "verify").returncode == 0
    st = json.loads(cli("--root", root, "tune", "status", "--json", check=True).stdout)
    assert st["try"] is None and st["active_profile"] == TRIED
    # confirming again: nothing is pending (a usage error, nothing written)
    again = cli("--root", root, "tune", "confirm")
    assert again.returncode == EXIT_USAGE and "no `tune try` is waiting for confirmation" in again.stderr


def test_enter_on_stdin_confirms(tmp_path: Any) -> None:
    root = _root(tmp_path)
    proc = _start(root, "--timeout", "60")
    _wait_pending(root, proc)
    assert proc.stdin is not None
    proc.stdin.write("\n")
    proc.stdin.flush()
    p = _finish(proc)
    assert p.returncode == 0 and "kept t-everything (confirmed)" in p.stderr
    assert journal(root).profile == TRIED


def test_eof_on_stdin_reverts(tmp_path: Any) -> None:
    """No previous profile: the knobs go back to the tree's values, the journal says rolled back."""
    root = _root(tmp_path, base=None)
    before = snapshot(root)
    p = _finish(_start(root, "--timeout", "60", stdin=subprocess.DEVNULL))
    assert p.returncode == EXIT_FAILURE
    assert "stdin was closed before a confirmation: reverted t-everything to the previous values" in p.stderr
    assert diff(before, snapshot(root)) == []
    j = journal(root)
    assert j.state == jn.ROLLED_BACK and j.trial is None and "not confirmed" in (j.error or "")


def test_sigterm_reverts(tmp_path: Any) -> None:
    root = _root(tmp_path)
    before = snapshot(root)
    proc = _start(root, "--timeout", "60")
    _wait_pending(root, proc)
    proc.send_signal(signal.SIGTERM)
    p = _finish(proc)
    assert p.returncode == EXIT_FAILURE and "interrupted before a confirmation: reverted" in p.stderr
    assert diff(before, snapshot(root)) == []


@pytest.mark.parametrize("command", [["status"], ["plan"]])
def test_sigkill_then_the_next_tune_command_reverts_once_expired(command: List[str], tmp_path: Any) -> None:
    root = _root(tmp_path)
    before, j_before = snapshot(root), journal(root)
    proc = _start(root, "--timeout", "3")
    j = _wait_pending(root, proc)
    proc.kill()
    proc.wait()
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    proc.stderr.close()
    tried = snapshot(root)
    # before the deadline: left alone (its waiter may be gone, but the deadline is the contract)
    early = cli("--root", root, "tune", *command, "--json")
    assert early.returncode == 0, early.stderr
    assert "reverted" not in early.stderr and diff(tried, snapshot(root)) == []
    if command == ["status"]:
        st = json.loads(early.stdout)
        assert st["try"]["pid"] == proc.pid and st["try"]["waiting"] is False
    assert j.trial is not None
    time.sleep(max(0.0, j.trial.deadline - time.time()) + 0.3)
    late = cli("--root", root, "tune", *command, "--json")
    assert late.returncode == 0, late.stderr
    assert "the `tune try` of t-everything was not confirmed by its deadline" in late.stderr
    assert diff(before, snapshot(root)) == []
    assert journal(root) == j_before
    if command == ["status"]:
        st = json.loads(late.stdout)
        assert st["try"] is None and st["active_profile"] == BASE


def test_a_pending_try_blocks_apply_and_revert_ends_it(tmp_path: Any) -> None:
    root = _root(tmp_path, base=None)
    before = snapshot(root)
    proc = _start(root, "--timeout", "60")
    _wait_pending(root, proc)
    a = cli("--root", root, "tune", "apply", BASE)
    assert a.returncode == EXIT_LOCKED and "is waiting for confirmation" in a.stderr
    r = cli("--root", root, "tune", "revert")
    assert r.returncode == 0 and "ended the pending `tune try` of t-everything" in r.stderr
    p = _finish(proc)
    assert p.returncode == EXIT_FAILURE and "ended by another command" in p.stderr
    assert diff(before, snapshot(root)) == []


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_bad_timeout_is_a_usage_error_and_writes_nothing(value: str, tmp_path: Any, capsys: Any) -> None:
    root = _root(tmp_path, base=None)
    before = snapshot(root)
    assert run(["--root", root, "tune", "try", TRIED, "--timeout", value]) == EXIT_USAGE
    assert "--timeout must be a positive number of seconds" in capsys.readouterr().err
    assert diff(before, snapshot(root)) == [] and not os.path.exists(root + jn.JOURNAL)


def test_confirm_without_a_try_is_a_usage_error(tmp_path: Any, capsys: Any) -> None:
    root = _root(tmp_path)
    assert run(["--root", root, "tune", "confirm", "--json"]) == EXIT_USAGE
    assert "no `tune try` is waiting for confirmation" in capsys.readouterr().err


def test_the_daemon_reverts_an_expired_try_first(tmp_path: Any) -> None:
    from tests.daemon_support import make_daemon

    root = _root(tmp_path)
    before, j_before = snapshot(root), journal(root)
    proc = _start(root, "--timeout", "2")
    j = _wait_pending(root, proc)
    proc.kill()
    proc.wait()
    d, _, cap = make_daemon(root)
    try:
        d.startup()  # not expired yet: a try waiting for confirmation is left alone
        assert d.rec.target.state == "trying" and diff(before, snapshot(root)) != []
        assert j.trial is not None
        time.sleep(max(0.0, j.trial.deadline - time.time()) + 0.3)
        d.rec.reconcile("test")
    finally:
        d.close()
    assert cap.grep("the `tune try` of t-everything was not confirmed by its deadline")
    assert diff(before, snapshot(root)) == []
    assert journal(root) == j_before
    assert d.rec.target.state == "applied" and d.rec.target.name == BASE
