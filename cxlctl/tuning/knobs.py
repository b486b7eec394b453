"""The knob registry: every kernel setting the tuning engine may change, one entry each.

An entry knows its path, how to validate a profile value, how to read the
kernel's text back into a canonical value (so verify compares meanings, not
spellings: ``true`` = ``1``), whether this kernel has it (probe), whether
changing it can be undone, and which knobs it is coupled with.  This is TuneD's
get/set registry without the plugin machinery (docs/tuning.md lists them all).

Names, paths and the apply order come from the one table ``status`` reads too
(:data:`cxlctl.hostio.paths.KNOBS`); REGISTRY lists its entries in that order.
The registry order is the apply order; rollback and revert go in reverse.  It
is chosen for safety in between: the promotion rate limit is set before NUMA
balancing turns tiering on, and undone after it is turned off again.
"""

from __future__ import annotations

from typing import Any, Dict, FrozenSet, Literal, Mapping, Optional, Sequence, Tuple

from cxlctl.damon.sysfs import DamonCaps, DamonState
from cxlctl.hostio import paths
from cxlctl.hostio.host import Host
from cxlctl.hostio.reader import Unreadable
from cxlctl.namedrecord import NamedTuple
from cxlctl.parse import decimal_suffix, is_decimal

WI_DIR = paths.WI_DIR
#: ``auto`` appeared in v6.16.  Some 6.18-era kernels name the file ``__auto_type``
#: (the attribute name went through a ``#define auto __auto_type`` macro); accept both.
WI_AUTO_NAMES = ("auto", "__auto_type")
WEIGHT_MIN, WEIGHT_MAX = 1, 255
#: the default largest weight computed from bandwidth: the scale Linux 6.16+'s own ``auto`` mode
#: spreads its weights over (``weightiness`` in mm/mempolicy.c), so cxlctl's weights are no
#: coarser than the kernel's (38912/16000/6144 MB/s: the kernel 20:8:3, cxlctl 19:8:3)
DEFAULT_MAX_WEIGHT = 32

TRUE_WORDS = ("1", "y", "yes", "true", "on")
FALSE_WORDS = ("0", "n", "no", "false", "off")


class Current(NamedTuple):
    """Raw text of every file the registry may touch (None = absent or unreadable)."""

    values: Dict[str, Optional[str]]
    wi_files: Optional[Tuple[str, ...]]  # names in the weighted_interleave dir; None: no dir
    damon: Optional[DamonState] = None  # every kdamond on the host (its files are in ``values`` too)
    damon_caps: Optional[DamonCaps] = None
    #: files that are there but cannot be read (path -> "cannot read ROOT/path: why"): not "absent"
    unreadable: Dict[str, str] = {}
    #: the cgroups a profile's DAMON ``memcg`` names: path -> :data:`MemcgState`
    memcgs: Dict[str, str] = {}
    #: ``cxlctl probe``'s stored record (cxlctl.probe.store.read) and the boot id it is judged against
    probe: Optional[Dict[str, Any]] = None
    boot_id: Optional[str] = None

    def get(self, path: str) -> Optional[str]:
        return self.values.get(path)

    @property
    def wi_auto_path(self) -> Optional[str]:
        for name in WI_AUTO_NAMES:
            if self.wi_files and name in self.wi_files:
                return f"{WI_DIR}/{name}"
        return None

    def wi_node_paths(self) -> Dict[int, str]:
        out: Dict[int, str] = {}
        for name in self.wi_files or ():
            nid = decimal_suffix(name, "node")  # ASCII digits only: "node²" is not a node
            if nid is not None:
                out[nid] = f"{WI_DIR}/{name}"
        return out


class BandwidthRule(NamedTuple):
    """Promotion rate limit derived from the CXL tier's write bandwidth."""

    fraction: float
    fallback: int


class WISpec(NamedTuple):
    """A profile's weighted-interleave request."""

    #: "bandwidth" (the firmware's figures, or cxlctl probe's current ones where the firmware has none
    #: or is more than 2x off them) | "firmware" (the firmware's alone) | "measured" (cxlctl probe's
    #: stored figures) | "ratio"
    weights: str
    ratio: Optional[Tuple[int, int]]  # dram:cxl when weights == "ratio"
    nodes: Tuple[str, ...]  # selectors: "dram", "cxl", "all" or node ids as strings
    prefer_auto: bool
    max_weight: int


#: a single file under /proc/sys, a single sysfs file, or a group of files planned as a whole
KnobKind = Literal["sysctl", "sysfs", "group"]


class Knob:
    """One registry entry.  Subclasses implement validate/canonical for their type."""

    extra_keys: FrozenSet[str] = frozenset()

    def __init__(
        self,
        name: str,
        summary: str,
        *,
        reversible: bool = True,
        reversible_note: str = "",
        coupled: Tuple[str, ...] = (),
        capability: Optional[str] = None,
        since: str = "",
    ) -> None:
        self.name = name
        #: from the one table of knobs status and tune share (KeyError: a knob missing there)
        self.path = path = paths.knob_path(name)
        self.kind: KnobKind = "sysctl" if path.startswith(paths.PROC_SYS) else "sysfs"
        self.summary = summary
        self.reversible = reversible
        self.reversible_note = reversible_note
        self.coupled = coupled
        self.capability = capability
        self.since = since

    @property
    def sysctl_key(self) -> Optional[str]:
        if self.path.startswith(paths.PROC_SYS):
            return self.path[len(paths.PROC_SYS) :].replace("/", ".")
        return None

    def validate(self, value: Any, table: Mapping[str, Any]) -> Any:
        """Profile value → internal value; ValueError(reason) when unacceptable."""
        raise NotImplementedError

    def canonical(self, raw: str) -> Optional[str]:
        """Kernel text → canonical form; None when it cannot be parsed."""
        raise NotImplementedError

    def text(self, canonical: str) -> str:
        """What to write for a canonical value (one line, newline-terminated)."""
        return canonical + "\n"

    def show(self, value: Any) -> str:
        """A profile value for humans (``tune show``)."""
        return str(value).lower() if isinstance(value, bool) else str(value)

    def probe(self, cur: Current) -> Optional[str]:
        """None when the kernel has this knob, else why not."""
        if self.path in cur.unreadable:
            return cur.unreadable[self.path]
        if cur.get(self.path) is None:
            return f"{self.path} is absent on this kernel" + (f" (needs {self.since})" if self.since else "")
        return None

    def files(self, cur: Current) -> Tuple[str, ...]:
        """Every file saved in the journal for this knob (a group saves all its members)."""
        return (self.path,)


class IntKnob(Knob):
    def __init__(self, name: str, summary: str, lo: int, hi: int, **kw: Any) -> None:
        super().__init__(name, summary, **kw)
        self.lo, self.hi = lo, hi

    def validate(self, value: Any, table: Mapping[str, Any]) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"must be an integer {self.lo}-{self.hi}, got {value!r}")
        if not self.lo <= value <= self.hi:
            raise ValueError(f"{value} is out of range (allowed {self.lo}-{self.hi})")
        return value

    def canonical(self, raw: str) -> Optional[str]:
        t = raw.strip()
        if not is_decimal(t[1:] if t.startswith("-") else t):  # int() would take "١" and "1_0"
            return None
        return str(int(t, 10))


class RateLimitKnob(IntKnob):
    """``numa_balancing_promote_rate_limit_MBps``: an integer, or ``"bandwidth"`` (a share of CXL write bandwidth)."""

    extra_keys = frozenset({"fraction", "fallback"})

    def validate(self, value: Any, table: Mapping[str, Any]) -> Any:
        if value == "bandwidth":
            frac = table.get("fraction", 0.1)
            if isinstance(frac, bool) or not isinstance(frac, (int, float)) or not 0 < frac <= 1:
                raise ValueError(f"fraction must be a number in (0, 1], got {frac!r}")
            fb = table.get("fallback", 1024)
            if isinstance(fb, bool) or not isinstance(fb, int) or not self.lo <= fb <= self.hi:
                raise ValueError(f"fallback must be an integer {self.lo}-{self.hi} (MB/s), got {fb!r}")
            return BandwidthRule(float(frac), fb)
        for k in self.extra_keys:
            if k in table:
                raise ValueError(f"'{k}' only applies with value = \"bandwidth\"")
        if isinstance(value, str):
            raise ValueError(f'must be an integer (MB/s) or "bandwidth", got {value!r}')
        return super().validate(value, table)

    def show(self, value: Any) -> str:
        if isinstance(value, BandwidthRule):
            return f"{value.fraction:g} x CXL write bandwidth (fallback {value.fallback} MB/s)"
        return str(value)


def _bool_word(t: str) -> Optional[str]:
    """Canonical true/false for the words the kernel's kstrtobool takes (lower-cased), else None."""
    if t in TRUE_WORDS:
        return "true"
    if t in FALSE_WORDS:
        return "false"
    return None


class BoolKnob(Knob):
    def validate(self, value: Any, table: Mapping[str, Any]) -> Any:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise ValueError(f"must be true or false, got {value!r}")

    def canonical(self, raw: str) -> Optional[str]:
        return _bool_word(raw.strip().lower())

    def text(self, canonical: str) -> str:
        # "1"/"0": accepted by every kernel's kstrtobool ("true"/"false" only since v5.19)
        return ("1" if canonical == "true" else "0") + "\n"


class EnumKnob(Knob):
    def __init__(self, name: str, summary: str, choices: Tuple[str, ...], **kw: Any) -> None:
        super().__init__(name, summary, **kw)
        self.choices = choices

    def validate(self, value: Any, table: Mapping[str, Any]) -> Any:
        if not isinstance(value, str) or value not in self.choices:
            raise ValueError(f"must be one of {', '.join(self.choices)}; got {value!r}")
        return value

    def canonical(self, raw: str) -> Optional[str]:
        t = raw.strip()
        return t if t in self.choices else None


class WeightedInterleaveKnob(Knob):
    """The weighted-interleave group: ``nodeN`` weights (1-255) plus ``auto`` where it exists.

    Writing any weight silently switches ``auto`` off, and switching ``auto`` on
    rewrites every weight, so the group is saved, planned and restored as a whole.
    """

    extra_keys = frozenset({"weights", "nodes", "prefer_auto", "max_weight"})

    def __init__(self, name: str, summary: str, **kw: Any) -> None:
        super().__init__(name, summary, **kw)
        self.kind = "group"

    def validate(self, value: Any, table: Mapping[str, Any]) -> Any:
        if "value" in table:
            raise ValueError("the weighted_interleave group takes 'weights' (and 'nodes'), not 'value'")
        w = table.get("weights", "bandwidth")
        ratio: Optional[Tuple[int, int]] = None
        if not isinstance(w, str):
            raise ValueError(
                f'weights must be "bandwidth", "firmware", "measured" or a "DRAM:CXL" ratio such as "3:1"; got {w!r}'
            )
        if w not in ("bandwidth", "firmware", "measured"):
            ratio = parse_ratio(w)
            w = "ratio"
        nodes = table.get("nodes", ["dram", "cxl"])
        if isinstance(nodes, str):
            nodes = [nodes]
        if not isinstance(nodes, list) or not nodes:
            raise ValueError('nodes must be a non-empty list of "dram", "cxl", "all" or node numbers')
        sel = []
        for n in nodes:
            if isinstance(n, bool):
                raise ValueError(f"bad node selector {n!r}")
            if isinstance(n, int) and 0 <= n < 1024:
                sel.append(str(n))
            elif n in ("dram", "cxl", "all"):
                sel.append(str(n))
            else:
                raise ValueError(f'bad node selector {n!r}: use "dram", "cxl", "all" or a node number')
        pa = table.get("prefer_auto", True)
        if not isinstance(pa, bool):
            raise ValueError(f"prefer_auto must be true or false, got {pa!r}")
        mw = table.get("max_weight", DEFAULT_MAX_WEIGHT)
        if isinstance(mw, bool) or not isinstance(mw, int) or not WEIGHT_MIN <= mw <= WEIGHT_MAX:
            raise ValueError(f"max_weight must be an integer {WEIGHT_MIN}-{WEIGHT_MAX}, got {mw!r}")
        return WISpec(w, ratio, tuple(sel), pa, mw)

    def canonical(self, raw: str) -> Optional[str]:
        """Canonical form of one member file: a weight (int) or auto (true/false)."""
        t = raw.strip().lower()
        if is_decimal(t):
            return str(int(t))
        return _bool_word(t)

    def text(self, canonical: str) -> str:
        # auto is written as "true"/"false" (the file exists only on 6.16+, whose
        # kstrtobool accepts them); "1"/"0" would read back as weights in a recorded tree
        return canonical + "\n"

    def show(self, value: Any) -> str:
        if not isinstance(value, WISpec):
            return str(value)
        nodes = ",".join(value.nodes)
        if value.weights == "ratio" and value.ratio:
            return f"ratio DRAM:CXL {value.ratio[0]}:{value.ratio[1]} over {nodes}"
        if value.weights == "measured":
            return f"from measured bandwidth (cxlctl probe) over {nodes}"
        if value.weights == "firmware":
            return f"from the firmware's bandwidth alone (max weight {value.max_weight}) over {nodes}"
        auto = "kernel auto mode if available, else " if value.prefer_auto else ""
        return f"{auto}from bandwidth (max weight {value.max_weight}) over {nodes}"

    def probe(self, cur: Current) -> Optional[str]:
        if cur.wi_files is None:
            return f"{WI_DIR} is absent (weighted interleave needs Linux 6.9 or later)"
        return None

    def files(self, cur: Current) -> Tuple[str, ...]:
        # nodes first, auto last: this is also the restore order (restoring auto=true
        # after the weights lets the kernel recompute them; the other way round, the
        # weight writes would switch auto off again)
        nodes = [p for _, p in sorted(cur.wi_node_paths().items())]
        auto = cur.wi_auto_path
        return tuple(nodes + ([auto] if auto else []))


class DamonKnob(Knob):
    """DAMON tiering: kdamonds with migrate_cold/migrate_hot schemes (:mod:`cxlctl.tuning.damon_tiering`).

    Set by a profile's ``[damon]`` section, not under ``[knobs]``; planned as a whole
    by :func:`cxlctl.tuning.plan.plan`.  Member files hold numbers and words the kernel
    echoes back as written, so the canonical form is the stripped text.
    """

    def __init__(self, name: str, summary: str, **kw: Any) -> None:
        super().__init__(name, summary, **kw)
        self.kind = "group"

    def validate(self, value: Any, table: Mapping[str, Any]) -> Any:
        from .damon_tiering import validate

        return validate(table)

    def canonical(self, raw: str) -> Optional[str]:
        t = raw.strip()
        return t if t else None

    def show(self, value: Any) -> str:
        from .damon_tiering import DamonSpec, show

        return show(value) if isinstance(value, DamonSpec) else str(value)

    def probe(self, cur: Current) -> Optional[str]:
        caps = cur.damon_caps
        if caps is None:
            return "DAMON was not probed"
        return caps.why_not

    def files(self, cur: Current) -> Tuple[str, ...]:
        return ()


def parse_ratio(text: str) -> Tuple[int, int]:
    """``"3:1"`` → (3, 1); both sides 1-255."""
    a, sep, b = text.strip().partition(":")
    if not sep or not is_decimal(a.strip()) or not is_decimal(b.strip()):
        raise ValueError(
            f'weights must be "bandwidth", "firmware", "measured" or a "DRAM:CXL" ratio such as "3:1"; got {text!r}'
        )
    x, y = int(a), int(b)
    for v in (x, y):
        if not WEIGHT_MIN <= v <= WEIGHT_MAX:
            raise ValueError(f"ratio {text!r}: each side must be {WEIGHT_MIN}-{WEIGHT_MAX}")
    return x, y


REGISTRY: Tuple[Knob, ...] = (
    IntKnob(
        "vm.zone_reclaim_mode",
        "reclaim on the local node before allocating from another (bitmask 1|2|4)",
        0,
        7,
    ),
    IntKnob(
        "vm.swappiness",
        "how readily anonymous memory is swapped relative to dropping page cache",
        0,
        200,
    ),
    BoolKnob(
        "demotion_enabled",
        "reclaim demotes cold pages to a slower memory tier instead of discarding/swapping them",
        coupled=("kernel.numa_balancing",),
        since="Linux 5.15",
    ),
    EnumKnob(
        "auto_online_blocks",
        "how hot-added memory blocks are onlined (and into which zone)",
        ("offline", "online", "online_kernel", "online_movable"),
        reversible_note="memory onlined while it was set keeps its zone after revert",
    ),
    RateLimitKnob(
        "kernel.numa_balancing_promote_rate_limit_MBps",
        "cap on NUMA-balancing promotion into each fast node (MB/s); only used with tiering mode",
        0,
        2**31 - 1,
        coupled=("kernel.numa_balancing",),
        since="Linux 6.0 with CONFIG_NUMA_BALANCING",  # numa_promotion_rate_limit (kernel/sched/fair.c)
    ),
    IntKnob(
        "kernel.numa_balancing",
        "automatic NUMA balancing: 0 off, 1 classic, 2 memory tiering (promotion), 3 both",
        0,
        3,
        coupled=("kernel.numa_balancing_promote_rate_limit_MBps", "demotion_enabled"),
        capability="CAP_SYS_ADMIN",
        since="CONFIG_NUMA_BALANCING",
    ),
    WeightedInterleaveKnob(
        "weighted_interleave",
        "per-node weights for MPOL_WEIGHTED_INTERLEAVE (nodeN 1-255, plus auto)",
        reversible_note="only new allocations follow the weights; pages already placed stay",
        since="Linux 6.9",
    ),
    DamonKnob(
        "damon",
        "DAMON tiering: kdamonds that migrate cold DRAM pages to CXL and hot CXL pages to DRAM",
        reversible_note="pages already migrated stay where they are",
        since="Linux 6.11 with CONFIG_DAMON_PADDR",
    ),
)

BY_NAME: Dict[str, Knob] = {k.name: k for k in REGISTRY}
ORDER: Dict[str, int] = {k.name: i for i, k in enumerate(REGISTRY)}


#: what a cgroup path is for DAMON's memcg filter: "memory" (a memory cgroup: the one kind the
#: kernel's filter finds), "parent" (a memory cgroup whose children have the controller too: the
#: filter matches pages charged to it alone, and its processes live in the children),
#: "no-memory" (a cgroup without the memory controller), "absent", or "cannot read ...: why"
MemcgState = str


def read_current(host: Host, memcgs: Sequence[str] = ()) -> Current:
    """Read every registry file under ``root`` (a few small reads; no inventory needed).

    A file that is there but cannot be read (a FIFO, a link out of the root, permission)
    is kept apart from an absent one: a plan then says "cannot read", not "absent on this
    kernel".  ``memcgs``: the cgroups a profile's DAMON filter names, whose state the plan
    checks (:data:`MemcgState`)."""
    values: Dict[str, Optional[str]] = {}
    unreadable: Dict[str, str] = {}
    r = host.reader

    def _read(path: str) -> Optional[str]:
        try:
            b = r.read(path)
        except Unreadable as e:
            unreadable[path] = str(e)
            return None
        return None if b is None else b.decode("utf-8", "replace")

    for k in REGISTRY:
        if k.kind != "group":
            values[k.path] = _read(k.path)
    wi: Optional[Tuple[str, ...]] = None
    if r.isdir(WI_DIR):
        names = r.listdir(WI_DIR)
        keep = sorted(n for n in names if decimal_suffix(n, "node") is not None or n in WI_AUTO_NAMES)
        wi = tuple(keep)
        for n in keep:
            values[f"{WI_DIR}/{n}"] = _read(f"{WI_DIR}/{n}")
    from cxlctl.damon.sysfs import probe_host

    damon, caps = probe_host(host)
    values.update(damon.files)
    groups: Dict[str, str] = {}
    for m in memcgs:
        # the kernel's memcg filter (damon_sysfs_memcg_path_to_id) walks the memory cgroups and
        # compares their paths: a cgroup whose memory controller is off has no memory cgroup to
        # find; its interface files (memory.stat; the root has it too) say which it is.  The filter
        # then matches a page charged to that very cgroup, not to its children (the ids are
        # compared, mm/damon/paddr.c): a cgroup that hands the controller on (subtree_control)
        # holds no process of its own below the root (cgroup v2's no-internal-process rule)
        c = m.rstrip("/") or "/"
        stat = paths.cgroup_file(c, "memory.stat")
        if not r.isdir(paths.CGROUP_DIR + c.rstrip("/")):
            groups[m] = "absent"
        elif _read(stat) is not None:
            handed = _read(paths.cgroup_file(c, "cgroup.subtree_control")) or ""
            groups[m] = "parent" if c != "/" and "memory" in handed.split() else "memory"
        else:
            groups[m] = unreadable.pop(stat, "") or "no-memory"
    from cxlctl.probe.store import read as read_probe

    return Current(values, wi, damon, caps, unreadable, groups, read_probe(host), host.boot_id)
