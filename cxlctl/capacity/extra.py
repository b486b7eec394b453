"""What the report takes from outside the inventory: in-use hugetlb pages on a CXL node (a blocker), and the
host's state after a surprise removal (:mod:`.surprise`).

Kept apart from :mod:`.report` so the report's own rules and these stay
separately reviewable: :func:`gather` and :func:`gather_for` are the report's,
with these added; every caller that reads the host (``capacity``, ``capacity
release``, the daemon) goes through them.
"""

from __future__ import annotations

from typing import Dict, List

from cxlctl.hostio.host import Host
from cxlctl.model import Inventory

from .report import Blocker, MemdevCapacity, NodeCapacity, Report


def _with(m: MemdevCapacity, more: List[Blocker]) -> MemdevCapacity:
    blockers = tuple(m.blockers) + tuple(b for b in more if b not in m.blockers)
    if not more:
        return m
    return m._replace(blockers=blockers, state="blocked", releasable=0)


def add_blockers(host: Host, rep: Report) -> Report:
    """``rep`` with the ``hugetlb`` blocker on each memdev whose online memory is on a node with huge pages
    in use (:func:`.stuck.hugetlb_blockers`); each affected node lists it too."""
    from .stuck import hugetlb_blockers
    from .surprise import host_state

    hs = host_state(host)
    rep = rep._replace(host_state=hs["state"], host_reason=hs["reason"])
    more: Dict[str, List[Blocker]] = {}
    for m in rep.memdevs:
        if m.online and m.nodes:
            bl = hugetlb_blockers(host.reader, m.nodes)
            if bl:
                more[m.memdev] = bl
    if not more:
        return rep
    mds = tuple(_with(m, more.get(m.memdev, [])) for m in rep.memdevs)
    blocked = {m.memdev for m in mds if m.state == "blocked"}
    nodes: List[NodeCapacity] = []
    for n in rep.nodes:
        extra = [b for md in n.memdevs for b in more.get(md, []) if b.subject == f"node:{n.node}"]
        add = tuple(b for i, b in enumerate(extra) if b not in n.blockers and b not in extra[:i])
        rel = 0 if any(md in blocked for md in n.memdevs) and add else n.releasable
        nodes.append(n._replace(blockers=tuple(n.blockers) + add, releasable=rel))
    return rep._replace(memdevs=mds, nodes=tuple(nodes))


def gather(host: Host) -> Report:
    """:func:`.report.gather` with :func:`add_blockers`."""
    from .report import gather as report_gather

    return add_blockers(host, report_gather(host))


def gather_for(host: Host, inv: Inventory) -> Report:
    """:func:`.report.gather_for` with :func:`add_blockers`."""
    from .report import gather_for as report_gather_for

    return add_blockers(host, report_gather_for(host, inv))
