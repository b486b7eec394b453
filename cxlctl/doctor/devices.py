"""Devices and regions: capacity that is there but not serving as memory, and why.

Pure functions of :class:`~.model.Facts` (the inventory does the reading and
:mod:`cxlctl.derive` the classification).  Each finding names the object, the
sysfs attribute that shows it, and the ``cxlctl`` command that fixes it (with
the ndctl equivalent where one exists).  Why each exists: issue 14's field
reports -- memory onlined ZONE_MOVABLE under pinned engine buffers (ndctl
#110), an auto-online policy fighting the tool (ndctl #246), a device that
always comes up as system-ram (ndctl #256), all memory in one tier (no
HMAT/CDAT).
"""

from __future__ import annotations

from typing import List, Optional

from cxlctl.derive import DEFAULT_DAX_TIER, cxl_in_dram_tier_why, default_tier_nodes
from cxlctl.errors import CxlctlError
from cxlctl.hostio import paths
from cxlctl.model import DaxDevice
from cxlctl.parse import format_nodelist, format_size
from cxlctl.regions.dax import auto_online_zone
from cxlctl.regions.planner import Request, plan_all, ram_region_support

from .model import FAIL, NOTE, OK, WARN, Check, Evidence, Facts, Result

D = "Devices and regions"


def _dax(name: str, attr: str) -> str:
    return f"{paths.DAX_DEVICES}/{name}/{attr}"


def _reconfigure(name: str) -> str:
    return f"cxlctl dax reconfigure {name} --mode system-ram --zone normal (daxctl reconfigure-device --mode=system-ram --no-movable {name})"


def check_memdevs(f: Facts) -> List[Check]:
    inv = f.inv
    out: List[Check] = []
    unused = []
    for m in inv.memdevs:
        total = (m.ram_size or 0) + (m.pmem_size or 0)
        if m.driver is None:
            out.append(
                Check(
                    D,
                    f"devices.memdev.{m.name}",
                    FAIL,
                    f"{m.name} is bound to no driver: no endpoint, its capacity cannot join a region",
                    (Evidence(f"{paths.CXL_DEVICES}/{m.name}/driver", "no link"),),
                    "modprobe cxl_mem; then dmesg | grep -i cxl for the probe error",
                )
            )
        elif (m.ram_size or 0) > m.dpa_allocated:
            unused.append((m, total - m.dpa_allocated))
    if unused:
        ok, why = ram_region_support(inv)
        names = ", ".join(m.name for m, _ in unused)
        free = sum(x for _, x in unused)
        ev = tuple(
            Evidence(
                f"{paths.CXL_DEVICES}/{m.name}/ram/size",
                f"{format_size(m.ram_size)}, {format_size(m.dpa_allocated)} allocated",
            )
            for m, _ in unused[:6]
        )
        if not ok:
            out.append(
                Check(
                    D,
                    "devices.memdevs-unused",
                    NOTE,
                    f"{names}: {format_size(free)} in no region (this kernel cannot create RAM regions; see kernel.ram-regions)",
                    ev,
                )
            )
        else:
            try:
                plans = plan_all(inv, Request())
                cmds = [
                    f"cxlctl region create --memdevs {','.join(t.memdev for t in p.targets)} --decoder {p.root_decoder}"
                    for p in plans
                ]
                fix = "; ".join(cmds) + " (or: cxlctl region create --all)" if cmds else "cxlctl region plan --all"
            except CxlctlError as e:
                fix = f"cxlctl region plan --all explains what blocks it: {e}"
            out.append(
                Check(
                    D,
                    "devices.memdevs-unused",
                    WARN,
                    f"{names}: {format_size(free)} of CXL capacity in no region (unused)",
                    ev,
                    fix,
                )
            )
    elif inv.memdevs:
        out.append(
            Check(
                D,
                "devices.memdevs-unused",
                OK,
                f"every memdev's capacity is in a region ({len(inv.memdevs)} memdev(s))",
                (Evidence(paths.CXL_DEVICES, " ".join(m.name for m in inv.memdevs[:8])),),
            )
        )
    return out


def check_regions(f: Facts) -> List[Check]:
    out: List[Check] = []
    for r in f.inv.regions:
        base = f"{paths.CXL_DEVICES}/{r.name}"
        if r.committed is False:
            out.append(
                Check(
                    D,
                    f"devices.region.{r.name}",
                    FAIL,
                    f"{r.name} is not committed (decoders not programmed): it provides no memory",
                    (Evidence(f"{base}/commit", "0"),),
                    f"cxlctl region destroy {r.name}, then cxlctl region create",
                )
            )
        elif r.mode == "ram" and r.committed and not r.dax_region:
            res: Result = NOTE if r.driver else FAIL
            msg = (
                _no_dax_region(f, r.name)
                if r.driver
                else f"{r.name} is not bound to the cxl_region driver: no DAX device, no memory"
            )
            out.append(
                Check(
                    D,
                    f"devices.region.{r.name}",
                    res,
                    msg,
                    (Evidence(f"{base}/driver", r.driver or "no link"),),
                    "" if r.driver else "modprobe dax_cxl; echo " + r.name + " > /sys/bus/cxl/drivers/cxl_region/bind",
                )
            )
    return out


def _no_dax_region(f: Facts, region: str) -> str:
    """Why a bound RAM region has no DAX region, as ``capacity`` reads it (maygo.foreign_ram)."""
    from cxlctl.capacity.maygo import foreign_ram

    blocks, known = foreign_ram(f.inv, region)
    if known and blocks:
        return (
            f"{region} has no dax region: {len(blocks)} block(s) of its range are online as System RAM (onlined "
            "by firmware; cxl_region_probe() then makes none): it cannot be released or destroyed from Linux"
        )
    r = f.inv.region(region)
    if known and r is not None and r.resource is not None:
        return f"{region} has no dax region and none of its range is online: is dax_cxl loaded?"
    return f"{region} has no dax region: its range is System RAM onlined by firmware, or dax_cxl is not loaded"


def check_port_holes(f: Facts) -> List[Check]:
    """Ports left with a free decoder below one in use: the next region through them fails."""
    from cxlctl.capacity.maygo import hole_text, port_holes

    return [
        Check(
            D,
            f"devices.port-hole.{h.port}",
            WARN,
            hole_text(h),
            tuple(Evidence(f"{paths.cxl_device(d)}/region", "(none)") for d in h.free[:4]),
            f"release or destroy {', '.join(sorted({r for _, r in h.held}))} (highest decoders first), then build "
            "the regions again",
        )
        for h in port_holes(f.inv)
    ]


def _blocks_ev(d: DaxDevice) -> Evidence:
    return Evidence(
        f"{paths.MEMORY_DIR}/memoryN/state (node {d.target_node})",
        f"{d.online_memblocks if d.online_memblocks is not None else '?'} of {d.total_memblocks if d.total_memblocks is not None else '?'} blocks online"
        + (f", zones {'/'.join(d.zones)}" if d.zones else ""),
    )


def check_dax(f: Facts) -> List[Check]:
    out: List[Check] = []
    auto = f.inv.knob_value("auto_online_blocks")
    for d in (d for d in f.inv.dax_devices if d.provider == "cxl"):
        what = f"{d.name}" + (f" ({d.region})" if d.region else "")
        if d.driver is None:
            out.append(
                Check(
                    D,
                    f"devices.dax.{d.name}",
                    FAIL,
                    f"{what} is bound to no driver: its memory is neither a NUMA node nor a device",
                    (Evidence(_dax(d.name, "driver"), "no link"),),
                    _reconfigure(d.name),
                )
            )
        elif d.mode == "devdax":
            out.append(
                Check(
                    D,
                    f"devices.dax.{d.name}",
                    WARN,
                    f"{what} is in devdax mode: its {format_size(d.size)} is a character device (/dev/{d.name}), not NUMA memory",
                    (Evidence(_dax(d.name, "driver"), "device_dax"),),
                    _reconfigure(d.name) + "; keep devdax only if an application maps /dev/" + d.name,
                )
            )
        elif d.mode == "system-ram" and d.total_memblocks and (d.online_memblocks or 0) < d.total_memblocks:
            off = d.total_memblocks - (d.online_memblocks or 0)
            none = not d.online_memblocks
            msg = (
                f"{d.region or d.name} is not onlined: all {off} memory blocks of {d.name} are offline, node {d.target_node} has none of its memory"
                if none
                else f"{off} of {d.total_memblocks} memory blocks of {d.name} are offline (node {d.target_node})"
            )
            if auto == "offline":
                msg += "; auto_online_blocks=offline left them so"
            fix = f"cxlctl dax reconfigure {d.name} --mode system-ram --zone normal (daxctl online-memory --no-movable {d.name})"
            out.append(Check(D, f"devices.dax.{d.name}", FAIL, msg, (_blocks_ev(d),), fix))
        elif d.mode == "system-ram" and d.zones and _split_covers(f, d):
            out.append(_in_share(f, d))
        elif d.mode == "system-ram" and f.lending and any(z != "Movable" for z in d.zones):
            out.append(_normal_on_lender(f, d))
        elif d.mode == "system-ram" and "Movable" in d.zones and f.lending:
            out.append(
                Check(
                    D,
                    f"devices.dax.{d.name}.zone",
                    OK,
                    f"{d.name} (node {d.target_node}) is online in ZONE_MOVABLE, as a host that lends capacity needs "
                    "(offline_pages() can empty it for `cxlctl capacity release`)",
                    (_blocks_ev(d), Evidence(f.lending.split(": ")[0], f.lending.split(": ", 1)[-1])),
                )
            )
        elif d.mode == "system-ram" and "Movable" in d.zones:
            out.append(
                Check(
                    D,
                    f"devices.dax.{d.name}.zone",
                    WARN,
                    f"{d.name} (node {d.target_node}) is online in ZONE_MOVABLE: long-term pinned buffers (CUDA pinned host memory, RDMA, KV offload) are migrated out of it, back to DRAM",
                    (_blocks_ev(d),),
                    _reconfigure(d.name) + "; keep movable only if the memory must be hot-unpluggable",
                )
            )
        else:
            out.append(
                Check(
                    D,
                    f"devices.dax.{d.name}",
                    OK,
                    f"{what}: system-ram, online on node {d.target_node} ({'/'.join(d.zones) or '?'})",
                    (_blocks_ev(d),),
                )
            )
        memmap = _memmap_on_cxl(f, d)
        if memmap is not None:
            out.append(memmap)
    return out


def _split_covers(f: Facts, d: DaxDevice) -> bool:
    """Whether the host's split (``[capacity] pinnable``, capacity/pinnable.py) accounts for ``d``'s zone: a
    movable device is the lendable share, a kernel-zone one the pinnable share while the host's kernel-zone
    CXL memory is within the target."""
    sh = f.share
    if sh is None or sh.target is None:
        return False
    return "Movable" in d.zones or sh.pinnable <= sh.target


def _in_share(f: Facts, d: DaxDevice) -> Check:
    """A device whose zone is what the host's split asks for: no lending or pinning warning (they agree)."""
    sh = f.share
    assert sh is not None
    movable = "Movable" in d.zones
    job = (
        "the lendable share: `cxlctl capacity release` can give it back, a long-term pin would move its pages"
        if movable
        else "the pinnable share: a long-term pinned KV offload stays there (folio_is_longterm_pinnable()), "
        "it is not lendable"
    )
    return Check(
        D,
        f"devices.dax.{d.name}.zone",
        OK,
        f"{d.name} (node {d.target_node}) is online in ZONE_{'/'.join(d.zones).upper()}, {job} ({sh.setting}; the "
        f"host has {format_size(sh.pinnable)} pinnable, {format_size(sh.lendable)} lendable CXL memory)",
        (_blocks_ev(d), Evidence(sh.source or paths.CONFIG_PATH, f"[capacity] pinnable = {sh.target}")),
    )


def check_pinnable_share(f: Facts) -> List[Check]:
    """``[capacity] pinnable`` against the host: a shortfall means pinned KV offloads would be moved to DRAM
    by their pin (mm/gup.c migrate_longterm_unpinnable_folios()) once they outgrow the kernel-zone CXL memory."""
    from cxlctl.capacity import pinnable

    sh = f.share
    if sh is None or sh.target is None:
        return []
    ev = (Evidence(sh.source or paths.CONFIG_PATH, f"[capacity] pinnable = {sh.target}"),)
    have = (
        f"{format_size(sh.pinnable)} of CXL memory online in a kernel zone, {format_size(sh.lendable)} in ZONE_MOVABLE"
    )
    if sh.shortfall:
        return [
            Check(
                D,
                "devices.pinnable-share",
                WARN,
                f"the host has {have}: {format_size(sh.shortfall)} short of {sh.setting}; a pinned KV offload "
                "beyond the kernel-zone memory is moved to DRAM by its pin (mm/gup.c "
                "migrate_longterm_unpinnable_folios())",
                ev,
                "build the next region without --zone (`cxlctl region create`: the split picks ZONE_NORMAL while "
                "short), or " + pinnable.NORMAL_FIX.split(" (", 1)[0] + " (`cxlctl dax reconfigure daxX.Y --mode "
                "system-ram --zone normal`); or lower [capacity] pinnable",
            )
        ]
    return [Check(D, "devices.pinnable-share", OK, f"the host has {have}: it meets {sh.setting}", ev)]


def _normal_on_lender(f: Facts, d: DaxDevice) -> Check:
    """CXL memory in ZONE_NORMAL on a host whose daemon configuration lends capacity: it cannot be given back.

    Why it lands there: ``zone_for_pfn_range()`` (mm/memory_hotplug.c) gives ``online_kernel`` the
    kernel zone, ``online_movable`` ZONE_MOVABLE, and plain ``online`` the zone the range already
    intersects, else ZONE_MOVABLE only with ``movable_node``, or by ``memory_hotplug.online_policy=
    auto-movable``'s ratio; otherwise ZONE_NORMAL.  ZONE_NORMAL takes unmovable kernel allocations,
    and ``offline_pages()`` fails with EBUSY on one, so ``capacity release`` refuses (zone-normal)."""
    from cxlctl.capacity import zones

    auto = f.inv.knob_value("auto_online_blocks")
    r = f.host.reader
    policy, numa_aware = r.text(paths.ONLINE_POLICY), r.text(paths.AUTO_MOVABLE_NUMA_AWARE)
    cause = {
        "online_kernel": "auto_online_blocks=online_kernel onlines new memory in the kernel zone",
        "online": "auto_online_blocks=online puts new memory in the zone the range already touches, else ZONE_NORMAL "
        "(unless movable_node, or memory_hotplug.online_policy=auto-movable with auto_movable_numa_aware=N)",
    }.get(auto or "", "it was onlined into the kernel zone (online_kernel, daxctl --no-movable, or the boot policy)")
    if auto == "online" and zones.numa_aware_blocks(policy, numa_aware):
        cause = (
            "memory_hotplug.online_policy=auto-movable is set, but with auto_movable_numa_aware=Y "
            "auto_movable_can_online_movable() finds no boot-time kernel memory on a CPU-less CXL node and "
            "auto_movable_zone_for_pfn() onlines it in ZONE_NORMAL"
        )
    where = f.lending.split(": ")[0] if f.lending else "the daemon's configuration"
    return Check(
        D,
        f"devices.dax.{d.name}.zone",
        WARN,
        f"{d.name} (node {d.target_node}) is online in ZONE_{'/'.join(d.zones).upper() or 'NORMAL'} on a host that lends "
        f"capacity ({f.lending}): offline_pages() fails with EBUSY on the unmovable kernel pages that zone takes, so "
        f"`cxlctl capacity release` refuses it (zone-normal); {cause}",
        (
            _blocks_ev(d),
            Evidence(where, (f.lending or "").split(": ", 1)[-1]),
            Evidence(paths.AUTO_ONLINE, auto or "?"),
        ),
        f"{zones.movable_fix()}; {d.name} itself: `cxlctl capacity release MEMDEV --try-normal` tries to give it "
        "back (rolled back on EBUSY); a reboot brings firmware-committed memory back the same way unless the boot "
        "setting above is made",
    )


def _memmap_on_cxl(f: Facts, d: DaxDevice) -> Optional[Check]:
    """A note when a kmem device's struct pages live on its own CXL memory.

    kmem asks for MHP_MEMMAP_ON_MEMORY when the device's ``memmap_on_memory`` is set (dax_cxl sets it
    for every CXL RAM region), and ``add_memory_resource`` then takes each memory block's memmap
    from the block itself (an altmap) where ``mhp_supports_memmap_on_memory`` allows it, which needs
    ``memory_hotplug.memmap_on_memory`` on (Y or force; off by default).  Judged only when that
    parameter is readable."""
    if d.mode != "system-ram" or not d.memmap_on_memory:
        return None
    param = f.host.reader.text(paths.MEMMAP_ON_MEMORY)
    if param not in ("Y", "force"):
        return None
    per = f": {format_size(d.size // 64)} of its {format_size(d.size)}" if d.size else ""
    return Check(
        D,
        f"devices.dax.{d.name}.memmap",
        NOTE,
        f"{d.name}'s struct pages (64 bytes per 4 KiB page{per}) live on the CXL memory itself "
        "(memmap_on_memory: MHP_MEMMAP_ON_MEMORY, add_memory_resource): every page-metadata access for node "
        f"{d.target_node} (LRU, refcounts, migration, DAMON's access checks) goes to CXL, and that part of it is "
        "not usable memory",
        (Evidence(_dax(d.name, "memmap_on_memory"), "1"), Evidence(paths.MEMMAP_ON_MEMORY, param)),
        "keep it if DRAM is scarce; for the memmap in DRAM: boot without memory_hotplug.memmap_on_memory, or write 0 "
        f"to {_dax(d.name, 'memmap_on_memory')} while kmem does not hold the device (the kernel refuses with EBUSY "
        f"then: cxlctl dax reconfigure {d.name} --mode devdax first) and reconfigure it to system-ram again",
    )


def check_auto_online(f: Facts) -> List[Check]:
    v = f.inv.knob_value("auto_online_blocks")
    ev = (Evidence(paths.AUTO_ONLINE, v if v is not None else "unreadable"),)
    if v is None:
        return [Check(D, "devices.auto-online", NOTE, "auto_online_blocks is not readable (no memory hot-plug?)", ev)]
    if v == "offline":
        offline = any(
            d.provider == "cxl"
            and d.mode == "system-ram"
            and d.total_memblocks
            and (d.online_memblocks or 0) < d.total_memblocks
            for d in f.inv.dax_devices
        )
        return [
            Check(
                D,
                "devices.auto-online",
                WARN,
                "auto_online_blocks=offline: memory added by a new region or a kmem bind stays offline"
                + (" (and some CXL memory is offline now)" if offline else ""),
                ev,
                f"echo online > {paths.AUTO_ONLINE} (boot: memhp_default_state=online), or let cxlctl online it: cxlctl region create --online, or the daemon's online_new_memory",
            )
        ]
    if v == "online_movable":
        return [
            Check(
                D,
                "devices.auto-online",
                NOTE,
                "auto_online_blocks=online_movable: new CXL memory goes to ZONE_MOVABLE (pinned engine buffers cannot stay there)",
                ev,
                f"echo online > {paths.AUTO_ONLINE} if the engine pins host memory",
            )
        ]
    zone = auto_online_zone(f.host)
    where = {
        "normal": "in ZONE_NORMAL",
        "movable": "in ZONE_MOVABLE (movable_node)",
        "either": "in ZONE_MOVABLE or ZONE_NORMAL, as memory_hotplug's auto-movable ratio allows at the time",
    }.get(zone or "", "")
    return [
        Check(
            D,
            "devices.auto-online",
            OK if zone != "movable" else NOTE,
            f"auto_online_blocks={v}: the kernel onlines a new CXL node's memory itself"
            + (f" {where} (zone_for_pfn_range)" if where else "")
            + "; daxctl reconfigure-device refuses while it is set for a movable onlining (its default) or --no-online, "
            "unless --force; cxlctl holds the policy back while it onlines in another zone",
            ev,
            f"echo online_kernel > {paths.AUTO_ONLINE} if the engine pins host memory" if zone == "movable" else "",
        )
    ]


def check_udev(f: Facts) -> List[Check]:
    out: List[Check] = []
    for path, line in f.udev_rules:
        ev = (Evidence(path, line[:160]),)
        if "daxctl" in line or "daxdev-reconfigure" in line:
            if f.daxctl_conf:
                secs = "; ".join(f"{p}: {s}" for p, s in f.daxctl_conf[:3])
                out.append(
                    Check(
                        D,
                        "devices.udev.daxctl",
                        WARN,
                        "ndctl's udev rule reconfigures DAX devices as they appear (daxctl -C / daxdev-reconfigure@), per "
                        + secs
                        + ": it fights the mode and zone cxlctl chooses",
                        ev + tuple(Evidence(p, s) for p, s in f.daxctl_conf[:3]),
                        "remove the [reconfigure-device] sections from "
                        + ", ".join(sorted({p for p, _ in f.daxctl_conf})),
                    )
                )
            else:
                out.append(
                    Check(
                        D,
                        "devices.udev.daxctl",
                        OK,
                        f"ndctl's udev rule runs daxctl on new DAX devices, but no {paths.DAXCTL_CONF_DIR}/*.conf has a [reconfigure-device] section: it changes nothing",
                        ev,
                    )
                )
        else:
            out.append(
                Check(
                    D,
                    "devices.udev.memory",
                    WARN,
                    "a udev rule onlines every hot-added memory block itself (in the zone it picks): it races cxlctl's onlining and zone choice",
                    ev,
                    f"mask it: an empty file of the same name in /etc/udev/rules.d ({path.rsplit('/', 1)[-1]}), then udevadm control --reload",
                )
            )
    return out


def check_tiers(f: Facts) -> List[Check]:
    inv = f.inv
    cxl = [n for n in inv.nodes if n.kind == "cxl" and n.has_memory]
    dram = [n for n in inv.nodes if n.kind == "dram"]
    if not cxl:
        return []
    dram_tiers = {n.tier for n in dram if n.tier is not None}
    same = [n for n in cxl if n.tier is not None and n.tier in dram_tiers]
    ev = tuple(
        Evidence(f"{paths.TIER_DIR}/memory_tier{t.id}/nodelist", format_nodelist(t.nodes)) for t in inv.tiers[:4]
    )
    if not inv.tiers:
        return [
            Check(
                D,
                "devices.tiers",
                NOTE,
                "no memory tiers in sysfs (kernel before 6.1, or CONFIG_NUMA off)",
                (Evidence(paths.TIER_DIR, "absent"),),
            )
        ]
    collapsed = default_tier_nodes(cxl)
    out: List[Check] = []
    if len(collapsed) > 1:
        out.append(
            Check(
                D,
                "devices.tiers.default",
                WARN,
                f"CXL nodes {', '.join(map(str, collapsed))} all sit in memory_tier{DEFAULT_DAX_TIER}, the tier kmem "
                "gives memory without performance figures (MEMTIER_DEFAULT_DAX_ADISTANCE): the kernel cannot tell "
                "them apart, so it never moves pages between a fast and a slow one",
                ev,
                "enable HMAT in the BIOS with generic port entries for the CXL host bridges (the devices' CDAT "
                "then gives each node its own tier); until then place memory per node explicitly (cxlctl launch)",
            )
        )
    if not same:
        return [
            Check(
                D,
                "devices.tiers",
                OK,
                f"CXL node(s) {format_nodelist(n.id for n in cxl)} are in a lower tier than DRAM: demotion and promotion can move pages",
                ev,
            )
        ] + out
    kmem = {d.target_node for d in inv.dax_devices if d.driver == "kmem"}
    return [
        Check(
            D,
            "devices.tiers",
            WARN,
            "; ".join(cxl_in_dram_tier_why(n, n.id in kmem) for n in same),
            ev,
            "place memory explicitly (weighted interleave or binding: cxlctl tune recommend, cxlctl launch); for "
            "boot-time System RAM, have the firmware mark CXL memory Soft Reserved (EFI_MEMORY_SP, often a BIOS "
            "option for CXL memory as special purpose) and drop efi=nosoftreserve, so kmem onlines it",
        )
    ] + out


def checks(f: Facts) -> List[Check]:
    return (
        check_memdevs(f)
        + check_regions(f)
        + check_port_holes(f)
        + check_dax(f)
        + check_pinnable_share(f)
        + check_auto_online(f)
        + check_udev(f)
        + check_tiers(f)
    )
