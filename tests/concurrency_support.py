"""Interleaved rounds of real cxlctl processes on one copy of a recorded tree (issue 22).

Shared by tests/test_reliab_concurrency.py (a seeded, CI-sized slice) and bench/concurrency.py (the
full 1,000 rounds).  A long-running ``cxlctl daemon run`` (drift repair on, rescan every 5 s) runs
for the whole sequence; each round starts 2-4 processes at once, drawn from: ``tune apply``,
``tune revert``, ``tune try`` (a short timer that expires unconfirmed), ``tune confirm``, ``daemon
run --once``, a second ``daemon run`` and ``tune verify``, with ``--wait`` 0 or 2.

After every round: each process exited with a code its command may give (0; 4 when the lock or
the daemon lock was held; 2 for ``confirm`` with no try pending or ``verify`` with nothing
applied; never 3, drift: nothing but cxlctl writes the knobs here, and ``verify`` takes the
lock's shared side, so a revert or apply beside it is never seen half done),
never a traceback; the journal loads (checksum holds); every entry's ``original`` is the tree's
boot value (never lost nor overwritten by a later apply's values); and once the try timers have
run out, the knobs are exactly what the journal says: the applied profile's desired values, or
the boot values after a revert.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from cxlctl.hostio.host import Host
from cxlctl.tuning import journal as jn
from tests.kit import REPO

PROFILES = ("inference-capacity", "latency-strict", "cxl-common")
TRY_TIMEOUT = 1.0

#: exit codes each command may give in a round (anything else, or a traceback, is a defect)
ALLOWED = {
    "apply": {0, 4},  # 4: locked, or a try waits for confirmation
    "revert": {0, 4},
    "try": {0, 1, 4},  # 1: the try ran out unconfirmed and was rolled back
    "confirm": {0, 2, 4},
    "once": {0, 4},
    "daemon2": {4},
    "verify": {0, 2, 4},  # 2: nothing applied to verify; 3 (drift) would be a torn read
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def daemon_config(root: str) -> str:
    path = os.path.join(root, "etc/cxlctl/cxlctl.toml")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(
            "[reconcile]\nrescan_interval = 5\nlock_wait = 2\n"
            '[drift]\ninterval = 1\naction = "reapply"\n'
            f'[metrics]\nlisten = "127.0.0.1:{_free_port()}"\ntelemetry_interval = 0\n'
            "[health]\nenabled = false\n[ras]\nenabled = false\n[nfd]\nenabled = false\n"
        )
    return path


def _env() -> Dict[str, str]:
    e = dict(os.environ)
    e.pop("CXLCTL_ROOT", None)
    e.update({"COLUMNS": "160", "CXLCTL_LOCK_WAIT": "2"})
    return e


def start(root: str, args: List[str]) -> subprocess.Popen[str]:
    # stdin a pipe never written: a `tune try` waits for its timer, not for EOF
    return subprocess.Popen(
        [sys.executable, "-m", "cxlctl", "--root", root, *args],
        cwd=REPO,
        env=_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _op(rng: random.Random) -> Tuple[str, List[str]]:
    kind = rng.choice(["apply", "apply", "revert", "try", "confirm", "once", "daemon2", "verify"])
    wait = rng.choice(["0", "2"])
    p = rng.choice(PROFILES)
    if kind == "apply":
        return kind, ["tune", "apply", "--wait", wait, p]
    if kind == "revert":
        return kind, ["tune", "revert", "--wait", wait]
    if kind == "try":
        return kind, ["tune", "try", "--timeout", str(TRY_TIMEOUT), "--wait", wait, p]
    if kind == "confirm":
        return kind, ["tune", "confirm", "--wait", wait]
    if kind == "once":
        return kind, ["daemon", "run", "--once"]
    if kind == "daemon2":
        return kind, ["daemon", "run", "--no-udev"]
    return kind, ["tune", "verify"]


def _read(root: str, path: str) -> str:
    with open(root + path) as f:
        return f.read()


def check_consistent(root: str, boot: Dict[str, str]) -> str:
    """The journal loads, its originals are the boot values, and the knobs are what it says."""
    j = jn.load(Host(root))  # raises on a damaged journal
    if j is None:
        assert all(_read(root, p) == v for p, v in boot.items()), "no journal, yet knobs changed"
        return "none"
    for e in j.entries:
        if e.path in boot:
            assert e.original == boot[e.path], f"{e.setting}: boot value {boot[e.path]!r} lost: {e.original!r}"
    assert j.state in (jn.APPLIED, jn.REVERTED, jn.ROLLED_BACK), f"journal left in state {j.state}: {j.error}"
    if j.state == jn.APPLIED and (j.trial is None or not j.trial.pending):
        from cxlctl.tuning.transaction import verify_entries

        bad = [c for c in verify_entries(Host(root), list(j.entries)) if c.status not in ("pass", "unsupported")]
        assert not bad, f"{j.profile} applied but {bad}"
    elif j.state != jn.APPLIED:
        changed = {p: _read(root, p) for p, v in boot.items() if _read(root, p) != v}
        assert not changed, f"journal {j.state} but knobs differ from boot: {changed}"
    return f"{j.state}:{j.profile}"


def rounds(root: str, n: int, seed: int, *, log: Any = None) -> Dict[str, Any]:
    """Run ``n`` rounds; returns counts of outcomes (asserts the invariants after each round)."""
    rng = random.Random(seed)
    from cxlctl.tuning.knobs import read_current

    cur = read_current(Host(root))
    knobs = (
        "/proc/sys/vm/swappiness",
        "/proc/sys/kernel/numa_balancing",
        "/proc/sys/vm/zone_reclaim_mode",
        "/sys/kernel/mm/numa/demotion_enabled",
        "/proc/sys/kernel/numa_balancing_promote_rate_limit_MBps",
    )
    boot = {p: _read(root, p) for p in knobs if cur.get(p) is not None}
    daemon_config(root)
    daemon = start(root, ["daemon", "run", "--no-udev"])
    codes: Dict[str, Dict[int, int]] = {}
    states: Dict[str, int] = {}
    t0 = time.monotonic()
    try:
        time.sleep(1.0)
        assert daemon.poll() is None, daemon.communicate()
        for i in range(n):
            ops = [_op(rng) for _ in range(rng.randint(2, 4))]
            procs = [(k, a, start(root, a)) for k, a in ops]
            for k, a, p in procs:
                out, err = p.communicate(timeout=120)
                assert "Traceback" not in err and "internal error" not in err, (a, err)
                assert p.returncode in ALLOWED[k], (i, a, p.returncode, out[-400:], err[-600:])
                codes.setdefault(k, {}).setdefault(p.returncode, 0)
                codes[k][p.returncode] += 1
            time.sleep(0.05)
            _settle(root)
            st = check_consistent(root, boot)
            states[st.split(":")[0]] = states.get(st.split(":")[0], 0) + 1
            if log is not None and (i + 1) % 50 == 0:
                log(f"round {i + 1}/{n}: {time.monotonic() - t0:.0f} s, {codes}")
        assert daemon.poll() is None, "the long-running daemon died"
    finally:
        daemon.terminate()
        try:
            _, err = daemon.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            _, err = daemon.communicate()
    assert "Traceback" not in err and "internal error" not in err, err[-2000:]
    return {"rounds": n, "seed": seed, "codes": codes, "states": states, "seconds": time.monotonic() - t0}


def _settle(root: str, limit: float = 10.0) -> Optional[str]:
    """Wait until no try is pending and the lock is free (the daemon may be mid-reconcile)."""
    from cxlctl.hostio.lock import is_held

    end = time.monotonic() + limit
    while time.monotonic() < end:
        j = jn.load(Host(root))
        pending = j is not None and j.trial is not None and j.trial.pending
        if not pending and not is_held(root):
            return None
        time.sleep(0.1)
    return "still busy"
