"""DAMON schemes' statistics, read-only, for ``stat`` and ``top``.

Where kdamonds run (``/sys/kernel/mm/damon/admin/kdamonds/N``), each scheme
of each context says what it did: ``nr_tried``/``sz_tried`` (regions and bytes
the scheme's access pattern matched), ``nr_applied``/``sz_applied`` (what its
action -- ``migrate_hot``, ``migrate_cold``, ``pageout``, ... -- was applied
to) and ``qt_exceeds`` (how often its quota stopped it).  cxlctl only reads:
the kernel refreshes these files when someone writes ``update_schemes_stats``
to the kdamond's ``state`` (damo does) or on its own where the kernel has
``refresh_ms``, so they may be older than the report; nothing here writes.
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Tuple

from cxlctl.damon.sysfs import read_damon
from cxlctl.hostio.reader import Reader


class Scheme(NamedTuple):
    kdamond: int
    context: int
    scheme: int
    state: Optional[str]  # the kdamond's: on | off
    action: Optional[str]
    target_nid: Optional[int]  # migrate_hot/migrate_cold destination (6.11+)
    stats: Dict[str, Optional[int]]
    #: quota goals: (target_metric, target_value, nid) -- what holds the scheme back (6.8+; nid 6.16+)
    goals: Tuple[Tuple[Optional[str], Optional[int], Optional[int]], ...] = ()

    @property
    def key(self) -> str:
        return f"{self.kdamond}/{self.context}/{self.scheme}"


def read_schemes(r: Reader, limit: int = 64) -> List[Scheme]:
    """Every scheme of every kdamond (at most ``limit``), as :func:`cxlctl.damon.read_damon` reads them; [] without DAMON sysfs."""
    out = [
        Scheme(
            k.id,
            c.id,
            s.id,
            k.state,
            s.action,
            s.target_nid,
            s.stats._asdict(),
            tuple((g.target_metric, g.target_value, g.nid) for g in s.quota.goals),
        )
        for k in read_damon(reader=r).kdamonds
        for c in k.contexts
        for s in c.schemes
    ]
    return out[:limit]
