"""A surprise removal: a memdev unbound while its memory was online as System RAM.  The host is then to be
drained and rebooted, and says so until it is.

Why a reboot: when the device goes, the kmem driver's ``dev_dax_kmem_remove()``
(drivers/dax/kmem.c) calls ``remove_memory()`` for each range; that fails with
EBUSY for a block still online (``try_remove_memory()`` → ``check_memblock_offlined_cb()``,
mm/memory_hotplug.c), and the driver, having "one shot for removing memory",
logs "… cannot be hotremoved until the next reboot" and leaks the resource on
purpose.  The pages stay in the page allocator with nothing behind them: the next
access to one poisons or machine-checks.  Only a reboot takes them out.

The state is a file under ``/run`` (:data:`paths.SURPRISE_FILE`: tmpfs, cleared
by that reboot) with the boot id it was written in, so a daemon restart keeps it
and another boot's file is ignored.  The daemon writes it (:func:`record`);
``cxlctl capacity --json`` (``host.state``), the metrics
(``cxlctl_capacity_host_ready``) and the NFD label ``cxl.capacity-ready`` show
it; the daemon adopts nothing while it holds.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, NamedTuple, Optional

from cxlctl.hostio import paths
from cxlctl.hostio.atomic import atomic_write
from cxlctl.hostio.host import Host

READY = "ready"
DRAIN = "drain-and-reboot"
#: the host states, for scripts (``capacity --json``'s ``host.state``)
HOST_STATES = (READY, DRAIN)


class Surprise(NamedTuple):
    boot_id: Optional[str]
    memdevs: List[Dict[str, Any]]  # memdev, serial, held

    @property
    def message(self) -> str:
        names = ", ".join(str(m.get("memdev")) for m in self.memdevs) or "a memdev"
        return (
            f"{names} left while online as System RAM: dev_dax_kmem_remove() left the memory in the page "
            "allocator with nothing behind it (accesses poison or machine-check) until the next reboot"
        )


def load(host: Host) -> Optional[Surprise]:
    """The surprise removal recorded in this boot, or None."""
    raw = host.reread().text(paths.SURPRISE_FILE)
    if not raw:
        return None
    try:
        d = json.loads(raw)
    except ValueError:
        return Surprise(None, [{"memdev": "unknown", "held": f"{host.path(paths.SURPRISE_FILE)} is unreadable"}])
    if not isinstance(d, dict):
        return None
    if d.get("boot_id") and host.boot_id and d["boot_id"] != host.boot_id:
        return None
    mds = d.get("memdevs")
    return Surprise(d.get("boot_id"), [m for m in mds if isinstance(m, dict)] if isinstance(mds, list) else [])


def record(host: Host, memdev: str, serial: Optional[int], held: str) -> Surprise:
    """Add one surprise removal to this boot's record (written atomically)."""
    from cxlctl.tuning.journal import now

    old = load(host)
    mds = list(old.memdevs) if old is not None else []
    mds.append({"memdev": memdev, "serial": serial, "held": held, "time": now()})
    s = Surprise(host.boot_id, mds)
    atomic_write(
        host.root,
        paths.SURPRISE_FILE,
        json.dumps({"boot_id": host.boot_id, "memdevs": mds}, indent=2) + "\n",
        mode=0o644,
    )
    return s


def host_state(host: Host) -> Dict[str, Any]:
    """``{"state": "ready"|"drain-and-reboot", "reason": …}``: what ``capacity --json`` says of the host."""
    s = load(host)
    if s is None:
        return {"state": READY, "reason": None}
    return {"state": DRAIN, "reason": s.message + "; drain the host and reboot it"}
