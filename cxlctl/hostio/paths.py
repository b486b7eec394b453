"""Every host path cxlctl reads or writes, defined once.

Paths are as seen on the managed host (``/sys/...``); :func:`cxlctl.hostio.root.under`
maps them into a ``--root`` tree.  Grouped by what they belong to.
"""

from __future__ import annotations

# typing costs ~5 ms of start-up: only mypy needs it here
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Tuple


SYS = "/sys/"

# -- sysfs: CXL and DAX buses --------------------------------------------------------------
CXL_DEVICES = "/sys/bus/cxl/devices"
CXL_REGION_DRIVER = "/sys/bus/cxl/drivers/cxl_region"
DAX_DEVICES = "/sys/bus/dax/devices"
DAX_DRIVERS = "/sys/bus/dax/drivers"
PCI_DEVICES = "/sys/bus/pci/devices"
#: each CXL/DAX module's driver directory: there while the driver is registered (loaded or built
#: in), whether or not the module has parameters (a built-in one without has no /sys/module/NAME)
MODULE_DRIVERS = {
    "cxl_acpi": "/sys/bus/platform/drivers/cxl_acpi",
    "cxl_pci": "/sys/bus/pci/drivers/cxl_pci",
    "cxl_mem": "/sys/bus/cxl/drivers/cxl_mem",
    "cxl_port": "/sys/bus/cxl/drivers/cxl_port",
    "dax_cxl": "/sys/bus/cxl/drivers/cxl_dax_region",
    "device_dax": "/sys/bus/dax/drivers/device_dax",
    "kmem": "/sys/bus/dax/drivers/kmem",
}
SYS_DEVICES = "/sys/devices"

# -- sysfs: NUMA, memory hotplug, tiers ------------------------------------------------------
NODE_DIR = "/sys/devices/system/node"
#: CPU caches: cpuN/cache/indexM/{level,size,shared_cpu_list} (the probe sizes its buffers past the
#: last level of every CPU it measures with)
CPU_CACHE_DIR = "/sys/devices/system/cpu/cpu{cpu}/cache"
MEMORY_DIR = "/sys/devices/system/memory"
BLOCK_SIZE = MEMORY_DIR + "/block_size_bytes"
AUTO_ONLINE = MEMORY_DIR + "/auto_online_blocks"
TIER_DIR = "/sys/devices/virtual/memory_tiering"
#: mm/memory_hotplug.c's module parameters: the zone ``online`` picks (``zone_for_pfn_range``)
MHP_PARAMS = "/sys/module/memory_hotplug/parameters"
ONLINE_POLICY = MHP_PARAMS + "/online_policy"  # contig-zones (default) | auto-movable
AUTO_MOVABLE_RATIO = MHP_PARAMS + "/auto_movable_ratio"  # percent, default 301
AUTO_MOVABLE_NUMA_AWARE = MHP_PARAMS + "/auto_movable_numa_aware"  # Y (default) | N
MEMMAP_ON_MEMORY = MHP_PARAMS + "/memmap_on_memory"  # N (default) | Y | force: struct pages on hot-added memory
WI_DIR = "/sys/kernel/mm/mempolicy/weighted_interleave"
DEMOTION_ENABLED = "/sys/kernel/mm/numa/demotion_enabled"
CGROUP_DIR = "/sys/fs/cgroup"

# -- sysfs: DAMON (Documentation/admin-guide/mm/damon/usage.rst) ------------------------------
DAMON_ADMIN = "/sys/kernel/mm/damon/admin"
DAMON_KDAMONDS = DAMON_ADMIN + "/kdamonds"
DAMON_NR_KDAMONDS = DAMON_KDAMONDS + "/nr_kdamonds"
MODULE_DIR = "/sys/module"
#: the DAMON modules that run a kdamond of their own (not visible under DAMON_KDAMONDS)
DAMON_MODULES = ("damon_reclaim", "damon_lru_sort", "damon_stat")
BOOT_DIR = "/boot"

# -- tracefs (RAS events) ------------------------------------------------------------------
TRACEFS = "/sys/kernel/tracing"
TRACEFS_DEBUGFS = "/sys/kernel/debug/tracing"  # where kernels before 4.1 (and some setups) mount it
#: cxlctl's own trace instances are named cxlctl-<what>; it never touches another
TRACE_INSTANCE_PREFIX = "cxlctl-"
#: the long-lived collection instance (``cxlctl events --collect``)
TRACE_COLLECT_INSTANCE = "cxlctl-events"
SOFT_OFFLINE_PAGE = "/sys/devices/system/memory/soft_offline_page"
JOURNAL_SOCKET = "/run/systemd/journal/socket"  # journald's native protocol (structured RAS entries)


def cxl_device(name: str) -> str:
    """``/sys/bus/cxl/devices/NAME`` (memdev, region, decoder, port)."""
    return f"{CXL_DEVICES}/{name}"


def decoder_locked(decoder: str) -> str:
    """``decoderX.Y/locked``: 1 when the firmware committed and locked the decoder (``CXL_DECODER_F_LOCK``);
    the kernel then refuses its region's decommit (``commit_store()``: EPERM).  Read by the inventory
    scan (``Decoder.locked``); the path doctor and ``capacity`` name as evidence."""
    return f"{CXL_DEVICES}/{decoder}/locked"


# -- procfs -------------------------------------------------------------------------------
PROC = "/proc"
PROC_SYS = "/proc/sys/"
OSRELEASE = "/proc/sys/kernel/osrelease"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
NUMA_BALANCING = "/proc/sys/kernel/numa_balancing"
PROMOTE_RATE_LIMIT = "/proc/sys/kernel/numa_balancing_promote_rate_limit_MBps"
ZONE_RECLAIM_MODE = "/proc/sys/vm/zone_reclaim_mode"
SWAPPINESS = "/proc/sys/vm/swappiness"
#: the thresholds below which the kernel's per-node reclaim (zone_reclaim_mode, nodeN/reclaim) scans nothing
MIN_UNMAPPED_RATIO = "/proc/sys/vm/min_unmapped_ratio"
MIN_SLAB_RATIO = "/proc/sys/vm/min_slab_ratio"
SELF_STATUS = "/proc/self/status"
#: this process' descriptors as links (``chmod`` through one reaches an ``O_PATH`` handle's inode)
SELF_FD = "/proc/self/fd"
#: every file lock on the host, with its holder's pid and inode (who holds cxlctl's lock)
PROC_LOCKS = "/proc/locks"
SELF_CGROUP = "/proc/self/cgroup"
#: the mounts this process sees, each with its file system's own options (a tmpfs's ``mpol=``)
SELF_MOUNTINFO = "/proc/self/mountinfo"
PROC_VMSTAT = "/proc/vmstat"
#: reading it (root only) folds every CPU's pending counter deltas into the totals that
#: /proc/vmstat and nodeN/vmstat show (Documentation/admin-guide/sysctl/vm.rst, stat_refresh)
VM_STAT_REFRESH = "/proc/sys/vm/stat_refresh"
UPTIME = "/proc/uptime"
CPUINFO = "/proc/cpuinfo"

#: The knob registry: every setting ``tune`` may change (name, path), in the tuning engine's
#: apply order (revert goes in reverse).  ``status`` shows the single-file ones (STATUS_KNOBS);
#: cxlctl.tuning.knobs gives each its validation, probe and files, looking the path up here by
#: name, so a knob cannot be known to one command and not the other, nor spelled two ways.
KNOBS: Tuple[Tuple[str, str], ...] = (
    ("vm.zone_reclaim_mode", ZONE_RECLAIM_MODE),
    ("vm.swappiness", SWAPPINESS),
    ("demotion_enabled", DEMOTION_ENABLED),
    ("auto_online_blocks", AUTO_ONLINE),
    ("kernel.numa_balancing_promote_rate_limit_MBps", PROMOTE_RATE_LIMIT),
    ("kernel.numa_balancing", NUMA_BALANCING),
    ("weighted_interleave", WI_DIR),  # a group: nodeN weights and auto
    ("damon", DAMON_KDAMONDS),  # a group: the kdamonds cxlctl adds
)
#: The single-file knobs in the order ``status`` lists them (NUMA balancing, what tiering turns on, first).
STATUS_KNOBS = (
    "kernel.numa_balancing",
    "kernel.numa_balancing_promote_rate_limit_MBps",
    "vm.zone_reclaim_mode",
    "vm.swappiness",
    "demotion_enabled",
    "auto_online_blocks",
)


def knob_path(name: str) -> str:
    """The file (or, for a group, the directory) of registry knob ``name``; KeyError if none."""
    for n, p in KNOBS:
        if n == name:
            return p
    raise KeyError(name)


def proc_pid(pid: int, what: str) -> str:
    """``/proc/PID/WHAT`` (``status``, ``numa_maps``, ``environ``, ``comm``)."""
    return f"{PROC}/{pid}/{what}"


def memory_block(bid: int) -> str:
    """Directory of memory block ``bid`` (``/sys/devices/system/memory/memoryN``)."""
    return f"{MEMORY_DIR}/memory{bid}"


def node_dir(nid: int) -> str:
    return f"{NODE_DIR}/node{nid}"


#: per-node memory-failure (hwpoison) counters, one file each (``total``, ``recovered``, ...)
NODE_MEMORY_FAILURE = "memory_failure"


def node_file(nid: int, what: str) -> str:
    """``/sys/devices/system/node/nodeN/WHAT`` (``vmstat``, ``meminfo``, ``numastat``)."""
    return f"{NODE_DIR}/node{nid}/{what}"


def cgroup_file(cgroup: str, what: str) -> str:
    """``WHAT`` (``memory.numa_stat``, ``memory.stat``) of cgroup ``cgroup`` as ``/proc/PID/cgroup``
    names it (``/system.slice/x.service``; ``/`` is the root cgroup)."""
    return CGROUP_DIR + ("" if cgroup in ("", "/") else cgroup) + "/" + what


# -- cxlctl's own state ---------------------------------------------------------------------
RUN_DIR = "/run/cxlctl"
#: on the live host, CXLCTL_TEST_* hooks are honoured only while this root-owned file exists (a test
#: machine: the VM tier's guests make it); under a --root tree, CXLCTL_TEST_HOOKS=1 is enough
TEST_HOOKS_MARK = "/run/cxlctl-test-hooks"
LOCK = RUN_DIR + "/lock"
DAEMON_LOCK = RUN_DIR + "/daemon.lock"  # held by a running `cxlctl daemon run`: one per host
LAUNCH_PROFILE_DIR = RUN_DIR + "/launch"
STATE_DIR = "/var/lib/cxlctl"
ACTIVE_PROFILE = STATE_DIR + "/active-profile"
#: the stored results of ``cxlctl probe`` (docs/probe.md)
PROBE_RESULTS = STATE_DIR + "/probe.json"
CONFIG_PATH = "/etc/cxlctl/cxlctl.toml"
#: root's cache (the probe's compiled helper, engines' flag lists): a user's $XDG_CACHE_HOME,
#: $HOME or $CXLCTL_CACHE_DIR (kept by ``sudo -E``) must not choose what root runs (issue 43)
ROOT_CACHE_DIR = "/var/cache/cxlctl"
#: where root looks up the tools it runs by name (the C compiler), never the caller's $PATH
ROOT_TOOL_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
#: where root makes a fresh private directory: ``/tmp`` itself (sticky, root's), never ``$TMPDIR``
ROOT_TMP = "/tmp"
USER_PROFILE_DIR = "/etc/cxlctl/profiles"
#: the manifest at the top of a tree ``cxlctl record`` wrote (``doctor`` reads it on replay)
RECORD_MANIFEST = "/cxlctl-record.json"

# -- other software's configuration that cxlctl reads or writes -----------------------------
NFD_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
SYSCTL_DIRS = ("/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d", "/lib/sysctl.d")
SYSCTL_CONF = "/etc/sysctl.conf"
PERSIST_SYSCTL = "/etc/sysctl.d/90-cxlctl.conf"
#: sysfs knobs for systemd-tmpfiles at boot (``w PATH - - - - VALUE`` lines, tmpfiles.d(5))
PERSIST_TMPFILES = "/etc/tmpfiles.d/90-cxlctl.conf"
TUNED_ACTIVE = "/etc/tuned/active_profile"
TUNED_MAIN = "/etc/tuned/tuned-main.conf"
TUNED_DIRS = ("/etc/tuned/profiles", "/etc/tuned", "/usr/lib/tuned/profiles", "/usr/lib/tuned")
DEV_SHM = "/dev/shm"
#: the host tmpfs bound to the node's pinnable CXL nodes that pods mount (``cxlctl k8s kv-pool``)
KV_POOL_DIR = "/run/cxlctl/kv"

# -- what `cxlctl doctor` reads besides the scan ------------------------------------------
PROC_CMDLINE = "/proc/cmdline"
PROC_MODULES = "/proc/modules"
PROC_CONFIG_GZ = "/proc/config.gz"
PROC_IOMEM = "/proc/iomem"
SELF_LIMITS = "/proc/self/limits"
ACPI_TABLES = "/sys/firmware/acpi/tables"
THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"
#: when a fault may stall to make a huge page (the probe records it beside the mode)
THP_DEFRAG = "/sys/kernel/mm/transparent_hugepage/defrag"
UDEV_RULES_DIRS = ("/etc/udev/rules.d", "/run/udev/rules.d", "/usr/lib/udev/rules.d", "/lib/udev/rules.d")
DAXCTL_CONF_DIR = "/etc/daxctl.conf.d"


def boot_config(release: str) -> str:
    """``/boot/config-RELEASE``: the kernel build configuration Debian/RHEL install beside the kernel."""
    return f"{BOOT_DIR}/config-{release}"


#: where Debian 13's new kernel packaging (``linux-binary``/``linux-modules``/``linux-base``)
#: keeps a kernel's ``vmlinuz``, modules and (``linux-base-RELEASE``) its build config
MODULES_DIR = "/usr/lib/modules"


def modules_config(release: str) -> str:
    """``/usr/lib/modules/RELEASE/config``: the build configuration of Debian 13's 6.19/7.x
    packages, which install nothing in /boot."""
    return f"{MODULES_DIR}/{release}/config"


def config_files(release: str) -> Tuple[str, ...]:
    """The files a kernel's build config is looked for in, first match wins: the classic
    ``/boot/config-RELEASE``, then Debian 13's ``/usr/lib/modules/RELEASE/config``."""
    return (boot_config(release), modules_config(release))


#: per-node hugetlb pools: ``nodeN/hugepages/hugepages-<size>kB/{nr,free}_hugepages``
NODE_HUGEPAGES = "hugepages"
#: where a release records a surprise removal seen in this boot (``/run``: cleared by the reboot that fixes it)
SURPRISE_FILE = RUN_DIR + "/surprise-removal.json"


def memdev_security(name: str, what: str) -> str:
    """``/sys/bus/cxl/devices/memN/security/<what>`` (``state``, ``sanitize``): the memdev's security
    attributes (drivers/cxl/core/memdev.c)."""
    return f"{CXL_DEVICES}/{name}/security/{what}"
