"""What doctor found (:class:`Check`) and what it read to find it (:class:`Facts`)."""

from __future__ import annotations

from typing import Dict, Final, List, Literal, Optional, Tuple

from cxlctl.hostio.host import Host
from cxlctl.model import Inventory
from cxlctl.namedrecord import NamedTuple

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cxlctl.capacity.pinnable import Share
    from cxlctl.probe.store import Stored

#: a check's result; a tag, not free text: mypy rejects a compare with a word it never holds
Result = Literal["ok", "note", "warn", "fail", "cannot-check"]
#: results, mildest first; only ``fail`` makes ``doctor`` exit 1
OK: Final = "ok"
NOTE: Final = "note"
WARN: Final = "warn"
FAIL: Final = "fail"
CANNOT: Final = "cannot-check"
RESULTS: Tuple[Result, ...] = (OK, NOTE, WARN, FAIL, CANNOT)

#: layers in the order doctor walks them (firmware up to the engine)
LAYERS = ("Kernel", "Firmware", "Devices and regions", "Tools", "Tuning and services", "Inference readiness")


class Evidence(NamedTuple):
    """One thing read: a file (or a command) and the value that mattered."""

    source: str
    value: str


class Check(NamedTuple):
    layer: str
    id: str  # stable, for scripts: "kernel.modules.cxl_pci"
    result: Result
    message: str  # what was found, and for cannot-check why it could not be
    evidence: Tuple[Evidence, ...] = ()
    fix: str = ""  # a command or a setting; empty when there is nothing to do


class Probe(NamedTuple):
    """A tool's answer: exit status and output; ``rc`` None means the tool is not installed."""

    rc: Optional[int]
    out: str


class Facts(NamedTuple):
    """Everything the checks look at, read once (see :mod:`.gather`)."""

    host: Host  # the host (or recorded tree) read; evidence is shown under its root
    as_root: bool  # could root-only files be read (live: euid 0; replay: the record's as_root)
    inv: Inventory
    config: Optional[Dict[str, str]]  # CONFIG_X -> y/m/value ("n" for "is not set")
    config_source: Optional[str]
    config_note: Optional[str]  # why the config could not be read
    modules: Optional[Dict[str, str]]  # loaded module -> state (from /proc/modules)
    sys_modules: Tuple[str, ...]  # /sys/module entries (built-in modules with parameters too)
    cmdline: Optional[str]
    iomem: Optional[str]
    acpi_tables: Optional[Tuple[str, ...]]  # None: the directory is not there
    udev_rules: Tuple[Tuple[str, str], ...]  # (file, matching line) that reconfigure dax or online memory
    daxctl_conf: Tuple[Tuple[str, str], ...]  # (file, [reconfigure-device ...] section)
    thp: Optional[str]
    mems_allowed: Optional[str]  # Mems_allowed_list of this process (what a launched engine inherits)
    memlock: Optional[Tuple[str, str]]  # (soft, hard) of "Max locked memory", bytes or "unlimited"
    probes: Optional[Dict[str, Probe]]  # " ".join(argv) -> answer; None: tools not asked (replay)
    probes_note: Optional[str]
    tuning: object  # cxlctl.tuning.results.StatusResult, or a str saying why it is unknown
    conflicts: Tuple[object, ...]  # cxlctl.tuning.conflicts.Conflict
    tuned_active: Optional[str]  # /etc/tuned/active_profile (None: TuneD not installed or no profile)
    nfd_labels: Optional[str]  # the daemon's NFD feature file
    engine: Optional[str]  # --for
    launch: object = None  # cxlctl.launch.build.LaunchPlan, or a str saying why it could not be planned
    notes: Tuple[Tuple[str, str], ...] = ()
    #: cxlctl.damon.sysfs.DamonModule of each DAMON module present (DAMON_STAT, _RECLAIM, _LRU_SORT)
    damon_modules: Tuple[object, ...] = ()
    #: ``Seccomp`` of /proc/self/status: 0 none, 1 strict, 2 a filter (what a launched engine inherits)
    seccomp: Optional[str] = None
    #: the engine's arguments doctor planned with (``doctor --for ENGINE -- ARGS``; a placeholder model without)
    engine_args: Tuple[str, ...] = ()
    #: the engines' NUMA variables of the environment a launch from this shell inherits (SGLANG_*NUMA*)
    numa_env: Tuple[Tuple[str, str], ...] = ()
    #: why the plan with --kv-size auto failed, when doctor then planned without --kv-size
    launch_note: Optional[str] = None
    #: ``cxlctl probe``'s stored record judged against the inventory (cxlctl.probe.store.Stored); None: none
    probe: Optional[Stored] = None
    #: the daemon's configuration lends capacity ("FILE: [capacity] adopt = MODE"); None: no file, or adopt = none
    lending: Optional[str] = None
    #: the host's split (cxlctl.capacity.pinnable.Share): [capacity] pinnable against its CXL zones
    share: Optional[Share] = None
    #: the modules whose driver directory exists (paths.MODULE_DRIVERS): registered, so loaded or built in
    drivers: Tuple[str, ...] = ()


def worst(checks: List[Check]) -> Result:
    order = {OK: 0, NOTE: 1, CANNOT: 1, WARN: 2, FAIL: 3}
    return max((c.result for c in checks), key=lambda r: order[r], default=OK)
