"""DAMON schemes and kdamonds as the daemon's metrics see them (read; refresh only cxlctl's).

The kernel updates a scheme's ``stats/`` files only when ``update_schemes_stats`` is
written to its kdamond's ``state``.  The daemon asks that of the kdamonds cxlctl
created (those the tuning journal of this boot owns, as ``tune status`` decides) and
never of anyone else's — damo, a script or a DAMON module keep their kdamonds to
themselves; theirs are exported as last refreshed by their owner, labelled
``owner="other"``.  Taken on the telemetry timer and after each reconcile.

Each scheme's *source* node is the NUMA node whose online memory its kdamond's
target regions cover (cxlctl monitors one node per kdamond; another tool's may span
several, joined with commas); its *destination* is the ``target_nid`` of a migrate
action.
"""

from __future__ import annotations

import logging
from typing import List, NamedTuple, Optional, Set, Tuple

from cxlctl.damon.sysfs import DamonState, Kdamond, SchemeStats
from cxlctl.hostio.host import Host
from cxlctl.model import Inventory


class SchemeView(NamedTuple):
    kdamond: int
    scheme: int
    owner: str  # cxlctl | other
    action: str
    source: str  # node id(s) the kdamond monitors, "" when unknown
    destination: str  # target_nid of a migrate action, "" otherwise
    stats: SchemeStats


class KdamondView(NamedTuple):
    id: int
    owner: str
    state: str  # on | off | "" (unreadable)


class DamonView(NamedTuple):
    sysfs: bool
    kdamonds: Tuple[KdamondView, ...]
    schemes: Tuple[SchemeView, ...]


def source_nodes(k: Kdamond, inv: Optional[Inventory]) -> str:
    """Nodes whose online memory the kdamond's target regions overlap ("" when unknown)."""
    if inv is None:
        return ""
    from cxlctl.tuning.damon_tiering import node_ranges

    ranges = [(n.id, r) for n in inv.nodes for r in node_ranges(inv, n)]
    found: Set[int] = set()
    for c in k.contexts:
        for t in c.targets:
            for reg in t.regions:
                if reg.start is None or reg.end is None:
                    continue
                found.update(nid for nid, (s, e) in ranges if reg.start < e and s < reg.end)
    return ",".join(str(n) for n in sorted(found))


def view(state: DamonState, mine: Optional[int], inv: Optional[Inventory]) -> DamonView:
    kds: List[KdamondView] = []
    schemes: List[SchemeView] = []
    for k in state.kdamonds:
        owner = "cxlctl" if mine is not None and k.id < mine else "other"
        kds.append(KdamondView(k.id, owner, k.state or ""))
        src = source_nodes(k, inv)
        for s in k.schemes:
            migrate = (s.action or "").startswith("migrate_")
            dest = str(s.target_nid) if migrate and s.target_nid is not None and s.target_nid >= 0 else ""
            schemes.append(SchemeView(k.id, s.id, owner, s.action or "", src, dest, s.stats))
    return DamonView(state.sysfs, tuple(kds), tuple(schemes))


def collect(
    host: Host, inv: Optional[Inventory], log: Optional[logging.Logger] = None, *, refresh: bool = True
) -> DamonView:
    """Read every kdamond, refreshing the stats of cxlctl's running ones first (``refresh``;
    ``cxlctl daemon metrics`` writes nothing and shows the stats as last refreshed)."""
    from cxlctl.damon.sysfs import read_damon
    from cxlctl.tuning import journal as jn
    from cxlctl.tuning.damon_tiering import owned
    from cxlctl.tuning.engine import refresh_damon_stats
    from cxlctl.tuning.state import this_boot
    from cxlctl.tuning.transaction import restore_map

    messages: List[str] = []
    try:
        j = this_boot(host, messages)
    except jn.JournalCorrupt:
        j = None
    mine = owned(restore_map(j)) if j is not None and j.state == jn.APPLIED else None
    state = read_damon(host.reader)
    if state.kdamonds and refresh:
        state = refresh_damon_stats(host, state, mine, messages)
    if log is not None:
        for m in messages:
            log.debug("damon: %s", m)
    return view(state, mine, inv)
