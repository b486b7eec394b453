"""What kernels 6.13-7.3 changed that doctor explains (issue 20 section 3).

Pure functions of :class:`~.model.Facts`, like the other layers.  Why each:

* DAMON_STAT (6.17+; Debian's 7.x starts it at boot with
  ``CONFIG_DAMON_STAT_ENABLED_DEFAULT=y``) runs a kdamond outside DAMON sysfs.  An
  operator who sees a kdamond thread should learn that it only monitors, and that
  the kernel starts it exclusively: no other kdamond (cxlctl's included) starts while it
  runs (EBUSY, seen in a 7.3.4 guest);
* the EDAC RAS features (scrub, ECS, memory repair), CXL Features and fwctl are
  optional builds; Debian's 7.3 leaves them out.  Their absence is "not built into
  this kernel", never a failure;
* since 6.16 ``weighted_interleave/nodeN`` exists only for nodes with memory and
  comes and goes with hot-plug: a memoryless node without one is normal, a memory
  node without one is the kernel failing to add it;
* ``dax_hmem`` hands Soft-Reserved ranges to the CXL driver and logs what became of
  each ("deferring range to CXL", "CXL claims resource, dropping", "CXL did not
  claim resource, registering"): the last means the range serves as an hmem DAX
  device without a CXL region;
* ``regionZ/extended_linear_cache_size``: DRAM in front of the region, used as a
  direct-mapped memory-side cache, changes what its figures and addresses mean.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from cxlctl.hostio import paths
from cxlctl.parse import format_nodelist, format_size

from . import probes as pr
from .model import CANNOT, NOTE, OK, WARN, Check, Evidence, Facts

K = "Kernel"
F = "Firmware"
D = "Devices and regions"

#: optional RAS builds: (symbol, what it brings) -- doctor reports their absence, never as a failure
RAS_FEATURES: Tuple[Tuple[str, str], ...] = (
    ("CONFIG_EDAC_SCRUB", "memory scrub control (/sys/bus/edac/devices/*/scrubX)"),
    ("CONFIG_EDAC_ECS", "DDR5 error check and scrub (ecs_fruX)"),
    ("CONFIG_EDAC_MEM_REPAIR", "memory repair: PPR and sparing (mem_repairX)"),
    ("CONFIG_CXL_FEATURES", "CXL Features commands (scrub and repair on CXL devices through EDAC)"),
    ("CONFIG_FWCTL", "fwctl, the firmware control interface for vendor tools"),
)

#: dax_hmem's hand-off lines (drivers/dax/hmem/hmem.c, dev_dbg: logged with dynamic debug on)
HMEM_DEFER = ("await CXL initial probe", "deferring range to CXL")
HMEM_CLAIMED = "CXL claims resource, dropping"
HMEM_UNCLAIMED = "CXL did not claim resource, registering"


def _module_params(name: str, what: str) -> str:
    return f"{paths.MODULE_DIR}/{name}/parameters/{what}"


def check_damon_modules(f: Facts) -> List[Check]:
    out: List[Check] = []
    for m in f.damon_modules:
        name = getattr(m, "name", "?")
        if not getattr(m, "running", False):
            continue
        pid = getattr(m, "kdamond_pid", None)
        ev = (
            Evidence(_module_params(name, "enabled"), "Y" if getattr(m, "enabled", None) else "?"),
            Evidence(_module_params(name, "kdamond_pid"), str(pid) if pid is not None else "absent"),
        )
        thread = f"a kdamond (pid {pid})" if pid else "a kdamond"
        if name == "damon_stat":
            out.append(
                Check(
                    K,
                    "kernel.damon.damon_stat",
                    NOTE,
                    f"DAMON_STAT runs {thread} of its own, outside /sys/kernel/mm/damon/admin (kernels built with "
                    "CONFIG_DAMON_STAT_ENABLED_DEFAULT=y start it at boot): it only monitors, to estimate memory "
                    "idleness, and migrates nothing, but the kernel starts it exclusively: while it runs, no other "
                    "kdamond starts (EBUSY), so cxlctl's DAMON tiering cannot start",
                    ev,
                    f"before a [damon] profile: echo N > {_module_params(name, 'enabled')} "
                    "(damon_stat.enabled=N on the kernel command line keeps it off at boot)",
                )
            )
        else:
            out.append(
                Check(
                    K,
                    f"kernel.damon.{name}",
                    NOTE,
                    f"the {name} module runs {thread} whose scheme acts on memory, and the kernel starts it "
                    "exclusively: while it runs, no other kdamond starts (EBUSY), so cxlctl's DAMON tiering cannot "
                    "start (tried on 6.12 and 7.3.4)",
                    ev,
                    f"echo N > {_module_params(name, 'enabled')} before cxlctl tune apply with a [damon] profile",
                )
            )
    return out


def check_ras_features(f: Facts) -> List[Check]:
    """One check: which optional RAS builds this kernel has, and which it was built without."""
    if f.config is None:
        return []  # kernel.config already says it cannot check
    src = f.config_source or "config"
    built, unbuilt, older = [], [], []
    for sym, what in RAS_FEATURES:
        val = f.config.get(sym)
        if val in ("y", "m"):
            built.append(f"{sym[7:]}={val}")
        elif val is None:
            older.append(sym[7:])  # the symbol is not in this kernel's config at all
        else:
            unbuilt.append((sym, what))
    ev = tuple(Evidence(src, f"# {sym} is not set") for sym, _ in unbuilt)
    parts = []
    if unbuilt:
        parts.append("not built into this kernel: " + "; ".join(f"{sym[7:]} ({what})" for sym, what in unbuilt))
    if older:
        parts.append("this kernel predates " + ", ".join(older))
    if built:
        parts.append("built: " + ", ".join(built))
    if not unbuilt and not older:
        return [Check(K, "kernel.ras-features", OK, "optional RAS features built: " + ", ".join(built), ev)]
    return [
        Check(
            K,
            "kernel.ras-features",
            NOTE,
            "optional RAS features: " + "; ".join(parts) + ". Not a fault: cxlctl's RAS view (trace events, "
            "poison lists) does not need them; scrub and repair control does",
            ev,
            "for scrub/repair control, a kernel built with " + ", ".join(sym for sym, _ in unbuilt) if unbuilt else "",
        )
    ]


def check_weighted_interleave_nodes(f: Facts) -> List[Check]:
    wi = f.inv.weighted_interleave
    if not wi.supported or wi.auto is None:
        return []  # before 6.16 every possible node has a file; nothing changed there
    with_mem = [n.id for n in f.inv.nodes if n.has_memory]
    without = [n.id for n in f.inv.nodes if not n.has_memory]
    lacking = [nid for nid in with_mem if nid not in wi.weights]
    ev = (Evidence(paths.WI_DIR, " ".join(f"node{n}" for n in sorted(wi.weights)) or "no nodeN files"),)
    normal = f"weighted_interleave/nodeN exists for the nodes with memory only (6.16+): {format_nodelist(sorted(wi.weights)) or 'none'}"
    if without:
        normal += f"; node(s) {format_nodelist(without)} have no memory, so no file: normal"
    if not lacking:
        return [Check(K, "kernel.weighted-interleave.nodes", OK, normal, ev)]
    return [
        Check(
            K,
            "kernel.weighted-interleave.nodes",
            WARN,
            f"node(s) {format_nodelist(lacking)} have memory but no weighted_interleave/nodeN: the kernel adds the "
            "file when a node gets memory, so it failed to here (dmesg: 'failed to add sysfs for node'); their "
            "weight cannot be set, and cxlctl's weights leave them out",
            ev,
            "offline and online the node's memory again (cxlctl dax reconfigure), or reboot",
        )
    ]


def _hmem_lines(log: str) -> Tuple[List[str], List[str], List[str]]:
    deferred, claimed, unclaimed = [], [], []
    for ln in log.splitlines():
        if HMEM_UNCLAIMED in ln:
            unclaimed.append(ln.strip())
        elif HMEM_CLAIMED in ln:
            claimed.append(ln.strip())
        elif any(k in ln for k in HMEM_DEFER):
            deferred.append(ln.strip())
    return deferred, claimed, unclaimed


def _range(line: str) -> str:
    """``[mem 0x…-0x… flags 0x200]`` of a hand-off line, or the line's tail."""
    i = line.find("[mem ")
    return line[i:].split("]")[0] + "]" if i >= 0 else line.rsplit(": ", 1)[-1]


def check_hmem_handoff(f: Facts) -> List[Check]:
    probe = (f.probes or {}).get(pr.key(pr.DMESG))
    if probe is None or probe.rc is None:
        return []
    if probe.rc != 0:
        soft = "Soft Reserved" in (f.iomem or "")
        if not soft:
            return []
        return [
            Check(
                F,
                "firmware.hmem-handoff",
                CANNOT,
                f"the kernel log is unreadable (dmesg exit {probe.rc}; kernel.dmesg_restrict needs root), so what "
                "dax_hmem did with the Soft Reserved ranges is unknown",
                (Evidence("dmesg", probe.out.strip()[:200] or f"exit {probe.rc}"),),
                "run cxlctl doctor as root",
            )
        ]
    deferred, claimed, unclaimed = _hmem_lines(probe.out)
    if unclaimed:
        ranges = ", ".join(_range(ln) for ln in unclaimed)
        return [
            Check(
                F,
                "firmware.hmem-handoff",
                WARN,
                f"dax_hmem registered Soft Reserved range(s) {ranges} itself because no CXL region claimed them "
                "('CXL did not claim resource, registering'): that memory serves as an hmem DAX device without a "
                "CXL region (no region RAS, no per-region poison injection, not managed by cxlctl region)",
                tuple(Evidence("dmesg", ln) for ln in unclaimed[:4]),
                "find why the region did not assemble: cxl list -R -v and dmesg | grep -i 'cxl.*region'; "
                "cxl_acpi, cxl_pci and cxl_mem must load before dax_hmem's deferred probe",
            )
        ]
    if claimed:
        return [
            Check(
                F,
                "firmware.hmem-handoff",
                OK,
                f"dax_hmem handed {len(claimed)} Soft Reserved range(s) to CXL regions "
                f"('CXL claims resource, dropping'): {', '.join(_range(ln) for ln in claimed)}",
                tuple(Evidence("dmesg", ln) for ln in claimed[:4]),
            )
        ]
    if deferred:
        return [
            Check(
                F,
                "firmware.hmem-handoff",
                NOTE,
                f"dax_hmem deferred {len(deferred)} Soft Reserved range(s) to CXL and the log says nothing yet of "
                "what became of them",
                tuple(Evidence("dmesg", ln) for ln in deferred[:4]),
            )
        ]
    return []


def check_linear_cache(f: Facts) -> List[Check]:
    out: List[Check] = []
    for r in f.inv.regions:
        size: Optional[int] = r.extended_linear_cache_size
        if not size:
            continue
        out.append(
            Check(
                D,
                f"devices.region.{r.name}.linear-cache",
                NOTE,
                f"{r.name} has an extended linear cache of {format_size(size)}: the platform keeps DRAM in front of "
                "it as a direct-mapped memory-side cache, so its bandwidth and latency in use depend on the cache "
                "hit rate, and a poisoned address has an alias in the cache's range (hpa_alias0 in RAS events)",
                (Evidence(f"{paths.CXL_DEVICES}/{r.name}/extended_linear_cache_size", str(size)),),
            )
        )
    return out


def checks(f: Facts) -> Sequence[Check]:
    return (
        check_damon_modules(f)
        + check_ras_features(f)
        + check_weighted_interleave_nodes(f)
        + check_hmem_handoff(f)
        + check_linear_cache(f)
    )
