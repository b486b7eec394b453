"""Per-second rates: a pure function of two samples.

A rate is ``(now - before) / seconds``.  It is None when either value is
missing, and when the counter went *down*: kernel counters only grow, so a
smaller value means the object was replaced in between (a node offlined and
onlined again, a cgroup removed and re-created under the same name) and no
honest rate exists for that interval.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional

# DAMON actions that migrate pages between nodes; the kernel counts their pages in
# ``pgmigrate_success``/``pgmigrate_fail`` (reason MR_DAMON), never in ``pgpromote_*``/``pgdemote_*``
from cxlctl.tiering import DAMON_MIGRATE_ACTIONS

from .counters import Counters
from .sample import Sample


class Rates(NamedTuple):
    seconds: float
    system: Dict[str, Optional[float]]
    nodes: Dict[int, Dict[str, Optional[float]]]
    cgroups: Dict[str, Dict[str, Optional[float]]]
    #: DAMON scheme (``kdamond/context/scheme``) → its stats per second
    damon: Dict[str, Dict[str, Optional[float]]] = {}
    #: node → its ``memory_failure/*`` counters per second (nodes that have the directory)
    memory_failure: Dict[int, Dict[str, Optional[float]]] = {}


def counter_rates(before: Counters, now: Counters, seconds: float) -> Dict[str, Optional[float]]:
    """Rate of every counter in ``now`` (names only in ``before`` are gone: left out)."""
    out: Dict[str, Optional[float]] = {}
    for name, v in now.values.items():
        b = before.values.get(name)
        out[name] = None if v is None or b is None or v < b or seconds <= 0 else (v - b) / seconds
    return out


def rates(before: Sample, now: Sample) -> Rates:
    """Rates over the interval between two samples (nodes and cgroups present in both)."""
    dt = now.time - before.time
    b_nodes = {n.id: n for n in before.nodes}
    b_cg = {c.name: c for c in before.cgroups}
    b_damon = {sc.key: sc for sc in before.damon}
    cg_counters = {c.name: counter_rates(b_cg[c.name].stat, c.stat, dt) for c in now.cgroups if c.name in b_cg}
    return Rates(
        seconds=dt,
        system=counter_rates(before.system, now.system, dt),
        nodes={n.id: counter_rates(b_nodes[n.id].vmstat, n.vmstat, dt) for n in now.nodes if n.id in b_nodes},
        cgroups={
            k: {n: v for n, v in d.items() if n.startswith(("pgpromote_", "pgdemote_"))} for k, d in cg_counters.items()
        },
        damon={
            sc.key: counter_rates(Counters(dict(b_damon[sc.key].stats), ()), Counters(dict(sc.stats), ()), dt)
            for sc in now.damon
            if sc.key in b_damon
        },
        memory_failure={
            n.id: counter_rates(mf_before, n.memory_failure, dt)
            for n in now.nodes
            if n.memory_failure is not None
            and n.id in b_nodes
            and (mf_before := b_nodes[n.id].memory_failure) is not None
        },
    )


def damon_migrated(s: Sample, r: Optional[Rates]) -> Dict[str, float]:
    """Bytes DAMON's migrating schemes moved, by action (``sz_applied``): since the scheme
    started (first report, ``r`` None) or per second over the interval.  Only running kdamonds'
    schemes count; {} when none migrates."""
    out: Dict[str, float] = {}
    for sc in s.damon:
        if sc.action not in DAMON_MIGRATE_ACTIONS or sc.state != "on":
            continue
        v = sc.stats.get("sz_applied") if r is None else (r.damon.get(sc.key) or {}).get("sz_applied")
        if v is not None:
            out[sc.action] = out.get(sc.action, 0.0) + float(v)
    return out


def damon_migrates(s: Sample) -> bool:
    """A running kdamond has a migrate_hot/migrate_cold scheme: DAMON tiers this host."""
    return any(sc.action in DAMON_MIGRATE_ACTIONS and sc.state == "on" for sc in s.damon)


def demote_sum(values: Dict[str, Optional[float]]) -> Optional[float]:
    """Sum of the ``pgdemote_*`` values present (None when the kernel has none of them)."""
    vals = [v for k, v in values.items() if k.startswith("pgdemote_") and v is not None]
    return sum(vals) if vals else None
