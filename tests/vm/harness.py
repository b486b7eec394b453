"""Boot a QEMU guest with emulated CXL memory and run a shell script in it.

Why this exists: cxlctl reads the kernel's CXL/DAX/NUMA sysfs, and the only way
to get a *real* kernel-made tree on a machine without CXL hardware is QEMU's
CXL emulation.  This module wraps the verified recipe in
docs/testing.md (QEMU 10 + virtme-ng + Debian 6.12/6.1
kernels, TCG, ``-cpu max,hypervisor=off`` less the features TCG runs slowly: :data:`GUEST_CPU`) so tests and the fixture recorder
can say "boot topology X on kernel Y and run this script" in one call.

Boots cost 25-60 s under TCG, so the intended use is *one boot, many checks*:
put everything a test needs into one guest script and inspect the files it
leaves in ``$OUT``.

The guest sees the host's root read-only (with overlays), so the checkout and
the project venv work inside as they are; only the ``--rwdir`` folder writes
through, and that is where every result (stdout, stderr, exit status) lands:
the console is unreliable on these kernels.

Guest script environment:

``$OUT``    the write-through results folder (``GuestResult.outdir``)
``$REPO``   the checkout root (derived from this file's location)
``$PY``     the host test process's ``sys.executable`` (the venv python)
``PYTHONDONTWRITEBYTECODE=1`` so nothing tries to write ``__pycache__`` into the
read-only checkout.  The functions of ``tests/vm/guest-lib.sh`` are defined,
and the CXL drivers are loaded with all memdevs enumerated.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from tests.vm.cdat import Speed

if TYPE_CHECKING:
    from tests.vm.qmp import QmpSession

#: checkout root: tests/vm/harness.py -> parents[2].  Not hard-coded because CI
#: runs from a different clone folder.
REPO = Path(__file__).resolve().parents[2]
#: the guest-side shell library sourced before every guest script
GUEST_LIB = Path(__file__).resolve().parent / "guest-lib.sh"

#: drivers the prelude loads, in this order (cxl_acpi first so ports exist
#: before endpoints probe; kmem last so new dax devices become System RAM)
GUEST_MODULES = ("cxl_acpi", "cxl_pci", "cxl_mem", "dax_cxl", "device_dax", "kmem")


class HarnessError(RuntimeError):
    """Base class for everything the VM harness raises."""


class KernelNotFound(HarnessError):
    """The requested guest kernel is not in the cache.

    Raised (never skipped) on purpose: CI must install the kernels with
    ``scripts/install-vm-deps.sh``; a silently skipped VM tier is worse than a
    red one.
    """


class GuestBootError(HarnessError):
    """The VM did not boot, did not reach the script, or timed out."""


# --------------------------------------------------------------------------- kernels


@dataclass(frozen=True)
class Kernel:
    """A guest kernel extracted by ``scripts/install-vm-deps.sh``."""

    series: str  # "6.12"
    release: str  # "6.12.117+deb12-amd64" (= uname -r in the guest)
    vmlinuz: Path

    @property
    def modules(self) -> Path:
        """Where virtme-ng expects its modules (the host's own /lib/modules)."""
        return Path("/lib/modules") / self.release


def vm_cache() -> Path:
    """Cache folder of install-vm-deps.sh (``$CXLCTL_VM_CACHE`` overrides)."""
    return Path(os.environ.get("CXLCTL_VM_CACHE", "/var/cache/cxlctl-vm"))


def kernel(series: str = "6.12") -> Kernel:
    """Look up the cached kernel of a series ("6.12", "6.1").

    The release name comes from ``<cache>/kernel-<series>``, written by
    install-vm-deps.sh, so a newer Debian point release needs no code change.
    """
    cache = vm_cache()
    name_file = cache / f"kernel-{series}"
    hint = "run scripts/install-vm-deps.sh (as root) to install the VM kernels"
    if not name_file.is_file():
        raise KernelNotFound(f"no kernel for series {series}: {name_file} is missing; {hint}")
    release = name_file.read_text().strip()
    vmlinuz = cache / "kernels" / release / "vmlinuz"
    if not vmlinuz.is_file():
        raise KernelNotFound(f"kernel {release}: {vmlinuz} is missing; {hint}")
    k = Kernel(series=series, release=release, vmlinuz=vmlinuz)
    if not (k.modules / "modules.dep").is_file():
        raise KernelNotFound(f"kernel {release}: modules not installed in {k.modules}; {hint}")
    return k


def kernels_for(*where: str, ci: Sequence[str]) -> List[str]:
    """The kernel series a check runs on: ``ci`` in CI, every one of ``where`` with
    ``CXLCTL_VM_KERNELS=all``.

    The rule (docs/testing.md, the kernel matrix): a guest check runs on the kernels where
    its result can differ -- where the kernel writes or accepts something else -- and not on
    all of them.  A check of cxlctl's own logic or of userspace (systemd, the fleet's
    backends) runs once; ``where`` keeps the wider set one variable away for a release check.
    """
    if os.environ.get("CXLCTL_VM_KERNELS", "") == "all":
        return list(where)
    return [k for k in where if k in ci]


# ------------------------------------------------------------------------ topologies


@dataclass(frozen=True)
class Region:
    """A RAM region shape a topology can host.

    ``window`` is the index N of ``cxl-fmw.N``; the kernel names its root
    decoder ``decoder0.N`` (CFMWS entries are parsed in the order QEMU writes
    them).  ``devices`` are QEMU ``cxl-type3`` ids; the guest finds their
    memdevs by serial, because memdev names do not follow QEMU's device order.
    """

    window: int
    granularity: int
    devices: Tuple[str, ...]

    @property
    def ways(self) -> int:
        return len(self.devices)

    @property
    def root_decoder(self) -> str:
        return f"decoder0.{self.window}"

    def create_command(self, topology: Topology) -> str:
        """Guest shell command that creates this region and prints its name."""
        memdevs = " ".join(f"$(memdev_by_serial {topology.serials[d]:#x})" for d in self.devices)
        return f"create_ram_region {self.root_decoder} {self.granularity} {memdevs}"


@dataclass(frozen=True)
class Topology:
    """A named QEMU CXL machine: description plus the qemu device arguments.

    ``args`` is the text after ``-M cxl=on -m ...``; the memdev count and the
    serials are parsed from it so adding a topology is just writing the args.
    ``regions`` lists region shapes known to commit on it, widest first.
    """

    name: str
    description: str
    args: str
    regions: Tuple[Region, ...] = ()
    #: (QEMU device id, its speed): the device gets a CDAT table of its own (tests/vm/cdat.py),
    #: written into the run's harness folder; the others report QEMU's default table
    cdat: Tuple[Tuple[str, Speed], ...] = ()
    #: guest CPUs.  One by default: under TCG a 2-vCPU guest is no faster alone (65 s against
    #: 69 s for the same boot and script) and two of them on two cores take 2.5x as long, while
    #: two 1-vCPU guests side by side take what one takes alone (docs/testing.md).  ``@CPUS@`` in
    #: :attr:`args` becomes the guest's CPU list (``0``, ``0-1``: hmat2 puts them all on its DRAM node).
    cpus: int = 1

    @property
    def qemu_args(self) -> List[str]:
        return shlex.split(self.args)

    def qemu_args_in(self, folder: Path) -> List[str]:
        """:attr:`qemu_args` with each :attr:`cdat` table written to ``folder`` and named
        on its device (``cxl-type3,...,id=X,cdat=FILE``)."""
        from tests.vm import cdat

        sizes = {
            m.group(1): m.group(2)
            for m in re.finditer(r"memory-backend-ram,id=([^,\s]+),[^\s]*?size=(\d+)M", self.args)
        }
        out = []
        speeds = dict(self.cdat)
        for a in self.qemu_args:
            m = re.match(r"cxl-type3,.*?\bid=([^,]+)", a)
            if m and m.group(1) in speeds:
                dev = m.group(1)
                mem = re.search(r"volatile-memdev=([^,]+)", a)
                size = int(sizes[mem.group(1)]) << 20 if mem else 0
                f = cdat.write(folder / f"cdat-{dev}.bin", speeds[dev], size)
                a = f"{a},cdat={f}"
            out.append(a)
        return out

    @property
    def device_ids(self) -> List[str]:
        """QEMU ids of the cxl-type3 devices, in the order of the args."""
        return [m.group(1) for m in re.finditer(r"cxl-type3,[^\s]*?\bid=([^,\s]+)", self.args)]

    @property
    def devices(self) -> int:
        """Number of type-3 devices, i.e. memdevs the guest must enumerate."""
        return len(self.device_ids)

    @property
    def serials(self) -> Dict[str, int]:
        """QEMU device id -> serial (``sn=``) as the kernel reports it."""
        out: Dict[str, int] = {}
        for m in re.finditer(r"cxl-type3,([^\s]+)", self.args):
            opts = dict(kv.split("=", 1) for kv in m.group(1).split(",") if "=" in kv)
            out[opts["id"]] = int(opts.get("sn", "0"), 0)
        return out

    @property
    def widest(self) -> Optional[Region]:
        """The region with the most ways (what the fixtures record)."""
        return max(self.regions, key=lambda r: r.ways) if self.regions else None


def _vmem(i: int, size: str) -> str:
    return f"-object memory-backend-ram,id=vmem{i},share=on,size={size} "


TOPOLOGIES: Dict[str, Topology] = {}


def _add(t: Topology) -> None:
    TOPOLOGIES[t.name] = t


_add(
    Topology(
        "single",
        "one 512 MiB volatile type-3 device behind one host bridge, one 4 GiB window",
        _vmem(0, "512M") + "-device pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1 "
        "-device cxl-rp,port=0,bus=cxl.1,id=root_port13,chassis=0,slot=2 "
        "-device cxl-type3,bus=root_port13,volatile-memdev=vmem0,id=cxl-vmem0,sn=0x1001 "
        "-M cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size=4G",
        regions=(Region(0, 256, ("cxl-vmem0",)),),
    )
)

_add(
    Topology(
        "hb2",
        "two host bridges with one 256 MiB device each; one 4 GiB window interleaved "
        "2-way across both bridges at 8 KiB",
        _vmem(0, "256M") + _vmem(1, "256M") + "-device pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1 "
        "-device pxb-cxl,bus_nr=222,bus=pcie.0,id=cxl.2 "
        "-device cxl-rp,port=0,bus=cxl.1,id=rp0,chassis=0,slot=2 "
        "-device cxl-rp,port=0,bus=cxl.2,id=rp1,chassis=0,slot=3 "
        "-device cxl-type3,bus=rp0,volatile-memdev=vmem0,id=cxl-vmem0,sn=0x2001 "
        "-device cxl-type3,bus=rp1,volatile-memdev=vmem1,id=cxl-vmem1,sn=0x2002 "
        "-M cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.targets.1=cxl.2,cxl-fmw.0.size=4G,"
        "cxl-fmw.0.interleave-granularity=8k",
        # the only window interleaves 2-way, so every region on it is 2-way
        regions=(Region(0, 8192, ("cxl-vmem0", "cxl-vmem1")),),
    )
)

_add(
    Topology(
        "switch2",
        "one host bridge (two root ports); a switch (one upstream, two downstream "
        "ports) on the first with two 256 MiB devices; one 4 GiB window at 4 KiB",
        _vmem(0, "256M") + _vmem(1, "256M") + "-device pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1 "
        "-device cxl-rp,port=0,bus=cxl.1,id=rp0,chassis=0,slot=0 "
        "-device cxl-rp,port=1,bus=cxl.1,id=rp1,chassis=0,slot=1 "
        "-device cxl-upstream,bus=rp0,id=us0 "
        "-device cxl-downstream,port=0,bus=us0,id=swport0,chassis=0,slot=4 "
        "-device cxl-type3,bus=swport0,volatile-memdev=vmem0,id=cxl-vmem0,sn=0x3001 "
        "-device cxl-downstream,port=1,bus=us0,id=swport1,chassis=0,slot=5 "
        "-device cxl-type3,bus=swport1,volatile-memdev=vmem1,id=cxl-vmem1,sn=0x3002 "
        "-M cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size=4G,cxl-fmw.0.interleave-granularity=4k",
        regions=(
            Region(0, 4096, ("cxl-vmem0", "cxl-vmem1")),
            Region(0, 4096, ("cxl-vmem0",)),
        ),
    )
)

_add(
    Topology(
        "hb2x2",
        "two host bridges with two root ports each, one 256 MiB device per root port; "
        "window 0 interleaves 2-way across both bridges at 8 KiB, windows 1 and 2 "
        "each target one bridge",
        "".join(_vmem(i, "256M") for i in range(4)) + "-device pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1 "
        "-device pxb-cxl,bus_nr=222,bus=pcie.0,id=cxl.2 "
        "-device cxl-rp,port=0,bus=cxl.1,id=rp0,chassis=0,slot=2 "
        "-device cxl-rp,port=1,bus=cxl.1,id=rp1,chassis=0,slot=3 "
        "-device cxl-rp,port=0,bus=cxl.2,id=rp2,chassis=0,slot=4 "
        "-device cxl-rp,port=1,bus=cxl.2,id=rp3,chassis=0,slot=5 "
        "-device cxl-type3,bus=rp0,volatile-memdev=vmem0,id=cxl-vmem0,sn=0x4001 "
        "-device cxl-type3,bus=rp1,volatile-memdev=vmem1,id=cxl-vmem1,sn=0x4002 "
        "-device cxl-type3,bus=rp2,volatile-memdev=vmem2,id=cxl-vmem2,sn=0x4003 "
        "-device cxl-type3,bus=rp3,volatile-memdev=vmem3,id=cxl-vmem3,sn=0x4004 "
        "-M cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.targets.1=cxl.2,cxl-fmw.0.size=4G,"
        "cxl-fmw.0.interleave-granularity=8k,"
        "cxl-fmw.1.targets.0=cxl.1,cxl-fmw.1.size=4G,"
        "cxl-fmw.2.targets.0=cxl.2,cxl-fmw.2.size=4G",
        regions=(
            # 4-way: the root interleaves across the bridges, each bridge across its ports
            Region(0, 8192, ("cxl-vmem0", "cxl-vmem1", "cxl-vmem2", "cxl-vmem3")),
            # 2-way on the cross-bridge window: one device per bridge
            Region(0, 8192, ("cxl-vmem0", "cxl-vmem2")),
            # 2-way inside one bridge (window 1 targets cxl.1 only)
            Region(1, 8192, ("cxl-vmem0", "cxl-vmem1")),
            # 1-way on a per-bridge window
            Region(2, 8192, ("cxl-vmem2",)),
        ),
    )
)


_add(
    Topology(
        "pool",
        "one host bridge (4 HDM decoders) with three root ports: a 256 MiB device on the first, the "
        "others left empty for hot-add over QMP (a fabric manager's bind, tests/vm/test_vm_capacity.py: "
        "two devices adopted through the one bridge); three 4 GiB windows on the bridge, so each device's "
        "region is a node of its own",
        _vmem(0, "256M") + "-device pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1 "
        "-device cxl-rp,port=0,bus=cxl.1,id=rp0,chassis=0,slot=2 "
        "-device cxl-rp,port=1,bus=cxl.1,id=rp1,chassis=0,slot=3 "
        "-device cxl-rp,port=2,bus=cxl.1,id=rp2,chassis=0,slot=4 "
        "-device cxl-type3,bus=rp0,volatile-memdev=vmem0,id=cxl-vmem0,sn=0x5001 "
        "-M cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size=4G,cxl-fmw.1.targets.0=cxl.1,cxl-fmw.1.size=4G,"
        "cxl-fmw.2.targets.0=cxl.1,cxl-fmw.2.size=4G",
        regions=(Region(0, 256, ("cxl-vmem0",)),),
    )
)


#: the HMAT topology's figures (issue 20): DRAM and the two host bridges' generic ports from the
#: firmware (HMAT), the devices' own from their CDAT.  The kernel computes each region's access
#: coordinates from the generic port, the link and the CDAT.
HMAT_DRAM = {"latency": 80, "bandwidth": "38G"}
HMAT_PORTS = ({"latency": 40, "bandwidth": "64G"}, {"latency": 60, "bandwidth": "32G"})
HMAT_DEVICES = (("cxl-vmem0", Speed(150, 250, 16000, 16000)), ("cxl-vmem1", Speed(300, 400, 6144, 6144)))


def _hmat_lb(target: int, fig: Dict[str, object]) -> str:
    base = f"-numa hmat-lb,initiator=0,target={target},hierarchy=memory,data-type="
    return f"{base}access-latency,latency={fig['latency']} {base}access-bandwidth,bandwidth={fig['bandwidth']} "


_add(
    Topology(
        "hmat2",
        "HMAT on: DRAM (2 GiB) and the CPUs on node 0, two host bridges with a generic port each "
        "(nodes 1 and 2), one 256 MiB device per bridge with its own CDAT (a fast and a slow "
        "expander), one 4 GiB window per bridge",
        "-M hmat=on -m 2G,maxmem=12G,slots=8 "
        "-object memory-backend-ram,id=ram0,size=2G -numa node,nodeid=0,cpus=@CPUS@,memdev=ram0 "
        "-numa node,nodeid=1 -numa node,nodeid=2 "
        "-object acpi-generic-port,id=gp0,pci-bus=cxl.1,node=1 "
        "-object acpi-generic-port,id=gp1,pci-bus=cxl.2,node=2 "
        + _hmat_lb(0, HMAT_DRAM)
        + _hmat_lb(1, HMAT_PORTS[0])
        + _hmat_lb(2, HMAT_PORTS[1])
        + _vmem(0, "256M")
        + _vmem(1, "256M")
        + "-device pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1 "
        "-device pxb-cxl,bus_nr=222,bus=pcie.0,id=cxl.2 "
        "-device cxl-rp,port=0,bus=cxl.1,id=rp0,chassis=0,slot=2 "
        "-device cxl-rp,port=0,bus=cxl.2,id=rp1,chassis=0,slot=3 "
        "-device cxl-type3,bus=rp0,volatile-memdev=vmem0,id=cxl-vmem0,sn=0x5001 "
        "-device cxl-type3,bus=rp1,volatile-memdev=vmem1,id=cxl-vmem1,sn=0x5002 "
        "-M cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size=4G,cxl-fmw.1.targets.0=cxl.2,cxl-fmw.1.size=4G",
        regions=(Region(0, 256, ("cxl-vmem0",)), Region(1, 256, ("cxl-vmem1",))),
        cdat=HMAT_DEVICES,
    )
)


def topology(name: Union[str, Topology]) -> Topology:
    """Accept a name or a Topology; raise a clear error for unknown names."""
    if isinstance(name, Topology):
        return name
    try:
        return TOPOLOGIES[name]
    except KeyError:
        raise HarnessError(f"unknown topology {name!r}; known: {', '.join(TOPOLOGIES)}") from None


# ---------------------------------------------------------------------------- guests


def out_text(out: Union[Path, str], name: str, missing_ok: bool = False) -> str:
    """Text of a file a guest script left in its ``$OUT`` directory (``out`` on the host).

    A missing file raises, so an assertion on a value the guest never wrote cannot pass.  In an
    assertion's *message*, pass ``missing_ok=True``: a failing check then says ``<NAME missing>``
    instead of hiding its own reason behind a FileNotFoundError.
    """
    p = Path(out) / name
    if missing_ok and not p.exists():
        return f"<{name} missing>"
    return p.read_text(errors="replace")


def out_json(out: Union[Path, str], name: str) -> Any:
    """The JSON document a guest script left in ``$OUT`` (see :func:`out_text`)."""
    return json.loads(out_text(out, name))


@dataclass
class GuestResult:
    """What a guest run left behind.

    ``stdout``/``stderr`` are the guest script's streams (captured to files in
    the rwdir, not the console).  ``boot_seconds`` is host wall time from
    launching vng until the guest script's prelude started; ``wall_seconds``
    is the whole run.  ``outdir`` is ``$OUT`` on the host; ``console`` is the
    vng/QEMU console log (kernel messages; handy when something fails).
    """

    returncode: int
    stdout: str
    stderr: str
    outdir: Path
    console: Path
    boot_seconds: float
    wall_seconds: float
    kernel: Kernel
    topology: Topology
    prelude_log: str = ""
    extra: Dict[str, str] = field(default_factory=dict)
    #: boots it took (more than 1 when a guest died before init and was retried)
    attempts: int = 1

    def file(self, name: str) -> str:
        """Text of a file the guest script left in ``$OUT``."""
        return out_text(self.outdir, name)

    def check(self) -> GuestResult:
        """Raise with the script's output if it exited non-zero; else return self."""
        if self.returncode != 0:
            raise HarnessError(
                f"guest script exited {self.returncode} ({self.topology.name}, "
                f"{self.kernel.release})\n--- stdout ---\n{_tail(self.stdout)}\n"
                f"--- stderr ---\n{_tail(self.stderr)}"
            )
        return self


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _find_vng() -> str:
    """virtme-ng may live outside the venv (install-vm-deps.sh puts it in the
    venv it is given); ``$CXLCTL_VNG`` overrides, then the venv, then PATH."""
    cand = os.environ.get("CXLCTL_VNG")
    if cand:
        return cand
    beside = Path(sys.executable).parent / "vng"
    if beside.exists():
        return str(beside)
    found = shutil.which("vng")
    if not found:
        raise HarnessError("vng (virtme-ng) not found; run scripts/install-vm-deps.sh")
    return found


#: where Debian keeps what vng and QEMU call by name (qemu-system-x86_64,
#: busybox, modprobe, udevadm); CI's PATH may be as short as /usr/bin:/bin
SYSTEM_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def tool_env(vng: str, base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment vng runs in: PATH starts with the folder of the vng
    that was found and of this interpreter, then the caller's PATH, then the
    system folders.

    Why: vng starts ``virtme-run`` (and virtme-ng-init helpers) through
    ``/bin/sh`` by name.  Found beside the venv's python, vng would otherwise
    depend on the caller having put ``.venv/bin`` on PATH, which CI's fresh
    machine does not (issue 9: every guest died with ``virtme-run: not found``).
    """
    env = dict(os.environ if base is None else base)
    first = [str(Path(vng).resolve().parent), str(Path(vng).parent), str(Path(sys.executable).parent)]
    rest = [d for d in env.get("PATH", "").split(os.pathsep) if d]
    path: List[str] = []
    for d in first + rest + list(SYSTEM_PATH):
        if d not in path:
            path.append(d)
    env["PATH"] = os.pathsep.join(path)
    env.setdefault("HOME", "/root" if os.geteuid() == 0 else tempfile.gettempdir())
    return env


_RUNNER = r"""#!/bin/bash
# Generated by tests/vm/harness.py: prelude + the test's script, results in $OUT.
export OUT={out} REPO={repo} PY={py} PYTHONDONTWRITEBYTECODE=1
export CXLVM_MEMDEVS={memdevs} CXLVM_SETTLE_TIMEOUT={settle}
export PATH="$(dirname "$PY"):$PATH"
# the guest drivers (tests/vm/*_driver.py, run as scripts) import their shared helpers as tests.vm.guest
export PYTHONPATH="$REPO${{PYTHONPATH:+:$PYTHONPATH}}"
# bind every symbol at exec: glibc's lazy-binding trampoline saves registers with XSAVEC on the
# stack, and QEMU 10's TCG segfaults (access_stq) when that stack page is CXL memory -- which
# it is for a program run under a policy over DRAM+CXL (docs/testing.md)
export LD_BIND_NOW=1
cat /proc/uptime > {hdir}/uptime-start
# every sysrq function, so a run that times out can still say which tasks were blocked and where:
# the harness presses alt-sysrq-w through the monitor and keeps what the console printed
echo 1 > /proc/sys/kernel/sysrq 2>/dev/null || true
# the checkout and the interpreter's standard library again, each from a 9p export of its own
# mounted with cache=loose over the same path (cached_exports: the root's 9p has no cache, and
# every stat of a Python import went to the host)
{cached_mounts}
# the heartbeat: the host's sign that the guest as a whole still runs (an emulator that stopped
# executing the guest stops it; a script that hangs does not).  Builtins only, so it forks
# nothing a check's leftover sweep could take for its own; `read -t` on a fifo nobody writes is
# the sleep.
mkfifo /run/cxlvm-heartbeat
(
  exec 9<>/run/cxlvm-heartbeat
  while :; do echo "${{SECONDS}}" > {hdir}/heartbeat; read -r -t {beat} -u 9 _; done
) &
heartbeat=$!
(
  . {lib}
  cxlvm_prelude
) > {hdir}/prelude.log 2>&1
echo $? > {hdir}/prelude-rc
# $CXLCTL: cxlctl from a warm server (tests/vm/cxz.py; its client execs `$PY -m cxlctl` itself
# while the server is not listening), started only for a script that uses it
export CXLCTL={cxz} CXLVM_CXZ=/run/cxlvm-cxz.sock
if [ "$(cat {hdir}/prelude-rc)" = 0 ] && [ {warm} = 1 ]; then
  ( cd / && exec "$PY" "$REPO/tests/vm/cxz.py" "$CXLVM_CXZ" ) > {hdir}/cxz.log 2>&1 < /dev/null &
fi
if [ "$(cat {hdir}/prelude-rc)" = 0 ]; then
  ( cd "$REPO" && . {lib} && . {hdir}/script.sh ) > {hdir}/stdout.txt 2> {hdir}/stderr.txt < /dev/null
  echo $? > {hdir}/rc
fi
cat /proc/uptime > {hdir}/uptime-end
kill $heartbeat
dmesg > {hdir}/dmesg.txt 2>&1
sync
"""


# run_guest's parameters are named like the brief's API (topology=, kernel=),
# which shadows the lookup functions inside it
_lookup_topology = topology
_lookup_kernel = kernel


def cached_exports() -> List[Tuple[str, str]]:
    """(9p mount tag, host path) of what the guest mounts again with ``cache=loose``: the checkout
    (cxlctl, the tests, the venv's site-packages) and the standard library of the venv's Python.

    vng exports the host's root over 9p without a cache, so every ``stat`` and ``open`` of an
    import crosses to the host: 2 ms a ``stat`` of the checkout in a 6.12 guest here (5,000 in
    10.5 s), where the guest's own tmpfs takes 0.035 ms.  Python under the drivers and the
    guest scripts' many ``$PY -m cxlctl`` calls spend most of their start there.  ``cache=loose``
    caches names, attributes and pages in the guest; it is safe because neither tree changes
    while a guest runs (``_precompile`` writes the bytecode before the boot, and scripts/test.sh
    never reinstalls a venv a guest executes from).  ``CXLCTL_VM_CACHED_9P=0`` turns it off.
    """
    if os.environ.get("CXLCTL_VM_CACHED_9P", "1") == "0":
        return []
    stdlib = Path(sys.base_prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    out = [("cxlrepo", str(REPO))]
    if stdlib.is_dir() and not str(REPO).startswith(str(stdlib)):
        out.append(("cxlstdlib", str(stdlib)))
    # a path with a comma would end QEMU's -virtfs option early
    return [(t, p) for t, p in out if "," not in p]


def _precompile() -> None:
    """Write .pyc files for the checkout before booting.

    With PYTHONDONTWRITEBYTECODE set (as on these machines) the repo's own modules
    have no bytecode, and every `python -m cxlctl` in the guest would compile them
    under TCG emulation — tens of seconds per cold start.  The guest reads the
    host's files, so compiling once here makes every guest start cheap.
    """
    import compileall

    for pkg in ("cxlctl", "tests"):
        compileall.compile_dir(str(REPO / pkg), quiet=1, force=False)


CXZ_SOURCE = Path(__file__).with_name("cxz.c")


def _cxz_client(hdir: Path) -> Path:
    """The guest scripts' ``$CXLCTL``: the warm server's client (tests/vm/cxz.c, built here), or where no C
    compiler is (a unit-tier machine), a script doing what the client does without a server."""
    try:
        return build_c(hdir, "cxz", CXZ_SOURCE.read_text())
    except (OSError, subprocess.CalledProcessError):
        cold = hdir / "cxz"
        cold.write_text('#!/bin/sh\nexec "$PY" -m cxlctl "$@"\n')
        cold.chmod(0o755)
        return cold


def build_c(tools: Path, name: str, source: str) -> Path:
    """``tools/name`` compiled from ``source`` with ``cc -O2 -Wall`` (``tools`` is created as needed)."""
    tools.mkdir(parents=True, exist_ok=True)
    (tools / f"{name}.c").write_text(source)
    subprocess.run(["cc", "-O2", "-Wall", "-o", str(tools / name), str(tools / f"{name}.c")], check=True)
    return tools / name


def boot_tries() -> int:
    """How many times a guest that dies before init is booted (``$CXLCTL_VM_BOOT_TRIES``, default 3)."""
    try:
        return max(1, int(os.environ.get("CXLCTL_VM_BOOT_TRIES", "3")))
    except ValueError:
        return 3


def boot_deadline(timeout: float) -> float:
    """Seconds a guest may take to reach its runner before it counts as hung.

    Boots take 25-60 s under TCG (up to ~120 s on a loaded 2-core machine); a
    guest stuck in early boot (RCU stalls from timer starvation) never gets
    there.  ``$CXLCTL_VM_BOOT_DEADLINE`` overrides; never more than half the
    run's own timeout, so a retry still fits.
    """
    return max(1.0, min(_env_seconds("CXLCTL_VM_BOOT_DEADLINE", 240.0), timeout / 2))


def _env_seconds(name: str, default: float) -> float:
    """``$name`` as seconds, ``default`` where it is unset or not a number."""
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


#: how often the guest's runner touches ``harness/heartbeat`` (seconds of guest time)
HEARTBEAT_SECONDS = 5

#: Modules udev would load for the q35 machine's own devices (its AHCI controller and CD-ROM, the
#: ICH9 watchdog and SMBus, the PC speaker, the PS/2 mouse), for the ``max`` CPU's features (kvm_amd for
#: its SVM, the ccp and crypto accelerations): no check uses any of them, and under TCG loading them
#: was half of a boot: a 6.12 ``single`` boot took 19.5-21.6 s with them and 13.3-14.1 s without
#: (2026-12-07, docs/testing.md).  Kept from the guest with ``modprobe.blacklist=`` on its command line.
UNNEEDED_MODULES = (
    "kvm_amd", "kvm_intel", "kvm", "irqbypass", "ccp", "sr_mod", "cdrom", "sg", "ahci", "libahci", "libata",
    "crct10dif_pclmul", "crc32_pclmul", "ghash_clmulni_intel", "sha512_ssse3", "sha256_ssse3", "sha1_ssse3",
    "aesni_intel", "iTCO_wdt", "intel_pmc_bxt", "iTCO_vendor_support", "psmouse", "evdev", "i2c_i801",
    "serio_raw", "pcspkr", "lpc_ich", "i6300esb",
)  # fmt: skip


def stall_after() -> float:
    """Seconds without a heartbeat after which a running guest counts as stopped.

    CI, stop 32: a 6.12 guest stopped dead while the launch check's program
    touched its memory under a DRAM+CXL policy -- no console line, no script
    output, its own 180 s waits never ended -- and the run waited out its
    2,700 s timeout.  The runner's heartbeat (every 5 s, builtins only) goes
    on while a script hangs, so a silent heartbeat is the emulator's stop, not
    the check's.  Default 240 s (a loaded 2-core machine with two guests has
    never delayed a 5 s beat by a minute); ``$CXLCTL_VM_STALL`` overrides.
    """
    return max(1.0, _env_seconds("CXLCTL_VM_STALL", 240.0))


#: every boot that was retried in this process: "topology kernel attempt N/M: why" lines,
#: listed at the end of a pytest run (tests/vm/conftest.py) so a retry is never silent in CI's log
RETRIES: List[str] = []


class _BootRetry(Exception):
    """A guest died or hung before its runner started, or QEMU itself crashed
    (a host signal, not the guest's doing): worth booting again.  ``ran`` says
    whether the guest's script had started, so its partial results are set aside."""

    def __init__(self, why: str, console_tail: str, ran: bool = False, detail: str = "") -> None:
        super().__init__(why)
        self.why = why
        self.console_tail = console_tail
        self.ran = ran
        self.detail = detail


# Signals that mean the emulator crashed (seen: QEMU 10's TCG segfaulting while a
# guest program touched CXL memory, host dmesg "qemu-system-x86[...]: segfault at 8").
_EMULATOR_CRASH = {
    signal.SIGSEGV: "SIGSEGV",
    signal.SIGABRT: "SIGABRT",
    signal.SIGBUS: "SIGBUS",
    signal.SIGILL: "SIGILL",
}

#: The guests' CPU: QEMU's ``max`` with ``hypervisor=off`` (a kernel that sees a hypervisor cannot flush CPU
#: caches for a new region and refuses to commit it: docs/testing.md) and without the features whose
#: emulation under TCG is slower than the code the guest runs without them.  AVX/AVX2 make glibc pick its
#: AVX2 string and memory functions, ERMS/FSRM make glibc and the kernel (clear_page_erms(), copy_user
#: with FSRM) use ``rep movsb``/``stosb``, which TCG runs one byte per iteration.  Measured 2026-12-07 in
#: a 6.12 ``single`` guest on a fixed workload (docs/testing.md "The guests' CPU"): Python string
#: operations 1.16-1.18 -> 0.80-0.84 s, filling 2 GiB through a bytearray 15.3 -> 5.4 s, the boot 11.4-13.6
#: -> 12.1 s, the workload's QEMU CPU 54.3-55.6 -> 43.7 s (most of it the fill); Python start-up and
#: cxlctl commands unchanged.  No check needs those features (the probe's helper is built with ``-march=native`` in the guest and takes SSE2's
#: non-temporal stores where AVX is absent).
GUEST_CPU = "max,hypervisor=off," + ",".join(
    f"{f}=off" for f in ("avx", "avx2", "fma", "f16c", "avx-vnni", "vaes", "erms", "fsrm")
)

#: Every 9p device (vng's root and --rwdir, the cached exports) can reach guest memory on a CXL node.
#: QEMU serves the CXL window as MMIO, so a device reaches it only through a bounce buffer, and the
#: system address space's is 4 KiB in all (``address_space_map``; QEMU 9.1 made the limit per address
#: space).  A 9p request whose buffer sits on the CXL node -- net/9p/client.c ``p9_fcall_init()``
#: ``kmalloc``s each request's buffers in the calling task's context, so a large one comes from the page
#: allocator under that task's memory policy -- then fails to map:
#: ``virtio: bogus descriptor or out of resources`` on QEMU's stderr, the device is marked broken and
#: every later request on it waits forever (CI's 6.12 launch check hung so twice on 2026-12-07; 24
#: parallel ``numactl --membind=CXL dd`` readers break it in the first round).  With the devices
#: modern-only and behind the platform's DMA (``iommu_platform``: the device's own bus-master address
#: space, whose bounce limit ``x-max-bounce-buffer-size`` sets) the same readers pass, as DMA to CXL
#: memory does on hardware.  Checked by the 6.12 ``single`` boot's ``dma9p`` check.
NINEP_DMA_TO_CXL = (
    "-global", "virtio-9p-pci.disable-legacy=on",
    "-global", "virtio-9p-pci.iommu_platform=on",
    "-global", f"virtio-9p-pci.x-max-bounce-buffer-size={16 << 20}",
)  # fmt: skip

_QEMU_WRAPPER = r"""#!/bin/bash
# Generated by tests/vm/harness.py: runs QEMU and records how it ended, which
# vng does not pass on (it turns every unexpected end into exit 255).
if [ "$1" = --version ]; then exec {qemu} "$@"; fi
{qemu} "$@"
echo $? > {status}
times > {times}
"""


def _find_qemu(env: Dict[str, str]) -> Optional[str]:
    """The QEMU binary vng would use (``CXLCTL_QEMU`` overrides), or None."""
    forced = os.environ.get("CXLCTL_QEMU")
    if forced:
        return forced
    return shutil.which("qemu-system-x86_64", path=env.get("PATH"))


def qemu_cpu_seconds(hdir: Path) -> Optional[float]:
    """CPU time (user + system, every thread) the last boot's QEMU used, from the wrapper's ``times``.

    On a machine whose CPU is the limit (CI's slowest: the whole run is one CPU-bound stream,
    docs/testing.md) this, not a guest's wall time, is what the boot costs the run."""
    try:
        line = (hdir / "qemu-times").read_text().splitlines()[1]
    except (OSError, IndexError):
        return None
    total = 0.0
    for field_ in line.split():
        m = re.fullmatch(r"([0-9]+)m([0-9]+(?:\.[0-9]+)?)s", field_)
        if m is None:
            return None
        total += int(m.group(1)) * 60 + float(m.group(2))
    return round(total, 1)


def _account(hdir: Path, topo: Topology, kern: Kernel, attempt: int, wall: float) -> Optional[float]:
    """One line per boot attempt in ``$CXLCTL_VM_CPU_LOG`` (scripts/test.sh sums them per test
    file in CI's recap): the test file, topology, kernel, attempt, wall seconds, QEMU's CPU seconds."""
    cpu = qemu_cpu_seconds(hdir)
    log = os.environ.get("CXLCTL_VM_CPU_LOG")
    if log:
        test = os.environ.get("PYTEST_CURRENT_TEST", "-").split("::")[0] or "-"
        cpu_text = "?" if cpu is None else f"{cpu:.1f}"
        try:
            with open(log, "a") as f:
                f.write(f"{test} {topo.name} {kern.series} {attempt} {wall:.1f} {cpu_text}\n")
        except OSError:
            pass
    return cpu


def qemu_crash(hdir: Path) -> Optional[str]:
    """The name of the signal that killed QEMU in the last boot, if it crashed.

    Read from the status the wrapper wrote (bash reports death by signal N as
    128+N).  None when QEMU exited on its own, was stopped by the harness
    (SIGTERM/SIGKILL are not crashes), or no wrapper ran."""
    try:
        code = int((hdir / "qemu-status").read_text().strip())
    except (OSError, ValueError):
        return None
    if code <= 128:
        return None
    try:
        return _EMULATOR_CRASH.get(signal.Signals(code - 128))
    except ValueError:
        return None


def run_guest(
    topology: Union[str, Topology],
    script: str,
    kernel: Union[str, Kernel] = "6.12",
    timeout: float = 600,
    memory: str = "2G",
    workdir: Optional[Path] = None,
    settle_timeout: int = 60,
    extra_qemu_args: Sequence[str] = (),
    qmp: Optional[Callable[[QmpSession], None]] = None,
    cpus: Optional[int] = None,
    overdue: Optional[Callable[[], Optional[str]]] = None,
) -> GuestResult:
    """Boot ``topology`` on ``kernel`` and run ``script`` (bash) as root in it.

    One guest per call; batch checks into one script because a boot costs
    25-60 s.  ``workdir`` (default: a fresh ``mkdtemp``, left in place for
    inspection) becomes the ``--rwdir``; ``$OUT`` is its ``out/`` folder.
    Returns the script's exit status and output; raises
    :class:`GuestBootError` (with the console tail) if the guest never got
    to run the script, the drivers did not enumerate every memdev, or the
    run exceeded ``timeout`` seconds.

    A guest that dies or hangs *before its runner starts* (QEMU's TCG
    occasionally asserts while PCI BARs are programmed, or the kernel stalls
    in early boot) is booted again, up to :func:`boot_tries` times, and each
    retry is logged to stderr with the reason.  Once the runner has started,
    the only retry is for QEMU itself crashing (SIGSEGV/SIGABRT/SIGBUS/SIGILL,
    recorded by a wrapper around the QEMU binary: QEMU 10's TCG segfaulted once
    in CI while a guest program touched CXL memory); what that attempt wrote is
    moved to ``attemptN/`` first.  The same goes for a guest that stops as a
    whole while its script runs: the runner's heartbeat (``harness/heartbeat``,
    every 5 s) silent for :func:`stall_after` seconds (CI, stop 32: a guest
    froze in the launch check and the run waited out its timeout); what QEMU's
    threads were doing is kept in ``stall-attemptN.txt``.  A failure inside
    the script, a script that hangs while the guest runs on, a guest kernel
    panic or a timeout is never retried: those are the test's.

    ``qmp``: a host-side driver, called in a thread once the guest's runner has
    started, with a :class:`tests.vm.qmp.QmpSession` (a client on QEMU's QMP
    socket, ``-qmp unix:<workdir>/harness/qmp.sock``, plus file handshakes
    through ``$OUT``).  If it raises, ``run_guest`` raises after the guest ends.

    ``cpus``: the guest's vCPUs, when a check needs more than the topology's
    (:func:`guest_cpus`); a guest with as many vCPUs as there are guest slots
    takes them all (:func:`_take_guest_slots`).

    ``overdue``: asked every few seconds while the script runs; a message it
    returns ends the run as a timeout does (the blocked tasks, then the kill):
    :func:`run_checks` gives each check a deadline of its own with it.
    """
    topo = _lookup_topology(topology)
    _precompile()
    kern = kernel if isinstance(kernel, Kernel) else _lookup_kernel(kernel)
    base = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=f"cxlvm-{topo.name}-"))
    base = base.resolve()
    out = base / "out"
    hdir = base / "harness"  # the runner's own files, kept out of $OUT
    out.mkdir(parents=True, exist_ok=True)
    vng = _find_vng()
    env = tool_env(vng)
    ncpu = guest_cpus(topo, cpus)
    vm_locks = _take_guest_slots(ncpu)
    try:
        tries = boot_tries()
        before = set(os.listdir(base))
        for attempt in range(1, tries + 1):
            qemu_args = list(extra_qemu_args)
            if qmp is not None:
                qemu_args += ["-qmp", f"unix:{hdir / 'qmp.sock'},server=on,wait=off"]
            cmd = _prepare(vng, script, base, out, hdir, topo, kern, memory, settle_timeout, qemu_args, env, ncpu)
            driver = _QmpDriver(qmp, hdir, out) if qmp is not None else None
            t0 = time.monotonic()
            try:
                try:
                    res = _boot_and_collect(
                        cmd, env, hdir / "console.log", base, out, hdir, topo, kern, timeout, t0, overdue
                    )
                finally:
                    if driver is not None:
                        driver.finish()
            except _BootRetry as r:
                _account(hdir, topo, kern, attempt, time.monotonic() - t0)
                # keep the dead boot's console for the post-mortem
                kept = base / f"console-attempt{attempt}.log"
                shutil.copyfile(hdir / "console.log", kept)
                msg = f"guest ({topo.name}, {kern.release}) attempt {attempt}/{tries}: {r.why}; console: {kept}"
                if r.detail:
                    stall = base / f"stall-attempt{attempt}.txt"
                    stall.write_text(r.detail)
                    msg += f"; the emulator's threads: {stall}"
                if r.ran:
                    _set_aside(base, before, attempt)
                if attempt == tries:
                    raise GuestBootError(f"{msg}\n--- console tail ---\n{r.console_tail}") from None
                RETRIES.append(msg)
                print(f"vm-harness: {msg}; booting again", file=sys.stderr, flush=True)
                continue
            res.attempts = attempt
            cpu = _account(hdir, topo, kern, attempt, res.wall_seconds)
            if cpu is not None:
                res.extra["qemu_cpu_seconds"] = f"{cpu:.1f}"
            if driver is not None and driver.error and res.returncode != 0:
                # the script failed first: that is the story (check() tells it); the
                # driver only stopped waiting for it
                res.extra["qmp_error"] = driver.error
            elif driver is not None and driver.error:
                raise HarnessError(
                    f"the host's QMP driver failed ({topo.name}, {kern.release}):\n{driver.error}\n"
                    f"--- guest stdout ---\n{_tail(res.stdout)}\n--- guest stderr ---\n{_tail(res.stderr)}"
                )
            return res
        raise AssertionError("unreachable")
    finally:
        for f in vm_locks:
            f.close()


def _env_count(name: str, what: str) -> Optional[int]:
    """``$name`` as a whole number of 1 or more, None where unset; anything else is an error naming it."""
    raw = os.environ.get(name, "")
    if not raw:
        return None
    if not raw.isascii() or not raw.isdigit() or int(raw) < 1:
        raise HarnessError(f"{name}={raw!r} is not a whole number of {what} (1 or more)")
    return int(raw)


def guest_slots() -> int:
    """How many guests may run at once on this machine (``CXLCTL_VM_SLOTS``, default 1)."""
    return _env_count("CXLCTL_VM_SLOTS", "guests") or 1


def guest_cpus(topo: Topology, asked: Optional[int] = None) -> int:
    """A guest's vCPUs: ``CXLCTL_VM_CPUS`` where set, else what the check asks, else the topology's."""
    return _env_count("CXLCTL_VM_CPUS", "CPUs") or (asked if asked is not None else topo.cpus)


def _take_guest_slots(cpus: int) -> List[IO[str]]:
    """Wait for ``cpus`` guest slots (at most all of them) and hold them (closing the files frees them).

    Why a machine-wide lock: parallel test runs (several developers' sessions) queue
    instead of thrash.  One slot by default; ``scripts/test.sh`` asks for two
    (``CXLCTL_VM_SLOTS``) once the host tiers have left the second core idle.  A guest
    with as many vCPUs as there are slots (or more) takes them all, so with two slots a
    2-vCPU guest runs alone: two TCG guests with more vCPUs than the cores between them
    take 2.5 times as long (docs/testing.md has the measurement); any other guest takes
    one.  Slot 0 is ``CXLCTL_VM_LOCK`` (``/tmp/cxlctl-vm.lock``), slot N that path with
    ``.N`` appended.  All of them: taken in order, blocking (no deadlock); one of
    several: whichever is free, polled.
    """
    base = os.environ.get("CXLCTL_VM_LOCK", "/tmp/cxlctl-vm.lock")
    paths = [base] + [f"{base}.{n}" for n in range(1, guest_slots())]
    if cpus >= len(paths):
        held: List[IO[str]] = []
        for path in paths:
            f = open(path, "a")
            fcntl.flock(f, fcntl.LOCK_EX)
            held.append(f)
        return held
    while True:
        for path in paths:
            f = open(path, "a")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                continue
            return [f]
        time.sleep(1)


#: a check of a shared boot: its name (its ``$OUT`` subfolder) and its guest script
SharedCheck = Tuple[str, str]


def check_deadline() -> float:
    """Seconds of host time one check of a shared boot may take: ``CXLCTL_VM_CHECK_TIMEOUT``,
    900 by default -- the slowest check took under 300 s on the half-speed machine (2026-12-07),
    and a check that hangs then costs 15 minutes, not the rest of its boot's timeout."""
    return _env_seconds("CXLCTL_VM_CHECK_TIMEOUT", 900.0)


class _CheckClock:
    """``run_guest``'s ``overdue`` for a shared boot: the check that started (its
    ``uptime-start`` written by ``cxlvm_check``) and has not ended (no ``rc``) more than
    ``limit`` seconds ago, by the host's clock from when it was first seen."""

    def __init__(self, meta: Path, names: Sequence[str], limit: float) -> None:
        self.meta, self.names, self.limit = meta, list(names), limit
        self.seen: Dict[str, float] = {}

    def __call__(self) -> Optional[str]:
        now = time.monotonic()
        for name in self.names:
            m = self.meta / name
            if (m / "rc").exists() or not (m / "uptime-start").exists():
                continue
            began = self.seen.setdefault(name, now)
            if now - began > self.limit:
                return f"check {name} still ran after {now - began:.0f} s, over its {self.limit:.0f} s (CXLCTL_VM_CHECK_TIMEOUT)"
        return None


def run_checks(
    topology: Union[str, Topology],
    checks: Sequence[SharedCheck],
    kernel: Union[str, Kernel] = "6.12",
    timeout: float = 1800,
    workdir: Optional[Path] = None,
    memory: str = "2G",
    qmp: Optional[Tuple[str, Callable[[QmpSession], None]]] = None,
    cpus: Optional[int] = None,
    check_timeout: Optional[float] = None,
) -> Dict[str, GuestResult]:
    """One boot, several checks: run each check's script in turn, as its own boot would.

    Each script sees ``$OUT`` as ``$OUT/NAME`` and runs from ``$REPO`` with the
    guest library's functions; ``create_ram_region`` hands back the region an
    earlier check made with the same arguments (``cxlvm_share_regions``).
    Between checks ``cxlvm_check`` kills what the check left running, removes
    its cgroups and clears cxlctl's state folders (``between.log`` says what was
    left).  Returns one :class:`GuestResult` per check, in order: its own exit
    status, streams, ``$OUT`` and ``wall_seconds`` (the check's own time in the
    guest); ``boot_seconds`` is the shared boot's, and ``extra["boot_wall"]``
    the whole boot's wall time.  A failing check does not stop the next.

    ``qmp``: (check name, driver) -- the host-side driver of one check (as for
    :func:`run_guest`), started when that check's ``$OUT`` appears and given a
    session whose ``out`` is that folder.

    ``check_timeout``: seconds of host time each check may take (default
    :func:`check_deadline`); one that takes longer ends the boot as a timeout
    does, with the guest's blocked tasks, instead of holding the whole boot's
    ``timeout`` (CI's hung launch check waited out 3,300 s).
    """
    names = [n for n, _ in checks]
    if len(set(names)) != len(names) or not all(re.fullmatch(r"[A-Za-z0-9_.-]+", n) for n in names):
        raise HarnessError(f"check names must be unique words: {names}")
    topo = _lookup_topology(topology)
    base = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=f"cxlvm-{topo.name}-shared-"))
    base = base.resolve()
    meta = base / "checks"
    meta.mkdir(parents=True, exist_ok=True)
    lines = ["cxlvm_share_regions"]
    if any("$CXLCTL" in script for _, script in checks):
        lines.insert(0, "# its checks use $CXLCTL (the runner starts the warm server)")
    for name, script in checks:
        (meta / f"{name}.sh").write_text(script if script.endswith("\n") else script + "\n")
        q = shlex.quote
        lines.append(f"cxlvm_check {q(name)} {q(str(meta / (name + '.sh')))} {q(str(meta / name))}")
    driver: Optional[Callable[[QmpSession], None]] = None
    qmp_errors: Dict[str, str] = {}
    if qmp is not None:
        qname, qfn = qmp
        if qname not in names:
            raise HarnessError(f"qmp driver for {qname!r}, which is not a check here: {names}")

        def driver(session: QmpSession) -> None:
            # a failure is the check's (its result carries it), not the boot's: the next check still runs
            try:
                session.wait_until((session.out / qname).is_dir, timeout, f"$OUT/{qname} (check {qname} starting)")
                session.out = session.out / qname
                qfn(session)
            except Exception:  # noqa: BLE001 - handed to the check's result
                import traceback

                qmp_errors[qname] = traceback.format_exc()

    whole = run_guest(
        topo,
        "\n".join(lines) + "\nexit 0\n",
        kernel=kernel,
        timeout=timeout,
        workdir=base,
        memory=memory,
        qmp=driver,
        cpus=cpus,
        overdue=_CheckClock(meta, names, check_deadline() if check_timeout is None else check_timeout),
    )
    results: Dict[str, GuestResult] = {}
    for name in names:
        m = meta / name
        if not (m / "rc").exists():
            raise HarnessError(
                f"shared boot ({topo.name}, {whole.kernel.release}): check {name} never finished\n"
                f"--- stdout ---\n{_tail(whole.stdout)}\n--- stderr ---\n{_tail(whole.stderr)}"
            )
        try:
            own = float(_read(m / "uptime-end").split()[0]) - float(_read(m / "uptime-start").split()[0])
        except (ValueError, IndexError):
            own = 0.0
        results[name] = GuestResult(
            returncode=int(_read(m / "rc").strip()),
            stdout=_read(m / "stdout.txt"),
            stderr=_read(m / "stderr.txt"),
            outdir=whole.outdir / name,
            console=whole.console,
            boot_seconds=whole.boot_seconds,
            wall_seconds=round(own, 1),
            kernel=whole.kernel,
            topology=topo,
            prelude_log=whole.prelude_log,
            extra={
                "boot_wall": str(whole.wall_seconds),
                "between": _read(m / "between.log"),
                "qemu_cpu_seconds": whole.extra.get("qemu_cpu_seconds", "?"),
            }
            | ({"qmp_error": qmp_errors[name]} if name in qmp_errors else {}),
            attempts=whole.attempts,
        )
    return results


def report_shared(res: Dict[str, GuestResult], work: Path) -> Dict[str, GuestResult]:
    """Print and keep a shared boot's times (the boot, then each check's own time in the guest):
    ``work/measured.txt`` and each check's ``between-NAME.log`` (what it left running)."""
    first = next(iter(res.values()))
    lines = [
        f"{first.kernel.series} {first.topology.name} shared boot: {first.kernel.release}, "
        f"boot {first.boot_seconds} s, wall {first.extra['boot_wall']} s, "
        f"QEMU CPU {first.extra.get('qemu_cpu_seconds', '?')} s"
    ]
    lines += [f"  {name}: rc {r.returncode}, {r.wall_seconds} s in the guest" for name, r in res.items()]
    print("\n".join(lines))
    (work / "measured.txt").write_text("\n".join(lines) + "\n")
    for name, r in res.items():
        (work / f"between-{name}.log").write_text(r.extra["between"])
    return res


class _QmpDriver:
    """Runs a test's QMP driver in a thread for one boot attempt: it starts
    once the runner's first file exists (QEMU is up, its socket is there) and
    is told to stop when the guest has ended, so it can never outlive the boot."""

    def __init__(self, fn: Callable[[QmpSession], None], hdir: Path, out: Path) -> None:
        import threading

        from tests.vm.qmp import QmpSession

        self.error = ""
        self._stop = threading.Event()
        self._session = QmpSession(hdir / "qmp.sock", out, self._stop)
        self._fn = fn
        self._started = hdir / "uptime-start"
        self._thread = threading.Thread(target=self._run, name="qmp-driver", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import traceback

        try:
            while not self._started.exists():
                if self._stop.is_set():
                    return
                time.sleep(0.2)
            self._fn(self._session)
        except BaseException:
            self.error = traceback.format_exc()
        finally:
            self._session.close()

    def finish(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def _set_aside(base: Path, before: set[str], attempt: int) -> None:
    """Move what a crashed attempt's script wrote (``out/`` and anything new in
    the work folder, such as a cache dir) to ``attemptN/``, so the next boot
    starts from what the test laid out and a stale file cannot pass a check."""
    keep = base / f"attempt{attempt}"
    keep.mkdir()
    for name in sorted(os.listdir(base)):
        if (
            name in before
            or name in ("harness", keep.name)
            or name.startswith(("attempt", "console-attempt", "stall-attempt"))
        ):
            continue
        shutil.move(str(base / name), str(keep / name))
    if (base / "out").exists():
        shutil.move(str(base / "out"), str(keep / "out"))
    (base / "out").mkdir()


def _prepare(
    vng: str,
    script: str,
    base: Path,
    out: Path,
    hdir: Path,
    topo: Topology,
    kern: Kernel,
    memory: str,
    settle_timeout: int,
    extra_qemu_args: Sequence[str],
    env: Optional[Dict[str, str]] = None,
    cpus: int = 1,
) -> List[str]:
    """Lay out a fresh runner folder and return the vng command line."""
    if hdir.exists():
        shutil.rmtree(hdir)
    hdir.mkdir()
    (hdir / "script.sh").write_text(script if script.endswith("\n") else script + "\n")
    q = shlex.quote
    (hdir / "runner.sh").write_text(
        _RUNNER.format(
            out=q(str(out)),
            repo=q(str(REPO)),
            py=q(sys.executable),
            memdevs=topo.devices,
            settle=int(settle_timeout),
            hdir=q(str(hdir)),
            lib=q(str(GUEST_LIB)),
            beat=HEARTBEAT_SECONDS,
            cxz=q(str(_cxz_client(hdir))),
            warm=1 if "$CXLCTL" in script else 0,
            cached_mounts="\n".join(
                f"mount -t 9p -o trans=virtio,version=9p2000.L,cache=loose,msize=512000,access=any,ro "
                f"{tag} {q(path)} 2>> {q(str(hdir / 'cached-mounts.log'))} || true"
                for tag, path in cached_exports()
            ),
        )
    )
    qemu = ["-cpu", GUEST_CPU, "-M", "cxl=on", "-m", f"{memory},maxmem=8G,slots=8", *NINEP_DMA_TO_CXL]
    for tag, path in cached_exports():
        qemu += ["-virtfs", f"local,path={path},mount_tag={tag},security_model=none,readonly=on,multidevs=remap"]
    cpu_list = "0" if cpus <= 1 else f"0-{cpus - 1}"
    qemu += [a.replace("@CPUS@", cpu_list) for a in topo.qemu_args_in(hdir)] + list(extra_qemu_args)
    hmp = hdir / "hmp.sock"
    if len(str(hmp)) < 100:  # a unix socket's path has room for 107 bytes
        # a human monitor for the stall report (stall_report: the vCPU's registers), beside vng's own
        qemu += [
            "-chardev",
            f"socket,id=cxlvm-hmp,path={hmp},server=on,wait=off",
            "-mon",
            "chardev=cxlvm-hmp,mode=readline",
        ]
    wrap: List[str] = []
    real = _find_qemu(env if env is not None else dict(os.environ))
    wrapper = hdir / "bin" / "qemu-system-x86_64"
    # vng pastes --qemu into a shell command unquoted: wrap only plain paths
    if real and not re.search(r"\s", str(wrapper)):
        wrapper.parent.mkdir()
        wrapper.write_text(
            _QEMU_WRAPPER.format(qemu=q(real), status=q(str(hdir / "qemu-status")), times=q(str(hdir / "qemu-times")))
        )
        wrapper.chmod(0o755)
        wrap = ["--qemu", str(wrapper)]
    return [
        vng,
        *wrap,
        "--verbose",
        "-r",
        str(kern.vmlinuz),
        "--disable-kvm",
        "--disable-microvm",
        "--append",
        "modprobe.blacklist=" + ",".join(UNNEEDED_MODULES),
        "--cpus",
        str(cpus),
        "-m",
        memory,
        "--rwdir",
        str(base),
        "--qemu-opts=" + " ".join(q(a) for a in qemu),
        "--exec",
        f"bash {q(str(hdir / 'runner.sh'))}",
    ]


def _wait_for_runner(proc: subprocess.Popen[bytes], started: Path, deadline: float) -> Optional[str]:
    """Wait until the runner has left its first file, the guest exits, or the
    boot deadline passes.  Returns why the boot is worth retrying, or None."""
    end = time.monotonic() + deadline
    while not started.exists():
        if proc.poll() is not None:
            # vng/QEMU ended; the runner may still have started just before
            return None if started.exists() else f"vng exited {proc.returncode} before the guest ran its script"
        if time.monotonic() > end:
            return f"no sign of the guest's script after {deadline:.0f} s (hung in boot)"
        time.sleep(0.5)
    return None


class _Overdue(Exception):
    """A check ran past its own deadline (``run_guest``'s ``overdue``): the test's failure."""


def _wait_watching_heartbeat(
    proc: subprocess.Popen[bytes],
    hdir: Path,
    console: Path,
    end: float,
    overdue: Optional[Callable[[], Optional[str]]] = None,
) -> None:
    """Wait for the guest to end by ``end`` (monotonic; then TimeoutExpired, the
    test's failure) or until ``overdue`` says a check ran too long (:class:`_Overdue`).
    A guest whose heartbeat goes silent for :func:`stall_after` seconds before its
    runner has finished has stopped as a whole: it is reported
    (:func:`stall_report`), killed, and raised as a retry."""
    limit = stall_after()
    while True:
        try:
            proc.wait(timeout=max(0.1, min(5.0, end - time.monotonic())))
            return
        except subprocess.TimeoutExpired:
            if time.monotonic() >= end:
                raise
        late = overdue() if overdue is not None else None
        if late:
            raise _Overdue(late)
        age = _heartbeat_age(hdir)
        if age is None or age < limit or (hdir / "uptime-end").exists():
            continue
        report = stall_report(proc.pid, hmp=hdir / "hmp.sock")
        _kill_group(proc)
        raise _BootRetry(
            f"the guest stopped: no heartbeat for {age:.0f} s while its script ran "
            "(the emulator stopped running it, not the script hanging)",
            _tail(_read(console)),
            ran=True,
            detail=report,
        )


def _stat(path: str) -> Optional[Tuple[str, List[str]]]:
    """A ``/proc/.../stat`` line as (comm, the fields after it), None once the task has gone."""
    try:
        stat = Path(path).read_text()
    except OSError:
        return None
    return stat[stat.find("(") + 1 : stat.rfind(")")], stat[stat.rfind(")") + 2 :].split()


def _qemu_in_session(sid: int) -> List[int]:
    """PIDs of the QEMU processes in the session vng was started in (``sid``)."""
    pids = []
    for d in os.listdir("/proc"):
        st = _stat(f"/proc/{d}/stat") if d.isdigit() else None
        if st is None or not st[0].startswith("qemu-system") or len(st[1]) < 4 or st[1][3] != str(sid):
            continue
        try:  # not the wrapper script of the same name (harness/bin), whose exe is bash
            if os.path.basename(os.readlink(f"/proc/{d}/exe")).startswith("qemu-system"):
                pids.append(int(d))
        except OSError:
            continue
    return pids


def _thread_ticks(pid: int) -> Dict[str, int]:
    """CPU ticks (user + system) of each of ``pid``'s threads, keyed "tid comm"."""
    ticks: Dict[str, int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return ticks
    for tid in tids:
        st = _stat(f"/proc/{pid}/task/{tid}/stat")
        if st is not None and len(st[1]) > 12:
            ticks[f"{tid} {st[0]}"] = int(st[1][11]) + int(st[1][12])
    return ticks


def hmp_command(sock: Path, command: str, timeout: float = 10.0) -> str:
    """``command``'s answer from QEMU's human monitor on ``sock``, or why there is none.

    The monitor needs QEMU's big lock: no answer within ``timeout`` says a vCPU
    thread holds it (stuck inside the emulator), itself a finding."""
    import socket

    def until_prompt(conn: socket.socket, end: float) -> str:
        got = b""
        while not got.endswith(b"(qemu) "):
            conn.settimeout(max(0.1, end - time.monotonic()))
            chunk = conn.recv(65536)
            if not chunk:
                break
            got += chunk
        return got.decode("utf-8", "replace")

    end = time.monotonic() + timeout
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(str(sock))
            until_prompt(conn, end)
            conn.sendall(command.encode() + b"\n")
            text = until_prompt(conn, end)
    except socket.timeout:
        return f"(no answer to {command!r} in {timeout:.0f} s: a vCPU thread holds QEMU's lock)"
    except OSError as e:
        return f"(the monitor at {sock}: {e})"
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text).replace("\r", "")
    return text.removesuffix("(qemu) ").split("\n", 1)[-1].rstrip()  # the echoed command goes


def blocked_tasks(hmp: Path, console: Path, settle: float = 10.0) -> str:
    """The guest kernel's list of blocked tasks with their stacks, for a run that timed out.

    A script that hangs while the guest runs on (the heartbeat fresh) leaves no other trace of
    where it waits: the monitor presses alt-sysrq-w (the runner enables every sysrq function),
    the kernel prints each task in uninterruptible sleep -- a 9p request never answered, a
    lock -- on the console, and what it printed is returned (empty when the monitor or the
    console gave nothing within ``settle`` seconds)."""
    if not hmp.exists():
        return ""
    start = len(_read(console))
    hmp_command(hmp, "sendkey alt-sysrq-w")
    end = time.monotonic() + settle
    seen = -1
    while time.monotonic() < end:
        time.sleep(1.0)
        size = len(_read(console))
        if size == seen and size > start:
            break  # the dump has ended
        seen = size
    text = _read(console)[start:]
    at = text.find("sysrq: Show Blocked State")
    return text[at:].strip() if at >= 0 else ""


def stall_report(sid: int, sample: float = 3.0, hmp: Optional[Path] = None) -> str:
    """What QEMU was doing when the guest stopped: each thread's CPU use over
    ``sample`` seconds (a vCPU thread at 100 % is spinning inside the
    emulator; all idle is a wait), the vCPUs' registers from the human
    monitor ``hmp`` (RIP and CPL: user program or kernel), then gdb's
    backtraces where gdb exists.  Kept beside the attempt's console
    (``stall-attemptN.txt``)."""
    pids = _qemu_in_session(sid)
    if not pids:
        return "no QEMU process found in the guest's session\n"
    hz = os.sysconf("SC_CLK_TCK")
    lines = []
    vcpus: List[str] = []
    if hmp is not None and hmp.exists():
        for cmd in ("info cpus", "info registers -a"):
            answer = hmp_command(hmp, cmd)
            vcpus += re.findall(r"thread_id=(\d+)", answer)
            lines.append(f"--- monitor: {cmd} ---\n{answer}")
    for pid in pids:
        t0 = _thread_ticks(pid)
        time.sleep(sample)
        t1 = _thread_ticks(pid)
        lines.append(f"QEMU pid {pid}: CPU use of each thread over {sample:.0f} s")
        for key in sorted(t1, key=lambda k: t0.get(k, 0) - t1[k]):
            used = (t1[key] - t0.get(key, t1[key])) / hz / sample
            lines.append(f"  {key}: {used:.0%}" + (" (vCPU)" if key.split()[0] in vcpus else ""))
        gdb = _gdb()
        if gdb:
            try:
                bt = subprocess.run(
                    [gdb, "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt 20"],
                    capture_output=True,
                    text=True,
                    timeout=90,
                ).stdout
            except (OSError, subprocess.TimeoutExpired) as e:
                bt = f"(gdb failed: {e})"
            lines.append(f"--- gdb: thread apply all bt 20 (pid {pid}) ---\n{bt}")
    return "\n".join(lines) + "\n"


def _gdb() -> Optional[str]:
    """gdb, for the stall report's backtraces, where installed."""
    return shutil.which("gdb")


def _heartbeat_age(hdir: Path) -> Optional[float]:
    """Seconds since the guest last wrote its heartbeat (9p: the host's clock), None before the first."""
    try:
        return time.time() - (hdir / "heartbeat").stat().st_mtime
    except OSError:
        return None


def _boot_and_collect(
    cmd: List[str],
    env: Dict[str, str],
    console: Path,
    base: Path,
    out: Path,
    hdir: Path,
    topo: Topology,
    kern: Kernel,
    timeout: float,
    t0: float,
    overdue: Optional[Callable[[], Optional[str]]] = None,
) -> GuestResult:
    with open(console, "wb") as con:
        # own session so a timeout can kill vng *and* the qemu it started, and
        # nothing else
        proc = subprocess.Popen(
            cmd,
            stdout=con,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=str(base),
            env=env,
        )
        try:
            retry = _wait_for_runner(proc, hdir / "uptime-start", boot_deadline(timeout))
            if retry is not None:
                _kill_group(proc)
                raise _BootRetry(retry, _tail(_read(console)))
            _wait_watching_heartbeat(proc, hdir, console, t0 + timeout, overdue)
            crash = qemu_crash(hdir)
            if crash and not (hdir / "rc").exists():
                raise _BootRetry(
                    f"QEMU died of {crash} while the guest ran its script (an emulator crash, not the guest's)",
                    _tail(_read(console)),
                    ran=True,
                )
        except _BootRetry:
            raise
        except BaseException as e:  # timeout, Ctrl-C, SIGTERM turned into an exception
            late = isinstance(e, (subprocess.TimeoutExpired, _Overdue))
            blocked = blocked_tasks(hdir / "hmp.sock", console) if late else ""
            _kill_group(proc)
            if not late:
                raise
            why = str(e) if isinstance(e, _Overdue) else f"timed out after {timeout:.0f} s"
            raise GuestBootError(
                f"guest ({topo.name}, {kern.release}) {why}\n"
                f"--- console tail ({console}) ---\n{_tail(_read(console))}"
                + (f"\n--- blocked tasks (sysrq-w) ---\n{blocked}" if blocked else "")
            ) from None
    wall = time.monotonic() - t0

    def fail(why: str) -> GuestBootError:
        # QEMU says so when something outside killed it (a stray `pkill qemu`)
        killed = re.search(r"terminating on signal \d+ from pid \d+.*", _read(console))
        if killed:
            why += f"; QEMU was killed: {killed.group(0)}"
        return GuestBootError(
            f"guest ({topo.name}, {kern.release}): {why} (vng exit {proc.returncode})\n"
            f"--- prelude log ---\n{_tail(_read(hdir / 'prelude.log'), 20)}\n"
            f"--- console tail ({console}) ---\n{_tail(_read(console))}"
        )

    if not (hdir / "prelude-rc").exists():
        raise fail("the guest started its script but never finished the prelude")
    if _read(hdir / "prelude-rc").strip() != "0":
        raise fail("the prelude failed (drivers did not load or memdevs did not enumerate)")
    if not (hdir / "rc").exists():
        raise fail("the guest script's exit status was not recorded")
    if not (hdir / "heartbeat").exists():
        raise fail("the runner's heartbeat never beat, so a stopped guest would go unseen (see runner.sh)")
    script_seconds = 0.0
    try:
        up0 = float(_read(hdir / "uptime-start").split()[0])
        up1 = float(_read(hdir / "uptime-end").split()[0])
        script_seconds = max(0.0, up1 - up0)
    except (ValueError, IndexError):
        pass
    return GuestResult(
        returncode=int(_read(hdir / "rc").strip()),
        stdout=_read(hdir / "stdout.txt"),
        stderr=_read(hdir / "stderr.txt"),
        outdir=out,
        console=console,
        boot_seconds=round(wall - script_seconds, 1),
        wall_seconds=round(wall, 1),
        kernel=kern,
        topology=topo,
        prelude_log=_read(hdir / "prelude.log"),
    )


def _read(p: Path) -> str:
    try:
        return p.read_text(errors="replace")
    except OSError:
        return ""


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop the vng process group we started (vng, qemu, virtiofsd ...)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m tests.vm.harness TOPOLOGY [-k 6.1] (-c SCRIPT | -f FILE)``:
    run one guest by hand (what scripts/vm-run.sh calls), print its output."""
    import argparse

    ap = argparse.ArgumentParser(prog="vm-run", description=main.__doc__)
    ap.add_argument("topology", choices=sorted(TOPOLOGIES))
    ap.add_argument("-k", "--kernel", default="6.12", help="kernel series (6.12, 6.1)")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("-c", "--command", help="guest bash script text")
    g.add_argument("-f", "--file", type=Path, help="guest bash script file")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--workdir", type=Path, help="rwdir to use (default: a new temp dir)")
    a = ap.parse_args(argv)
    script = a.command if a.command is not None else a.file.read_text()
    r = run_guest(a.topology, script, kernel=a.kernel, timeout=a.timeout, workdir=a.workdir)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    print(
        f"vm-run: {r.topology.name} on {r.kernel.release}: exit {r.returncode}, "
        f"boot {r.boot_seconds} s, wall {r.wall_seconds} s, $OUT={r.outdir}",
        file=sys.stderr,
    )
    return r.returncode


if __name__ == "__main__":
    raise SystemExit(main())
