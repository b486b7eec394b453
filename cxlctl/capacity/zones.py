"""The one place that says how CXL memory gets into ZONE_MOVABLE, and what to do about ZONE_NORMAL.

doctor, the capacity report's ``zone-normal`` blocker and the docs take their
words from here, each way checked against the kernel:

* per device, now: ``online_movable`` written to each block
  (``zone_for_pfn_range()``, mm/memory_hotplug.c: MMOP_ONLINE_MOVABLE →
  ZONE_MOVABLE): ``cxlctl region create --zone movable``, ``cxlctl capacity
  adopt``, ``daxctl reconfigure-device --mode=system-ram`` (movable unless
  ``--no-movable``);
* every hot-added range, boot included: ``memhp_default_state=online_movable``
  on the kernel command line (``setup_memhp_default_state()`` takes any
  ``mhp_online_type_from_str()`` word; ``online_memory_block()`` onlines each
  block with it), or ``online_movable`` in
  ``/sys/devices/system/memory/auto_online_blocks`` at run time (the same
  parser).  This is what makes a pool host's Soft-Reserved CXL memory, onlined
  by kmem at every boot, come up movable;
* ``memory_hotplug.online_policy=auto-movable`` does not, by itself, for a CXL
  node: ``auto_movable_zone_for_pfn()`` also asks
  ``auto_movable_can_online_movable(nid, …)`` while ``auto_movable_numa_aware``
  is on (the default), and a CPU-less node has no boot-time kernel memory
  (``kernel_early_pages`` 0), so the test fails and the memory goes to the kernel
  zone.  Only with ``memory_hotplug.auto_movable_numa_aware=N`` does the
  system-wide ratio (``auto_movable_ratio``, 301 % of the boot-time kernel
  memory by default) decide;
* daxctl's configuration (``/etc/daxctl.conf.d/*.conf``, ``[reconfigure-device
  NAME]`` run by udev's daxdev-reconfigure service) matches a device by
  ``nvdimm.uuid``: a CXL RAM region's DAX device has no NVDIMM namespace, so it
  does not apply to CXL memory.

A reboot does not move memory out of ZONE_NORMAL: memory the firmware committed
comes back the same way at every boot, into whatever zone the settings above
give it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from .pinnable import Share

#: how to online new CXL memory movable, per device
PER_DEVICE = (
    '`cxlctl region create --zone movable` / `cxlctl capacity adopt` (the daemon\'s [capacity] zone = "movable"), '
    "`daxctl reconfigure-device --mode=system-ram` without --no-movable"
)
#: how to make every hot-added range (a pool host's boot-time CXL memory too) come up movable
BOOT = (
    "boot with memhp_default_state=online_movable (or write online_movable to "
    "/sys/devices/system/memory/auto_online_blocks before the memory is added)"
)
#: auto-movable, as the kernel applies it to a CPU-less CXL node
AUTO_MOVABLE = (
    "memory_hotplug.online_policy=auto-movable only together with memory_hotplug.auto_movable_numa_aware=N "
    "(numa-aware, the default, sends a CPU-less node's memory to ZONE_NORMAL) and within auto_movable_ratio"
)
#: daxctl's configuration file, and why it is not a way here
DAXCTL_CONF = "daxctl's /etc/daxctl.conf.d matches devices by nvdimm.uuid, which a CXL region's DAX device lacks"


def numa_aware_blocks(online_policy: Optional[str], numa_aware: Optional[str]) -> bool:
    """True when ``auto-movable`` is the policy but its NUMA-aware check sends a CPU-less node to ZONE_NORMAL."""
    return (online_policy or "").strip() == "auto-movable" and (numa_aware or "Y").strip() in ("Y", "y", "1")


def movable_fix() -> str:
    """The fix for CXL memory that should have been movable: the ways that work, and the one that does not."""
    return f"online CXL memory movable: {PER_DEVICE}; for every boot: {BOOT}; or {AUTO_MOVABLE}"


def zone_normal_fix(memdev: Optional[str] = None, split: Optional[Share] = None) -> str:
    """What to do about a device online in ZONE_NORMAL (the report's ``zone-normal`` blocker); with the host's
    split set (``[capacity] pinnable``), that memory is the pinned KV's share on purpose: lower the target first."""
    who = memdev or "MEMDEV"
    first = ""
    if split is not None and split.target is not None:
        first = (
            f"{split.setting} keeps kernel-zone CXL memory for pinned KV; to lend this instead, lower it first, then "
        )
    return first + (
        f"try it: `cxlctl capacity release {who} --try-normal` offlines the ZONE_NORMAL blocks and rolls back "
        "on EBUSY (an unmovable kernel page); a reboot does not help, the firmware's memory comes back in "
        f"ZONE_NORMAL: {BOOT}, or build the region with `cxlctl region create --zone movable`"
    )


#: the hint after an offline failed with EBUSY (regions/dax.py, capacity release)
EBUSY_HINT = (
    "free the memory on that node (stop the processes using it) and retry; a block in ZONE_NORMAL may hold "
    "unmovable kernel pages (slab, page tables) that no retry moves, and a reboot brings the firmware's memory back "
    f"in ZONE_NORMAL unless the host is set to online it movable ({BOOT})"
)
