"""Helpers shared by the tuning-engine tests (tests/test_tune_*.py).

Every test runs on a writable copy of a *recorded* tree: the committed real-kernel
fixtures under ``fixtures/`` (found by glob, so new recordings are picked up) plus
a record of the machine running the tests.  Nothing mocks ``open``; faults are
injected through the tree or through the write primitive's environment hooks
(see cxlctl/hostio/write.py).
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import tempfile
from typing import Dict, List, Optional, Set, Tuple

from cxlctl.hostio.host import Host
from cxlctl.tuning import engine
from cxlctl.tuning import journal as jn
from tests.kit import REPO, cli, copy_fixture, fixture_id, fixture_roots

BUILTIN = ("inference-bandwidth", "inference-capacity", "latency-strict", "cxl-common")
LIVE = "live-host"

#: test profiles (inputs, not trees) that exercise what the built-ins may not touch on a
#: given tree: manual weights by ratio, auto_online_blocks, every scalar knob
TEST_PROFILES: Dict[str, str] = {
    "t-ratio": """
summary = "test: weights by ratio on top of tiering"
include = "inference-capacity"
[knobs.weighted_interleave]
weights = "3:1"
nodes = ["dram", "cxl"]
reason = "test ratio"
""",
    "t-everything": """
summary = "test: every scalar knob away from common defaults"
[knobs."vm.zone_reclaim_mode"]
value = 1
[knobs."vm.swappiness"]
value = 100
[knobs.demotion_enabled]
value = true
[knobs.auto_online_blocks]
value = "online_movable"
[knobs."kernel.numa_balancing_promote_rate_limit_MBps"]
value = 4096
[knobs."kernel.numa_balancing"]
value = 3
[knobs.weighted_interleave]
weights = "2:1"
nodes = ["all"]
""",
}
PROFILES = BUILTIN + tuple(TEST_PROFILES)

_LIVE_DIR: Optional[str] = None


def sources() -> List[str]:
    """Ids of every recorded tree: committed fixtures, then the live host."""
    return [fixture_id(r) for r in fixture_roots()] + [LIVE]


def representative() -> List[str]:
    """A few trees for the costlier scenarios: the live host plus, per recorded kernel,
    the first tree with a CXL region (or the first tree when it has none)."""
    picked = [LIVE]
    kernels = sorted({s.split("/")[0] for s in sources() if s != LIVE})
    for k in kernels:
        mine = [s for s in sources() if s.startswith(k + "/")]
        regions = [s for s in mine if s.endswith("-region")]
        picked.append((regions or mine)[0])
    return picked


def pristine(source: str) -> str:
    """Read-only path of a recorded tree (the live record is made once per session)."""
    global _LIVE_DIR
    if source != LIVE:
        return os.path.join(REPO, "fixtures", source)
    if _LIVE_DIR is None:
        d = tempfile.mkdtemp(prefix="cxlctl-live-")
        dest = os.path.join(d, "rec")
        cli("record", dest, check=True)
        _LIVE_DIR = dest
    return _LIVE_DIR


_SCRATCH: Optional[str] = None


def _scratch(dest: str) -> str:
    """Where a copy for ``dest`` really lives: on tmpfs (/dev/shm) when there is one.

    The journal is fsynced twice per apply; on a busy disk that dominated the suite's
    time, and durability cannot be tested here anyway.  ``dest`` (under pytest's
    tmp_path) only names the copy.
    """
    global _SCRATCH
    if not os.access("/dev/shm", os.W_OK):
        return dest
    if _SCRATCH is None:
        _SCRATCH = tempfile.mkdtemp(prefix="cxlctl-tune-tests-", dir="/dev/shm")
        atexit.register(shutil.rmtree, _SCRATCH, True)
    return os.path.join(_SCRATCH, dest.strip("/").replace("/", "_"))


def work_copy(source: str, dest: str, *, profiles: bool = True) -> str:
    """Writable copy of a recorded tree, with the test profiles under /etc/cxlctl/profiles.

    Returns the copy's path (on tmpfs when available, see :func:`_scratch`).
    """
    dest = _scratch(dest)
    if os.path.exists(dest):
        shutil.rmtree(dest)
    copy_fixture(pristine(source), dest)
    if profiles:
        pdir = os.path.join(dest, "etc/cxlctl/profiles")
        os.makedirs(pdir, exist_ok=True)
        for name, text in TEST_PROFILES.items():
            with open(os.path.join(pdir, name + ".toml"), "w") as f:
                f.write(text)
    return dest


Snapshot = Dict[str, Tuple[str, bytes]]


def snapshot(root: str, under: Tuple[str, ...] = ("",)) -> Snapshot:
    """Every file (bytes) and symlink (target) under root, except cxlctl's own /run state.

    ``under`` limits the walk to some top-level paths (relative to root).
    """
    out: Snapshot = {}
    base = root.rstrip("/") + "/"
    skip = base + "run/cxlctl"
    stack = [base + u for u in under]
    while stack:
        top = stack.pop()
        try:
            it = os.scandir(top)
        except (NotADirectoryError, FileNotFoundError):
            if os.path.isfile(top) and not os.path.islink(top):
                with open(top, "rb") as f:
                    out[top[len(base) :]] = ("file", f.read())
            continue
        with it:
            for e in it:
                if e.is_symlink():
                    out[e.path[len(base) :]] = ("link", os.readlink(e.path).encode())
                elif e.is_dir():
                    if e.path != skip:
                        stack.append(e.path)
                else:
                    with open(e.path, "rb") as f:
                        out[e.path[len(base) :]] = ("file", f.read())
    return out


def diff(a: Snapshot, b: Snapshot) -> List[str]:
    """Human-readable differences between two snapshots (empty = byte-identical)."""
    out = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            out.append(f"{k}: {a.get(k)!r} -> {b.get(k)!r}")
    return out


def plan_writes(root: str, profile: str) -> int:
    """How many knob files an apply of ``profile`` would write on ``root`` now."""
    return len(engine.prepare(root, profile).plan.writes)


def knobs_to_cover(root: str) -> List[str]:
    """Registry knobs a fault or crash test must reach on ``root``: every scalar knob whose file the
    tree has, and the weights when there is a CXL node to weigh (DAMON has its own tests).

    Found from the tree and the registry, not from a plan, so a knob the engine stopped planning
    shows up as one the cases never reached.
    """
    from cxlctl.inventory import scan
    from cxlctl.tuning.knobs import REGISTRY, read_current

    cur = read_current(root)
    want = [k.name for k in REGISTRY if k.kind != "group" and cur.get(k.path) is not None]
    if cur.wi_files and any(n.kind == "cxl" and n.has_memory for n in scan(Host(root)).nodes):
        want.append("weighted_interleave")
    return want


def uncovered(root: str, profile: str, reached: Set[str]) -> List[str]:
    """Knobs of :func:`knobs_to_cover` that ``reached`` lacks, except those ``profile`` leaves alone
    because the tree already holds its value (a ``noop`` step: nothing to fail or interrupt)."""
    noop = {s.knob for s in engine.prepare(root, profile).plan.steps if s.action == "noop"}
    return [k for k in knobs_to_cover(root) if k not in reached and k not in noop]


def journal(root: str) -> jn.Journal:
    j = jn.load(root)
    assert j is not None, "expected a journal"
    return j


def write_boot_id(root: str, value: str) -> None:
    path = os.path.join(root, "proc/sys/kernel/random")
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "boot_id"), "w") as f:
        f.write(value + "\n")


def kill_at_pause(argv: List[str], k: int) -> None:
    """Run ``argv`` (a ``tune apply``) with ``CXLCTL_TEST_PAUSE_AFTER_WRITES=k``, SIGKILL it at the pause.

    The apply prints ``cxlctl-test: paused after k writes`` to stderr and sleeps; it is
    killed right there (no cleanup handler can run).  An apply that ends without
    pausing fails the test with what it printed.
    """
    env = dict(os.environ, CXLCTL_TEST_PAUSE_AFTER_WRITES=str(k), CXLCTL_TEST_PAUSE_SECONDS="30")
    env.pop("CXLCTL_TEST_FAULT", None)
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    try:
        assert p.stderr is not None
        seen: List[str] = []
        for line in p.stderr:
            seen.append(line)
            if line.strip() == f"cxlctl-test: paused after {k} writes":
                break
        else:
            raise AssertionError(f"apply finished without pausing at {k}: {''.join(seen)}")
        p.send_signal(signal.SIGKILL)
    finally:
        p.wait()
    assert p.returncode == -signal.SIGKILL
