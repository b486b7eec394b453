"""Read everything doctor looks at, once, through the host-I/O layer.

Why one reader: ``cxlctl record`` passes its logging
:class:`~cxlctl.hostio.reader.Reader` here (after its scan), so every file a
check depends on lands in the record and ``doctor --root RECORD`` gives the
same answers.  What is reused rather than re-read: the inventory scan
(:func:`cxlctl.inventory.scan`), the tuning engine's status and its
TuneD/sysctl.d conflict finder, and the launcher's plan (``--for``).
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from cxlctl.capacity import pinnable
from cxlctl.errors import CxlctlError
from cxlctl.hostio import paths
from cxlctl.hostio.host import Host
from cxlctl.hostio.proc import status_field
from cxlctl.hostio.reader import Reader
from cxlctl.inventory import scan
from cxlctl.kconfig import read_config
from cxlctl.model import Inventory

from . import probes as pr
from .model import Facts, Probe

if TYPE_CHECKING:
    from cxlctl.probe.store import Stored

#: modules the CXL memory path uses (issue 14's list), with the config symbol that builds each
MODULES: Tuple[Tuple[str, str], ...] = (
    ("cxl_acpi", "CONFIG_CXL_ACPI"),
    ("cxl_pci", "CONFIG_CXL_PCI"),
    ("cxl_mem", "CONFIG_CXL_MEM"),
    ("cxl_port", "CONFIG_CXL_PORT"),
    ("dax_cxl", "CONFIG_DEV_DAX_CXL"),
    ("device_dax", "CONFIG_DEV_DAX"),
    ("kmem", "CONFIG_DEV_DAX_KMEM"),
)
#: ACPI tables that describe CXL memory: windows (CEDT), proximity (SRAT), performance (HMAT), distances (SLIT)
ACPI_NAMES = ("CEDT", "SRAT", "HMAT", "SLIT")
#: the engine arguments doctor plans with: a model is needed to plan, and which one does not
#: change what is checked (it is never loaded: the plan is a dry run)
ENGINE_ARGS: Dict[str, Tuple[str, ...]] = {"vllm": ("serve", "MODEL"), "sglang": ("--model-path", "MODEL")}


def parse_modules(text: str) -> Dict[str, str]:
    """``/proc/modules`` → module name → state (``Live``, ``Loading``, ``Unloading``)."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        f = line.split()
        if f:
            out[f[0]] = f[4] if len(f) > 4 else "?"
    return out


def _udev(host: Host, r: Reader) -> Tuple[Tuple[str, str], ...]:
    """Rules that reconfigure DAX devices (ndctl's daxctl rule) or online memory blocks.

    All rules files are scanned with the host's reader, which does not log (a record
    would otherwise copy a hundred unrelated files); the files that match are read
    again through ``r``, so a record holds exactly the evidence.
    """
    quiet = host.reader
    seen: Dict[str, str] = {}
    for d in paths.UDEV_RULES_DIRS:
        for n in quiet.listdir(d, lambda x: x.endswith(".rules")):
            seen.setdefault(n, f"{d}/{n}")  # a name in an earlier directory masks later ones
    out: List[Tuple[str, str]] = []
    for n in sorted(seen):
        path = seen[n]
        text = quiet.text(path)
        if not text or ("dax" not in text and "memory" not in text):
            continue
        hits = [ln for ln in _logical_lines(text) if _fights(ln)]
        if hits:
            r.raw(path)
            out.extend((path, h) for h in hits)
    return tuple(out)


def _logical_lines(text: str) -> List[str]:
    """udev rule lines with ``\\`` continuations joined, comments dropped."""
    out: List[str] = []
    cur = ""
    for line in text.splitlines():
        s = line.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        out.append((cur + s).strip())
        cur = ""
    if cur:
        out.append(cur.strip())
    return out


def _fights(line: str) -> bool:
    """A rule that changes what cxlctl decides: daxctl reconfiguring, or onlining memory blocks."""
    if "daxctl" in line or "daxdev-reconfigure" in line:
        return True
    compact = line.replace(" ", "")
    return 'SUBSYSTEM=="memory"' in compact and 'ATTR{state}="' in compact


def _daxctl_conf(r: Reader) -> Tuple[Tuple[str, str], ...]:
    """Active ``[reconfigure-device ...]`` sections of ``/etc/daxctl.conf.d/*.conf``."""
    out: List[Tuple[str, str]] = []
    for n in r.listdir(paths.DAXCTL_CONF_DIR, lambda x: x.endswith(".conf")):
        path = f"{paths.DAXCTL_CONF_DIR}/{n}"
        for line in (r.text(path) or "").splitlines():
            s = line.strip()
            if s.startswith("[reconfigure-device"):
                out.append((path, s))
    return tuple(out)


def parse_memlock(text: Optional[str]) -> Optional[Tuple[str, str]]:
    """(soft, hard) of ``Max locked memory`` in a ``/proc/PID/limits`` text."""
    for line in (text or "").splitlines():
        if line.startswith("Max locked memory"):
            f = line[len("Max locked memory") :].split()
            if len(f) >= 2:
                return f[0], f[1]
    return None


def _as_root(host: Host) -> bool:
    """Whether root-only files were readable: this process' euid live, the record's own word on replay."""
    if host.live:
        return os.geteuid() == 0
    text = host.reader.body(paths.RECORD_MANIFEST)
    try:
        return bool(json.loads(text or "{}").get("as_root"))
    except (ValueError, AttributeError):
        return False


def _tuning(host: Host) -> Tuple[object, Tuple[object, ...]]:
    """The tuning engine's status, and the TuneD/sysctl.d settings of the knobs it manages."""
    from cxlctl.tuning import engine
    from cxlctl.tuning.conflicts import find, our_keys
    from cxlctl.tuning.knobs import REGISTRY
    from cxlctl.tuning.state import applied_journal
    from cxlctl.tuning.transaction import persisted

    try:
        st: object = engine.status(host)
    except CxlctlError as e:
        st = str(e)
    j = applied_journal(host)
    values: List[Tuple[str, str, Optional[str]]]
    if j is not None:
        values = [(e.knob, e.path, e.desired) for e in j.entries if e.desired is not None]
    else:
        values = [(k.name, k.path, None) for k in REGISTRY if k.kind != "group"]
    try:
        found = tuple(find(host, our_keys(values), persisted(host)))
    except (CxlctlError, OSError):
        found = ()
    return st, found


def _lending(host: Host) -> Optional[str]:
    """Where the daemon's configuration says this host lends capacity: a configuration file (the daemon is
    deployed here) with ``[capacity] adopt`` other than ``none``; None otherwise."""
    from cxlctl import config

    try:
        cfg = config.load(host)
    except CxlctlError:
        return None
    if cfg.source is None or cfg.adopt == "none":
        return None
    if cfg.pinnable_target is not None:  # the split decides the zone (capacity/pinnable.py)
        return f"{cfg.source}: [capacity] adopt = {cfg.adopt!r}, pinnable = {cfg.pinnable_target}"
    return f"{cfg.source}: [capacity] adopt = {cfg.adopt!r}, zone = {cfg.adopt_zone!r}"


def _nfd_labels(host: Host, r: Reader) -> Optional[str]:
    """The Node Feature Discovery file the daemon rewrites on every rescan (its one state file),
    in the directory its configuration names; None when labels are off or the file is absent."""
    from cxlctl import config
    from cxlctl.k8s import nfd

    try:
        cfg = config.load(host)
    except CxlctlError:
        cfg = config.defaults()
    if not cfg.nfd_enabled:
        return None
    return r.text(f"{cfg.nfd_dir.rstrip('/')}/{nfd.FILE_NAME}")


#: the variables of SGLang's own NUMA binding (srt/environ.py, 0.5.23) that doctor weighs against cxlctl's policy
NUMA_ENV = ("SGLANG_AUTO_NUMA_BIND", "SGLANG_NUMA_BIND_V2", "SGLANG_CRASH_ON_NUMA_BIND_FAILURE")


def _launch(host: Host, inv: Inventory, engine: str, args: Tuple[str, ...]) -> Tuple[object, Optional[str]]:
    """What ``cxlctl launch ENGINE --dry-run -- ARGS`` would plan (its pre-flight included), or why it cannot;
    with why ``--kv-size auto`` could not be planned when the plan without it is the one returned."""
    from cxlctl.launch.build import Request, build

    def said(e: CxlctlError) -> str:
        return str(e) + (f" ({e.hint})" if getattr(e, "hint", None) else "")

    has_cxl_memory = any(n.kind == "cxl" and (n.mem_free or 0) > 0 for n in inv.nodes)
    # allow_unpinnable: a pinned offload that would leave CXL is planned (and judged by the
    # inference.pinned-kv check) rather than refused
    req = Request(
        engine=engine,
        args=args or ENGINE_ARGS[engine],
        kv_size="auto" if has_cxl_memory else None,
        dry_run=True,
        allow_unpinnable=True,
    )
    try:
        return build(host, req), None
    except CxlctlError as e:
        if req.kv_size is None:
            return said(e), None
        auto = said(e)  # the CXL tier too small for the engine's unit (SGLang: whole GB per rank), ...
    try:
        return build(host, req._replace(kv_size=None)), auto
    except CxlctlError as e:
        return said(e), None


def _damon_modules(r: Reader) -> Tuple[object, ...]:
    from cxlctl.damon.sysfs import read_modules

    return tuple(read_modules(r))


def gather(
    host: Host,
    *,
    reader: Optional[Reader] = None,
    inv: Optional[Inventory] = None,
    runner: Optional[pr.Runner] = None,
    engine: Optional[str] = None,
    engine_args: Sequence[str] = (),
) -> Facts:
    """Read the host (or a recorded tree) for doctor.  ``runner`` replaces the tool runs (tests);
    without it the tools are run on the live host and a record's saved answers are used for a tree.
    ``reader`` replaces ``host.reader`` for what a record must hold (``record``'s logging one)."""
    r = host.reader if reader is None else reader
    if inv is None:
        inv = scan(host, r)
    cfg, cfg_src, cfg_note = read_config(r, inv.kernel)
    mods_text = r.text(paths.PROC_MODULES)
    wanted = {m for m, _ in MODULES}
    sys_mods = tuple(r.listdir(paths.MODULE_DIR, lambda n: n in wanted))
    drivers = tuple(m for m, _ in MODULES if r.isdir(paths.MODULE_DRIVERS[m]))
    acpi: Optional[Tuple[str, ...]] = None
    if r.isdir(paths.ACPI_TABLES):
        acpi = tuple(r.listdir(paths.ACPI_TABLES, lambda n: n.rstrip("0123456789") in ACPI_NAMES))
    probes: Optional[Dict[str, Probe]]
    probes_note = None
    if runner is not None:
        probes = pr.collect(runner)
    elif host.live:
        probes = pr.collect()
    else:
        probes = pr.load_recorded(host)
        if probes is None:
            probes_note = f"the tree {host.root} holds no {pr.PROBES_FILE} (tool answers are saved by `cxlctl record`)"
    r.text(paths.SELF_CGROUP)  # for a record: the launcher's cpuset hint reads it on replay
    self_status = r.text(paths.SELF_STATUS)
    tuning, conflicts = _tuning(host)
    facts = Facts(
        host=host,
        as_root=_as_root(host),
        inv=inv,
        config=cfg,
        config_source=cfg_src,
        config_note=cfg_note,
        modules=parse_modules(mods_text) if mods_text is not None else None,
        sys_modules=sys_mods,
        drivers=drivers,
        cmdline=r.text(paths.PROC_CMDLINE),
        iomem=r.text(paths.PROC_IOMEM),
        acpi_tables=acpi,
        udev_rules=_udev(host, r),
        daxctl_conf=_daxctl_conf(r),
        thp=r.text(paths.THP_ENABLED),
        mems_allowed=status_field(self_status, "Mems_allowed_list"),
        memlock=parse_memlock(r.text(paths.SELF_LIMITS)),
        probes=probes,
        probes_note=probes_note,
        tuning=tuning,
        conflicts=conflicts,
        tuned_active=(r.text(paths.TUNED_ACTIVE) or None),
        nfd_labels=_nfd_labels(host, r),
        engine=engine,
        notes=tuple(r.notes),
        damon_modules=_damon_modules(r),
        seccomp=status_field(self_status, "Seccomp"),
        probe=_probe(host, inv),
        lending=_lending(host),
        share=pinnable.load_share(host, inv, strict=False),
    )
    if engine is not None:
        args = tuple(engine_args)
        plan, note = _launch(host, inv, engine, args)
        facts = facts._replace(
            launch=plan,
            launch_note=note,
            engine_args=args or ENGINE_ARGS[engine],
            # the shell's environment, live or replayed: what a launch from here would inherit
            numa_env=tuple((k, os.environ[k]) for k in NUMA_ENV if k in os.environ),
        )
    return facts


def _probe(host: Host, inv: Inventory) -> Optional[Stored]:
    """``cxlctl probe``'s stored record, judged (its modules load only when there is one)."""
    if not host.reader.exists(paths.PROBE_RESULTS):
        return None
    from cxlctl.probe.store import load

    return load(host, inv)
