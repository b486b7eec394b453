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

import os
import time
from typing import Any, Dict, Literal, NamedTuple, Optional, Tuple

from cxlctl.hostio.host import Host
from cxlctl.hostio.tools import ToolError, cxl_list, memdev_objects

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


#: a memdev's health in one word (a tag: mypy rejects a compare with a word it never holds)
HealthStatus = Literal["ok", "warning", "critical", "no-data"]


class MemdevHealth(NamedTuple):
    memdev: str
    status: HealthStatus
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
    status: HealthStatus = "critical" if crit else "warning" if warn else "ok"
    return MemdevHealth(memdev, status, values, tuple(crit + warn))


def parse(doc: Any) -> Tuple[MemdevHealth, ...]:
    """``cxl list`` JSON → health per memdev, sorted by name."""
    seen: Dict[str, MemdevHealth] = {}
    for m in memdev_objects(doc):
        seen[m["memdev"]] = classify(m["memdev"], m.get("health"))
    return tuple(seen[k] for k in sorted(seen, key=lambda n: (len(n), n)))


def collect(host: Host, command: str = "cxl", timeout: float = 10.0) -> Health:
    """Run ``cxl list -M -H`` (bounded by ``timeout``) and parse it; never raises."""
    t0 = time.monotonic()

    def unavailable(why: str) -> Health:
        return Health(False, why, (), time.time(), time.monotonic() - t0)

    if not host.live:
        return unavailable(f"cxl list reads the live system, not --root {host.root}")
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")}
    try:
        got = cxl_list("-M", "-H", command=command, timeout=timeout, env=env)
    except ToolError as e:
        return unavailable(str(e))
    return Health(True, " ".join(got.argv), parse(got.memdevs), time.time(), time.monotonic() - t0)
