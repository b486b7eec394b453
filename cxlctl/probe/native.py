"""The probe's inner loops: ``probe.c``, shipped in the package, compiled on first use.

Why a helper of our own, compiled on first use with the host's ``cc``:

* the loops must be native (an interpreter's loop costs more than a cache miss);
* the reference tools each lack a part: ``likwid-bench`` has no pointer chase and
  no memory binding of its own (its ``-w M0:…`` domains are sockets/dies, not
  CXL nodes without CPUs); ``stress-ng --stream`` and ``mbw`` report one copy/triad
  figure without node binding; ``sysbench memory`` measures its own block loop,
  not streaming loads; none is installed on a fresh host;
* a C extension built by pip would turn the pure-Python wheel into a
  per-platform one and need a compiler at install time anyway; ``ctypes`` over
  a shared object needs the same compiler and adds the GIL to the timed loop.

The binary is cached in ``$XDG_CACHE_HOME/cxlctl`` (root: ``/root/.cache/cxlctl``),
named by a hash of the source, the compiler's version and the CPU's feature
flags, so an upgrade of either, or another CPU, rebuilds it.  Without ``cc`` the probe refuses with the package to
install.  Every run goes through :func:`cxlctl.hostio.tools.run`.
"""

from __future__ import annotations

import hashlib
import os
from typing import Dict, List, Optional, Sequence

from cxlctl.errors import CxlctlError
from cxlctl.hostio import tools

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "probe.c")
#: seconds a compile may take
COMPILE_TIMEOUT = 120.0
#: -march=native first (the host's widest loads); plain -O2 where the compiler refuses it
FLAGS = (("-O2", "-march=native"), ("-O2",))


class HelperError(CxlctlError):
    """The helper could not be built or did not measure (exit 1)."""


def _cache_dir() -> str:
    from cxlctl.launch.engines import cache_dir

    return cache_dir(dict(os.environ))


def _compiler() -> str:
    cc = os.environ.get("CC") or "cc"
    if tools.which(cc) is None:
        raise HelperError(
            f"{cc} is not installed: cxlctl probe compiles its measuring loops (probe.c) on first use",
            hint="install a C compiler (Debian/Ubuntu: apt-get install gcc; Fedora: dnf install gcc), then run it again",
        )
    return cc


def _cpu_flags() -> str:
    """The CPU's feature line (x86 ``flags``, arm64 ``Features``) of ``/proc/cpuinfo``."""
    from cxlctl.hostio.paths import CPUINFO
    from cxlctl.hostio.reader import Reader

    for line in (Reader().body(CPUINFO, limit=1 << 16, head=True) or "").splitlines():
        if line.startswith(("flags", "Features")):
            return line
    return ""


def helper_path() -> str:
    """The compiled helper, building it when the cached one is missing or out of date."""
    cc = _compiler()
    with open(SOURCE, "rb") as fh:
        src = fh.read()
    version = tools.run([cc, "--version"], check=False, timeout=10.0).output
    # -march=native: a binary built for this CPU may not run on another sharing the cache (a VM guest)
    key = hashlib.sha256(src + b"\0" + version.encode() + b"\0" + _cpu_flags().encode()).hexdigest()[:16]
    d = _cache_dir()
    exe = os.path.join(d, f"probe-{key}")
    if os.access(exe, os.X_OK):
        return exe
    os.makedirs(d, mode=0o700, exist_ok=True)
    tmp = f"{exe}.{os.getpid()}.tmp"
    last = ""
    for flags in FLAGS:
        res = tools.run([cc, *flags, "-pthread", "-o", tmp, SOURCE], timeout=COMPILE_TIMEOUT, check=False)
        if res.returncode == 0:
            os.replace(tmp, exe)
            return exe
        last = tools.gist(res.stderr)
    raise HelperError(
        f"{cc} could not compile {SOURCE}: {last}",
        hint="check the compiler (`cc --version`) and its C library headers (Debian/Ubuntu: apt-get install libc6-dev)",
    )


def parse_line(text: str) -> Dict[str, str]:
    """The helper's ``key=value key=value`` line (the last non-empty line of its output)."""
    lines = [x for x in text.splitlines() if x.strip()]
    last = lines[-1] if lines else ""
    if last.startswith("error="):
        return {"error": last[6:].strip()}
    out: Dict[str, str] = {}
    for word in last.split():
        k, sep, v = word.partition("=")
        if sep:
            out[k] = v
    return out


def run(exe: str, mode: str, node: int, size: int, seconds: float, cpus: Sequence[int]) -> Dict[str, str]:
    """One measurement; the helper's answer as a dict; :class:`HelperError` when it failed."""
    argv: List[str] = [exe, mode, str(node), str(size), f"{seconds:g}", ",".join(map(str, cpus))]
    # setup (first touch, the permutation) takes about as long as the windows on a slow node
    res = tools.run(argv, timeout=60.0 + 20 * seconds + size / 50e6, check=False)
    got = parse_line(res.stdout)
    err: Optional[str] = got.get("error")
    if res.returncode != 0 or err or "median" not in got:
        why = err or tools.gist(res.stderr) or f"exit {res.returncode}"
        raise HelperError(f"{mode} of node {node}: {why}", hint="run `cxlctl probe` again; see docs/probe.md")
    if got.get("pages_on_node") != got.get("pages_checked"):
        # MPOL_BIND does not fall back, but a page migrated away (NUMA balancing, DAMON) would lie
        on, checked = got.get("pages_on_node"), got.get("pages_checked")
        raise HelperError(
            f"{mode} of node {node}: only {on} of {checked} sampled pages were on node {node}",
            hint="stop what migrates pages (kernel.numa_balancing, DAMON schemes) while probing",
        )
    return got
