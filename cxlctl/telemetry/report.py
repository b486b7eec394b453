"""The ``cxlctl stat`` report: one JSON object per sample, and its text at 80 columns.

The JSON keeps the kernel's counter names as keys (cumulative values, as the
kernel prints them) with a ``rates`` object beside them (per second over the
last interval; ``null`` in the first report, which covers the time since
boot).  Node ids are JSON object keys, hence strings.  docs/json-schema.md
describes every field.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Sequence

from cxlctl.hostio import paths
from cxlctl.model import Coordinates
from cxlctl.parse import PAGE_SIZE
from cxlctl.term import clean

from .rates import Rates, damon_migrated, damon_migrates, demote_sum
from .sample import Sample
from .verdicts import Verdict


def _per_node(d: Dict[int, int]) -> Dict[str, int]:
    return {str(k): v for k, v in sorted(d.items())}


def hmat_dict(c: Optional[Coordinates], source: Optional[str]) -> Optional[Dict[str, Any]]:
    """A node's expected access characteristics as JSON (None: not described)."""
    if c is None:
        return None
    return {
        "read_bandwidth_mbps": c.read_bandwidth,
        "write_bandwidth_mbps": c.write_bandwidth,
        "read_latency_ns": c.read_latency,
        "write_latency_ns": c.write_latency,
        "from": source,
    }


MB = 1 << 20  # the kernel's MB: numa_balancing_promote_rate_limit_MBps is shifted by 20 bits


def cxl_traffic(s: Sample, r: Optional[Rates]) -> Optional[Dict[str, Optional[float]]]:
    """Pages moved to and from CXL per second as MB/s, and as a share of the CXL nodes' bandwidth.

    Promotion reads from a CXL node (``pgpromote_success``, counted on the DRAM
    node the page lands on), demotion writes to one (every ``pgdemote_*``); both
    count base pages.  The share is of the read bandwidth for promotion and of the
    write bandwidth for demotion, over all CXL nodes (None when one is not
    described).  None in the first report (no interval yet).
    """
    if r is None:
        return None
    promote = r.system.get("pgpromote_success")
    demote = demote_sum(r.system)
    p_mbps = None if promote is None else promote * PAGE_SIZE / MB
    d_mbps = None if demote is None else demote * PAGE_SIZE / MB

    def share(mbps: Optional[float], bw: Optional[int]) -> Optional[float]:
        return None if mbps is None or not bw else round(mbps / bw, 6)

    moved = damon_migrated(s, r)
    return {
        "promote_mbps": None if p_mbps is None else round(p_mbps, 3),
        "demote_mbps": None if d_mbps is None else round(d_mbps, 3),
        # DAMON's migrations, both directions (not in the promote/demote figures above)
        "damon_migrate_mbps": round(sum(moved.values()) / MB, 3) if moved else None,
        "cxl_read_bandwidth_mbps": s.cxl_read_mbps,
        "cxl_write_bandwidth_mbps": s.cxl_write_mbps,
        "promote_share_of_read_bandwidth": share(p_mbps, s.cxl_read_mbps),
        "demote_share_of_write_bandwidth": share(d_mbps, s.cxl_write_mbps),
    }


def damon_migrated_dict(s: Sample, r: Optional[Rates]) -> Optional[Dict[str, Any]]:
    """What DAMON's running migrate_hot/migrate_cold schemes moved (bytes since they started, or
    bytes per second), or None when no running scheme migrates.  Kept apart from promotion and
    demotion because the kernel counts it in ``pgmigrate_*`` (reason MR_DAMON) only."""
    if not damon_migrates(s):
        return None
    moved = damon_migrated(s, r)
    unit = "bytes" if r is None else "bytes_per_second"
    return {
        "unit": unit,
        "migrate_hot": moved.get("migrate_hot"),
        "migrate_cold": moved.get("migrate_cold"),
        "counted_in": ["pgmigrate_success", "pgmigrate_fail"],
    }


def to_dict(s: Sample, r: Optional[Rates], verdicts: Sequence[Verdict], report: int) -> Dict[str, Any]:
    """The JSON object of one report (without ``schema_version``: the emitter adds it)."""
    st = s.settings
    return {
        "report": report,
        "since_boot": r is None,
        "interval": None if r is None else round(r.seconds, 6),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(s.wall)),
        "kernel": s.kernel,
        "settings": {
            "demotion_enabled": st.demotion_enabled,
            "numa_balancing": st.numa_balancing,
            "numa_balancing_promote_rate_limit_MBps": st.promote_rate_limit_mbps,
        },
        "system": {
            "readable": s.system.readable,
            "counters": dict(s.system.values),
            "missing": list(s.system.missing),
            "rates": None if r is None else r.system,
        },
        "nodes": _node_dicts(s, r),
        "cxl_traffic": cxl_traffic(s, r),
        "damon_migrated": damon_migrated_dict(s, r),
        "cgroups": _cgroup_dicts(s, r),
        "cgroups_unavailable": s.cgroups_unavailable,
        "processes": _process_dicts(s),
        "damon": [
            {
                "kdamond": sc.kdamond,
                "context": sc.context,
                "scheme": sc.scheme,
                "state": sc.state,
                "action": sc.action,
                "target_nid": sc.target_nid,
                "stats": dict(sc.stats),
                "rates": None if r is None else r.damon.get(sc.key),
            }
            for sc in s.damon
        ],
        "verdicts": [v._asdict() for v in verdicts],
        "notes": list(s.notes),
    }


def _node_dicts(s: Sample, r: Optional[Rates]) -> List[Dict[str, Any]]:
    nodes = []
    for n in s.nodes:
        nodes.append(
            {
                "id": n.id,
                "kind": n.kind,
                "tier": n.tier,
                "memory": dict(n.memory),
                "readable": n.vmstat.readable,
                "counters": dict(n.vmstat.values),
                "missing": list(n.vmstat.missing),
                "numastat": dict(n.numastat),
                "hmat": hmat_dict(n.hmat, n.hmat_from),
                "rates": None if r is None else r.nodes.get(n.id),
                "memory_failure": None
                if n.memory_failure is None
                else {
                    "counters": dict(n.memory_failure.values),
                    "rates": None if r is None else r.memory_failure.get(n.id),
                },
            }
        )
    return nodes


def _cgroup_dicts(s: Sample, r: Optional[Rates]) -> List[Dict[str, Any]]:
    cgroups = []
    for c in s.cgroups:
        cgroups.append(
            {
                "name": c.name,
                "path": c.path,
                "readable": c.readable,
                "bytes_per_node": _per_node(c.bytes_per_node),
                "numa_stat": {k: _per_node(v) for k, v in c.numa_stat.items()},
                "counters": dict(c.stat.values),
                "missing": list(c.stat.missing),
                "rates": None if r is None else r.cgroups.get(c.name),
            }
        )
    return cgroups


def _process_dicts(s: Sample) -> List[Dict[str, Any]]:
    procs = []
    for p in s.processes:
        m = p.maps
        procs.append(
            {
                "pid": p.pid,
                "comm": p.comm,
                "cgroup": p.cgroup,
                "rss": p.rss,
                "readable": m is not None,
                "pages_per_node": None if m is None else _per_node(m.pages),
                "bytes_per_node": None if m is None else _per_node(m.bytes),
                "shm": None if m is None else {f: _per_node(v) for f, v in sorted(m.shm.items())},
                "anon_pages_per_node": None if m is None else _per_node(m.anon),
                "asked_policy": None if p.asked is None else {"mode": p.asked[0], "nodes": list(p.asked[1])},
            }
        )
    return procs


# -- text ---------------------------------------------------------------------------------------


def size(b: Optional[float]) -> str:
    """Bytes, short, in the IEC units ``status`` uses: 512 B, 6.0 MiB, 300 GiB ('-' for unknown).
    Three digits at most (1000 MiB is 1.0 GiB), so a size takes 7 columns."""
    if b is None:
        return "-"
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        v = b / (1 << shift)
        if v >= 1000 / 1024:  # 1000 of the unit below or more: this unit
            return f"{v:.1f} {unit}" if v < 9.95 else f"{v:.0f} {unit}"
    return f"{b:.0f} B"


def count(v: Optional[float]) -> str:
    """A counter or rate, short: 1957, 12.3k, 4.5M ('n/a' when the kernel lacks it)."""
    if v is None:
        return "n/a"
    if v >= 10_000_000:
        return f"{v / 1e6:.1f}M"
    if v >= 100_000:
        return f"{v / 1e3:.1f}k"
    return f"{v:.0f}" if v == int(v) or v >= 100 else f"{v:.1f}"


def mbps(v: Optional[float]) -> str:
    """MB/s, the unit of the kernel's files (HMAT's ``read_bandwidth``, the promotion rate limit):
    850 MB/s, 38912 MB/s ('n/a' unknown); never converted, so ``stat`` and ``status`` print one figure."""
    if v is None:
        return "n/a"
    return f"{v:.1f} MB/s" if v < 10 else f"{v:.0f} MB/s"


def ns(v: Optional[int]) -> str:
    return "n/a" if v is None else f"{v} ns"


def pct(share: Optional[float], which: str) -> str:
    """`` (0.4% of CXL read bandwidth)``, or nothing when the bandwidth is not described."""
    return "" if share is None else f" ({share * 100:.1f}% of CXL {which} bandwidth)"


def _other_demotions(vals: Dict[str, Optional[Any]]) -> Optional[float]:
    rest = {
        k: v for k, v in vals.items() if k.startswith("pgdemote_") and k not in ("pgdemote_kswapd", "pgdemote_direct")
    }
    return demote_sum(rest)


#: the node table's short headers, in the kernel's counter names (/proc/vmstat, nodeN/vmstat)
LEGEND = (
    "promoted: pgpromote_success; candid.: pgpromote_candidate (pages NUMA balancing picked to promote); "
    "dem-ksw, dem-dir, dem-oth: pgdemote_kswapd, pgdemote_direct, the other pgdemote_* (khugepaged, proactive)"
)


def _wrap(text: str, width: int, indent: str) -> List[str]:
    from cxlctl.term import fold_lines

    return fold_lines(text, max(width, 40), indent, indent + "  ")


def render_text(s: Sample, r: Optional[Rates], verdicts: Sequence[Verdict], report: int, width: int = 80) -> str:
    """One report as text (at most ``width`` columns): nodes, system, cgroups, processes, verdicts.

    Reads the sample, the rates and the verdicts themselves, not :func:`to_dict`'s JSON: the
    text and the JSON are two views of the same objects."""
    lines = _node_lines(s, r, report)
    lines += _wrap(LEGEND, width, "")
    lines += _system_lines(s, r, width)
    lines += _notes_lines(s, width)
    lines += _owner_lines(s, r, width)
    for v in verdicts:
        lines += _wrap(f"! {v.id}: {v.message}", width, "")
        lines += _wrap(f"fix: {v.fix}", width, "  ")
    return "\n".join(lines)


def _node_lines(s: Sample, r: Optional[Rates], report: int) -> List[str]:
    """The header (time, unit, settings) and one table row per node."""
    unit = "pages since boot" if r is None else f"pages/s over {round(r.seconds, 6):.1f} s"
    st = s.settings
    dem = {True: "on", False: "off", None: "n/a"}[st.demotion_enabled]
    nb = "n/a" if st.numa_balancing is None else st.numa_balancing
    limit = st.promote_rate_limit_mbps
    lines = [
        f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(s.wall))}  report {report}  ({unit})",
        f"demotion {dem}  numa_balancing {nb}  promote limit {'n/a' if limit is None else str(limit) + ' MB/s'}",
        f"{'node':>4} {'kind':<5} {'used':>7} {'free':>7} {'shmem':>7} {'promoted':>8} {'candid.':>8} "
        f"{'dem-ksw':>8} {'dem-dir':>8} {'dem-oth':>7}",
    ]
    for n in s.nodes:
        vals: Dict[str, Any] = dict(n.vmstat.values) if r is None else (r.nodes.get(n.id) or {})
        mem = n.memory
        lines.append(
            f"{n.id:>4} {n.kind:<5} {size(mem['used']):>7} {size(mem['free']):>7} {size(mem['shmem']):>7} "
            f"{count(vals.get('pgpromote_success')):>8} {count(vals.get('pgpromote_candidate')):>8} "
            f"{count(vals.get('pgdemote_kswapd')):>8} {count(vals.get('pgdemote_direct')):>8} "
            f"{count(_other_demotions(vals)):>7}"
        )
    return lines


def _system_lines(s: Sample, r: Optional[Rates], width: int) -> List[str]:
    """The expected bandwidths, the traffic to and from CXL, the system's counters, DAMON's
    migrations and the nodes' memory failures."""
    lines: List[str] = []
    described = [n for n in s.nodes if n.hmat is not None]
    if described:
        lines += _wrap(
            "expected (HMAT/CDAT): "
            + "; ".join(
                f"node {n.id} read {mbps(n.hmat.read_bandwidth)} write "
                f"{mbps(n.hmat.write_bandwidth)} latency {ns(n.hmat.read_latency)}"
                for n in described
                if n.hmat is not None
            ),
            width,
            "",
        )
    tr = cxl_traffic(s, r)
    if tr is not None:
        lines += _wrap(
            f"to/from CXL: promoted {mbps(tr['promote_mbps'])}{pct(tr['promote_share_of_read_bandwidth'], 'read')}, "
            f"demoted {mbps(tr['demote_mbps'])}{pct(tr['demote_share_of_write_bandwidth'], 'write')}",
            width,
            "",
        )
    sysv: Dict[str, Any] = dict(s.system.values) if r is None else (r.system or {})
    lines += _wrap(
        f"system: hint faults {count(sysv.get('numa_hint_faults'))} (local {count(sysv.get('numa_hint_faults_local'))}), "
        f"NUMA pages migrated {count(sysv.get('numa_pages_migrated'))}, migrate ok {count(sysv.get('pgmigrate_success'))} "
        f"fail {count(sysv.get('pgmigrate_fail'))}",
        width,
        "",
    )
    if sysv.get("pgscan_proactive") is not None or sysv.get("pgsteal_proactive") is not None:
        lines += _wrap(
            f"proactive reclaim: scanned {count(sysv.get('pgscan_proactive'))}, "
            f"reclaimed {count(sysv.get('pgsteal_proactive'))}",
            width,
            "",
        )
    if damon_migrates(s):
        moved = damon_migrated(s, r)
        per = "" if r is None else "/s"
        lines += _wrap(
            f"DAMON migrated: hot {size(moved.get('migrate_hot'))}{per}, cold {size(moved.get('migrate_cold'))}{per} "
            "(counted in pgmigrate_*, not in promoted/demoted)",
            width,
            "",
        )
    for n in s.nodes:
        mf = n.memory_failure
        mv: Dict[str, Any] = {} if mf is None else (dict(mf.values) if r is None else r.memory_failure.get(n.id) or {})
        if mv.get("total"):
            lines += _wrap(
                f"node {n.id} memory failures: "
                + ", ".join(f"{k} {count(mv.get(k))}" for k in ("total", "recovered", "failed", "delayed", "ignored")),
                width,
                "",
            )
    return lines


def _notes_lines(s: Sample, width: int) -> List[str]:
    """What could not be read, what this kernel lacks, why there are no cgroup figures."""
    lines: List[str] = []
    unread = [f"node{n.id}/vmstat" for n in s.nodes if not n.vmstat.readable]
    unread += [] if s.system.readable else [paths.PROC_VMSTAT]
    if unread:
        lines += _wrap("could not read: " + ", ".join(unread), width, "")
    sources = [n.vmstat for n in s.nodes if n.vmstat.readable] + ([s.system] if s.system.readable else [])
    lacking = {m for src in sources for m in src.missing}
    # a counter /proc/vmstat has but the node files lack (6.1's pgdemote_*) is not missing from the kernel
    system_only = sorted(m for m in lacking if s.system.readable and m not in s.system.missing)
    missing = sorted(lacking.difference(system_only))
    if system_only:
        lines += _wrap(
            f"per node not on this kernel, system-wide only ({paths.PROC_VMSTAT}): " + ", ".join(system_only), width, ""
        )
    if missing:
        lines += _wrap("not available on this kernel: " + ", ".join(missing), width, "")
    if s.cgroups_unavailable:
        lines += _wrap(s.cgroups_unavailable, width, "")
    return lines


def _owner_lines(s: Sample, r: Optional[Rates], width: int) -> List[str]:
    """One line per cgroup, process and DAMON scheme asked for."""
    lines: List[str] = []
    for c in s.cgroups:
        vals = dict(c.stat.values) if r is None else (r.cgroups.get(c.name) or {})
        where = " ".join(f"N{k}={size(v)}" for k, v in _per_node(c.bytes_per_node).items()) or "no memory.numa_stat"
        lines += _wrap(
            f"cgroup {clean(c.name)}: {where}; promoted {count(vals.get('pgpromote_success'))}, "
            f"demoted kswapd {count(vals.get('pgdemote_kswapd'))} direct {count(vals.get('pgdemote_direct'))}",
            width,
            "",
        )
    for p in s.processes:
        if p.maps is None:
            lines.append(f"pid {p.pid}: numa_maps unreadable (exited, or not permitted)")
            continue
        where = " ".join(f"N{k}={size(v)}" for k, v in _per_node(p.maps.bytes).items()) or "no pages"
        lines += _wrap(f"pid {p.pid} ({clean(p.comm or '?')}) rss {size(p.rss)}: {where}", width, "")
    for d in s.damon:
        stats: Dict[str, Any] = dict(d.stats) if r is None else (r.damon.get(d.key) or {})
        to = "" if d.target_nid is None else f" -> node {d.target_nid}"
        lines += _wrap(
            f"damon {d.kdamond}/{d.context}/{d.scheme} ({clean(d.state or '?')}) "
            f"{clean(d.action or '?')}{to}: applied {size(stats.get('sz_applied'))}"
            f"{'' if r is None else '/s'} of {size(stats.get('sz_tried'))} tried, quota hit {count(stats.get('qt_exceeds'))}",
            width,
            "",
        )
    return lines
