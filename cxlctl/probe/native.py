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

The binary is cached in cxlctl's cache directory (:mod:`cxlctl.hostio.cache`: root's is
``/var/cache/cxlctl``, whatever ``$XDG_CACHE_HOME`` or ``$HOME`` say), named by a hash of the
source, the compiler's version and the CPU's feature flags, so an upgrade of either, or another
CPU, rebuilds it.  Without ``cc`` the probe refuses with the package to install.  Every run goes
through :func:`cxlctl.hostio.tools.run`.

Root runs what it builds, so (issue 43) the name being computable by anyone must not matter:
root compiles with the ``cc`` found on :data:`~cxlctl.hostio.paths.ROOT_TOOL_PATH` (never
``$CC`` or the caller's ``PATH``), by absolute path, in a clean environment; the directory and
the binary must pass :func:`cxlctl.hostio.trust.untrusted`; the binary's SHA-256, recorded
beside it at build time, is checked before every run.  A directory that cannot be used
(read-only, another user's) is named with the reason, and the helper is built in a fresh
private directory for this run instead.
"""

from __future__ import annotations

import hashlib
import os
from typing import Callable, Dict, List, Optional, Sequence

from cxlctl.errors import CxlctlError
from cxlctl.hostio import cache, tools

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "probe.c")
#: seconds a compile may take
COMPILE_TIMEOUT = 120.0
#: -march=native first (the host's widest loads); plain -O2 where the compiler refuses it
FLAGS = (("-O2", "-march=native"), ("-O2",))


class HelperError(CxlctlError):
    """The helper could not be built or did not measure (exit 1)."""


#: the SHA-256 of each helper this process built or checked, by path: what :func:`run` verifies
_RECORDED: Dict[str, str] = {}


def _compiler() -> str:
    """The C compiler, by absolute path.  Root: ``cc`` on :data:`ROOT_TOOL_PATH` only, and only
    where no other user can change it (``$CC`` and ``$PATH`` are the caller's to set)."""
    from cxlctl.hostio.paths import ROOT_TOOL_PATH

    root = os.geteuid() == 0
    cc = "cc" if root else os.environ.get("CC") or "cc"
    found = tools.which(cc, {"PATH": ROOT_TOOL_PATH} if root else None)
    if found is None:
        where = f" (looked on {ROOT_TOOL_PATH}: root ignores $CC and $PATH)" if root else ""
        raise HelperError(
            f"{cc} is not installed{where}: cxlctl probe compiles its measuring loops (probe.c) on first use",
            hint="install a C compiler (Debian/Ubuntu: apt-get install gcc; Fedora: dnf install gcc), then run it again",
        )
    found = os.path.abspath(found)
    if root:
        from cxlctl.hostio.trust import require_trusted

        require_trusted(
            os.path.realpath(found), "the C compiler", hint="reinstall the compiler from the distribution's packages"
        )
    return found


def _tool_env() -> Optional[Dict[str, str]]:
    """The compiler's and the helper's environment: root's is clean (no caller's ``PATH``,
    ``COMPILER_PATH``, ``GCC_EXEC_PREFIX`` or ``LD_PRELOAD`` choosing what runs), others' their own."""
    from cxlctl.hostio.paths import ROOT_TOOL_PATH

    return {"PATH": ROOT_TOOL_PATH} if os.geteuid() == 0 else None


def _cpu_flags() -> str:
    """The CPU's feature line (x86 ``flags``, arm64 ``Features``) of ``/proc/cpuinfo``."""
    from cxlctl.hostio.paths import CPUINFO
    from cxlctl.hostio.reader import Reader

    for line in (Reader().body(CPUINFO, limit=1 << 16, head=True) or "").splitlines():
        if line.startswith(("flags", "Features")):
            return line
    return ""


def helper_name(cc: str) -> str:
    """``probe-<hash>``: the helper for this source, compiler (its version) and CPU."""
    with open(SOURCE, "rb") as fh:
        src = fh.read()
    version = tools.run([cc, "--version"], check=False, timeout=10.0, env=_tool_env()).output
    # -march=native: a binary built for this CPU may not run on another sharing the cache (a VM guest)
    key = hashlib.sha256(src + b"\0" + version.encode() + b"\0" + _cpu_flags().encode()).hexdigest()[:16]
    return f"probe-{key}"


def _cached_problem(exe: str) -> Optional[str]:
    """Why the cached helper ``exe`` must not run (None when it may): another user's file, or not
    the bytes recorded when it was built."""
    if not os.path.lexists(exe):
        return "missing"
    why = _trust_problem(exe)
    if why:
        return why
    try:
        with open(exe + ".sha256", encoding="ascii") as f:
            recorded = f.read().strip()
    except (OSError, ValueError):
        return "no hash was recorded when it was built"
    if cache.file_problem(exe + ".sha256") or cache.sha256_of(exe) != recorded:
        return "its bytes are not the ones recorded when it was built"
    _RECORDED[exe] = recorded
    return None


def _trust_problem(exe: str) -> Optional[str]:
    """Why this user must not run ``exe`` as its own: root, the one trust check of the binary and
    every directory above it; others, their own file, not writable by others."""
    if os.geteuid() == 0:
        from cxlctl.hostio.trust import untrusted

        reasons = untrusted(exe)
        return "; ".join(reasons) if reasons else None
    why = cache.file_problem(exe)
    return f"{exe} {why}" if why else None


def helper_path(note: Optional[Callable[[str], None]] = None) -> str:
    """The compiled helper, building it when the cached one is missing, out of date or not to be
    trusted.  ``note`` hears why the usual cache directory was not used, when it was not."""
    cc = _compiler()
    name = helper_name(cc)
    d = cache.cache_dir(os.environ)
    why = cache.dir_problem(d)
    if why is not None:
        fallback = cache.fresh_private()
        if note is not None:
            note(f"the cache directory {d} {why}: building the probe's helper in {fallback} for this run")
        d = fallback
    exe = os.path.join(d, name)
    if _cached_problem(exe) is None:
        return exe
    tmp = f"{exe}.{os.getpid()}.tmp"
    last = ""
    for flags in FLAGS:
        res = tools.run(
            [cc, *flags, "-pthread", "-o", tmp, SOURCE], timeout=COMPILE_TIMEOUT, check=False, env=_tool_env(), cwd=d
        )
        if res.returncode == 0:
            return _record(tmp, exe)
        last = tools.gist(res.stderr)
    try:
        os.unlink(tmp)
    except OSError:
        pass
    raise HelperError(
        f"{cc} could not compile {SOURCE} into {d}: {last}",
        hint="check the compiler (`cc --version`) and its C library headers (Debian/Ubuntu: apt-get install libc6-dev)",
    )


def _record(tmp: str, exe: str) -> str:
    """Move the fresh build ``tmp`` to ``exe`` (0700) and record its hash beside it (and here)."""
    from cxlctl.hostio.atomic import atomic_write

    os.chmod(tmp, 0o700)
    digest = cache.sha256_of(tmp)
    os.replace(tmp, exe)
    atomic_write("/", exe + ".sha256", digest + "\n", mode=0o600, sync_dir=False)
    _RECORDED[exe] = digest
    return exe


def _verify(exe: str) -> None:
    """Before every run: the helper is one this process built or checked, still root's (or the
    user's) alone, and still the bytes recorded; :class:`HelperError` otherwise."""
    recorded = _RECORDED.get(exe)
    why = _trust_problem(exe) if recorded else "it was not built or checked by cxlctl"
    if why is None and cache.sha256_of(exe) != recorded:
        why = "its bytes changed since it was built"
    if why:
        raise HelperError(
            f"refusing to run the probe's helper {exe}: {why}", hint="run `cxlctl probe` again (it rebuilds the helper)"
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
    _verify(exe)
    argv: List[str] = [exe, mode, str(node), str(size), f"{seconds:g}", ",".join(map(str, cpus))]
    # setup (first touch, the permutation) takes about as long as the windows on a slow node
    res = tools.run(argv, timeout=60.0 + 20 * seconds + size / 50e6, check=False, env=_tool_env(), cwd="/")
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
