"""What the kernel does when DAMON's sysfs files are written, replayed on a recorded tree.

A recorded tree holds regular files, so writing ``nr_kdamonds`` there changes a
number and nothing else; the kernel instead removes every ``kdamonds/N`` directory
and creates N fresh ones (and refuses with EBUSY while a kdamond runs).  The tuning
engine's DAMON group depends on exactly that, so its unit tests install this model
around the one write primitive (:func:`cxlctl.hostio.write.write_knob`): the real
write happens first (fault injection included), then the side effect the kernel
would have.  The model follows ``mm/damon/sysfs*.c`` of 6.12 as documented in
``Documentation/admin-guide/mm/damon/usage.rst``; the default file contents are the
ones Debian's 6.12 showed in the VM (tests/vm/damon_record_driver.py records them).
The VM test (tests/vm/test_vm_damon.py) runs the same apply/revert on the real kernel.

Only what cxlctl uses is modelled: the ``nr_*`` counts, ``state`` (on/off/commit/
update_schemes_stats; ``pid``), EBUSY on ``nr_kdamonds`` while running, EINVAL on an
unknown action or operations name.

Newer kernels are told apart by the tree's ``proc/sys/kernel/osrelease`` (a test that
wants a "6.17" host rewrites that one file of its work copy): from 6.16 a quota goal
directory has ``nid``; from 6.17 a scheme directory has ``dests/nr_dests`` and writing
N there creates ``dests/0`` … ``dests/N-1`` with ``id`` and ``weight`` (both ``0``), as
``mm/damon/sysfs-schemes.c`` does.  The kernel parses ``nr_dests`` with kstrtoint and
refuses a negative count with EINVAL, and ``id``/``weight`` with kstrtouint (EINVAL for
anything but an unsigned number); ``nr_dests`` is accepted while the kdamond runs (its
EBUSY only answers a concurrent DAMON sysfs writer, which a single test never has).
From 6.19 a goal directory has ``path``, from 7.0 a scheme ``stats/nr_snapshots``, from 7.1 ``quotas/goal_tuner`` (``consist`` or
``temporal``, EINVAL otherwise), from 7.2 a context ``pause``; ``target_metric`` takes the
metric names of the release (EINVAL for one it does not know).
Not modelled: 6.14+'s ``allow``, 6.15+'s ``core_filters``/``ops_filters``.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import sys
from typing import Any, Callable, Dict, Optional

from cxlctl.hostio import write as hw
from cxlctl.hostio.root import under

ADMIN = "sys/kernel/mm/damon/admin/kdamonds"
ACTIONS = ("willneed", "cold", "pageout", "hugepage", "nohugepage", "lru_prio", "lru_deprio", "migrate_hot",
           "migrate_cold", "stat")  # fmt: skip
OPERATIONS = ("vaddr", "fvaddr", "paddr")

#: quota goal metric names the kernel's target_metric file takes, and since when
GOAL_METRICS = (
    ("user_input", (6, 8)),
    ("some_mem_psi_us", (6, 9)),
    ("node_mem_used_bp", (6, 16)),
    ("node_mem_free_bp", (6, 16)),
    ("node_memcg_used_bp", (6, 19)),
    ("node_memcg_free_bp", (6, 19)),
    ("active_mem_bp", (7, 0)),
    ("inactive_mem_bp", (7, 0)),
    ("node_eligible_mem_bp", (7, 2)),
)

#: file → default content of a freshly created directory of each kind
KDAMOND = {"state": "off\n", "pid": "-1\n", "contexts/nr_contexts": "0\n"}
CONTEXT = {
    "avail_operations": "vaddr\nfvaddr\npaddr\n",
    "operations": "vaddr\n",
    "monitoring_attrs/intervals/sample_us": "5000\n",
    "monitoring_attrs/intervals/aggr_us": "100000\n",
    "monitoring_attrs/intervals/update_us": "60000000\n",
    "monitoring_attrs/nr_regions/min": "10\n",
    "monitoring_attrs/nr_regions/max": "1000\n",
    "targets/nr_targets": "0\n",
    "schemes/nr_schemes": "0\n",
}
TARGET = {"pid_target": "0\n", "regions/nr_regions": "0\n"}
REGION = {"start": "0\n", "end": "0\n"}
SCHEME = {
    "action": "stat\n",
    "target_nid": "-1\n",
    "apply_interval_us": "0\n",
    "access_pattern/sz/min": "0\n",
    "access_pattern/sz/max": "0\n",
    "access_pattern/nr_accesses/min": "0\n",
    "access_pattern/nr_accesses/max": "0\n",
    "access_pattern/age/min": "0\n",
    "access_pattern/age/max": "0\n",
    "quotas/ms": "0\n",
    "quotas/bytes": "0\n",
    "quotas/reset_interval_ms": "0\n",
    "quotas/effective_bytes": "0\n",
    "quotas/weights/sz_permil": "0\n",
    "quotas/weights/nr_accesses_permil": "0\n",
    "quotas/weights/age_permil": "0\n",
    "quotas/goals/nr_goals": "0\n",
    "watermarks/metric": "none\n",
    "watermarks/interval_us": "0\n",
    "watermarks/high": "0\n",
    "watermarks/mid": "0\n",
    "watermarks/low": "0\n",
    "filters/nr_filters": "0\n",
    "stats/nr_tried": "0\n",
    "stats/sz_tried": "0\n",
    "stats/nr_applied": "0\n",
    "stats/sz_applied": "0\n",
    "stats/qt_exceeds": "0\n",
    "tried_regions/total_bytes": "0\n",
}
FILTER = {"type": "anon\n", "matching": "N\n", "memcg_path": "\n", "addr_start": "0\n", "addr_end": "0\n",
          "damon_target_idx": "0\n"}  # fmt: skip
GOAL = {"target_metric": "user_input\n", "target_value": "0\n", "current_value": "0\n"}
DEST = {"id": "0\n", "weight": "0\n"}  # 6.17+

#: count file name → (template of each child, children's sub-directory relative to the count's dir)
COUNTS: Dict[str, Dict[str, str]] = {
    "nr_kdamonds": KDAMOND,
    "nr_contexts": CONTEXT,
    "nr_targets": TARGET,
    "nr_regions": REGION,
    "nr_schemes": SCHEME,
    "nr_filters": FILTER,
    "nr_goals": GOAL,
    "nr_dests": DEST,
}
FAKE_PID = 4242


def _fill(d: str, template: Dict[str, str]) -> None:
    for rel, text in template.items():
        p = os.path.join(d, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)


def _running(admin: str) -> bool:
    for name in os.listdir(admin) if os.path.isdir(admin) else ():
        st = os.path.join(admin, name, "state")
        if name.isdigit() and os.path.isfile(st):
            with open(st) as f:
                if f.read().strip() == "on":
                    return True
    return False


def _fail(path: str, code: int) -> None:
    raise hw.classify(OSError(code, os.strerror(code), path), path)


class Model:
    """The kernel's side effects for one tree (``root``)."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.admin = os.path.join(self.root, ADMIN)
        self.version = kernel_of(self.root)
        self.counts = dict(COUNTS)
        if self.version >= (6, 16):
            self.counts["nr_goals"] = {**GOAL, "nid": "0\n"}
        if self.version >= (6, 17):
            self.counts["nr_schemes"] = {**SCHEME, "dests/nr_dests": "0\n"}
        if self.version >= (6, 19):
            self.counts["nr_goals"] = {**self.counts["nr_goals"], "path": "\n"}  # node_memcg_* metrics' cgroup
        # 7.0 stats/nr_snapshots, 7.1 quotas/goal_tuner (scheme), 7.2 pause (context)
        if self.version >= (7, 0):
            self.counts["nr_schemes"] = {**self.counts["nr_schemes"], "stats/nr_snapshots": "0\n"}
        if self.version >= (7, 1):
            self.counts["nr_schemes"] = {**self.counts["nr_schemes"], "quotas/goal_tuner": "consist\n"}
        if self.version >= (7, 2):
            self.counts["nr_contexts"] = {**self.counts["nr_contexts"], "pause": "N\n"}
        self.metrics = [m for m, since in GOAL_METRICS if self.version >= since]

    def owns(self, host_path: str) -> bool:
        return os.path.abspath(host_path).startswith(self.admin + "/")

    def before(self, host_path: str, text: str) -> Optional[str]:
        """Refuse what the kernel refuses (before the write); the previous content of ``state``."""
        name = os.path.basename(host_path)
        value = text.strip()
        if name == "nr_kdamonds" and _running(self.admin):
            _fail(host_path, errno.EBUSY)
        if name == "action" and value not in ACTIONS:
            _fail(host_path, errno.EINVAL)
        if name == "operations" and value not in OPERATIONS:
            _fail(host_path, errno.EINVAL)
        if name == "target_metric" and value not in self.metrics:
            _fail(host_path, errno.EINVAL)  # damon_sysfs_quota_goal target_metric_store: no such name
        if name == "goal_tuner" and value not in ("consist", "temporal"):
            _fail(host_path, errno.EINVAL)
        if name == "nr_dests" and not re.fullmatch(r"[+]?[0-9]+", value):
            _fail(host_path, errno.EINVAL)  # kstrtoint, then "nr < 0" is EINVAL too
        in_dests = os.path.basename(os.path.dirname(os.path.dirname(host_path))) == "dests"
        if in_dests and name in ("id", "weight") and not re.fullmatch(r"[+]?[0-9]+", value):
            _fail(host_path, errno.EINVAL)  # kstrtouint
        if name == "state":
            if value not in ("on", "off", "commit", "update_schemes_stats"):
                _fail(host_path, errno.EINVAL)
            if value in ("commit", "update_schemes_stats"):
                with open(host_path) as f:
                    if f.read().strip() != "on":
                        _fail(host_path, errno.EINVAL)  # the kernel answers EINVAL for a stopped kdamond
            with open(host_path) as f:
                return f.read()
        return None

    def after(self, host_path: str, text: str, previous: Optional[str]) -> None:
        name = os.path.basename(host_path)
        d = os.path.dirname(host_path)
        value = text.strip()
        if name in self.counts:
            n = int(value)
            for entry in os.listdir(d):
                if entry.isdigit():
                    shutil.rmtree(os.path.join(d, entry))
            for i in range(n):
                _fill(os.path.join(d, str(i)), self.counts[name])
        elif name == "state":
            keep = value if value in ("on", "off") else (previous or "off\n").strip()
            with open(host_path, "w") as f:
                f.write(keep + "\n")
            with open(os.path.join(d, "pid"), "w") as f:
                f.write(f"{FAKE_PID if keep == 'on' else -1}\n")


def kernel_of(root: str) -> tuple:  # type: ignore[type-arg]
    """(major, minor) of the tree's ``proc/sys/kernel/osrelease``; (0, 0) when unreadable."""
    try:
        with open(os.path.join(root, "proc/sys/kernel/osrelease")) as f:
            m = re.match(r"([0-9]+)\.([0-9]+)", f.read())
    except OSError:
        return (0, 0)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def as_kernel(root: str, release: str) -> None:
    """Make the work copy ``root`` claim kernel ``release`` (before :func:`install`): the one file
    the probe and this model read to tell kernels apart."""
    with open(os.path.join(root, "proc/sys/kernel/osrelease"), "w") as f:
        f.write(release + "\n")


def install(monkeypatch: Any, root: str) -> Model:
    """Wrap the write primitive for ``root`` (pytest ``monkeypatch``; undone after the test)."""
    model = Model(root)
    real: Callable[..., None] = hw.write_knob

    def write_knob(root_: str, path: str, text: str, *, index: Optional[int] = None) -> None:
        host_path = under(root_, path)
        if not model.owns(host_path):
            real(root_, path, text, index=index)
            return
        previous = model.before(host_path, text)
        real(root_, path, text, index=index)
        model.after(host_path, text, previous)

    monkeypatch.setattr(hw, "write_knob", write_knob)
    return model


def main_with_model(root: str, argv: list) -> int:  # type: ignore[type-arg]
    """``python -c`` entry for crash tests: the CLI in a process whose writes follow the model."""

    class _MP:
        def setattr(self, obj: Any, name: str, value: Any) -> None:
            setattr(obj, name, value)

    install(_MP(), root)
    from cxlctl.cli import run

    return run(argv)


def kill_damon_apply_at(root: str, k: int, grow: str) -> None:
    """``inference-damon`` committed in a process of its own (this stand-in installed there too) on
    the inventory that ``grow`` (``module:function`` of a test module: a second CXL node, say) makes
    of the tree's scan, SIGKILLed after ``k`` writes."""
    from tests.tune_support import kill_at_pause

    module, fn = grow.split(":")
    code = (
        "from tests.damon_sysfs import install\n"
        "class _MP:\n"
        "    def setattr(self, obj, name, value): setattr(obj, name, value)\n"
        f"install(_MP(), {root!r})\n"
        "from cxlctl.inventory import scan\n"
        "from cxlctl.hostio.host import Host\n"
        "from cxlctl.tuning.transaction import Transaction\n"
        f"from {module} import {fn}\n"
        f"Transaction(Host({root!r}), 'inference-damon', inventory={fn}(scan(Host({root!r})))).commit()\n"
    )
    kill_at_pause([sys.executable, "-c", code], k)
