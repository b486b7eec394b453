"""Can pages move between DRAM and CXL at all?  The one verdict ``status``, ``doctor`` and ``stat`` give.

Three commands describe one host: ``stat`` (its ``tiering-off`` verdict), ``status`` (a
warning) and ``doctor`` (a check of the "Tuning and services" layer).  Each gathers the
same four facts its own way and hands them to :func:`tiering_off`, so one host state gets
one verdict in the same words everywhere.

What moves pages between tiers, as the kernel decides it:

* demotion: reclaim demotes instead of discarding only while ``numa_demotion_enabled``
  is set (``can_demote()`` in mm/vmscan.c, switched by
  ``/sys/kernel/mm/numa/demotion_enabled``);
* promotion: NUMA balancing promotes from a lower tier only in its tiering mode,
  ``NUMA_BALANCING_MEMORY_TIERING`` (bit 2 of ``kernel.numa_balancing``, tested against
  ``sysctl_numa_balancing_mode`` in ``should_numa_migrate_memory()``, kernel/sched/fair.c);
* DAMON: a running kdamond with a ``migrate_hot``/``migrate_cold`` scheme migrates pages
  itself (``damon_pa_migrate()`` in mm/damon/paddr.c), counted as ``pgmigrate_*``.

With none of the three, nothing moves pages between DRAM and CXL.  This module imports no
``typing`` at run time: ``status`` (its fast path) calls it.
"""

from __future__ import annotations

from cxlctl.hostio import paths
from cxlctl.parse import is_decimal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterable, Optional, Tuple

    from cxlctl.hostio.reader import Reader
    from cxlctl.model import Inventory

#: the verdict's id: stat's verdict id, status's warning code, doctor's check id suffix
ID = "tiering-off"
#: DAMON actions that move pages between nodes (the action names of mm/damon/sysfs-schemes.c,
#: ``damon_sysfs_damos_action_strs`` where 6.11 added them)
DAMON_MIGRATE_ACTIONS = ("migrate_hot", "migrate_cold")
#: at most this many kdamonds, contexts and schemes are looked at (real hosts run a few)
_MAX = 64


def tiering_off(
    cxl_nodes: Iterable[int],
    demotion_enabled: Optional[bool],
    numa_balancing: Optional[int],
    damon_migrates: bool,
) -> Optional[Tuple[str, str]]:
    """(message, fix) when CXL nodes with memory are online and nothing moves pages to or from
    them; None when something does, or when demotion's state is unknown (no verdict on a guess).
    The words name no ``--root``: ``status --json`` of a recorded tree must not depend on where the
    tree lies; ``stat`` and ``doctor`` add it to the fix they print (:func:`cxlctl.hostio.root.rooted`)."""
    cxl = sorted(cxl_nodes)
    if not cxl or demotion_enabled is not False or damon_migrates:
        return None
    if numa_balancing is not None and numa_balancing & 2:
        return None
    nb = "unknown" if numa_balancing is None else str(numa_balancing)
    return (
        f"CXL node(s) {', '.join(map(str, cxl))} are online but demotion is disabled, kernel.numa_balancing is "
        f"{nb} (no tiering mode) and no DAMON scheme migrates pages, so no page will ever move between DRAM "
        "and CXL",
        "apply a tiering profile (cxlctl tune recommend names the one for this host), or set "
        f"{paths.DEMOTION_ENABLED} to true and kernel.numa_balancing to 2",
    )


def damon_migrates(r: Reader) -> bool:
    """A running kdamond (``state`` on) has a ``migrate_hot``/``migrate_cold`` scheme."""
    from cxlctl.damon import tree as t

    for k in r.listdir(t.listing(t.ADMIN, t.LIST_KDAMONDS), is_decimal)[:_MAX]:
        if (r.text(t.state(int(k))) or "").strip() != "on":
            continue
        for c in r.listdir(t.listing(t.kdamond(int(k)), t.LIST_CONTEXTS), is_decimal)[:_MAX]:
            for s in r.listdir(t.listing(t.context(int(k), int(c)), t.LIST_SCHEMES), is_decimal)[:_MAX]:
                action = r.text(t.at(t.scheme(int(k), int(c), int(s)), t.ACTION))
                if (action or "").strip() in DAMON_MIGRATE_ACTIONS:
                    return True
    return False


def of_inventory(inv: Inventory, r: Reader) -> Optional[Tuple[str, str]]:
    """The verdict for the host ``inv`` was scanned from (``r`` reads its DAMON state), as
    ``status`` and ``doctor`` give it."""
    cxl = [n.id for n in inv.nodes if n.kind == "cxl" and (n.mem_total or 0) > 0]
    if not cxl:
        return None
    dem = inv.knob_value("demotion_enabled")
    nb = inv.knob_value("kernel.numa_balancing")
    enabled = {"true": True, "false": False}.get((dem or "").strip())
    mode = int(nb) if nb is not None and is_decimal(nb.strip()) else None
    if enabled is not False or (mode is not None and mode & 2):
        return None  # settled without reading DAMON
    return tiering_off(cxl, enabled, mode, damon_migrates(r))
