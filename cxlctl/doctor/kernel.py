"""Kernel and Firmware layers: what the running kernel brings, and what the firmware described.

Pure functions of :class:`~.model.Facts`.  Why these: a kernel without the
CXL region driver, a module that is not loaded or a command-line option such
as ``efi=nosoftreserve`` explains "the expander is visible but no node
appeared" before any device is looked at; the ACPI tables and ``/proc/iomem``
say whether the firmware described CXL windows at all, and which ranges it
set aside (Soft Reserved) or committed and locked itself.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from cxlctl.derive import DEFAULT_DAX_TIER, default_tier_nodes
from cxlctl.hostio import paths
from cxlctl.kconfig import kernel_version
from cxlctl.parse import format_size
from cxlctl.regions.planner import NEWER_KERNEL, RAM_REGION_SINCE

from .gather import MODULES
from .model import CANNOT, FAIL, NOTE, OK, WARN, Check, Evidence, Facts, Result

K = "Kernel"
F = "Firmware"

#: (since, what it brings) for the CXL/tiering features doctor explains
FEATURES: Tuple[Tuple[Tuple[int, int], str], ...] = (
    (RAM_REGION_SINCE, "CXL RAM regions from sysfs (create_ram_region)"),
    ((6, 9), "weighted interleave (MPOL_WEIGHTED_INTERLEAVE)"),
    ((6, 11), "DAMON migrate_hot/migrate_cold actions"),
    ((6, 16), "weighted interleave 'auto' weights"),
)

#: config symbols: (symbol, needed for, severity when missing on a CXL host)
CONFIG: Tuple[Tuple[str, str, Result], ...] = (
    ("CONFIG_CXL_BUS", "the CXL bus itself", FAIL),
    ("CONFIG_CXL_PCI", "CXL memory devices (cxl_pci)", FAIL),
    ("CONFIG_CXL_ACPI", "CXL windows from the CEDT (cxl_acpi)", FAIL),
    ("CONFIG_CXL_MEM", "memdev endpoints (cxl_mem)", FAIL),
    ("CONFIG_CXL_PORT", "CXL ports and decoders (cxl_port)", FAIL),
    ("CONFIG_CXL_REGION", "CXL regions", FAIL),
    ("CONFIG_DEV_DAX", "DAX devices (device_dax)", FAIL),
    ("CONFIG_DEV_DAX_KMEM", "onlining DAX memory as a NUMA node (kmem)", FAIL),
    ("CONFIG_DEV_DAX_CXL", "DAX devices for CXL RAM regions (dax_cxl, 6.3+)", FAIL),
    ("CONFIG_MEMORY_HOTPLUG", "adding CXL memory at run time", FAIL),
    ("CONFIG_NUMA_BALANCING", "NUMA balancing and tiering promotion", WARN),
    ("CONFIG_ACPI_HMAT", "firmware performance data (HMAT): memory tiers", WARN),
    ("CONFIG_DAMON_PADDR", "DAMON physical-address tiering", NOTE),
)

CORE_MODULES = ("cxl_acpi", "cxl_pci", "cxl_mem", "cxl_port")
DAX_MODULES = ("dax_cxl", "device_dax", "kmem")


def version(f: Facts) -> Optional[Tuple[int, int]]:
    return kernel_version(f.inv.kernel)


def cxl_platform(f: Facts) -> bool:
    """The host has CXL memory hardware or windows: a missing driver then matters."""
    cedt = f.acpi_tables is not None and "CEDT" in f.acpi_tables
    return bool(f.inv.memdevs or f.inv.buses or cedt)


def _ev_kernel(f: Facts) -> Evidence:
    return Evidence(paths.OSRELEASE, f.inv.kernel or "unreadable")


def check_version(f: Facts) -> List[Check]:
    v = version(f)
    if v is None:
        return [Check(K, "kernel.version", CANNOT, "kernel release unknown", (_ev_kernel(f),))]
    has = [w for since, w in FEATURES if v >= since]
    lacks = [f"{w} ({since[0]}.{since[1]}+)" for since, w in FEATURES if v < since]
    msg = f"Linux {f.inv.kernel}" + (": has " + ", ".join(has) if has else "")
    if lacks:
        msg += "; lacks " + ", ".join(lacks)
    out = [Check(K, "kernel.version", OK if not lacks else NOTE, msg, (_ev_kernel(f),))]
    if v < RAM_REGION_SINCE:
        ram = [m for m in f.inv.memdevs if (m.ram_size or 0) > m.dpa_allocated]
        res: Result = FAIL if ram else NOTE
        what = (
            f"{', '.join(m.name for m in ram)} cannot be used: " if ram else "no memdev waits for a region; "
        ) + "only regions the firmware committed are usable"
        roots = [d for d in f.inv.decoders if d.kind == "root"]
        ev = [_ev_kernel(f)] + [
            Evidence(f"{paths.CXL_DEVICES}/{d.name}/create_ram_region", "absent") for d in roots if not d.can_create_ram
        ]
        out.append(
            Check(
                K,
                "kernel.ram-regions",
                res,
                f"no RAM regions on this kernel (Linux {f.inv.kernel}): creating CXL RAM regions needs Linux "
                f"{RAM_REGION_SINCE[0]}.{RAM_REGION_SINCE[1]} or newer; {what}",
                tuple(ev),
                NEWER_KERNEL,
            )
        )
    return out


def check_config(f: Facts) -> List[Check]:
    if f.config is None:
        return [
            Check(
                K,
                "kernel.config",
                CANNOT,
                f.config_note or "kernel config not found",
                tuple(Evidence(p, "absent") for p in paths.config_files(f.inv.kernel or "RELEASE"))
                + (Evidence(paths.PROC_CONFIG_GZ, "absent"),),
                "install the kernel package's config file (/boot/config-RELEASE, or Debian 13's"
                " linux-base-RELEASE for /usr/lib/modules/RELEASE/config), or boot a kernel with"
                " CONFIG_IKCONFIG_PROC=y",
            )
        ]
    src = f.config_source or "config"
    cxl = cxl_platform(f)
    v = version(f)
    out: List[Check] = []
    present: List[str] = []
    for sym, why, sev in CONFIG:
        val = f.config.get(sym)
        if val in ("y", "m"):
            present.append(f"{sym[7:]}={val}")
            continue
        if sym == "CONFIG_DEV_DAX_CXL" and v is not None and v < RAM_REGION_SINCE:
            continue  # the symbol appeared in 6.3; kernel.ram-regions says what that means
        res: Result = sev if cxl or sev != FAIL else NOTE
        shown = "not set" if val in (None, "n") else val
        out.append(
            Check(
                K,
                f"kernel.config.{sym[7:]}",
                res,
                f"{sym} is {shown}: this kernel lacks {why}",
                (Evidence(src, f"{sym} {shown}"),),
                f"a kernel built with {sym}=y or =m (Debian's 6.12 has it)",
            )
        )
    out.insert(
        0,
        Check(
            K,
            "kernel.config",
            OK,
            f"{len(present)} of {len(CONFIG)} CXL-related options built",
            (Evidence(src, " ".join(present)),),
        ),
    )
    return out


def _made_by(f: Facts, name: str) -> Optional[Evidence]:
    """What sysfs shows the driver made, which it makes only when it is loaded or built in and
    bound: the driver's directory, or the objects its probe adds (drivers/cxl/acpi.c
    ``cxl_acpi_probe`` adds the root port; drivers/cxl/pci.c ``cxl_pci_probe`` the memdev
    (``devm_cxl_add_memdev``); drivers/cxl/mem.c ``cxl_mem_probe`` the endpoint port
    (``devm_cxl_add_endpoint``); drivers/cxl/port.c ``cxl_port_probe`` the decoders of host
    bridge, switch and endpoint ports (``devm_cxl_enumerate_decoders``, or a passthrough decoder);
    drivers/dax/cxl.c ``cxl_dax_region_probe`` a region's DAX device (``devm_create_dev_dax``);
    drivers/dax/kmem.c ``dev_dax_kmem_probe`` and drivers/dax/device.c ``dev_dax_probe`` bind DAX
    devices in system-ram and devdax mode)."""
    if name in f.drivers:
        return Evidence(paths.MODULE_DRIVERS[name], "exists")
    inv = f.inv
    made: List[str] = []
    if name == "cxl_acpi":
        made = [p.name for p in inv.buses if p.kind == "root" and p.provider != "cxl_test"]
    elif name == "cxl_pci":
        made = [m.name for m in inv.memdevs]
    elif name == "cxl_mem":
        made = [p.name for p in inv.endpoints]
    elif name == "cxl_port":
        made = [d.name for d in inv.decoders if d.kind in ("switch", "endpoint")]
    elif name == "dax_cxl":
        made = [d.name for d in inv.dax_devices if d.provider == "cxl"]
    elif name == "kmem":
        made = [d.name for d in inv.dax_devices if d.driver == "kmem"]
    elif name == "device_dax":
        made = [d.name for d in inv.dax_devices if d.driver == "device_dax"]
    if not made:
        return None
    return Evidence(paths.CXL_DEVICES if name.startswith("cxl_") else paths.DAX_DEVICES, " ".join(made[:4]))


def _module_state(f: Facts, name: str, sym: str) -> Tuple[str, Evidence]:
    """(state, what shows it): loaded | built-in | working | present | loadable | not-built | unknown."""
    cfg = (f.config or {}).get(sym)
    src = f.config_source or "config"
    if f.modules is not None and name in f.modules:
        return "loaded", Evidence(paths.PROC_MODULES, f"{name} {f.modules[name]}")
    if cfg == "y":
        return "built-in", Evidence(src, f"{sym}=y")
    if cfg == "m":
        return "loadable", Evidence(src, f"{sym}=m; not in {paths.PROC_MODULES}")
    if cfg == "n":
        return "not-built", Evidence(src, f"{sym} is not set")
    made = _made_by(f, name)  # no config to tell: what the driver made proves it works
    if made is not None:
        return "working", made
    if name in f.sys_modules:  # built in with parameters, or loaded under another name
        return "present", Evidence(f"{paths.MODULE_DIR}/{name}", "exists")
    if f.modules is not None:
        return "unknown", Evidence(paths.PROC_MODULES, f"no {name}; no {paths.MODULE_DIR}/{name}")
    return "unknown", Evidence(paths.PROC_MODULES, "unreadable")


def check_modules(f: Facts) -> List[Check]:
    if f.modules is None and f.config is None and not f.sys_modules:
        return [
            Check(
                K,
                "kernel.modules",
                CANNOT,
                f"{f.host.path(paths.PROC_MODULES)} is unreadable and no kernel config was found",
            )
        ]
    cxl = cxl_platform(f)
    ram_regions = any(r.mode == "ram" for r in f.inv.regions)
    v = version(f)
    out: List[Check] = []
    fine: List[str] = []
    unbuilt: List[str] = []
    ev: List[Evidence] = []
    for name, sym in MODULES:
        state, how = _module_state(f, name, sym)
        if state in ("loaded", "built-in", "working", "present"):
            fine.append(f"{name} ({state})")
            ev.append(how)
            continue
        if name == "dax_cxl" and v is not None and v < RAM_REGION_SINCE:
            continue  # no such module before 6.3
        if state == "not-built":  # kernel.config.SYMBOL says it, with its fix: one answer, not two
            unbuilt.append(name)
            continue
        needed = cxl if name in CORE_MODULES else ram_regions
        res: Result
        if state == "unknown":
            res, msg, fix = (
                CANNOT,
                f"cannot tell whether {name} is built in: it is not loaded, no kernel config says how it is "
                "built, and sysfs shows nothing it made",
                f"if {name} is a module: modprobe {name}; the kernel config tells (kernel.config)",
            )
        elif needed:
            what = "CXL devices and windows stay invisible" if name in CORE_MODULES else "regions get no usable memory"
            res, msg, fix = FAIL, f"{name} is not loaded: {what}", f"modprobe {name}"
        else:
            res, msg, fix = (
                NOTE,
                f"{name} is not loaded (nothing needs it yet: "
                + ("no CXL device or window" if name in CORE_MODULES else "no CXL RAM region")
                + ")",
                f"modprobe {name}",
            )
        out.append(Check(K, f"kernel.modules.{name}", res, msg, (how,), fix))
    summary = "loaded or built in: " + (", ".join(fine) or "none")
    if unbuilt:
        summary += "; not built (kernel.config): " + ", ".join(unbuilt)
    out.insert(0, Check(K, "kernel.modules", OK if fine else NOTE, summary, tuple(ev)))
    return out


#: command-line options that change how CXL memory is handled: option -> (result, why, fix)
CMDLINE: Dict[str, Tuple[Result, str, str]] = {
    "efi=nosoftreserve": (
        WARN,
        "firmware's Soft Reserved (EFI_MEMORY_SP) ranges become ordinary System RAM at boot: no CXL region or "
        "DAX device manages that memory, so it cannot be placed, tiered or offlined as CXL",
        "remove efi=nosoftreserve from the kernel command line (GRUB_CMDLINE_LINUX in /etc/default/grub, update-grub)",
    ),
    "movable_node": (
        NOTE,
        "memory hot-added later (a new CXL region) that the kernel onlines with auto_online_blocks=online goes to "
        "ZONE_MOVABLE (default_zone_for_pfn), as does hot-pluggable memory named by SRAT: pinned buffers cannot stay on it",
        "drop movable_node unless hot-unplug is needed",
    ),
}


def judged(tok: str) -> bool:
    """Is kernel command-line option ``tok`` one :func:`check_cmdline` judges?  ``cxlctl record``
    keeps only these by default: the rest (``root=``, ``BOOT_IMAGE``, site options) is the
    host's business, not the bug report's."""
    key = tok.partition("=")[0]
    return tok in CMDLINE or key in ("memhp_default_state", "numa_balancing") or key.startswith("memory_hotplug.")


def check_cmdline(f: Facts) -> List[Check]:
    if f.cmdline is None:
        return [Check(K, "kernel.cmdline", CANNOT, f"{f.host.path(paths.PROC_CMDLINE)} is unreadable")]
    out: List[Check] = []
    res: Result
    for tok in f.cmdline.split():
        key, _, val = tok.partition("=")
        ev = (Evidence(paths.PROC_CMDLINE, tok),)
        if tok in CMDLINE:
            res, why, fix = CMDLINE[tok]
            out.append(Check(K, f"kernel.cmdline.{key}", res, f"{tok}: {why}", ev, fix))
        elif key == "memhp_default_state":
            if val == "online_movable" and f.lending:
                res, why = (  # the pool-host setting capacity/zones.py names: what makes memory releasable
                    NOTE,
                    "hot-added memory (new CXL regions, the firmware's Soft-Reserved memory at boot) is onlined "
                    "ZONE_MOVABLE: what a host that lends capacity wants, so it can be given back "
                    "(engines' pinned buffers do not stay on it)",
                )
            elif val == "online_movable":
                res, why = (
                    WARN,
                    "hot-added memory (new CXL regions) is onlined ZONE_MOVABLE: engines' pinned buffers cannot stay on it",
                )
            elif val == "offline":
                res, why = (
                    NOTE,
                    "hot-added memory stays offline until something onlines it (cxlctl region create --online, the daemon)",
                )
            else:
                res, why = NOTE, "sets the default of auto_online_blocks for hot-added memory"
            fix = (
                "memhp_default_state=online (ZONE_NORMAL by default) if the engine pins host memory"
                if res == WARN
                else ""
            )
            out.append(Check(K, "kernel.cmdline.memhp_default_state", res, f"{tok}: {why}", ev, fix))
        elif key.startswith("memory_hotplug."):
            out.append(
                Check(
                    K, f"kernel.cmdline.{key}", NOTE, f"{tok}: memory hot-plug behaviour changed from its default", ev
                )
            )
        elif key == "numa_balancing":
            res = NOTE if val != "disable" else WARN
            out.append(
                Check(
                    K,
                    "kernel.cmdline.numa_balancing",
                    res,
                    f"{tok}: "
                    + (
                        "NUMA balancing (and tiering promotion) off at boot"
                        if val == "disable"
                        else "NUMA balancing set at boot"
                    ),
                    ev,
                    "cxlctl tune apply with a tiering profile sets kernel.numa_balancing at run time"
                    if res == WARN
                    else "",
                )
            )
    if not out:
        out.append(
            Check(
                K,
                "kernel.cmdline",
                OK,
                "no command-line option that changes CXL memory handling",
                (
                    Evidence(
                        paths.PROC_CMDLINE,
                        "none of efi=nosoftreserve, memhp_default_state, memory_hotplug.*, movable_node, numa_balancing",
                    ),
                ),
            )
        )
    return out


# ----------------------------------------------------------------------------- Firmware


def check_acpi(f: Facts) -> List[Check]:
    if f.acpi_tables is None:
        return [
            Check(
                F,
                "firmware.acpi",
                CANNOT,
                f"{f.host.path(paths.ACPI_TABLES)} does not exist (not an ACPI platform, or not recorded)",
            )
        ]
    have = set(t.rstrip("0123456789") for t in f.acpi_tables)
    ev = (Evidence(paths.ACPI_TABLES, " ".join(f.acpi_tables) or "none of CEDT SRAT HMAT SLIT"),)
    out: List[Check] = []
    if "CEDT" in have:
        out.append(
            Check(F, "firmware.cedt", OK, "CEDT present: the firmware describes CXL host bridges and windows", ev)
        )
    elif f.inv.memdevs:
        out.append(
            Check(
                F,
                "firmware.cedt",
                FAIL,
                "no CEDT, but CXL memdevs exist: without CXL windows (CFMWS) cxl_acpi finds no root, so no region can be created",
                ev,
                "enable CXL memory in the BIOS (CXL or memory expansion options) or update the firmware",
            )
        )
    else:
        out.append(Check(F, "firmware.cedt", NOTE, "no CEDT: the firmware describes no CXL windows", ev))
    if "SRAT" not in have:
        out.append(Check(F, "firmware.srat", NOTE, "no SRAT: no NUMA proximity domains from firmware", ev))
    if "HMAT" in have:
        out.append(Check(F, "firmware.hmat", OK, "HMAT present: firmware performance data for memory tiers", ev))
    else:
        # without HMAT the kernel has no DRAM figures (default_dram_perf, set only by
        # hmat_set_default_dram_perf), so mt_perf_to_adistance gives no kmem node an abstract
        # distance and each keeps MEMTIER_DEFAULT_DAX_ADISTANCE: a warning when that shows, i.e.
        # several CXL nodes collapse into that one tier
        collapsed = default_tier_nodes([n for n in f.inv.nodes if n.kind == "cxl"])
        res: Result = WARN if len(collapsed) > 1 else NOTE
        out.append(
            Check(
                F,
                "firmware.hmat",
                res,
                "no HMAT: the kernel has no figures for DRAM to measure CXL against (default_dram_perf), so "
                f"every kmem CXL node gets the default tier {DEFAULT_DAX_TIER} below DRAM "
                "(MEMTIER_DEFAULT_DAX_ADISTANCE)"
                + (
                    f": CXL nodes {', '.join(map(str, collapsed))} share it and cannot be told apart"
                    if res == WARN
                    else ""
                ),
                ev,
                "enable HMAT in the BIOS (often under NUMA / ACPI options), with generic port entries for the CXL "
                "host bridges, so the devices' CDAT figures place each node in its own tier"
                if res == WARN
                else "",
            )
        )
    return out


def parse_iomem(text: str) -> List[Tuple[int, int, int, str]]:
    """``/proc/iomem`` → (depth, start, end, name); unparsable lines are skipped."""
    out: List[Tuple[int, int, int, str]] = []
    for line in text.splitlines():
        body = line.lstrip(" ")
        depth = (len(line) - len(body)) // 2
        rng, sep, name = body.partition(" : ")
        a, dash, b = rng.partition("-")
        if not sep or not dash:
            continue
        try:
            out.append((depth, int(a, 16), int(b, 16), name.strip()))
        except ValueError:
            continue
    return out


def check_iomem(f: Facts) -> List[Check]:
    if f.iomem is None:
        return [Check(F, "firmware.iomem", CANNOT, f"{f.host.path(paths.PROC_IOMEM)} is unreadable")]
    entries = parse_iomem(f.iomem)
    if entries and all(s == 0 and e == 0 for _, s, e, _ in entries):
        return [
            Check(
                F,
                "firmware.iomem",
                CANNOT,
                f"cannot check: needs root ({f.host.path(paths.PROC_IOMEM)} shows zero addresses to other users)",
                (Evidence(paths.PROC_IOMEM, "all ranges 00000000-00000000"),),
                "sudo cxlctl doctor",
            )
        ]
    windows = [(s, e, n) for d, s, e, n in entries if n.startswith("CXL Window")]
    soft = [(i, s, e) for i, (d, s, e, n) in enumerate(entries) if n == "Soft Reserved"]
    out: List[Check] = []
    ev = tuple(Evidence(paths.PROC_IOMEM, f"{s:x}-{e:x} : {n}") for s, e, n in windows)
    if windows:
        total = sum(e - s + 1 for s, e, _ in windows)
        out.append(
            Check(
                F,
                "firmware.cxl-windows",
                OK,
                f"{len(windows)} CXL window(s), {format_size(total)} of host address space",
                ev,
            )
        )
    elif cxl_platform(f):
        state, _ = _module_state(f, "cxl_acpi", "CONFIG_CXL_ACPI")
        why, fix = {  # one answer with kernel.modules: a driver not built is not modprobed
            "not-built": ("cxl_acpi is not built for this kernel", "a kernel with CONFIG_CXL_ACPI=m (kernel.config)"),
            "loaded": ("cxl_acpi found no CFMWS in the CEDT", "check dmesg for cxl_acpi's errors"),
            "built-in": ("cxl_acpi found no CFMWS in the CEDT", "check dmesg for cxl_acpi's errors"),
        }.get(state, ("cxl_acpi is not loaded or found no CFMWS", "modprobe cxl_acpi"))
        out.append(
            Check(
                F,
                "firmware.cxl-windows",
                WARN,
                f"no 'CXL Window' in {f.host.path(paths.PROC_IOMEM)} although the host has CXL: {why}",
                (Evidence(paths.PROC_IOMEM, "no CXL Window"),),
                fix,
            )
        )
    for i, s, e in soft:
        depth = entries[i][0]
        kids = []
        for d, _s, _e, n in entries[i + 1 :]:
            if d <= depth:
                break
            kids.append(n)
        ev2 = (
            Evidence(paths.PROC_IOMEM, f"{s:x}-{e:x} : Soft Reserved" + (" > " + ", ".join(kids[:3]) if kids else "")),
        )
        if kids:
            out.append(
                Check(
                    F,
                    "firmware.soft-reserved",
                    OK,
                    f"Soft Reserved {format_size(e - s + 1)} at {s:#x} is claimed ({', '.join(kids[:3])})",
                    ev2,
                )
            )
        else:
            out.append(
                Check(
                    F,
                    "firmware.soft-reserved",
                    WARN,
                    f"Soft Reserved {format_size(e - s + 1)} at {s:#x} is claimed by nothing: memory the firmware set aside for a driver that did not take it",
                    ev2,
                    "modprobe cxl_acpi cxl_pci cxl_mem dax_hmem; check dmesg for CXL region assembly errors",
                )
            )
    return out


def check_locked(f: Facts) -> List[Check]:
    """Regions the firmware programmed and locked (region destroy refuses them), and free capacity."""
    from cxlctl.capacity.maygo import locked_by_region

    out: List[Check] = []
    for region, decs in locked_by_region(f.inv).items():  # the reading `capacity` refuses them by
        out.append(
            Check(
                F,
                "firmware.locked-region",
                NOTE,
                f"{region} was programmed and locked by the firmware: it cannot be destroyed or resized from Linux",
                tuple(Evidence(paths.decoder_locked(d), "1") for d in decs[:4]),
                "change it in the BIOS setup, if at all",
            )
        )
    t = f.inv.totals
    if f.inv.memdevs:
        out.append(
            Check(
                F,
                "firmware.capacity",
                OK if t.cxl_unassigned == 0 else NOTE,
                f"CXL capacity {format_size(t.cxl_capacity)}: {format_size(t.cxl_in_regions)} in regions, {format_size(t.cxl_unassigned)} in none",
                (Evidence(paths.CXL_DEVICES, f"{len(f.inv.memdevs)} memdev(s), {len(f.inv.regions)} region(s)"),),
            )
        )
    return out


def checks(f: Facts) -> Tuple[List[Check], List[Check]]:
    """(Kernel checks, Firmware checks)."""
    kern = check_version(f) + check_config(f) + check_modules(f) + check_cmdline(f)
    fw = check_acpi(f) + check_iomem(f) + check_locked(f)
    return kern, fw
