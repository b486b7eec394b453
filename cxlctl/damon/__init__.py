"""DAMON (Data Access MONitor) as seen through its sysfs interface: read-only.

:mod:`.tree` spells every path of the tree (reads and the tuning engine's writes use it);
:mod:`.sysfs` reads every kdamond under ``/sys/kernel/mm/damon/admin/kdamonds/``
(contexts, targets, regions, schemes with their access patterns, quotas, goals,
watermarks, filters and statistics), the DAMON modules that run kdamonds of their
own (DAMON_RECLAIM, DAMON_LRU_SORT, DAMON_STAT), and probes what the kernel can do
(``migrate_hot``/``migrate_cold``, quota goals on node memory).  It writes nothing:
the tuning engine (:mod:`cxlctl.tuning.damon_tiering`) plans and journals the writes, and the
telemetry commands may show the scheme statistics it returns.
"""

from __future__ import annotations

# The reader is imported on first use of one of its names (PEP 562), not with the package:
# ``status`` (its fast path, which loads no ``typing``) reads kdamond states through :mod:`.tree`.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from .sysfs import (
        DamonCaps,
        DamonModule,
        DamonState,
        Kdamond,
        Scheme,
        SchemeStats,
        probe,
        read_damon,
    )

__all__ = [
    "DamonCaps",
    "DamonModule",
    "DamonState",
    "Kdamond",
    "Scheme",
    "SchemeStats",
    "probe",
    "read_damon",
]


def __getattr__(name: str) -> object:
    if name in __all__:
        from . import sysfs

        return getattr(sysfs, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
