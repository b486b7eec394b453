"""Helpers shared by the tuning-engine tests (tests/test_tune_*.py).

Every test runs on a writable copy of a *recorded* tree: the committed real-kernel
fixtures under ``fixtures/`` (found by glob, so new recordings are picked up) plus
a record of the machine running the tests.  Nothing mocks ``open``; faults are
injected through the tree or through the write primitive's environment hooks
(see cxlctl/tuning/write.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Tuple

from conftest import REPO, fixture_id, fixture_roots

from cxlctl.tuning import engine
from cxlctl.tuning import journal as jn

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


def pristine(source: str) -> str:
    """Read-only path of a recorded tree (the live record is made once per session)."""
    global _LIVE_DIR
    if source != LIVE:
        return os.path.join(REPO, "fixtures", source)
    if _LIVE_DIR is None:
        d = tempfile.mkdtemp(prefix="cxlctl-live-")
        dest = os.path.join(d, "rec")
        subprocess.run(
            [sys.executable, "-m", "cxlctl", "record", dest], check=True, capture_output=True, cwd=REPO
        )
        _LIVE_DIR = dest
    return _LIVE_DIR


def work_copy(source: str, dest: str, *, profiles: bool = True) -> str:
    """Writable copy of a recorded tree, with the test profiles under /etc/cxlctl/profiles."""
    if os.path.exists(dest):
        shutil.rmtree(dest)
    shutil.copytree(pristine(source), dest, symlinks=True)
    if profiles:
        pdir = os.path.join(dest, "etc/cxlctl/profiles")
        os.makedirs(pdir, exist_ok=True)
        for name, text in TEST_PROFILES.items():
            with open(os.path.join(pdir, name + ".toml"), "w") as f:
                f.write(text)
    return dest


Snapshot = Dict[str, Tuple[str, bytes]]


def snapshot(root: str) -> Snapshot:
    """Every file (bytes) and symlink (target) under root, except cxlctl's own /run state."""
    out: Snapshot = {}
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        if rel == os.path.join("run", "cxlctl") or rel.startswith(os.path.join("run", "cxlctl") + os.sep):
            dirs[:] = []
            continue
        for name in dirs + files:
            p = os.path.join(d, name)
            key = os.path.relpath(p, root)
            if os.path.islink(p):
                out[key] = ("link", os.readlink(p).encode())
            elif os.path.isfile(p):
                with open(p, "rb") as f:
                    out[key] = ("file", f.read())
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


def journal(root: str) -> jn.Journal:
    j = jn.load(root)
    assert j is not None, "expected a journal"
    return j


def write_boot_id(root: str, value: str) -> None:
    path = os.path.join(root, "proc/sys/kernel/random")
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "boot_id"), "w") as f:
        f.write(value + "\n")
