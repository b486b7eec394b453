"""Memory policy and CPU affinity: the kernel calls, and the equivalent numactl command.

Why both: numactl is what operators know and read, so the launcher execs through
it when the installed numactl can express the policy — but Debian 12 ships
numactl 2.0.16, which has no ``--weighted-interleave`` (2.0.19+), and old
kernels reject modes numactl offers.  The direct path sets the policy on
cxlctl's own process with ``set_mempolicy(2)`` and the affinity with
``sched_setaffinity(2)``, then ``execve``\\s the engine: both survive
``execve`` and are inherited by every child (set_mempolicy(2)), so the whole
engine tree runs under them and cxlctl is gone — systemd and signals see the
engine itself.

Raw syscalls through ctypes, not libnuma: libnuma may be absent, and its
weighted-interleave calls came after its last release (numactl 2.0.19; Debian 12 ships 2.0.16).  The node mask
is 1024 bits and ``maxnode`` is passed as 1025: the kernel drops the last bit
(the off-by-one every raw ``set_mempolicy`` caller works around, as numactl does).
"""

from __future__ import annotations

import ctypes
import os
import platform
import re
import shlex
from typing import Dict, List, Optional, Sequence, Tuple

from cxlctl.errors import CxlctlError
from cxlctl.hostio import paths
from cxlctl.namedrecord import NamedTuple
from cxlctl.parse import format_nodelist, parse_nodelist

#: uapi/linux/mempolicy.h
MODES: Dict[str, int] = {
    "default": 0,
    "preferred": 1,
    "bind": 2,
    "interleave": 3,
    "local": 4,
    "preferred-many": 5,
    "weighted-interleave": 6,
}
MODE_NAMES = {v: k for k, v in MODES.items()}
#: what a user may ask for (``default`` is what a process has without cxlctl)
POLICIES = ("bind", "preferred", "preferred-many", "interleave", "weighted-interleave", "local")
#: kernel release that introduced each mode (older kernels answer EINVAL)
SINCE = {"preferred-many": (5, 15), "weighted-interleave": (6, 9)}
#: numactl option of each mode, and the numactl release that has it
NUMACTL_OPTION = {
    "bind": "--membind",
    "preferred": "--preferred",
    "preferred-many": "--preferred-many",
    "interleave": "--interleave",
    "weighted-interleave": "--weighted-interleave",
    "local": "--localalloc",
}

MASK_BITS = 1024
_ULONG_BITS = ctypes.sizeof(ctypes.c_ulong) * 8
_WORDS = MASK_BITS // _ULONG_BITS

#: (set_mempolicy, get_mempolicy) syscall numbers per architecture
_SYSCALLS = {
    "x86_64": (238, 239),
    "aarch64": (237, 236),
    "riscv64": (237, 236),
    "ppc64le": (261, 260),
    "ppc64": (261, 260),
    "s390x": (270, 269),
}
CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 16384, 1 << 18
#: the private /dev/shm's mount flags: it holds data (the KV offload, shared-memory files), never
#: programs or device nodes, and the engine that writes it is no longer root (issue 43)
TMPFS_FLAGS = ("nosuid", "nodev", "noexec")


class Policy(NamedTuple):
    """What the engine gets: a memory policy over ``nodes`` and CPUs of ``cpu_nodes``."""

    mode: str  # one of POLICIES
    nodes: Tuple[int, ...]  # empty for local
    cpu_nodes: Tuple[int, ...]
    cpus: Tuple[int, ...]  # the CPUs of cpu_nodes
    weights: Tuple[Tuple[int, int], ...] = ()  # weighted interleave: (node, weight) in effect for the launch

    def describe(self) -> str:
        nodes = f" over node(s) {format_nodelist(self.nodes)}" if self.nodes else ""
        w = (" weights " + " ".join(f"node{n}={x}" for n, x in self.weights)) if self.weights else ""
        return f"{self.mode}{nodes}{w}; CPUs of node(s) {format_nodelist(self.cpu_nodes)}"

    def env_value(self) -> str:
        """``CXLCTL_POLICY``: what was asked, for ``cxlctl policy show`` to compare with."""
        parts = [
            f"mode={self.mode}",
            f"nodes={format_nodelist(self.nodes)}",
            f"cpunodes={format_nodelist(self.cpu_nodes)}",
        ]
        if self.weights:
            parts.append("weights=" + ",".join(f"{n}:{w}" for n, w in self.weights))
        return " ".join(parts)


class Asked(NamedTuple):
    """A parsed ``CXLCTL_POLICY`` value."""

    mode: str
    nodes: Tuple[int, ...]
    cpu_nodes: Tuple[int, ...]
    weights: Dict[int, int]


def parse_env_value(text: str) -> Optional[Asked]:
    """Inverse of :meth:`Policy.env_value` (None when it does not parse)."""
    mode = None
    nodes: Tuple[int, ...] = ()
    cpun: Tuple[int, ...] = ()
    weights: Dict[int, int] = {}
    try:
        for part in text.split():
            k, _, v = part.partition("=")
            if k == "mode":
                if v not in MODES:
                    return None
                mode = v
            elif k == "nodes":
                nodes = parse_nodelist(v)
            elif k == "cpunodes":
                cpun = parse_nodelist(v)
            elif k == "weights":
                weights = {int(a): int(b) for a, _, b in (x.partition(":") for x in v.split(",") if x)}
    except ValueError:
        return None
    return Asked(mode, nodes, cpun, weights) if mode else None


# --------------------------------------------------------------------------- kernel calls


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _numbers() -> Tuple[int, int]:
    arch = platform.machine()
    if arch not in _SYSCALLS:
        raise CxlctlError(
            f"no set_mempolicy syscall number known for {arch}",
            hint="install numactl 2.0.19 or later; cxlctl then execs through it",
        )
    return _SYSCALLS[arch]


def _mask(nodes: Sequence[int]) -> ctypes.Array[ctypes.c_ulong]:
    arr = (ctypes.c_ulong * _WORDS)()
    for n in nodes:
        if not 0 <= n < MASK_BITS:
            raise ValueError(f"node {n} out of range")
        arr[n // _ULONG_BITS] |= 1 << (n % _ULONG_BITS)
    return arr


def set_mempolicy(mode: str, nodes: Sequence[int]) -> None:
    """The calling thread's policy (inherited across fork and execve); OSError on failure."""
    nr = _numbers()[0]
    libc = _libc()
    mask = _mask(nodes) if nodes else None
    rc = libc.syscall(
        ctypes.c_long(nr),
        ctypes.c_int(MODES[mode]),
        mask,
        ctypes.c_ulong(MASK_BITS + 1 if nodes else 0),
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def get_mempolicy() -> Tuple[str, Tuple[int, ...]]:
    """(mode name, nodes) of the calling thread."""
    nr = _numbers()[1]
    libc = _libc()
    mode = ctypes.c_int(0)
    mask = _mask(())
    rc = libc.syscall(
        ctypes.c_long(nr),
        ctypes.byref(mode),
        mask,
        ctypes.c_ulong(MASK_BITS + 1),
        ctypes.c_void_p(0),
        ctypes.c_ulong(0),
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    nodes = tuple(i for i in range(MASK_BITS) if mask[i // _ULONG_BITS] >> (i % _ULONG_BITS) & 1)
    m = mode.value & 0xFFFF  # upper bits are mode flags (static/relative nodes)
    return MODE_NAMES.get(m, str(m)), nodes


def apply_in_process(policy: Policy) -> None:
    """Affinity, then memory policy, on this process — right before ``execve``.

    Affinity first: the policy's nodes need not contain the CPUs' node, and the
    few pages Python touches in between do not matter.  Errors name the fix.
    """
    if policy.cpus:
        try:
            os.sched_setaffinity(0, policy.cpus)
        except OSError as e:
            raise CxlctlError(
                f"sched_setaffinity to the CPUs of node(s) {format_nodelist(policy.cpu_nodes)} failed: {e.strerror}",
                hint="the CPUs may be outside this process' cpuset (grep Cpus_allowed_list /proc/self/status)",
            ) from None
    if policy.mode == "local":
        nodes: Tuple[int, ...] = ()
    else:
        nodes = policy.nodes
    try:
        set_mempolicy(policy.mode, nodes)
    except OSError as e:
        why = {
            22: "EINVAL: the kernel does not know this mode, or a node is outside Mems_allowed / has no memory",
            1: "EPERM: not permitted (containers need CAP_SYS_NICE for memory policies)",
        }.get(e.errno or 0, e.strerror or str(e))
        raise CxlctlError(
            f"set_mempolicy({policy.mode}, nodes {format_nodelist(nodes) or '-'}) failed: {why}",
            hint="check the pre-flight output of the same command with --dry-run",
        ) from None


def unshare_shm(size: int, nodes: Sequence[int], mpol: str = "bind", target: str = paths.DEV_SHM) -> None:
    """Private mount namespace whose ``target`` is a tmpfs with ``mpol=MPOL:NODES`` (bind; prefer or
    interleave when ``--force`` lets the offload spill).

    tmpfs places each page by the mount's mpol, whoever faults it (kernel
    Documentation/filesystems/tmpfs.rst), so a shared-memory file there lands
    on ``nodes`` whatever policy the engine's workers have.
    """
    libc = _libc()
    if libc.unshare(ctypes.c_int(CLONE_NEWNS)) != 0:
        err = ctypes.get_errno()
        raise CxlctlError(
            f"unshare(CLONE_NEWNS) failed: {os.strerror(err)}",
            hint="--kv-tmpfs needs CAP_SYS_ADMIN (run as root)",
        )
    if libc.mount(b"none", b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None) != 0:
        err = ctypes.get_errno()
        raise CxlctlError(f"making mounts private failed: {os.strerror(err)}", hint="--kv-tmpfs needs CAP_SYS_ADMIN")
    opts = tmpfs_options(size, nodes, mpol).encode()
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
    if libc.mount(b"tmpfs", target.encode(), b"tmpfs", ctypes.c_ulong(flags), opts) != 0:
        err = ctypes.get_errno()
        raise CxlctlError(
            f"mounting tmpfs ({opts.decode()}) on {target} failed: {os.strerror(err)}",
            hint="the kernel needs CONFIG_TMPFS and the nodes must have memory online",
        )


def tmpfs_options(size: int, nodes: Sequence[int], mpol: str = "bind") -> str:
    """The mount options (``mpol=`` as ``shmem_parse_one``/``mpol_parse_str`` take it: bind, prefer, interleave)."""
    return f"size={size},mode=1777,mpol={mpol}:{format_nodelist(nodes)}"


# --------------------------------------------------------------------------- numactl


class Numactl(NamedTuple):
    path: Optional[str]  # None: not installed
    options: Tuple[str, ...]  # long options its usage text lists
    version: Optional[str]

    def supports(self, mode: str) -> bool:
        return self.path is not None and NUMACTL_OPTION[mode] in self.options


def detect_numactl(env: Optional[Dict[str, str]] = None) -> Numactl:
    """Feature-detect the installed numactl from its usage text (2.0.16 has no --version)."""
    from cxlctl.hostio import tools

    path = tools.which("numactl", env)
    if path is None:
        return Numactl(None, (), None)
    try:  # the usage text is read whatever the exit status
        text = tools.run([path, "--help"], check=False).output
    except tools.ToolError:
        return Numactl(path, (), None)
    opts = tuple(sorted(set(re.findall(r"--[a-z][a-z-]+", text))))
    version = None
    try:
        v = tools.run([path, "--version"])
        m = re.search(r"\b(\d+\.\d+\.\d+)\b", v.output)
        version = m.group(1) if m else None
    except tools.ToolError:
        pass
    return Numactl(path, opts, version)


def numactl_argv(policy: Policy, numactl: str = "numactl") -> List[str]:
    """``numactl --cpunodebind=… --<policy>=… --`` (prefix for the engine's argv)."""
    out = [numactl]
    if policy.cpu_nodes:
        out.append(f"--cpunodebind={format_nodelist(policy.cpu_nodes)}")
    opt = NUMACTL_OPTION[policy.mode]
    out.append(opt if policy.mode == "local" else f"{opt}={format_nodelist(policy.nodes)}")
    out.append("--")
    return out


def shell_line(argv: Sequence[str], env: Optional[Dict[str, str]] = None) -> str:
    pre = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted((env or {}).items()))
    return (pre + " " if pre else "") + " ".join(shlex.quote(a) for a in argv)


def kernel_supports(mode: str, osrelease: Optional[str], wi_dir: bool) -> Optional[str]:
    """None when the kernel has ``mode``, else why not (the pre-flight check)."""
    if mode == "weighted-interleave":
        if wi_dir:
            return None
        return f"weighted interleave needs Linux 6.9 or later (this is {osrelease or 'unknown'}; no /sys/kernel/mm/mempolicy/weighted_interleave)"
    need = SINCE.get(mode)
    if need is None or osrelease is None:
        return None
    m = re.match(r"(\d+)\.(\d+)", osrelease)
    if m and (int(m.group(1)), int(m.group(2))) < need:
        return f"{mode} needs Linux {need[0]}.{need[1]} or later (this is {osrelease})"
    return None
