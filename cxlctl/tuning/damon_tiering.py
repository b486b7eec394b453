"""DAMON tiering as a knob group: the ``[damon]`` profile section and its plan.

What it sets up (HMSDK ``gen_migpol.py`` and damo ``scripts/mem_tier.sh`` do the
same by hand): one kdamond per memory node, each monitoring that node's physical
address ranges (``paddr``; ranges from the node's memory blocks) with one scheme —

* a DRAM node: ``migrate_cold`` to its nearest CXL node (pages not accessed for
  ``cold_age``), so DRAM keeps room for hot data before reclaim has to act; on 6.17+
  (a scheme's ``dests/``) and with several CXL nodes in that node's memory tier, to all
  of them, weighted by write bandwidth or online capacity (:func:`dest_weights`), with
  ``target_nid`` still the nearest for code that reads only that;
* a CXL node: ``migrate_hot`` to its nearest DRAM node (regions accessed in at
  least ``hot_accesses`` of the samples);

each with access-pattern bounds, a quota (bytes and time per interval),
optional watermarks (free-memory rate), quota goals on the DRAM node's memory use
where the kernel has them (6.16+), and filters (young pages, a memcg, anonymous
pages only).  One kdamond per node (not one kdamond with every range) because a
scheme acts on every region its kdamond monitors: scoping a scheme to one node's
addresses is what a separate context gives for free.

Why the group is planned as a whole: writing ``nr_kdamonds`` removes and re-creates
*every* kdamond directory, and fails with EBUSY while any kdamond runs.  So cxlctl
adds kdamonds only where there are none (it never writes ``nr_kdamonds`` under
someone else's kdamond — damo, a script), and revert writes every ``state`` ``off``
and then ``nr_kdamonds`` back to its boot value, which removes exactly cxlctl's
directories.  The journal saves the ``state`` files first with the value a new
kdamond starts with (``off``) and ``nr_kdamonds`` next, so the engine's ordinary
restore (entries in journal order) is that revert.
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, List, Literal, Mapping, Optional, Tuple

from cxlctl.damon import tree as t
from cxlctl.damon.sysfs import TUNER_SINCE, DamonCaps, DamonState
from cxlctl.damon.tree import KDAMONDS, NR_KDAMONDS
from cxlctl.namedrecord import NamedTuple

__all__ = ["KDAMONDS", "NR_KDAMONDS", "DamonSpec", "validate", "layout", "files", "owned", "others"]
from cxlctl.figures import node_figures
from cxlctl.model import Inventory, Node
from cxlctl.parse import format_size, parse_size

#: what the kernel caps: sz max (ULONG_MAX on 64-bit) and age max (UINT_MAX) mean "no upper bound"
SZ_MAX = 2**64 - 1
AGE_MAX = 2**32 - 1
KEYS = (
    "enabled",
    "reason",
    "sample",
    "aggregate",
    "update",
    "min_regions",
    "max_regions",
    "cold_age",
    "hot_accesses",
    "min_size",
    "apply_interval",
    "quota_size",
    "quota_time",
    "quota_interval",
    "dram_free_goal",
    "dram_used_goal",
    "dram_max_used",
    "hot_on_dram",
    "goal_tuner",
    "watermarks",
    "young_filter",
    "memcg",
    "anon_only",
    "beside_other_damon",
    "multi_dest",
)


class DamonSpec(NamedTuple):
    """A validated ``[damon]`` section (times in microseconds, sizes in bytes)."""

    enabled: bool
    sample_us: int = 5_000
    aggr_us: int = 100_000
    update_us: int = 1_000_000
    min_regions: int = 10
    max_regions: int = 1000
    cold_age_us: int = 30_000_000  # HMSDK gen_migpol.py: age >= 30 s
    hot_accesses_pct: float = 5.0  # damo mem_tier.sh: access rate 5%..max
    min_size: int = 0
    apply_interval_us: int = 1_000_000  # mem_tier.sh --damos_apply_interval 1s
    quota_bytes: int = 200 << 20  # mem_tier.sh: 200 MB per second
    quota_ms: int = 0  # 0: no time limit
    quota_reset_ms: int = 1000
    dram_free_goal_bp: Optional[int] = 50  # mem_tier.sh: node_mem_free_bp 0.5%
    dram_used_goal_bp: Optional[int] = 9970  # mem_tier.sh: node_mem_used_bp 99.7%
    #: "keep DRAM at most N% used" (``dram_max_used``): sets both goals above from one statement
    dram_max_used_bp: Optional[int] = None
    #: "keep at least N% of the hot set on DRAM" (``hot_on_dram``): node_eligible_mem_bp (7.2+)
    hot_on_dram_bp: Optional[int] = None
    goal_tuner: Optional[str] = None  # 7.1+: consist | temporal (None: the kernel's default)
    watermarks: Optional[Tuple[int, int, int]] = None  # (high, mid, low) per-mille free memory
    young_filter: bool = True
    memcg: Optional[str] = None
    anon_only: bool = False
    multi_dest: bool = True  # 6.17+: demote to every CXL node of the nearest one's tier, weighted


# ---------------------------------------------------------------------------- units

_DUR = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*(us|ms|s|sec|min|h)$")
_DUR_US = {"us": 1, "ms": 1_000, "s": 1_000_000, "sec": 1_000_000, "min": 60_000_000, "h": 3_600_000_000}


def parse_duration_us(value: Any, key: str) -> int:
    """``"5s"``, ``"100ms"``, ``"2min"``, ``"500us"`` → microseconds (a unit is required)."""
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError(f'{key} must be a duration with a unit such as "5s", "100ms" or "2min"; got {value!r}')
    m = _DUR.match(value.strip())
    if not m:
        raise ValueError(f'{key}: {value!r} is not a duration (a number and us, ms, s, min or h: "5s", "2min")')
    us = float(m.group(1)) * _DUR_US[m.group(2)]
    if us > 2**63 or us != int(us):  # int() of a float overflowed to inf raises
        raise ValueError(f"{key}: {value!r} is not a whole number of microseconds")
    return int(us)


def parse_percent(value: Any, key: str, lo: float = 0.0, hi: float = 100.0) -> float:
    if isinstance(value, bool) or not isinstance(value, str) or not value.strip().endswith("%"):
        raise ValueError(f'{key} must be a percentage such as "5%"; got {value!r}')
    num = value.strip()[:-1].strip()
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)?", num):
        raise ValueError(f'{key}: {value!r} is not a percentage such as "5%"')
    v = float(num)
    if not lo <= v <= hi:
        raise ValueError(f"{key}: {value!r} is out of range ({lo:g}%-{hi:g}%)")
    return v


def _size(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f'{key} must be a size such as "256M" or "4K"; got {value!r}')
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{key} must not be negative")
        return value
    try:
        return parse_size(value)
    except ValueError as e:
        raise ValueError(f"{key}: {e}") from None


def _int(value: Any, key: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{key} must be an integer {lo}-{hi}; got {value!r}")
    return value


def _flag(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{key} must be true or false; got {value!r}")
    return value


def validate(table: Mapping[str, Any]) -> DamonSpec:
    """The ``[damon]`` table → :class:`DamonSpec`; ValueError naming the key on any problem."""
    for k in table:
        if k not in KEYS:
            raise ValueError(f"unknown key {k!r} (allowed: {', '.join(KEYS)})")
    if "enabled" not in table:
        raise ValueError("'enabled' is missing (enabled = true turns DAMON tiering on)")
    d = DamonSpec(enabled=_flag(table["enabled"], "enabled"))
    kw: Dict[str, Any] = {}
    for key, field in (("sample", "sample_us"), ("aggregate", "aggr_us"), ("update", "update_us")):
        if key in table:
            kw[field] = parse_duration_us(table[key], key)
            if kw[field] <= 0:
                raise ValueError(f"{key} must be longer than 0")
    if "min_regions" in table:
        kw["min_regions"] = _int(table["min_regions"], "min_regions", 3, 1_000_000)
    if "max_regions" in table:
        kw["max_regions"] = _int(table["max_regions"], "max_regions", 3, 1_000_000)
    if "cold_age" in table:
        kw["cold_age_us"] = parse_duration_us(table["cold_age"], "cold_age")
    if "hot_accesses" in table:
        kw["hot_accesses_pct"] = parse_percent(table["hot_accesses"], "hot_accesses", 0.0, 100.0)
    if "min_size" in table:
        kw["min_size"] = _size(table["min_size"], "min_size")
    if "apply_interval" in table:
        kw["apply_interval_us"] = parse_duration_us(table["apply_interval"], "apply_interval")
    if "quota_size" in table:
        kw["quota_bytes"] = _size(table["quota_size"], "quota_size")
    if "quota_time" in table:
        kw["quota_ms"] = parse_duration_us(table["quota_time"], "quota_time") // 1000
    if "quota_interval" in table:
        kw["quota_reset_ms"] = parse_duration_us(table["quota_interval"], "quota_interval") // 1000
        if kw["quota_reset_ms"] <= 0:
            raise ValueError("quota_interval must be at least 1ms")
    for key, field in (("dram_free_goal", "dram_free_goal_bp"), ("dram_used_goal", "dram_used_goal_bp")):
        if key in table:
            v = table[key]
            kw[field] = None if v is False else int(round(parse_percent(v, key) * 100))
    if "dram_max_used" in table:
        # the statement replaces dram_free_goal/dram_used_goal (an included profile's among them)
        used = int(round(parse_percent(table["dram_max_used"], "dram_max_used", 1.0, 100.0) * 100))
        # demote (migrate_cold) until at least 100-N % of DRAM is free; promote (migrate_hot) only
        # while DRAM is below N % used: the two goals meet at the operator's line, so neither
        # scheme pushes pages the other pulls back
        kw.update(dram_max_used_bp=used, dram_used_goal_bp=used, dram_free_goal_bp=10000 - used)
    if "hot_on_dram" in table:
        kw["hot_on_dram_bp"] = int(round(parse_percent(table["hot_on_dram"], "hot_on_dram", 1.0, 100.0) * 100))
    if "goal_tuner" in table:
        g = table["goal_tuner"]
        if g not in t.GOAL_TUNERS:
            raise ValueError(f"goal_tuner must be one of {', '.join(t.GOAL_TUNERS)}; got {g!r}")
        kw["goal_tuner"] = g
    if "watermarks" in table:
        kw["watermarks"] = _watermarks(table["watermarks"])
    for key in ("young_filter", "anon_only", "multi_dest"):
        if key in table:
            kw[key] = _flag(table[key], key)
    if "beside_other_damon" in table:  # earlier profiles: checked, and of no effect (EXCLUSIVE_MODULES)
        _flag(table["beside_other_damon"], "beside_other_damon")
    if "memcg" in table:
        m = table["memcg"]
        if not isinstance(m, str) or not m.startswith("/") or "\n" in m or "\0" in m or ".." in m.split("/"):
            raise ValueError(f'memcg must be a cgroup path under /sys/fs/cgroup such as "/inference.slice"; got {m!r}')
        kw["memcg"] = m
    d = d._replace(**kw)
    if d.aggr_us < d.sample_us:
        raise ValueError(f"aggregate ({d.aggr_us} us) must not be shorter than sample ({d.sample_us} us)")
    if d.min_regions > d.max_regions:
        raise ValueError(f"min_regions ({d.min_regions}) is larger than max_regions ({d.max_regions})")
    return d


def _watermarks(v: Any) -> Optional[Tuple[int, int, int]]:
    if v is False or v == "off":
        return None
    if not isinstance(v, dict) or set(v) - {"high", "mid", "low"} or len(v) != 3:
        raise ValueError(
            'watermarks must be "off" or a table { high = 500, mid = 400, low = 50 } (per-mille free memory)'
        )
    h, m, lo = (_int(v[k], f"watermarks.{k}", 0, 1000) for k in ("high", "mid", "low"))
    if not h >= m >= lo:
        raise ValueError(f"watermarks must satisfy high >= mid >= low; got {h}, {m}, {lo}")
    return h, m, lo


def show(spec: DamonSpec) -> str:
    """One line for ``tune show``."""
    if not spec.enabled:
        return "off"
    parts = [
        f"migrate_cold DRAM→CXL after {_dur(spec.cold_age_us)} idle",
        f"migrate_hot CXL→DRAM at ≥{spec.hot_accesses_pct:g}% accesses",
        f"quota {spec.quota_bytes >> 20} MiB/{_dur(spec.quota_reset_ms * 1000)}",
        f"intervals {_dur(spec.sample_us)}/{_dur(spec.aggr_us)}/{_dur(spec.update_us)}",
    ]
    if spec.dram_max_used_bp is not None:
        parts.append(f"keep DRAM at most {spec.dram_max_used_bp / 100:g}% used")
    if spec.hot_on_dram_bp is not None:
        parts.append(f"keep ≥{spec.hot_on_dram_bp / 100:g}% of the hot set on DRAM")
    if spec.memcg:
        parts.append(f"memcg {spec.memcg}")
    if spec.anon_only:
        parts.append("anonymous pages only")
    if not spec.multi_dest:
        parts.append("one demotion target per DRAM node")
    return "; ".join(parts)


def _dur(us: int) -> str:
    for unit, mult in (("min", 60_000_000), ("s", 1_000_000), ("ms", 1_000)):
        if us >= mult and us % mult == 0:
            return f"{us // mult}{unit}"
    return f"{us}us"


# ---------------------------------------------------------------------------- the layout


class SchemeLayout(NamedTuple):
    action: Literal["migrate_cold", "migrate_hot"]
    target_nid: int
    nr_accesses: Tuple[int, int]
    age: Tuple[int, int]
    goals: Tuple[Tuple[str, int, int], ...]  # (metric, value, nid)
    filters: Tuple[Tuple[str, bool, str], ...]  # (type, matching, memcg_path)
    #: 6.17+ ``dests/``: (node, weight) of every destination, nearest first; () with ``dests_files``
    #: writes ``nr_dests`` 0 (target_nid alone), without it no ``dests/`` file is written at all
    dests: Tuple[Tuple[int, int], ...] = ()
    dests_files: bool = False
    weighted_by: str = ""  # what the weights are: "write bandwidth (HMAT/CDAT access1)", "online capacity"
    #: ``quotas/goal_tuner`` to write (None: leave the kernel's default, consist, or a kernel without it)
    goal_tuner: Optional[str] = None
    #: the goals were left off for a fixed quota (:func:`tune_goals`): ``nr_goals`` 0 is written
    goals_off: bool = False


#: the memory a kdamond watches: DRAM (cold pages leave) or CXL (hot pages come back)
SourceKind = Literal["dram", "cxl"]


class KdamondLayout(NamedTuple):
    id: int
    node: int
    kind: SourceKind
    regions: Tuple[Tuple[int, int], ...]
    scheme: SchemeLayout


def node_ranges(inv: Inventory, node: Node) -> Tuple[Tuple[int, int], ...]:
    """Physical address ranges [start, end) of ``node``'s online memory blocks, merged."""
    bs = inv.memory_block_size
    if not bs:
        return ()
    ids = sorted(b.id for b in node.memory_blocks if b.state == "online")
    out: List[Tuple[int, int]] = []
    for i in ids:
        s, e = i * bs, (i + 1) * bs
        if out and out[-1][1] == s:
            out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return tuple(out)


def nearest(node: Node, candidates: List[Node], online: List[int]) -> Optional[Node]:
    """The candidate at the smallest NUMA distance from ``node`` (lowest id on ties or unknown distance).

    ``node.distance`` is the kernel's ``nodeN/distance`` row: one entry per *online* node
    (``online``, the inventory's node ids), in id order — not indexed by node id (with DRAM
    node 0 and CXL node 3 online the row has two entries).
    """
    ids = sorted(online)
    known = len(node.distance) == len(ids)
    best: Optional[Node] = None
    best_d = math.inf
    for c in sorted(candidates, key=lambda n: n.id):
        d = node.distance[ids.index(c.id)] if known and c.id in ids else math.inf
        if best is None or d < best_d:
            best, best_d = c, d
    return best


#: weights are written as small integers (the kernel takes any u32 and spreads by their ratio);
#: ratios of larger numbers are scaled so that the largest weight is this
WEIGHT_MAX = 1000


def demotion_nodes(inv: Inventory, src: Node, nearest_cxl: Node, cxl: List[Node]) -> List[Node]:
    """The CXL nodes ``src`` demotes to when the kernel takes several destinations: the nearest
    one and every other CXL node of its memory tier (the kernel's own demotion treats a tier as
    one class of memory), or — tiers unknown — every CXL node at the same NUMA distance.
    Nodes without an online memory block are left out (there is nothing to place pages on).
    Nearest first, then by id; just ``[nearest_cxl]`` when no other node qualifies."""
    ids = sorted(n.id for n in inv.nodes)
    known = len(src.distance) == len(ids)

    def dist(n: Node) -> Optional[int]:
        return src.distance[ids.index(n.id)] if known and n.id in ids else None

    if nearest_cxl.tier is not None:
        peers = [n for n in cxl if n.tier == nearest_cxl.tier]
    elif dist(nearest_cxl) is not None:
        peers = [n for n in cxl if dist(n) == dist(nearest_cxl)]
    else:
        peers = []
    others = sorted((n for n in peers if n.id != nearest_cxl.id and node_ranges(inv, n)), key=lambda n: n.id)
    return [nearest_cxl] + others


def dest_weights(inv: Inventory, nodes: List[Node]) -> Tuple[Tuple[int, ...], str]:
    """Weights for ``nodes`` and what they are.

    Write bandwidth from the CPU-class figures the kernel holds for each node
    (:func:`cxlctl.figures.node_figures`: ``nodeN/access1``, or on 7.x the one CXL region's
    ``access1`` the kernel took; never ``access0``, whose nearest initiator may be a GPU) when
    *every* node has it, because demotion writes the pages to the destination and a node that
    takes them faster should take more; otherwise the online capacity (memory blocks online),
    so that nodes fill in proportion to their size.  A partial bandwidth set is not mixed with
    sizes, and a node whose regions differ has no bandwidth here."""
    raw: List[int] = []
    by = ""
    cpu = [node_figures(n, inv.regions, inv.nodes).cpu for n in nodes]
    bws = [c.write_bandwidth if c is not None and c.write_bandwidth else None for c in cpu]
    if all(b is not None for b in bws):
        raw, by = [b for b in bws if b is not None], "write bandwidth (access1, HMAT/CDAT)"
    if not raw:
        raw = [sum(e - s for s, e in node_ranges(inv, n)) for n in nodes]
        by = "online capacity"
    if not all(v > 0 for v in raw):
        return tuple(1 for _ in nodes), "equal (no capacity known)"
    g = 0
    for v in raw:
        g = math.gcd(g, v)
    w = [v // g for v in raw]
    if max(w) > WEIGHT_MAX:
        top = max(raw)
        w = [max(1, round(v * WEIGHT_MAX / top)) for v in raw]
        g = 0
        for v in w:
            g = math.gcd(g, v)
        w = [v // g for v in w]
    return tuple(w), by


def layout(inv: Inventory, spec: DamonSpec, caps: DamonCaps) -> Tuple[List[KdamondLayout], List[str]]:
    """One kdamond per DRAM and CXL memory node (DRAM first, by id); notes on nodes left out."""
    notes: List[str] = []
    dram = [n for n in inv.nodes if n.kind == "dram" and n.has_memory]
    cxl = [n for n in inv.nodes if n.kind == "cxl" and n.has_memory]
    hot_min = max(1, math.ceil(spec.hot_accesses_pct / 100 * (spec.aggr_us // spec.sample_us)))
    max_acc = spec.aggr_us // spec.sample_us
    cold_age = max(1, spec.cold_age_us // spec.aggr_us)
    out: List[KdamondLayout] = []
    sources: List[Tuple[Node, SourceKind]] = [(n, "dram") for n in dram] + [(n, "cxl") for n in cxl]
    for src, kind in sources:
        dest = nearest(src, cxl if kind == "dram" else dram, [n.id for n in inv.nodes])
        regions = node_ranges(inv, src)
        if dest is None:
            continue
        if not regions:
            notes.append(f"node {src.id} has no online memory block to monitor")
            continue
        filters: List[Tuple[str, bool, str]] = []
        if spec.young_filter:
            # before 6.14 a filter excludes what it matches: cold skips young pages, hot skips the others
            filters.append(("young", kind == "dram", ""))
        if spec.anon_only:
            filters.append(("anon", False, ""))
        if spec.memcg:
            filters.append(("memcg", False, spec.memcg))
        goals: List[Tuple[str, int, int]] = []
        dram_node = src if kind == "dram" else dest
        if caps.node_goals:
            if kind == "dram" and spec.dram_free_goal_bp is not None:
                goals.append(("node_mem_free_bp", spec.dram_free_goal_bp, dram_node.id))
            if kind == "cxl" and spec.dram_used_goal_bp is not None:
                goals.append(("node_mem_used_bp", spec.dram_used_goal_bp, dram_node.id))
        if kind == "cxl" and spec.hot_on_dram_bp is not None and "node_eligible_mem_bp" in caps.goal_metrics:
            # the hot scheme's quota grows until this share of what it finds hot sits on DRAM.  The
            # kernel measures that share over the context's own regions, so this kdamond watches the
            # DRAM node too: over the CXL node alone the share reads 0 for ever and the quota never
            # stops growing (a 7.3.4 guest: current_value 0 with 511 of 512 hot pages on DRAM).
            # Hot pages already on DRAM are not moved (paddr skips folios on target_nid)
            goals.append(("node_eligible_mem_bp", spec.hot_on_dram_bp, dram_node.id))
            regions = tuple(sorted(regions + node_ranges(inv, dram_node)))
        dests: Tuple[Tuple[int, int], ...] = ()
        by = ""
        if kind == "dram" and caps.dests and spec.multi_dest:
            spread = demotion_nodes(inv, src, dest, cxl)
            if len(spread) > 1:
                weights, by = dest_weights(inv, spread)
                dests = tuple(zip((n.id for n in spread), weights))
        scheme = SchemeLayout(
            action="migrate_cold" if kind == "dram" else "migrate_hot",
            target_nid=dest.id,
            nr_accesses=(0, 0) if kind == "dram" else (min(hot_min, max_acc), max_acc),
            age=(cold_age, AGE_MAX) if kind == "dram" else (0, AGE_MAX),
            goals=tuple(goals),
            filters=tuple(filters),
            dests=dests,
            # on a kernel with dests/, the DRAM scheme always says how many (0: target_nid alone), so
            # that a running kdamond committed from a layout with several destinations loses them
            dests_files=kind == "dram" and caps.dests,
            weighted_by=by,
        )
        scheme, note = tune_goals(inv, spec, caps, scheme, f"kdamond {len(out)} ({scheme.action}, node {src.id})")
        if note:
            notes.append(note)
        out.append(KdamondLayout(len(out), src.id, kind, regions, scheme))
    return out, notes


#: the first size the plan times the consist tuner to (its input starts at 10,000 bp, one byte:
#: ``max(quota->esz_bp, 10000UL)``)
_MIB = 1 << 20
#: a goal the consist tuner would need longer than this to bring to 1 MiB per interval is "far"
FAR_S = 60.0


def goal_score(inv: Inventory, goals: Tuple[Tuple[str, int, int], ...]) -> Optional[int]:
    """The score ``damos_quota_score`` (mm/damon/core.c) would compute now: the highest of the goals'
    ``current * 10000 / target``, from the DRAM node's meminfo as ``damos_get_node_mem_bp`` reads it
    (MemTotal - MemFree, or MemFree, per 10,000 of MemTotal).  None when a goal is not a node-memory
    one (its current value is DAMON's own measurement) or the node's figures are unknown."""
    best = 0
    for metric, target, nid in goals:
        node = next((n for n in inv.nodes if n.id == nid), None)
        if metric not in ("node_mem_used_bp", "node_mem_free_bp") or node is None or target <= 0:
            return None
        if not node.mem_total or node.mem_free is None:
            return None
        free = node.mem_free * 10000 // node.mem_total
        current = free if metric == "node_mem_free_bp" else 10000 - free
        best = max(best, current * 10000 // target)
    return best


def consist_ramp_s(score: int, reset_ms: int, size: int) -> float:
    """Seconds the consist tuner takes to grow the quota from 1 byte to ``size`` bytes per interval
    while the score stays ``score`` (< 10,000): ``damon_feed_loop_next_input`` multiplies its input
    by 1 + (10000 - score) / 10000 every ``reset_interval_ms``."""
    growth = math.log1p((10000 - score) / 10000)
    return math.log(max(size, 2)) / growth * reset_ms / 1000


def _ago(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def tune_goals(
    inv: Inventory, spec: DamonSpec, caps: DamonCaps, sc: SchemeLayout, what: str
) -> Tuple[SchemeLayout, str]:
    """The goal tuner a scheme gets, and what the kernel will do with its goals (a plan note).

    The kernel's default tuner (``consist``: ``damos_goal_tune_esz_bp_consist`` feeding
    ``damon_feed_loop_next_input``) starts the goal-tuned quota at one byte and grows it by the
    relative error each reset interval: at a score of 9,728 (DRAM 10.5 % used against an 8 % goal)
    that is 2.7 % a second, about 9 minutes to the first MiB, while the scheme moves nothing.  So,
    unless the profile names a tuner: on 7.1+ ``temporal`` (``damos_goal_tune_esz_bp_temporal``: the
    full quota while the goal is unmet, none once it is met); before 7.1, a scheme far from its goal
    (the first MiB more than :data:`FAR_S` away) runs on the fixed quota without goals."""
    if not sc.goals:
        return sc, ""
    score = goal_score(inv, sc.goals)
    fixed = f"{format_size(spec.quota_bytes)} per {_dur(spec.quota_reset_ms * 1000)}"
    ramp = ""
    far = False
    if score is not None and score < 10000:
        t1 = consist_ramp_s(score, spec.quota_reset_ms, _MIB)
        tq = consist_ramp_s(score, spec.quota_reset_ms, spec.quota_bytes)
        far = t1 > FAR_S
        ramp = (
            f"at today's score {score:,} (damos_quota_score) the kernel's consist tuner (damon_feed_loop_next_input) "
            f"starts the quota at 1 byte and grows it {(10000 - score) / 100:.1f} % per "
            f"{_dur(spec.quota_reset_ms * 1000)}: 1 MiB after ~{_ago(t1)}, the {format_size(spec.quota_bytes)} quota "
            f"after ~{_ago(tq)}"
        )
    elif score is not None:
        ramp = (
            f"its goal is met now (score {score:,}): the kernel shrinks the quota by the same rule, to its minimum at "
            "twice the goal, until it is not"
        )
    if spec.goal_tuner is not None:
        why = f"goal_tuner {spec.goal_tuner} as the profile says" + (
            f"; {ramp}" if ramp and spec.goal_tuner == "consist" else ""
        )
        return sc._replace(goal_tuner=spec.goal_tuner), f"{what}: {why}"
    if caps.goal_tuner:
        note = (
            f"{what}: goal_tuner temporal (7.1+, damos_goal_tune_esz_bp_temporal): the full {fixed} quota while "
            "the goal is unmet, none once it is met"
        )
        if score is not None and score >= 10000:
            note += f"; met now (score {score:,}), so it moves nothing until it is not"
        return sc._replace(goal_tuner="temporal"), note + (
            f"; the default (consist) would crawl: {ramp}" if far else ""
        )
    if far:
        return sc._replace(goals=(), goals_off=True), (
            f"{what}: far from its goal, so the fixed {fixed} quota without goals: {ramp}, and this kernel has no "
            f"goal_tuner (7.1+); run cxlctl tune apply again near the goal to hand the scheme to the kernel's tuner"
        )
    return sc, (f"{what}: {ramp}" if ramp else "")


def files(k: KdamondLayout, spec: DamonSpec) -> List[Tuple[str, str, str]]:
    """(path, value, display name) of every file of one kdamond, in write order.

    Counts (``nr_*``) come before the files they create; the kernel re-creates the
    sub-directories on each count write, so a count is written before, never after,
    its children.  ``state`` is not here: it is written last, after every kdamond.
    """
    kd = t.kdamond(k.id)
    c = t.context(k.id, 0)
    name = f"damon.kdamond{k.id}"
    out: List[Tuple[str, str, str]] = [
        (t.count(kd, t.LIST_CONTEXTS), "1", f"{name}.nr_contexts"),
        (t.at(c, t.OPERATIONS), "paddr", f"{name}.operations"),
        (t.at(c, t.SAMPLE_US), str(spec.sample_us), f"{name}.sample_us"),
        (t.at(c, t.AGGR_US), str(spec.aggr_us), f"{name}.aggr_us"),
        (t.at(c, t.UPDATE_US), str(spec.update_us), f"{name}.update_us"),
        (t.at(t.at(c, t.NR_REGIONS), t.MIN), str(spec.min_regions), f"{name}.nr_regions.min"),
        (t.at(t.at(c, t.NR_REGIONS), t.MAX), str(spec.max_regions), f"{name}.nr_regions.max"),
        (t.count(c, t.LIST_TARGETS), "1", f"{name}.nr_targets"),
    ]
    tg = t.entry(c, t.LIST_TARGETS, 0)
    out.append((t.count(tg, t.LIST_REGIONS), str(len(k.regions)), f"{name}.nr_regions"))
    for i, (start, end) in enumerate(k.regions):
        r = t.entry(tg, t.LIST_REGIONS, i)
        out += [
            (t.at(r, t.START), str(start), f"{name}.region{i}.start"),
            (t.at(r, t.END), str(end), f"{name}.region{i}.end"),
        ]
    return out + _scheme_files(k, spec, c, f"{name}.scheme0")


def _scheme_files(k: KdamondLayout, spec: DamonSpec, c: str, sn: str) -> List[Tuple[str, str, str]]:
    """:func:`files` of the kdamond's one scheme (``sn`` its display name): its count, action and
    destinations, access pattern and quota, then its goals, watermarks and filters."""
    s = t.scheme(k.id, 0, 0)
    sc = k.scheme
    name = sn.rpartition(".")[0]
    out: List[Tuple[str, str, str]] = [
        (t.count(c, t.LIST_SCHEMES), "1", f"{name}.nr_schemes"),
        (t.at(s, t.ACTION), sc.action, f"{sn}.action"),
        (t.at(s, t.TARGET_NID), str(sc.target_nid), f"{sn}.target_nid"),
    ]
    if sc.dests_files:
        out.append((t.count(s, t.LIST_DESTS), str(len(sc.dests)), f"{sn}.nr_dests"))
        for i, (node, weight) in enumerate(sc.dests):
            d = t.entry(s, t.LIST_DESTS, i)
            out += [
                (t.at(d, t.DEST_ID), str(node), f"{sn}.dest{i}.id"),
                (t.at(d, t.DEST_WEIGHT), str(weight), f"{sn}.dest{i}.weight"),
            ]
    out += [
        (t.at(s, t.APPLY_INTERVAL_US), str(spec.apply_interval_us), f"{sn}.apply_interval_us"),
        (t.at(t.at(s, t.SZ), t.MIN), str(spec.min_size), f"{sn}.sz.min"),
        (t.at(t.at(s, t.SZ), t.MAX), str(SZ_MAX), f"{sn}.sz.max"),
        (t.at(t.at(s, t.NR_ACCESSES), t.MIN), str(sc.nr_accesses[0]), f"{sn}.nr_accesses.min"),
        (t.at(t.at(s, t.NR_ACCESSES), t.MAX), str(sc.nr_accesses[1]), f"{sn}.nr_accesses.max"),
        (t.at(t.at(s, t.AGE), t.MIN), str(sc.age[0]), f"{sn}.age.min"),
        (t.at(t.at(s, t.AGE), t.MAX), str(sc.age[1]), f"{sn}.age.max"),
        (t.at(s, t.QUOTA_MS), str(spec.quota_ms), f"{sn}.quota.ms"),
        (t.at(s, t.QUOTA_BYTES), str(spec.quota_bytes), f"{sn}.quota.bytes"),
        (t.at(s, t.QUOTA_RESET_INTERVAL_MS), str(spec.quota_reset_ms), f"{sn}.quota.reset_interval_ms"),
    ]
    if sc.goals_off:  # a running kdamond may hold goals from an earlier commit
        out.append((t.count(s, t.LIST_GOALS), "0", f"{sn}.quota.nr_goals"))
    if sc.goals:
        if sc.goal_tuner is not None:
            out.append((t.at(s, t.QUOTA_GOAL_TUNER), sc.goal_tuner, f"{sn}.quota.goal_tuner"))
        out.append((t.count(s, t.LIST_GOALS), str(len(sc.goals)), f"{sn}.quota.nr_goals"))
        for i, (metric, value, nid) in enumerate(sc.goals):
            g = t.entry(s, t.LIST_GOALS, i)
            out += [
                (t.at(g, t.GOAL_TARGET_METRIC), metric, f"{sn}.goal{i}.target_metric"),
                (t.at(g, t.GOAL_TARGET_VALUE), str(value), f"{sn}.goal{i}.target_value"),
            ]
            if t.GOAL_NID in t.GOAL_METRICS.get(metric, ((0, 0), (t.GOAL_NID,)))[1]:
                out.append((t.at(g, t.GOAL_NID), str(nid), f"{sn}.goal{i}.nid"))
    if spec.watermarks is not None and sc.action == "migrate_cold":
        h, m, lo = spec.watermarks
        out += [
            (t.at(s, t.WATERMARKS_METRIC), "free_mem_rate", f"{sn}.watermarks.metric"),
            (t.at(s, t.WATERMARKS_INTERVAL_US), str(spec.apply_interval_us), f"{sn}.watermarks.interval_us"),
            (t.at(s, t.WATERMARKS_HIGH), str(h), f"{sn}.watermarks.high"),
            (t.at(s, t.WATERMARKS_MID), str(m), f"{sn}.watermarks.mid"),
            (t.at(s, t.WATERMARKS_LOW), str(lo), f"{sn}.watermarks.low"),
        ]
    if sc.filters:
        out.append((t.count(s, t.LIST_FILTERS), str(len(sc.filters)), f"{sn}.nr_filters"))
        for i, (ftype, matching, memcg) in enumerate(sc.filters):
            f = t.entry(s, t.LIST_FILTERS, i)
            out += [
                (t.at(f, t.FILTER_TYPE), ftype, f"{sn}.filter{i}.type"),
                (t.at(f, t.FILTER_MATCHING), "Y" if matching else "N", f"{sn}.filter{i}.matching"),
            ]
            if memcg:
                out.append((t.at(f, t.FILTER_MEMCG_PATH), memcg, f"{sn}.filter{i}.memcg_path"))
    return out


def describe(k: KdamondLayout) -> str:
    """``node0→node1 migrate_cold``, or with 6.17 destinations
    ``node0→nodes 2,3 weights 3:1 migrate_cold (6.17 destinations by online capacity; …)``."""
    sc = k.scheme
    if not sc.dests:
        return f"node{k.node}→node{sc.target_nid} {sc.action}"
    nodes = ",".join(str(n) for n, _ in sc.dests)
    weights = ":".join(str(w) for _, w in sc.dests)
    # the kernel's paddr migrate has read only target_nid so far (vaddr spreads by dests since 6.17):
    # say where pages go on such a kernel rather than promise a spread (docs/tuning.md)
    return (
        f"node{k.node}→nodes {nodes} weights {weights} {sc.action} (6.17 destinations by {sc.weighted_by}; "
        f"node{sc.target_nid} alone where paddr ignores them)"
    )


def state_path(index: int) -> str:
    return t.state(index)


# ---------------------------------------------------------------------------- ownership


def owned(restore: Mapping[str, Tuple[str, Optional[str]]]) -> Optional[int]:
    """How many kdamonds the profile in effect created (from its journal), or None: none."""
    if restore.get(NR_KDAMONDS, ("", None))[0] != "damon":
        return None
    return sum(1 for p, (k, _) in restore.items() if k == "damon" and is_state(p))


is_state = t.is_state


def others(state: DamonState, mine: Optional[int]) -> List[str]:
    """Kdamonds under sysfs that are not cxlctl's, described for a refusal."""
    if mine is not None and state.nr_kdamonds is not None and state.nr_kdamonds <= mine:
        # fewer than cxlctl journaled: a re-target removed some (a node went); the journal keeps
        # their files for a rollback, so it counts more states than run now
        return []
    out = []
    for k in state.kdamonds:
        acts = ", ".join(sorted({s.action or "?" for s in k.schemes})) or "no schemes"
        out.append(
            f"kdamond {k.id} ({k.state or '?'}" + (f", pid {k.pid}" if k.pid and k.running else "") + f"; {acts})"
        )
    if not out and state.nr_kdamonds:
        out.append(f"nr_kdamonds is {state.nr_kdamonds}")
    return out


def _module_name(m: Any) -> str:
    return f"{m.name} (kdamond pid {m.kdamond_pid})" if m.kdamond_pid else m.name


def goal_support(spec: DamonSpec, caps: DamonCaps) -> Tuple[List[str], List[str]]:
    """(what the plan says about the quota goals this spec asks for, refusals).

    A statement the operator made (``dram_max_used``, ``hot_on_dram``, ``goal_tuner``) that this
    kernel cannot keep is refused, naming the metric, the release that added it and what the
    kernel takes; the defaults (``dram_free_goal``/``dram_used_goal``) fall back to fixed quotas."""
    notes: List[str] = []
    refusals: List[str] = []
    offers = ", ".join(caps.goal_metrics) or "no node or memory goal metric"
    asked: List[Tuple[str, str]] = []
    if spec.dram_max_used_bp is not None:
        asked += [("dram_max_used", "node_mem_used_bp"), ("dram_max_used", "node_mem_free_bp")]
    if spec.hot_on_dram_bp is not None:
        asked.append(("hot_on_dram", "node_eligible_mem_bp"))
    for key, metric in asked:
        since = t.GOAL_METRICS[metric][0]
        if metric in caps.goal_metrics:
            notes.append(f"{key}: quota goal {metric} ({since[0]}.{since[1]}+) is on this kernel")
        else:
            refusals.append(
                f"{key} needs the DAMON quota goal metric {metric}, which Linux {since[0]}.{since[1]} added; "
                f"this kernel{f' ({caps.release})' if caps.release else ''} takes {offers}. Leave {key} out of "
                "the profile, or boot a newer kernel"
            )
    if (
        spec.hot_on_dram_bp is not None
        and "node_eligible_mem_bp" in caps.goal_metrics
        and (spec.memcg or spec.anon_only)
    ):
        # the kernel's metric checks a region's access pattern only, then counts every LRU folio in
        # it (damos_calc_eligible_bytes, mm/damon/core.c): the scheme's filters narrow what moves,
        # not what the share is measured over
        notes.append(
            "hot_on_dram: the kernel measures the share over all memory in the regions DAMON finds hot on "
            "both nodes, not only the "
            + " and ".join(
                x for x in (f"memcg {spec.memcg}" if spec.memcg else "", "anonymous" if spec.anon_only else "") if x
            )
            + " pages the scope moves: other hot memory on DRAM counts towards the goal"
        )
    if asked:
        newer = [
            f"{m} ({since[0]}.{since[1]}+)" for m, (since, _) in t.GOAL_METRICS.items() if m not in caps.goal_metrics
        ]
        notes.append(
            f"quota goal metrics on this kernel: {offers}" + (f"; not on it: {', '.join(newer)}" if newer else "")
        )
    if spec.goal_tuner is not None and not caps.goal_tuner:
        refusals.append(
            f"goal_tuner needs quotas/goal_tuner (Linux {TUNER_SINCE[0]}.{TUNER_SINCE[1]}+), which this kernel's "
            "DAMON does not have. Leave goal_tuner out of the profile"
        )
    return notes, list(dict.fromkeys(refusals))


#: DAMON modules whose running kdamond the kernel lets no sysfs kdamond start beside: each starts
#: its kdamond exclusively (``damon_start(&ctx, 1, true)`` in mm/damon/{stat,reclaim,lru_sort}.c),
#: and ``damon_start`` refuses a non-exclusive start while one runs, and an exclusive one while any
#: runs (EBUSY).  Tried in 6.12 and 7.3.4 guests: with DAMON_RECLAIM or DAMON_LRU_SORT enabled a
#: sysfs kdamond's ``state=on`` failed with EBUSY, and with a sysfs kdamond on, enabling either did;
#: DAMON_STAT (Debian's 7.x starts it at boot) the same.
EXCLUSIVE_MODULES = ("damon_stat", "damon_reclaim", "damon_lru_sort")


def exclusive_kdamonds(state: DamonState) -> List[str]:
    """Running DAMON modules of :data:`EXCLUSIVE_MODULES`: no sysfs kdamond starts beside them."""
    return [_module_name(m) for m in state.modules if m.running and m.name in EXCLUSIVE_MODULES]


def exclusive_names(state: DamonState) -> List[str]:
    """The module names of :func:`exclusive_kdamonds` (``damon_stat``), for the files that stop them."""
    return [m.name for m in state.modules if m.running and m.name in EXCLUSIVE_MODULES]
