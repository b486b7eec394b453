"""The DAMON sysfs tree, spelled once: every kdamond, context, target, region and scheme path.

The reader (:mod:`cxlctl.damon.sysfs`) and the tuning engine's writes
(:mod:`cxlctl.tuning.damon_tiering`) build their paths here, as damo keeps its own in
one module (``_damon_sysfs.py``): a file the engine writes is, by construction, the file
the reader reads back, and a kernel that renames one is fixed in one place.

The tree (``Documentation/admin-guide/mm/damon/usage.rst``)::

    /sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds
        K/state, pid
        K/contexts/nr_contexts
            C/avail_operations, operations, pause (7.2)
            C/monitoring_attrs/intervals/{sample_us,aggr_us,update_us}, nr_regions/{min,max}
            C/targets/nr_targets, T/pid_target, T/regions/nr_regions, R/{start,end}
            C/schemes/nr_schemes
                S/action, target_nid (6.11), apply_interval_us
                S/access_pattern/{sz,nr_accesses,age}/{min,max}
                S/quotas/{ms,bytes,reset_interval_ms}, goal_tuner (7.1),
                    goals/nr_goals, G/{target_metric,target_value,current_value,nid (6.16),path (6.19)}
                S/watermarks/{metric,interval_us,high,mid,low}
                S/filters/nr_filters, F/{type,matching,memcg_path,addr_start,addr_end,allow}
                S/dests/nr_dests, D/{id,weight} (6.17)
                S/stats/{nr_tried,sz_tried,nr_applied,sz_applied,qt_exceeds}, nr_snapshots (7.0)

Every numbered list is a directory ``X`` holding a count file ``nr_X`` and the entries
``0`` … ``nr_X - 1`` (writing the count re-creates the entries): :func:`count` and
:func:`entry` spell that once for every kind of list.  File names are constants named
after the directory they sit in; :func:`at` joins one to its directory.
"""

from __future__ import annotations

from cxlctl.hostio import paths

ADMIN = paths.DAMON_ADMIN
KDAMONDS = paths.DAMON_KDAMONDS
NR_KDAMONDS = paths.DAMON_NR_KDAMONDS

# -- the numbered lists, each relative to the directory that holds it
LIST_KDAMONDS = "kdamonds"  # in ADMIN
LIST_CONTEXTS = "contexts"  # in a kdamond
LIST_TARGETS = "targets"  # in a context
LIST_REGIONS = "regions"  # in a target
LIST_SCHEMES = "schemes"  # in a context
LIST_GOALS = "quotas/goals"  # in a scheme (6.8)
LIST_FILTERS = "filters"  # in a scheme
LIST_DESTS = "dests"  # in a scheme (6.17)

# -- a kdamond's files
STATE = "state"  # on | off; commands: commit, update_schemes_stats, ...
PID = "pid"

# -- a context's files
OPERATIONS = "operations"
AVAIL_OPERATIONS = "avail_operations"
SAMPLE_US = "monitoring_attrs/intervals/sample_us"
AGGR_US = "monitoring_attrs/intervals/aggr_us"
UPDATE_US = "monitoring_attrs/intervals/update_us"
NR_REGIONS = "monitoring_attrs/nr_regions"  # a range (MIN, MAX)
PAUSE = "pause"  # 7.2

# -- a target's and a region's files
PID_TARGET = "pid_target"
START = "start"
END = "end"

# -- a scheme's files
ACTION = "action"
TARGET_NID = "target_nid"  # 6.11
APPLY_INTERVAL_US = "apply_interval_us"
SZ = "access_pattern/sz"  # a range
NR_ACCESSES = "access_pattern/nr_accesses"  # a range
AGE = "access_pattern/age"  # a range
QUOTA_MS = "quotas/ms"
QUOTA_BYTES = "quotas/bytes"
QUOTA_RESET_INTERVAL_MS = "quotas/reset_interval_ms"
QUOTA_GOAL_TUNER = "quotas/goal_tuner"  # 7.1: consist (the default) | temporal
WATERMARKS_METRIC = "watermarks/metric"
WATERMARKS_INTERVAL_US = "watermarks/interval_us"
WATERMARKS_HIGH = "watermarks/high"
WATERMARKS_MID = "watermarks/mid"
WATERMARKS_LOW = "watermarks/low"
STATS_NR_TRIED = "stats/nr_tried"
STATS_SZ_TRIED = "stats/sz_tried"
STATS_NR_APPLIED = "stats/nr_applied"
STATS_SZ_APPLIED = "stats/sz_applied"
STATS_QT_EXCEEDS = "stats/qt_exceeds"
STATS_NR_SNAPSHOTS = "stats/nr_snapshots"  # 7.0

# -- a range directory's files
MIN = "min"
MAX = "max"

# -- a quota goal's files
GOAL_TARGET_METRIC = "target_metric"
GOAL_TARGET_VALUE = "target_value"
GOAL_CURRENT_VALUE = "current_value"
GOAL_NID = "nid"  # 6.16
GOAL_PATH = "path"  # 6.19: the memory cgroup of node_memcg_* metrics

#: quota goal metrics cxlctl can write: name -> (the release that added it, the files it needs
#: beside target_metric/target_value).  ``node_eligible_mem_bp`` is the share of the memory in
#: the regions that match the scheme's access pattern (not its filters: every LRU folio there counts)
#: that sits on ``nid``.
GOAL_METRICS = {
    "node_mem_used_bp": ((6, 16), (GOAL_NID,)),
    "node_mem_free_bp": ((6, 16), (GOAL_NID,)),
    "node_memcg_used_bp": ((6, 19), (GOAL_NID, GOAL_PATH)),
    "node_memcg_free_bp": ((6, 19), (GOAL_NID, GOAL_PATH)),
    "active_mem_bp": ((7, 0), ()),
    "inactive_mem_bp": ((7, 0), ()),
    "node_eligible_mem_bp": ((7, 2), (GOAL_NID,)),
}
#: ``quotas/goal_tuner`` values (7.1)
GOAL_TUNERS = ("consist", "temporal")

#: files whose presence in a scheme / context / goal directory shows the release that added them:
#: (where, file, release).  What the kernel's own tree offers decides which goal metrics it takes;
#: the release string is asked only where no directory answers (an idle host has none).
ABI_MARKERS = (
    ("goal", GOAL_NID, (6, 16)),
    ("goal", GOAL_PATH, (6, 19)),
    ("scheme", STATS_NR_SNAPSHOTS, (7, 0)),
    ("scheme", QUOTA_GOAL_TUNER, (7, 1)),
    ("context", PAUSE, (7, 2)),
)

# -- a filter's files
FILTER_TYPE = "type"
FILTER_MATCHING = "matching"
FILTER_ALLOW = "allow"  # 6.14
FILTER_MEMCG_PATH = "memcg_path"

# -- a destination's files (6.17)
DEST_ID = "id"
DEST_WEIGHT = "weight"


def at(directory: str, name: str) -> str:
    """File (or sub-directory) ``name`` of ``directory``."""
    return directory + "/" + name


def listing(parent: str, kind: str) -> str:
    """The directory of list ``kind`` (a ``LIST_*``) in ``parent``."""
    return at(parent, kind)


def count(parent: str, kind: str) -> str:
    """The count file of list ``kind`` in ``parent`` (``…/schemes/nr_schemes``)."""
    return at(listing(parent, kind), "nr_" + kind.rsplit("/", 1)[-1])


def entry(parent: str, kind: str, index: object) -> str:
    """Entry ``index`` of list ``kind`` in ``parent`` (``…/schemes/0``)."""
    return f"{listing(parent, kind)}/{index}"


def kdamond(k: int) -> str:
    return entry(ADMIN, LIST_KDAMONDS, k)


def state(k: int) -> str:
    """Kdamond ``k``'s on/off (and command) file."""
    return at(kdamond(k), STATE)


def context(k: int, c: int) -> str:
    return entry(kdamond(k), LIST_CONTEXTS, c)


def scheme(k: int, c: int, s: int) -> str:
    return entry(context(k, c), LIST_SCHEMES, s)


def is_state(path: str) -> bool:
    """``…/kdamonds/K/state``: a kdamond's on/off file (K in ASCII digits)."""
    head, sep, tail = path.rpartition("/")
    if sep != "/" or tail != STATE:
        return False
    parent, sep, k = head.rpartition("/")
    return sep == "/" and parent == KDAMONDS and k.isascii() and k.isdigit()
