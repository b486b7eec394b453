"""Device health from ndctl's ``cxl list -M -H``, when that tool is installed.

Why shell out: health comes from the device's *Get Health Info* mailbox
command (CXL 3.x §8.2.9.9.3.1), which the kernel does not expose in sysfs; only
an ioctl on ``/dev/cxl/memN`` reaches it, and ``cxl`` already wraps that.  The
kernel of this era exposes no poison or media-error *counts* either (the poison
list is a trigger that emits trace events), so the error counters here are the
device's own corrected-error counts from the same health record.

Where ``cxl`` is missing, the daemon runs on ``--root`` (``cxl`` reads the live
system only), or a device does not implement the command (QEMU's emulated
type-3 devices, for one), health is reported as unavailable — never guessed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

#: numeric fields exported as metrics (ndctl's JSON names)
NUMERIC = ("life_used_percent", "temperature", "dirty_shutdowns", "volatile_errors", "pmem_errors")
#: boolean flags that mean the device needs attention
CRITICAL_FLAGS = (
    "hw_replacement_needed",
    "media_data_lost",
    "media_persistence_lost",
    "media_powerloss_data_loss",
    "media_shutdown_data_loss",
)
WARNING_FLAGS = (
    "maintenance_needed",
    "performance_degraded",
    "media_data_loss_imminent",
    "media_persistence_loss_imminent",
)
EXT_FIELDS = ("ext_life_used", "ext_temperature", "ext_corrected_volatile", "ext_corrected_persistent")


class MemdevHealth(NamedTuple):
    memdev: str
    status: str  # ok | warning | critical | no-data
    values: Dict[str, int]  # the NUMERIC fields present
    reasons: Tuple[str, ...]  # flags and ext_* states that set the status


class Health(NamedTuple):
    available: bool
    reason: str  # why not, or the command that was run
    memdevs: Tuple[MemdevHealth, ...]
    collected: float  # time.time()
    duration: float


def classify(memdev: str, h: Optional[Dict[str, Any]]) -> MemdevHealth:
    """One memdev's ``health`` object (None: the device gave none) → status and values."""
    if not isinstance(h, dict):
        return MemdevHealth(memdev, "no-data", {}, ())
    crit = [f for f in CRITICAL_FLAGS if h.get(f) is True]
    warn = [f for f in WARNING_FLAGS if h.get(f) is True]
    if h.get("media_normal") is False and not crit:
        warn.append("media_normal=false")
    for f in EXT_FIELDS:
        v = h.get(f)
        if v == "critical":
            crit.append(f"{f}=critical")
        elif v == "warning":
            warn.append(f"{f}=warning")
    values = {k: int(h[k]) for k in NUMERIC if isinstance(h.get(k), int) and not isinstance(h.get(k), bool)}
    status = "critical" if crit else "warning" if warn else "ok"
    return MemdevHealth(memdev, status, values, tuple(crit + warn))


def _memdevs(doc: Any) -> List[Dict[str, Any]]:
    """Memdev objects wherever ``cxl list`` put them (flat with -M, nested with -vvv)."""
    out: List[Dict[str, Any]] = []

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            if isinstance(x.get("memdev"), str):
                out.append(x)
                return
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(doc)
    return out


def parse(doc: Any) -> Tuple[MemdevHealth, ...]:
    """``cxl list`` JSON → health per memdev, sorted by name."""
    seen: Dict[str, MemdevHealth] = {}
    for m in _memdevs(doc):
        seen[m["memdev"]] = classify(m["memdev"], m.get("health"))
    return tuple(seen[k] for k in sorted(seen, key=lambda n: (len(n), n)))


def collect(root: str, command: str = "cxl", timeout: float = 10.0) -> Health:
    """Run ``cxl list -M -H`` (bounded by ``timeout``) and parse it; never raises."""
    t0 = time.monotonic()

    def unavailable(why: str) -> Health:
        return Health(False, why, (), time.time(), time.monotonic() - t0)

    if root != "/":
        return unavailable(f"cxl list reads the live system, not --root {root}")
    exe = command if os.path.isabs(command) else shutil.which(command)
    if not exe or not os.access(exe, os.X_OK):
        return unavailable(f"{command} (ndctl's cxl tool) is not installed")
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")}
    try:
        p = subprocess.run(
            [exe, "list", "-M", "-H"],
            capture_output=True,
            timeout=timeout,
            env=env,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return unavailable(f"{command} list -M -H did not finish in {timeout:g} s")
    except OSError as e:
        return unavailable(f"cannot run {exe}: {e.strerror}")
    if p.returncode != 0:
        err = p.stderr.decode("utf-8", "replace").strip().splitlines()
        return unavailable(f"{command} list -M -H exited {p.returncode}" + (f": {err[-1]}" if err else ""))
    text = p.stdout.decode("utf-8", "replace").strip()
    try:
        doc = json.loads(text) if text else []
    except ValueError:
        return unavailable(f"{command} list -M -H printed something that is not JSON")
    return Health(True, f"{exe} list -M -H", parse(doc), time.time(), time.monotonic() - t0)
