"""Kubernetes Node Feature Discovery labels: the ``features.d/cxlctl`` feature file.

Why a file: NFD's ``local`` source reads every file in
``/etc/kubernetes/node-feature-discovery/features.d/`` (``key=value`` lines,
``#`` comments) on each discovery pass and turns them into node labels, so a
scheduler can place memory-hungry inference pods on nodes with CXL capacity
(``nodeSelector``/affinity on ``feature.node.kubernetes.io/cxl.present``).
No Kubernetes API access, no credentials.

Rules honoured here (NFD's customization guide): names carry an explicit
namespace (unprefixed names are deprecated), ``feature.node.kubernetes.io`` is
allowed by nfd-master without flags, the file stays under 64 kB, and label
*values* follow Kubernetes' rules — at most 63 characters of ``[A-Za-z0-9_.-]``
starting and ending alphanumeric — so node id lists use ``_`` rather than
commas.  A ``# +expiry-time=`` directive (RFC 3339) makes the labels lapse if
the daemon stops refreshing the file (it rewrites it on every rescan).  The
temporary file is a dot-file, which NFD skips, then renamed into place.

Beyond presence and totals, the labels say what a scheduler needs to place an
inference pod: CXL capacity online/free per memory tier (keyed by the tier's rank,
:func:`tier_ranks`, never by the kernel's id), whether and how
weighted interleave is set (``auto`` since 6.16, else manual weights), the
tiering engine in effect (kernel NUMA-balancing tiering, a running DAMON
kdamond, both, or none: :func:`tiering_engine`, read only) and, only where the
daemon's health probe (``cxl list -H``) really returned device data, the worst
memdev health.  Nothing is guessed: without data a label is left out.
"""

from __future__ import annotations

import datetime
import os
import re
from typing import TYPE_CHECKING, Dict, List, Optional, Set

from cxlctl.hostio import paths
from cxlctl.hostio.atomic import atomic_write
from cxlctl.hostio.host import Host
from cxlctl.hostio.reader import Reader
from cxlctl.model import Inventory
from cxlctl.parse import is_decimal, parse_int

if TYPE_CHECKING:
    from cxlctl.capacity.report import Report
    from cxlctl.ras.health_probe import Health

FILE_NAME = "cxlctl"
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def valid_value(v: str) -> bool:
    return len(v) <= 63 and _VALUE.match(v) is not None


def _mib(n: int) -> str:
    """Bytes as whole MiB: a 512 MiB device is ``512``, where GiB rounded it to ``0`` (and a label's
    ``Gt``/``Lt`` compare integers, so a unit fine enough for the smallest device is the one to use)."""
    return str(n >> 20)


def tier_ranks(tiers: Set[int]) -> Dict[int, int]:
    """Kernel memory tier id → rank among ``tiers`` (1 = the fastest), for label keys a fleet shares.

    Why not the id itself: the kernel names a tier by its abstract distance,
    ``memory_tierN`` with N = adistance >> MEMTIER_CHUNK_BITS (mm/memory-tiers.c,
    ``find_create_memory_tier``), and the abstract distance of CXL memory comes from
    the firmware's HMAT/CDAT figures: the same device is tier 22 on one host, 33 or
    146 on another.  A smaller id is a smaller distance (faster memory), so ranking
    the ids keeps the kernel's order while giving a selector a key that exists on
    every node: ``cxl.tier-rank-1.free-mib`` is the fastest tier holding CXL memory.
    """
    return {t: i for i, t in enumerate(sorted(tiers), 1)}


#: kernel.numa_balancing bit 2: NUMA_BALANCING_MEMORY_TIERING (promotion from slow tiers)
NUMA_BALANCING_TIERING = 2
_HEALTH_ORDER = ("ok", "warning", "critical")


def tiering_engine(host: Host, reader: Optional[Reader] = None) -> str:
    """Which tiering engine is in effect: ``none``, ``numa-balancing``, ``damon`` or ``damon_numa-balancing``.

    Read only, and deliberately small: NUMA-balancing tiering is bit 2 of
    ``kernel.numa_balancing``; DAMON counts when any kdamond under
    ``/sys/kernel/mm/damon/admin/kdamonds/N/state`` reads ``on`` (whoever
    started it: cxlctl, damo, HMSDK), asked of :func:`cxlctl.damon.sysfs.any_running`.
    Read through ``host.reader``, or ``reader`` (``record``'s logging one).
    """
    from cxlctl.damon.sysfs import any_running

    r = host.reader if reader is None else reader
    out = []
    if any_running(r):
        out.append("damon")
    nb = (r.text(paths.NUMA_BALANCING) or "").strip()
    try:
        mode = parse_int(nb) if is_decimal(nb) else 0
    except ValueError:  # wider than 64 bits: corruption, not a mode
        mode = 0
    if mode & NUMA_BALANCING_TIERING:
        out.append("numa-balancing")
    return "_".join(out) or "none"


def health_summary(h: Optional[Health]) -> Optional[str]:
    """The worst memdev health (ok / warning / critical), or None when the probe returned no device data."""
    if h is None or not h.available:
        return None
    seen = [m.status for m in h.memdevs if m.status in _HEALTH_ORDER]
    return max(seen, key=_HEALTH_ORDER.index) if seen else None


def labels(
    inv: Inventory,
    profile: Optional[str],
    namespace: str = "feature.node.kubernetes.io",
    *,
    tiering: Optional[str] = None,
    health: Optional[Health] = None,
    capacity: Optional[Report] = None,
) -> Dict[str, str]:
    """Label name → value for ``inv`` (pure; values always valid Kubernetes label values)."""
    cxl = sorted(n.id for n in inv.nodes if n.kind == "cxl" and n.has_memory)
    ns = namespace + "/"
    t = inv.totals
    out: Dict[str, str] = {
        "cxl.present": "true" if inv.has_cxl else "false",
        "cxl.memdevs": str(len(inv.memdevs)),
        "cxl.capacity-mib": _mib(t.cxl_capacity),
        "cxl.online-mib": _mib(t.cxl_online),
        "cxl.free-mib": _mib(t.cxl_free),
        "cxl.numa-nodes": "_".join(str(i) for i in cxl) if cxl else "none",
        "cxl.numa-node-count": str(len(cxl)),
    }
    dram_tiers = {n.tier for n in inv.nodes if n.kind == "dram" and n.tier is not None}
    cxl_tiers = {n.tier for n in inv.nodes if n.kind == "cxl" and n.has_memory and n.tier is not None}
    if cxl:
        # tiering (demotion/promotion) needs CXL in a lower tier than DRAM (HMAT/CDAT data)
        out["cxl.separate-tier"] = "true" if cxl_tiers and not (cxl_tiers & dram_tiers) else "false"
    # capacity per memory tier holding CXL memory (memory_tierN ids: HMAT/CDAT-derived abstract distance)
    per_tier: Dict[int, List[int]] = {}
    for n in inv.nodes:
        if n.kind == "cxl" and n.has_memory and n.tier is not None:
            acc = per_tier.setdefault(n.tier, [0, 0])
            acc[0] += n.mem_total or 0
            acc[1] += n.mem_free or 0
    ranks = tier_ranks(set(per_tier))
    for tier, (online, free) in sorted(per_tier.items()):
        key = f"cxl.tier-rank-{ranks[tier]}"
        out[key + ".kernel-tier"] = str(tier)  # the host's own id, as a value (it differs host to host)
        out[key + ".online-mib"] = _mib(online)
        out[key + ".free-mib"] = _mib(free)
    wi = inv.weighted_interleave
    out["cxl.weighted-interleave"] = "true" if wi.supported else "false"
    out["cxl.weighted-interleave.mode"] = "none" if not wi.supported else "auto" if wi.auto else "manual"
    if tiering is not None:
        out["cxl.tiering"] = tiering
    hs = health_summary(health)
    if hs is not None:
        out["cxl.health"] = hs
    if capacity is not None and capacity.memdevs:
        # what an orchestrator lending capacity asks first: how much this node could give back now
        # (``cxlctl capacity``: whole releasable or free memdevs) and how much is held by blockers
        out["cxl.releasable-mib"] = _mib(sum(m.releasable for m in capacity.memdevs))
        out["cxl.blocked-mib"] = _mib(sum(m.capacity for m in capacity.memdevs if m.state == "blocked"))
    if capacity is not None:
        # false after a surprise removal (docs/capacity.md): schedule nothing new here, drain and reboot
        out["cxl.capacity-ready"] = "true" if capacity.host_state == "ready" else "false"
    if profile and valid_value(profile):
        out["cxl.profile"] = profile
    result = {ns + k: v for k, v in out.items() if valid_value(v)}
    return result


EXPIRY_DIRECTIVE = "# +expiry-time="
EXPIRY_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def render(lbls: Dict[str, str], expiry: Optional[datetime.datetime] = None) -> str:
    lines = ["# Written by the cxlctl daemon (docs/daemon.md); rewritten on every rescan. Do not edit."]
    if expiry is not None:
        ts = expiry.astimezone(datetime.timezone.utc).replace(microsecond=0).strftime(EXPIRY_FORMAT)
        lines.append(EXPIRY_DIRECTIVE + ts)
    lines += [f"{k}={v}" for k, v in sorted(lbls.items())]
    return "\n".join(lines) + "\n"


def expiry_of(text: str) -> Optional[datetime.datetime]:
    """The expiry :func:`render` wrote into ``text`` (None: none, or not in its format)."""
    for line in text.splitlines():
        if line.startswith(EXPIRY_DIRECTIVE):
            try:
                ts = datetime.datetime.strptime(line[len(EXPIRY_DIRECTIVE) :].strip(), EXPIRY_FORMAT)
            except ValueError:
                return None
            return ts.replace(tzinfo=datetime.timezone.utc)
    return None


def write(host: Host, directory: str, text: str) -> str:
    """Atomically replace ``directory/cxlctl`` (a host path) under ``host.root`` (NFD skips the hidden
    temporary file); returns the file's path under the root."""
    return atomic_write(host.root, os.path.join(directory, FILE_NAME), text, mode=0o644, sync_dir=False)


def expiry_after(seconds: float) -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)
