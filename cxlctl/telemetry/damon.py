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

from typing import Dict, List, NamedTuple, Optional

from cxlctl.hostio import paths
from cxlctl.hostio.reader import Reader
from cxlctl.parse import decimal_suffix, is_decimal

STATS = ("nr_tried", "sz_tried", "nr_applied", "sz_applied", "qt_exceeds")


class Scheme(NamedTuple):
    kdamond: int
    context: int
    scheme: int
    state: Optional[str]  # the kdamond's: on | off
    action: Optional[str]
    target_nid: Optional[int]  # migrate_hot/migrate_cold destination (6.11+)
    stats: Dict[str, Optional[int]]

    @property
    def key(self) -> str:
        return f"{self.kdamond}/{self.context}/{self.scheme}"


def _num(r: Reader, path: str) -> Optional[int]:
    t = r.text(path)
    return int(t) if t is not None and is_decimal(t) and len(t) < 21 else None


def _ids(r: Reader, d: str) -> List[int]:
    return [n for n in (decimal_suffix(x, "") for x in r.listdir(d, is_decimal)) if n is not None]


def read_schemes(r: Reader, limit: int = 64) -> List[Scheme]:
    """Every scheme of every kdamond (at most ``limit``); [] without DAMON sysfs."""
    out: List[Scheme] = []
    base = paths.DAMON_ADMIN + "/kdamonds"
    for k in _ids(r, base):
        kd = f"{base}/{k}"
        state = r.text(f"{kd}/state")
        for c in _ids(r, f"{kd}/contexts"):
            sd = f"{kd}/contexts/{c}/schemes"
            for s in _ids(r, sd):
                d = f"{sd}/{s}"
                out.append(
                    Scheme(
                        k,
                        c,
                        s,
                        state,
                        r.text(f"{d}/action"),
                        _num(r, f"{d}/target_nid"),
                        {name: _num(r, f"{d}/stats/{name}") for name in STATS},
                    )
                )
                if len(out) >= limit:
                    return out
    return out
