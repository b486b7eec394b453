"""Read DAMON's sysfs tree and probe what the kernel offers (no writes).

The tree (``Documentation/admin-guide/mm/damon/usage.rst``) is drawn, and every path in it
spelled, in :mod:`.tree`, which the tuning engine's writes use too.

Why a reader of its own: the tuning engine must know every kdamond on the host
before it adds one (writing ``nr_kdamonds`` re-creates *all* kdamond directories and
fails with EBUSY while any of them runs, so a kdamond of someone else — damo, a
script — rules out adding ours), ``tune status``/``verify`` compare what runs with
what was applied, and the telemetry commands show the scheme statistics.

Everything read is kept as raw text by path too (:attr:`DamonState.files`): the
tuning engine plans and verifies per file.  Numbers parse ASCII digits only; any
file that does not parse reads as None.  Counts are bounded so a corrupt or hostile
tree cannot make the reader loop for long.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

from cxlctl.hostio import paths
from cxlctl.hostio.reader import Reader
from cxlctl.kconfig import kernel_version, read_config
from cxlctl.namedrecord import NamedTuple
from cxlctl.parse import is_decimal, sysfs_int

from . import tree as t
from .tree import KDAMONDS, NR_KDAMONDS

#: at most this many entries of each kind are read (the kernel has no limit; real hosts use a few)
MAX_ENTRIES = 64
MAX_REGIONS = 1024

#: actions the sysfs interface accepts, with the kernel that added them
MIGRATE_SINCE = (6, 11)
NODE_GOALS_SINCE = (6, 16)  # quota goal metrics node_mem_used_bp / node_mem_free_bp, goal ``nid``
TUNER_SINCE = (7, 1)  # quotas/goal_tuner
FILTER_ALLOW_SINCE = (6, 14)
#: a scheme's ``dests/`` directory (``nr_dests``, ``<D>/id``, ``<D>/weight``): weighted migration
#: destinations, added in 6.17 (Documentation/ABI/testing/sysfs-kernel-mm-damon, "Jul 2025")
DESTS_SINCE = (6, 17)


class Range(NamedTuple):
    min: Optional[int]
    max: Optional[int]


class Region(NamedTuple):
    start: Optional[int]
    end: Optional[int]


class Target(NamedTuple):
    id: int
    pid_target: Optional[int]
    regions: Tuple[Region, ...]


class QuotaGoal(NamedTuple):
    id: int
    target_metric: Optional[str]
    target_value: Optional[int]
    current_value: Optional[int]
    nid: Optional[int]  # 6.16+


class Quota(NamedTuple):
    ms: Optional[int]
    bytes: Optional[int]
    reset_interval_ms: Optional[int]
    goals: Tuple[QuotaGoal, ...]


class Watermarks(NamedTuple):
    metric: Optional[str]
    interval_us: Optional[int]
    high: Optional[int]
    mid: Optional[int]
    low: Optional[int]


class Filter(NamedTuple):
    id: int
    type: Optional[str]
    matching: Optional[bool]
    allow: Optional[bool]  # 6.14+; None: the kernel has no such file (every filter rejects)
    memcg_path: Optional[str]


class Dest(NamedTuple):
    """One ``dests/<D>`` of a scheme (6.17+): a migration destination node and its weight."""

    id: int
    node: Optional[int]
    weight: Optional[int]


class SchemeStats(NamedTuple):
    """``stats/`` of one scheme, as of the last ``update_schemes_stats`` (or the kernel's own refresh)."""

    nr_tried: Optional[int]
    sz_tried: Optional[int]
    nr_applied: Optional[int]
    sz_applied: Optional[int]
    qt_exceeds: Optional[int]


class Scheme(NamedTuple):
    id: int
    action: Optional[str]
    target_nid: Optional[int]  # None: no such file (before 6.11) or unparsable
    apply_interval_us: Optional[int]
    sz: Range
    nr_accesses: Range
    age: Range
    quota: Quota
    watermarks: Watermarks
    filters: Tuple[Filter, ...]
    stats: SchemeStats
    dests: Tuple[Dest, ...] = ()  # 6.17+; () also when the kernel has no ``dests/`` directory
    goal_tuner: Optional[str] = None  # 7.1+: consist | temporal; None without the file


class Context(NamedTuple):
    id: int
    operations: Optional[str]
    avail_operations: Tuple[str, ...]
    sample_us: Optional[int]
    aggr_us: Optional[int]
    update_us: Optional[int]
    nr_regions: Range
    targets: Tuple[Target, ...]
    schemes: Tuple[Scheme, ...]


class Kdamond(NamedTuple):
    id: int
    path: str  # /sys/kernel/mm/damon/admin/kdamonds/K
    state: Optional[str]  # on | off
    pid: Optional[int]  # of the kdamond thread while it runs
    contexts: Tuple[Context, ...]

    @property
    def running(self) -> bool:
        return self.state == "on"

    @property
    def schemes(self) -> Tuple[Scheme, ...]:
        return tuple(s for c in self.contexts for s in c.schemes)


class DamonModule(NamedTuple):
    """A DAMON module that runs its own kdamond (invisible under ``kdamonds/``)."""

    name: str  # damon_reclaim | damon_lru_sort | damon_stat
    enabled: Optional[bool]
    kdamond_pid: Optional[int]

    @property
    def running(self) -> bool:
        return bool(self.enabled) or (self.kdamond_pid is not None and self.kdamond_pid > 0)


class DamonState(NamedTuple):
    sysfs: bool  # /sys/kernel/mm/damon/admin/kdamonds exists (CONFIG_DAMON_SYSFS)
    nr_kdamonds: Optional[int]
    kdamonds: Tuple[Kdamond, ...]
    modules: Tuple[DamonModule, ...]
    files: Dict[str, str]  # path → raw text of every file read under kdamonds/

    def kdamond(self, index: int) -> Optional[Kdamond]:
        for k in self.kdamonds:
            if k.id == index:
                return k
        return None


class DamonCaps(NamedTuple):
    """What this kernel's DAMON can do, and how that was found out."""

    sysfs: bool
    release: Optional[str]
    paddr: Optional[bool]  # None: not known before a context exists and without the kernel config
    migrate: Optional[bool]  # migrate_hot/migrate_cold (6.11+)
    node_goals: bool  # quota goals node_mem_used_bp/node_mem_free_bp (6.16+)
    filter_allow: bool  # filters with an ``allow`` file (6.14+)
    evidence: Tuple[str, ...]
    dests: bool = False  # a scheme's weighted migration destinations, ``dests/`` (6.17+)
    #: quota goal metrics this kernel takes (of :data:`cxlctl.damon.tree.GOAL_METRICS`)
    goal_metrics: Tuple[str, ...] = ()
    goal_tuner: bool = False  # ``quotas/goal_tuner`` (7.1+)

    @property
    def tiering(self) -> bool:
        """DAMON tiering can be set up here (unknown counts as yes: the apply proves it)."""
        return self.sysfs and self.migrate is not False and self.paddr is not False

    @property
    def why_not(self) -> Optional[str]:
        if self.tiering:
            return None
        missing = []
        if not self.sysfs:
            missing.append("no DAMON sysfs interface (/sys/kernel/mm/damon/admin; CONFIG_DAMON_SYSFS)")
        if self.migrate is False:
            missing.append("no migrate_hot/migrate_cold actions")
        if self.paddr is False:
            missing.append("no physical-address monitoring (CONFIG_DAMON_PADDR)")
        return (
            f"not available on this kernel{f' ({self.release})' if self.release else ''}: "
            + "; ".join(missing)
            + " (needs 6.11+ with CONFIG_DAMON_PADDR)"
        )


# ---------------------------------------------------------------------------- reading


def _bool(text: Optional[str]) -> Optional[bool]:
    if text is None:
        return None
    t = text.strip().lower()
    if t in ("y", "yes", "1", "true", "on"):
        return True
    if t in ("n", "no", "0", "false", "off"):
        return False
    return None


def _word(text: Optional[str]) -> Optional[str]:
    if text is None:
        return None
    t = text.strip()
    return t if t and len(t) <= 256 and "\n" not in t else None


class _Walk:
    """One pass over the tree with one reader; raw texts land in ``files``."""

    def __init__(self, r: Reader) -> None:
        self.r = r
        self.files: Dict[str, str] = {}

    def text(self, path: str) -> Optional[str]:
        raw = self.r.raw(path)
        if raw is None:
            return None
        t = raw.decode("utf-8", "replace")
        self.files[path] = t
        return t

    def num(self, path: str) -> Optional[int]:
        return sysfs_int(self.text(path))

    def range(self, d: str) -> Range:
        return Range(self.num(t.at(d, t.MIN)), self.num(t.at(d, t.MAX)))

    def entries(self, parent: str, kind: str, build: Callable[[str, int], Any], limit: int = MAX_ENTRIES) -> List[Any]:
        """The entries of list ``kind`` in ``parent`` (as listed; its count file is read for the record)."""
        self.text(t.count(parent, kind))
        out = []
        for name in self.r.listdir(t.listing(parent, kind), is_decimal)[:limit]:
            out.append(build(t.entry(parent, kind, name), int(name)))
        return out

    def region(self, d: str, i: int) -> Region:
        return Region(self.num(t.at(d, t.START)), self.num(t.at(d, t.END)))

    def target(self, d: str, i: int) -> Target:
        regions = self.entries(d, t.LIST_REGIONS, self.region, MAX_REGIONS)
        return Target(i, self.num(t.at(d, t.PID_TARGET)), tuple(regions))

    def goal(self, d: str, i: int) -> QuotaGoal:
        self.text(t.at(d, t.GOAL_PATH))  # read for the ABI probe (6.19), kept in ``files``
        nid = self.num(t.at(d, t.GOAL_NID))
        return QuotaGoal(
            i,
            _word(self.text(t.at(d, t.GOAL_TARGET_METRIC))),
            self.num(t.at(d, t.GOAL_TARGET_VALUE)),
            self.num(t.at(d, t.GOAL_CURRENT_VALUE)),
            nid,
        )

    def dest(self, d: str, i: int) -> Dest:
        return Dest(i, self.num(t.at(d, t.DEST_ID)), self.num(t.at(d, t.DEST_WEIGHT)))

    def filter(self, d: str, i: int) -> Filter:
        return Filter(
            i,
            _word(self.text(t.at(d, t.FILTER_TYPE))),
            _bool(self.text(t.at(d, t.FILTER_MATCHING))),
            _bool(self.text(t.at(d, t.FILTER_ALLOW))),
            (self.text(t.at(d, t.FILTER_MEMCG_PATH)) or "").strip() or None,
        )

    def scheme(self, d: str, i: int) -> Scheme:
        def num(name: str) -> Optional[int]:
            return self.num(t.at(d, name))

        has_goals = self.r.isdir(t.listing(d, t.LIST_GOALS))
        goals = self.entries(d, t.LIST_GOALS, self.goal) if has_goals else []
        dests = self.entries(d, t.LIST_DESTS, self.dest) if self.r.isdir(t.listing(d, t.LIST_DESTS)) else []
        tuner = _word(self.text(t.at(d, t.QUOTA_GOAL_TUNER)))
        self.text(t.at(d, t.STATS_NR_SNAPSHOTS))  # for the ABI probe (7.0)
        return Scheme(
            id=i,
            action=_word(self.text(t.at(d, t.ACTION))),
            target_nid=sysfs_int(self.text(t.at(d, t.TARGET_NID))),
            apply_interval_us=num(t.APPLY_INTERVAL_US),
            sz=self.range(t.at(d, t.SZ)),
            nr_accesses=self.range(t.at(d, t.NR_ACCESSES)),
            age=self.range(t.at(d, t.AGE)),
            quota=Quota(num(t.QUOTA_MS), num(t.QUOTA_BYTES), num(t.QUOTA_RESET_INTERVAL_MS), tuple(goals)),
            watermarks=Watermarks(
                _word(self.text(t.at(d, t.WATERMARKS_METRIC))),
                num(t.WATERMARKS_INTERVAL_US),
                num(t.WATERMARKS_HIGH),
                num(t.WATERMARKS_MID),
                num(t.WATERMARKS_LOW),
            ),
            filters=tuple(self.entries(d, t.LIST_FILTERS, self.filter)),
            stats=SchemeStats(
                num(t.STATS_NR_TRIED),
                num(t.STATS_SZ_TRIED),
                num(t.STATS_NR_APPLIED),
                num(t.STATS_SZ_APPLIED),
                num(t.STATS_QT_EXCEEDS),
            ),
            dests=tuple(dests),
            goal_tuner=tuner,
        )

    def context(self, d: str, i: int) -> Context:
        self.text(t.at(d, t.PAUSE))  # for the ABI probe (7.2)
        avail = tuple(w for w in (self.text(t.at(d, t.AVAIL_OPERATIONS)) or "").split() if len(w) <= 32)[:16]
        return Context(
            id=i,
            operations=_word(self.text(t.at(d, t.OPERATIONS))),
            avail_operations=avail,
            sample_us=self.num(t.at(d, t.SAMPLE_US)),
            aggr_us=self.num(t.at(d, t.AGGR_US)),
            update_us=self.num(t.at(d, t.UPDATE_US)),
            nr_regions=self.range(t.at(d, t.NR_REGIONS)),
            targets=tuple(self.entries(d, t.LIST_TARGETS, self.target)),
            schemes=tuple(self.entries(d, t.LIST_SCHEMES, self.scheme)),
        )

    def kdamond(self, d: str, i: int) -> Kdamond:
        state = _word(self.text(t.at(d, t.STATE)))
        return Kdamond(
            id=i,
            path=d,
            state=state,
            pid=sysfs_int(self.text(t.at(d, t.PID))),
            contexts=tuple(self.entries(d, t.LIST_CONTEXTS, self.context)),
        )


def read_modules(r: Reader) -> Tuple[DamonModule, ...]:
    out = []
    for name in paths.DAMON_MODULES:
        d = f"{paths.MODULE_DIR}/{name}/parameters"
        if not r.isdir(d):
            continue
        out.append(DamonModule(name, _bool(r.text(d + "/enabled")), sysfs_int(r.text(d + "/kdamond_pid"))))
    return tuple(out)


def read_damon(root: str = "/", reader: Optional[Reader] = None) -> DamonState:
    """Every kdamond under ``root``'s DAMON sysfs, and the DAMON modules' kdamonds."""
    r = reader or Reader(root)
    modules = read_modules(r)
    if not r.isdir(KDAMONDS):
        return DamonState(False, None, (), modules, {})
    w = _Walk(r)
    nr = sysfs_int(w.text(NR_KDAMONDS))
    kds = tuple(
        w.kdamond(t.entry(t.ADMIN, t.LIST_KDAMONDS, n), int(n)) for n in r.listdir(KDAMONDS, is_decimal)[:MAX_ENTRIES]
    )
    return DamonState(True, nr, kds, modules, w.files)


def any_running(r: Reader) -> bool:
    """Whether any kdamond under ``kdamonds/`` is on, reading only their ``state`` files
    (the NFD tiering label asks no more; :attr:`Kdamond.running` answers the same for a full read)."""
    if not r.isdir(KDAMONDS):
        return False
    return any(
        _word(r.text(t.at(t.entry(t.ADMIN, t.LIST_KDAMONDS, n), t.STATE))) == "on"
        for n in r.listdir(KDAMONDS, is_decimal)[:MAX_ENTRIES]
    )


# ---------------------------------------------------------------------------- probing


def probe(state: DamonState, release: Optional[str], reader: Optional[Reader] = None) -> DamonCaps:
    """What DAMON can do on this kernel, from the tree itself first, then the release and kernel config.

    Evidence order: a context's ``avail_operations`` lists ``paddr`` when it is built; a scheme
    directory has ``target_nid`` exactly when the migrate actions exist (both came in 6.11),
    and a ``dests/`` directory exactly when weighted destinations exist (6.17).
    Without any kdamond directory to look at (the usual idle host), the release decides
    and the kernel config (``/boot/config-<release>``, else ``/proc/config.gz``) says whether
    CONFIG_DAMON_PADDR is set.  The config (~280 KiB on Debian) is read only then: the tuning
    engine probes on every plan and the daemon on every reconcile, and with cxlctl's kdamonds
    running ``avail_operations`` has already answered.
    """
    ev: List[str] = []
    ver = kernel_version(release)
    if not state.sysfs:
        return DamonCaps(False, release, None, None, False, False, (f"no {KDAMONDS}",))
    ev.append("DAMON sysfs interface present")
    paddr: Optional[bool] = None
    migrate: Optional[bool] = None
    dests: Optional[bool] = None
    for k in state.kdamonds:
        for c in k.contexts:
            if c.avail_operations and paddr is None:
                paddr = "paddr" in c.avail_operations
                ev.append(f"avail_operations of kdamond {k.id}: {' '.join(c.avail_operations)}")
            for s in c.schemes:
                sd = t.entry(t.entry(k.path, t.LIST_CONTEXTS, c.id), t.LIST_SCHEMES, s.id)
                if migrate is None:
                    has = t.at(sd, t.TARGET_NID) in state.files
                    migrate = has
                    ev.append(f"scheme directories {'have' if has else 'lack'} target_nid")
                if dests is None:
                    dests = t.count(sd, t.LIST_DESTS) in state.files
                    ev.append(f"scheme directories {'have' if dests else 'lack'} dests/ (weighted destinations)")
    if paddr is None and reader is not None:
        found, cfg_src, _ = read_config(reader, release)
        cfg = found or {}
        if any(k.startswith("CONFIG_DAMON") for k in cfg):
            paddr = cfg.get("CONFIG_DAMON_PADDR") == "y"
            ev.append(f"{cfg_src}: CONFIG_DAMON_PADDR={cfg.get('CONFIG_DAMON_PADDR', 'unset')}")
    if migrate is None and ver is not None:
        migrate = ver >= MIGRATE_SINCE
        ev.append(f"kernel {ver[0]}.{ver[1]}: migrate_hot/migrate_cold {'present' if migrate else 'absent'} (6.11+)")
    level, abi_ev = abi_level(state, ver)
    ev += abi_ev
    goal_metrics = tuple(m for m, (since, _) in t.GOAL_METRICS.items() if level is not None and level >= since)
    node_goals = "node_mem_used_bp" in goal_metrics
    allow = ver is not None and ver >= FILTER_ALLOW_SINCE
    if dests is None:
        dests = ver is not None and ver >= DESTS_SINCE
        if ver is not None and dests:
            ev.append(f"kernel {ver[0]}.{ver[1]}: scheme destinations dests/ present (6.17+)")
    return DamonCaps(
        True,
        release,
        paddr,
        migrate,
        node_goals,
        allow,
        tuple(ev),
        dests,
        goal_metrics,
        level is not None and level >= TUNER_SINCE,
    )


def abi_level(state: DamonState, ver: Optional[Tuple[int, int]]) -> Tuple[Optional[Tuple[int, int]], List[str]]:
    """The DAMON ABI release this kernel's tree shows (for the goal metrics), and how that was found.

    Each marker file of :data:`cxlctl.damon.tree.ABI_MARKERS` present in a directory of its kind
    proves at least its release; absent from such a directory, it proves an older one.  The
    release string only places the kernel inside what the tree leaves open (all of it on an idle
    host, which has no directory to look at), so a vendor kernel with backports, or without them,
    is taken for what it offers."""
    lo: Optional[Tuple[int, int]] = None
    hi: Optional[Tuple[int, int]] = None  # exclusive: the kernel is older than this
    ev: List[str] = []
    dirs: Dict[str, List[str]] = {"scheme": [], "context": [], "goal": []}
    for k in state.kdamonds:
        for c in k.contexts:
            cd = t.entry(k.path, t.LIST_CONTEXTS, c.id)
            dirs["context"].append(cd)
            for s in c.schemes:
                sd = t.entry(cd, t.LIST_SCHEMES, s.id)
                dirs["scheme"].append(sd)
                dirs["goal"] += [t.entry(sd, t.LIST_GOALS, g.id) for g in s.quota.goals]
    for where, name, since in t.ABI_MARKERS:
        if not dirs[where]:
            continue
        has = any(t.at(d, name) in state.files for d in dirs[where])
        ev.append(f"{where} directories {'have' if has else 'lack'} {name} ({since[0]}.{since[1]}+)")
        if has and (lo is None or since > lo):
            lo = since
        if not has and (hi is None or since < hi):
            hi = since
    if ver is None:
        return lo, ev
    level = ver
    if lo is not None and level < lo:
        level = lo
    if hi is not None and level >= hi:
        level = (hi[0], hi[1] - 1) if hi[1] > 0 else (hi[0] - 1, 99)
    if level != ver:
        ev.append(f"the tree overrules the release {ver[0]}.{ver[1]}: DAMON ABI of {level[0]}.{level[1]}")
    return level, ev


def probe_host(root: str = "/") -> Tuple[DamonState, DamonCaps]:
    """Read and probe in one go (the tuning engine and ``tune recommend`` use this)."""
    r = Reader(root)
    state = read_damon(root, r)
    release = r.text(paths.OSRELEASE)
    return state, probe(state, release, r)
