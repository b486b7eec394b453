"""Progress on long work: the engines' callback, and the bar the CLI draws only on a terminal."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import threading
from typing import Any, List, Tuple

from cxlctl.hostio.host import Host
from cxlctl.regions import dax
from cxlctl.tuning.transaction import Transaction
from tests.kit import FIXTURES, REPO, cli, copy_fixture
from tests.tune_support import plan_writes, work_copy

HB2X2_R = os.path.join(FIXTURES, "linux-6.12", "hb2x2-region")

Call = Tuple[int, int, str]


def _monotonic_to_total(calls: List[Call]) -> None:
    assert calls, "the callback was never called"
    dones = [d for d, _, _ in calls]
    totals = {t for _, t, _ in calls}
    assert len(totals) == 1, totals
    assert dones == sorted(dones) and len(set(dones)) == len(dones), dones
    assert dones[-1] == totals.pop()


def test_offlining_a_region_reports_every_block(tmp_path: Any) -> None:
    root = copy_fixture(HB2X2_R, str(tmp_path / "root"))
    online = dax.online_blocks(Host(root), "dax0.0")
    assert len(online) > 1, "the recorded region should have its memory online"
    calls: List[Call] = []
    ids = dax.offline_blocks(Host(root), online, lambda m: None, "region0/dax0.0", lambda *a: calls.append(a))
    _monotonic_to_total(calls)
    assert calls[-1][1] == len(online) == len(ids)
    assert all("offlining" in w for _, _, w in calls)
    assert dax.online_blocks(Host(root), "dax0.0") == []  # the writes really happened


def test_onlining_reports_every_block(tmp_path: Any) -> None:
    root = copy_fixture(HB2X2_R, str(tmp_path / "root"))
    online = dax.online_blocks(Host(root), "dax0.0")
    dax.offline_blocks(Host(root), online, lambda m: None, "dax0.0")
    assert dax.online_blocks(Host(root), "dax0.0") == []
    calls: List[Call] = []
    # a DaxError here (a block refused) fails the test: the progress of a failed onlining proves nothing
    dax.online_in_zone(Host(root), "dax0.0", "movable", lambda m: None, lambda *a: calls.append(a))
    _monotonic_to_total(calls)
    assert calls[-1][1] == len(online)
    assert all("onlining" in w for _, _, w in calls)
    assert len(dax.online_blocks(Host(root), "dax0.0")) == len(online)  # the writes really happened


def test_tune_commit_reports_every_write(tmp_path: Any) -> None:
    root = work_copy(os.path.join(FIXTURES, "linux-6.12", "hb2x2-region"), str(tmp_path / "root"))
    n = plan_writes(root, "t-everything")
    assert n > 1
    calls: List[Call] = []
    res = Transaction(Host(root), "t-everything").commit(on_progress=lambda *a: calls.append(a))
    assert res.ok, res.error
    _monotonic_to_total(calls)
    assert calls[-1][1] == n


def _run(root: str, tty: bool) -> Tuple[int, str]:
    """``cxlctl tune apply`` with stderr on a pseudo-terminal (tty) or a pipe; (exit code, stderr)."""
    args = ["--root", root, "tune", "apply", "t-everything"]
    argv = [sys.executable, "-m", "cxlctl", *args]
    env = dict(os.environ, TERM="xterm", COLUMNS="100")
    env.pop("CXLCTL_ROOT", None)
    if not tty:
        p = cli(*args, env={"TERM": "xterm", "COLUMNS": "100"})
        return p.returncode, p.stderr
    master, slave = pty.openpty()
    chunks: List[bytes] = []

    def drain() -> None:
        while True:
            try:
                b = os.read(master, 4096)
            except OSError:
                return
            if not b:
                return
            chunks.append(b)

    t = threading.Thread(target=drain)
    t.start()
    p2 = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave, env=env, cwd=REPO)
    os.close(slave)
    t.join(10)
    os.close(master)
    return p2.returncode, b"".join(chunks).decode(errors="replace")


def test_the_bar_shows_on_a_terminal_only(tmp_path: Any) -> None:
    src = os.path.join(FIXTURES, "linux-6.12", "hb2x2-region")
    rc, err = _run(work_copy(src, str(tmp_path / "tty")), tty=True)
    assert rc == 0, err
    assert "writing tuning knobs" in err
    rc, err = _run(work_copy(src, str(tmp_path / "pipe")), tty=False)
    assert rc == 0, err
    assert "writing tuning knobs" not in err and "\x1b[" not in err
