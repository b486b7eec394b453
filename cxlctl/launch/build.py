"""A launch, from options to ``execve``: :func:`build` plans (no changes), :func:`execute` runs it.

:func:`build` is the whole decision — node sets, policy, weights, engine
flags, KV size, pre-flight, the exact argv and environment — and changes
nothing on the host, so ``--dry-run`` shows precisely what a real launch
would do.  :func:`execute` then changes, in this order and only after every
pre-flight check passed: the weighted-interleave weights (tuning engine,
journaled), the private ``/dev/shm`` (``--kv-tmpfs``), the CPU affinity and
memory policy (directly, unless numactl does it), and finally ``execve``: the
engine replaces cxlctl in the same process (same PID), so systemd, signals
and ``cxlctl policy show $PID`` see the engine itself.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from typing import Any, Dict, List, Optional, Tuple

from cxlctl.errors import CxlctlError, UsageError
from cxlctl.hostio.host import Host
from cxlctl.hostio.mounts import TmpfsPolicy
from cxlctl.hostio.proc import has_cap
from cxlctl.inventory import scan
from cxlctl.model import Inventory
from cxlctl.namedrecord import NamedTuple
from cxlctl.parse import format_nodelist, format_size

from . import devdax as devdax_mod
from . import engines as eng
from . import kvplace, kvsize, preflight, runas, sysweights
from .nodesets import NodeSets, cpus_of, nearest_cxl, resolve
from .policy import (
    POLICIES,
    TMPFS_FLAGS,
    Numactl,
    Policy,
    detect_numactl,
    numactl_argv,
    shell_line,
    tmpfs_options,
)


class Request(NamedTuple):
    engine: str  # exec | vllm | sglang
    args: Tuple[str, ...]  # after --
    engine_cmd: Optional[str] = None
    policy: Optional[str] = None
    cpu_nodes: Optional[str] = None
    mem_nodes: Optional[str] = None
    ratio: Optional[str] = None
    set_weights: bool = False  # --set-weights: the launch may write the system-wide weights (--ratio implies it)
    gpus: Optional[str] = None
    kv_size: Optional[str] = None
    reserve: Optional[str] = None
    model_config: Optional[str] = None
    kv_tmpfs: Optional[bool] = None  # --kv-tmpfs / --no-kv-tmpfs; None: cxlctl picks (kvplace)
    keep_numa_bind: bool = False
    lmcache: bool = False
    dry_run: bool = False  # plan even without the engine installed (its flags are then assumed)
    devdax: Optional[str] = None  # daxX.Y | /dev/daxX.Y | auto: a KV backend maps the device
    devdax_pool_id: Optional[str] = None
    devdax_offset: Optional[str] = None
    mooncake: bool = False  # --devdax goes to Mooncake's CXL transport (MC_CXL_*)
    force: bool = False  # a --kv-size the chosen nodes cannot hold may spill to others
    pinned: bool = False  # exec --pinned: the program long-term pins its /dev/shm offload
    allow_unpinnable: bool = False  # --allow-unpinnable: launch although the pin moves the offload off CXL
    user: Optional[str] = None  # --user: who the engine runs as (default: the sudo caller)
    group: Optional[str] = None  # --group
    allow_root: bool = False  # --allow-root: the engine keeps root and every capability


class LaunchPlan(NamedTuple):
    request: Request
    inventory: Inventory
    nodesets: NodeSets
    policy: Policy
    weights: Optional[sysweights.WeightPlan]
    features: Optional[eng.Features]
    engine: eng.EngineArgs
    kv: Optional[kvsize.KvRequest]
    model: Optional[kvsize.ModelKv]
    tokens: Optional[int]
    numactl: Numactl
    method: str  # numactl | direct
    argv: Tuple[str, ...]  # what is exec'd
    env_added: Dict[str, str]  # on top of the caller's environment
    env: Dict[str, str]  # the whole environment of the engine
    tmpfs: Optional[Tuple[int, Tuple[int, ...], str]]  # (size, nodes, mpol) of the private /dev/shm
    equivalent: str  # the same launch as a shell command line with numactl
    checks: Tuple[preflight.Check, ...]
    notes: Tuple[str, ...]
    warnings: Tuple[str, ...]
    wi_users: Tuple[Tuple[int, str], ...]
    devdax: Optional[devdax_mod.Devdax] = None
    mooncake_version: Optional[str] = None
    #: where the KV offload lands and what decides it (None without a KV size)
    placement: Optional[kvplace.KvPlacement] = None
    #: who the engine runs as (runas: the privilege drop before exec)
    run_as: Optional[runas.RunAs] = None

    @property
    def failed(self) -> List[preflight.Check]:
        return preflight.failures(self.checks)


def _ratio(text: Optional[str]) -> Optional[Tuple[int, int]]:
    if text is None:
        return None
    from cxlctl.tuning.knobs import parse_ratio

    try:
        return parse_ratio(text)
    except ValueError:
        raise UsageError(
            f"--ratio {text!r}: expected DRAM:CXL weights such as 3:1 (each 1-255)", hint="e.g. --ratio 3:1"
        ) from None


def _policy_nodes(req: Request, mode: str, ns: NodeSets, notes: List[str]) -> Tuple[int, ...]:
    if mode == "local":
        if req.mem_nodes is not None:
            raise UsageError(
                "--policy local takes no --mem-nodes (it allocates on the node of the CPU that faults)",
                hint="leave out --mem-nodes",
            )
        return ()
    if mode == "preferred":
        if len(ns.mem_nodes) == 1:
            return ns.mem_nodes
        if req.mem_nodes is not None:
            raise UsageError(
                f"--policy preferred takes one node, --mem-nodes gives {format_nodelist(ns.mem_nodes)}",
                hint="give one node, or use --policy preferred-many",
            )
        pick = ns.cxl[0] if ns.cxl else ns.mem_nodes[0]
        notes.append(
            f"preferred node {pick}: the nearest {'CXL' if ns.cxl else 'DRAM'} node (allocations fall back to others when it is full)"
        )
        return (pick,)
    return ns.mem_nodes


def _model_kv(req: Request, ea: eng.EngineArgs, notes: List[str]) -> Optional[kvsize.ModelKv]:
    path = req.model_config
    if path is None and ea.model and os.path.isfile(os.path.join(ea.model, "config.json")):
        path = ea.model
    if path is None:
        if ea.kv_bytes and req.engine not in ("exec", "lmcache"):
            notes.append("no local model directory (or --model-config): tokens that fit are not computed")
        return None
    return kvsize.model_kv(kvsize.load_config(path), ea.kv_cache_dtype)


def _check_request(req: Request) -> Tuple[str, Optional[Tuple[int, int]], List[str]]:
    """Reject inconsistent options before touching the host: (policy mode, ratio, engine command)."""
    if req.engine not in eng.ENGINES:
        raise UsageError(f"unknown engine {req.engine!r}", hint="use exec, vllm or sglang")
    mode = req.policy or "weighted-interleave"
    if mode not in POLICIES:
        raise UsageError(
            f"--policy {mode!r} is not one of {', '.join(POLICIES)}", hint="e.g. --policy weighted-interleave"
        )
    ratio = _ratio(req.ratio)
    if ratio is not None and mode != "weighted-interleave":
        raise UsageError(
            f"--ratio only applies to --policy weighted-interleave (not {mode})", hint="drop --ratio or change --policy"
        )
    if req.engine_cmd is not None:
        try:
            cmd = shlex.split(req.engine_cmd)
        except ValueError as e:
            raise UsageError(f"--engine-cmd: {e}", hint="quote it as one shell word list") from None
        if not cmd:
            raise UsageError("--engine-cmd is empty", hint="e.g. --engine-cmd /opt/vllm/bin/vllm")
        if req.engine == "exec":
            raise UsageError("--engine-cmd is for vllm and sglang", hint="for exec, the program is what follows --")
    else:
        cmd = list(eng.DEFAULT_CMD.get(req.engine, []))
    if req.engine == "exec" and not req.args:
        raise UsageError(
            "nothing to launch", hint="give the program after --: cxlctl launch exec [options] -- PROGRAM ARGS..."
        )
    _check_devdax_request(req)
    return mode, ratio, cmd


def _check_devdax_request(req: Request) -> None:
    """--devdax belongs to one backend: LMCache's server (engine lmcache) or Mooncake (--mooncake)."""
    if req.engine == "lmcache":
        if req.devdax is None:
            raise UsageError(
                "cxlctl launch lmcache puts LMCache's L1 on a devdax device: --devdax is required",
                hint="cxlctl launch lmcache --devdax auto -- server ... (cxlctl region create --online devdax makes one)",
            )
        if req.mooncake or req.lmcache or req.kv_tmpfs:
            raise UsageError(
                "--mooncake, --lmcache and --kv-tmpfs do not apply to cxlctl launch lmcache",
                hint="LMCache's server takes its L1 from --devdax",
            )
    elif req.devdax is not None and not req.mooncake:
        raise UsageError(
            f"--devdax with {req.engine}: say which backend maps the device",
            hint="add --mooncake (Mooncake's CXL transport), or run LMCache's server with cxlctl launch lmcache --devdax",
        )
    if req.mooncake and req.devdax is None:
        raise UsageError(
            "--mooncake needs --devdax (the device Mooncake maps)", hint="add --devdax auto or --devdax daxX.Y"
        )
    if req.devdax is None and (req.devdax_pool_id is not None or req.devdax_offset is not None):
        raise UsageError("--devdax-pool-id and --devdax-offset need --devdax", hint="add --devdax daxX.Y")
    if req.devdax is not None:
        if req.lmcache:
            raise UsageError(
                "--lmcache (LMCache's CPU cache in the engine) and --devdax are two different KV caches",
                hint="give one of them",
            )
        if req.kv_tmpfs is True:
            raise UsageError("--kv-tmpfs and --devdax are two different KV placements", hint="give one of them")
        if req.reserve is not None:
            raise UsageError("--reserve does not apply to --devdax", hint="--kv-size SIZE maps part of the device")


def _resolve_nodes(host: Host, inv: Inventory, req: Request) -> NodeSets:
    """The CPU, memory and GPU node sets, within what this process may use (its cpuset)."""
    mems, cpus_allowed = preflight.self_allowed(host)
    allowed_cpu_nodes = None
    if cpus_allowed is not None:
        allowed_cpu_nodes = [n.id for n in inv.nodes if n.has_cpu and set(n.cpus) & set(cpus_allowed)]
    return resolve(
        inv,
        host,
        cpu_spec=req.cpu_nodes,
        mem_spec=req.mem_nodes,
        gpu_spec=req.gpus,
        allowed_mems=mems,
        allowed_cpu_nodes=allowed_cpu_nodes,
    )


def _devdax(inv: Inventory, req: Request) -> Optional[devdax_mod.Devdax]:
    """The devdax device and the bytes the backend maps (--kv-size SIZE, or the whole device)."""
    if req.devdax is None:
        return None
    want = None
    if req.kv_size is not None and req.kv_size.strip().lower() != "auto":
        want = kvsize.parse_size_arg(req.kv_size, "--kv-size")
        if want == 0:
            raise UsageError("--kv-size 0: nothing to map", hint="leave out --kv-size to map the whole device")
    return devdax_mod.resolve(inv, req.devdax, want, req.devdax_pool_id, req.devdax_offset)


def _mooncake(
    req: Request, cmd: List[str], environ: Dict[str, str], dd: devdax_mod.Devdax, notes: List[str], warnings: List[str]
) -> Tuple[Dict[str, str], Optional[str]]:
    """Mooncake's MC_CXL_* environment, after asking the engine's python which Mooncake it has."""
    python = _engine_python(req, cmd, environ)
    version, err = devdax_mod.mooncake_version(python, environ) if python else (None, "no python3 on PATH")
    if version is None:
        if not req.dry_run:
            raise UsageError(
                f"--mooncake: {err}",
                hint=f"pip install {devdax_mod.MOONCAKE_DIST} in the engine's environment",
            )
        warnings.append(
            f"Mooncake not found ({err}); dry run assuming {devdax_mod.MOONCAKE_DIST} {devdax_mod.MOONCAKE_ASSUMED}"
        )
    else:
        notes.append(f"Mooncake {version} ({devdax_mod.MOONCAKE_DIST}, as {python} sees it)")
    return devdax_mod.mooncake_env(dd, version or devdax_mod.MOONCAKE_ASSUMED, environ, notes, warnings), version


def _engine_python(req: Request, cmd: List[str], environ: Dict[str, str]) -> Optional[str]:
    """The interpreter that runs the engine: SGLang's python, a script's ``#!`` python, else python3."""
    path = environ.get("PATH")
    if req.engine == "sglang":
        return shutil.which(cmd[0], path=path)
    exe = shutil.which(cmd[0] if cmd else req.args[0], path=path)
    python = eng.script_python(exe, path) if exe is not None else None
    if python is not None:
        return python
    return shutil.which("python3", path=path)


def _cxl_share(inv: Inventory, policy: Policy) -> float:
    """The part of the engine's own memory (not the KV offload) its policy puts on CXL nodes: the CXL
    nodes' weights over all (weighted interleave: ``weighted_interleave_nodes``, mm/mempolicy.c),
    their count over all (interleave); 0 for the modes that fill DRAM first or bind elsewhere."""
    cxl = {n.id for n in inv.nodes if n.kind == "cxl"}
    nodes = list(policy.nodes)
    if not nodes or not cxl & set(nodes) or policy.mode not in ("weighted-interleave", "interleave"):
        return 0.0
    w = dict(policy.weights) if policy.mode == "weighted-interleave" else {}
    weights = {n: (w.get(n) or 1) for n in nodes}
    return sum(weights[n] for n in nodes if n in cxl) / sum(weights.values())


def _model_dir(req: Request) -> Optional[str]:
    """A local model directory among the engine's arguments (or --model-config's), for its size."""
    for cand in ([req.model_config] if req.model_config else []) + list(req.args):
        d = cand if os.path.isdir(cand) else os.path.dirname(cand) if cand.endswith("config.json") else None
        if d and os.path.isfile(os.path.join(d, "config.json")):
            return d
    return None


def _kv_request(
    host: Host,
    inv: Inventory,
    req: Request,
    ns: NodeSets,
    feats: Optional[eng.Features],
    notes: List[str],
    policy: Optional[Policy] = None,
) -> Optional[kvsize.KvRequest]:
    if req.devdax is not None:
        return None  # --kv-size sizes the device mapping (_devdax)
    if feats is not None and feats.backend == "cpu" and (req.kv_size or "").strip().lower() == "auto":
        cpus = cpus_of(inv, ns.cpu_nodes)
        node = next((n.id for n in inv.nodes if cpus and cpus[0] in n.cpus), None)
        ckv = kvsize.cpu_worker_kv_request(
            node, preflight.node_available(host, node) if node is not None else None, req.reserve
        )
        notes.append(
            f"--kv-size auto on vLLM's CPU backend: its worker puts the KV cache on node {node} (its first CPU), "
            f"where vLLM counts {format_size(ckv.available or 0)} available (MemFree + Active(file) + "
            f"Inactive(file) + SReclaimable), minus reserve {format_size(ckv.reserve or 0)} = "
            f"{format_size(ckv.bytes)}, shared by its workers; not CXL memory"
        )
        return ckv
    # the CXL-bound /dev/shm puts the KV on the nearest CXL nodes even when the process' memory set has none
    kv_nodes = ns.cxl or (nearest_cxl(inv, ns.cpu_nodes) if req.kv_tmpfs is not False else ())
    auto = (req.kv_size or "").strip().lower() == "auto"
    share = _cxl_share(inv, policy) if policy is not None and auto else 0.0
    model_dir = _model_dir(req) if share else None
    model_bytes = kvsize.model_files_bytes(model_dir) if model_dir else 0
    others = int(model_bytes * share)
    kv = kvsize.kv_request(inv, req.kv_size, req.reserve, kv_nodes, others)
    if kv is not None and kv.auto:
        line = (
            f"--kv-size auto: {format_size(kv.free_cxl)} free on CXL node(s) {format_nodelist(kv_nodes)} "
            f"minus reserve {format_size(kv.reserve)}"
        )
        if share and policy is not None:
            line += (
                f" minus the engine's other memory there ({format_size(others)}: its {policy.mode} policy puts "
                f"{share:.0%} of it on CXL, and its model files are {format_size(model_bytes)})"
                if model_bytes
                else ""
            )
        line += f" = {format_size(kv.bytes)}"
        if share and policy is not None and not model_bytes:
            line += (
                f"; the engine's other memory (model weights, buffers) goes {share:.0%} to CXL under its "
                f"{policy.mode} policy too, not counted: its size is unknown (no local model directory) -- "
                "keep room for it with --reserve"
            )
        notes.append(line)
    return kv


def _engine_features(req: Request, cmd: List[str], environ: Dict[str, str]) -> Optional[eng.Features]:
    """Resolve the executable first (a missing engine is a usage error, except in a dry run, which
    plans with assumed flags and says so), then ask the engine which flags it has."""
    feats = None
    if req.engine != "exec":
        if shutil.which(cmd[0], path=environ.get("PATH")) is None:
            if not req.dry_run:
                raise UsageError(
                    f"{req.engine} engine not found: {cmd[0]!r} is not on PATH",
                    hint=f"install {req.engine}, activate its environment, or give --engine-cmd",
                )
            feats = eng.assumed(req.engine, f"{cmd[0]!r} is not on PATH")
        else:  # installed but its help fails: plan on, passing the arguments through (a warning says so)
            feats = eng.detect(req.engine, cmd, environ)
            if feats.broken and not req.dry_run:
                raise UsageError(
                    f"{feats.broken}; vLLM would die at start-up",
                    hint="give the wheel the name vLLM looks up (docs/launch.md, 'vLLM's CPU wheel'), "
                    "or install vLLM's CPU build from source",
                )
    elif shutil.which(req.args[0], path=environ.get("PATH")) is None:
        raise UsageError(f"program not found: {req.args[0]!r}", hint="give a path or a program on PATH after --")
    if req.kv_tmpfs is True and req.engine == "sglang":
        raise UsageError(
            "--kv-tmpfs is for vLLM's /dev/shm offload (and exec)", hint="SGLang's host cache is not a /dev/shm file"
        )
    return feats


def _offload_bytes(ea: eng.EngineArgs) -> Optional[int]:
    """The bytes the engine reads for its KV offload: vLLM's --kv-offloading-size as vLLM turns it into
    bytes (``kv_offloading_size * (1 << 30)``, vllm/config/vllm.py), else the plan's KV bytes."""
    if "--kv-offloading-size" in ea.added:
        i = ea.added.index("--kv-offloading-size")
        return int(float(ea.added[i + 1]) * (1 << 30))
    return ea.kv_bytes


def _kv_placement(
    host: Host,
    inv: Inventory,
    req: Request,
    ns: NodeSets,
    policy: Policy,
    feats: Optional[eng.Features],
    ea: eng.EngineArgs,
    dd: Optional[devdax_mod.Devdax],
) -> Optional[kvplace.KvPlacement]:
    """Where the KV offload lands (cxlctl.launch.kvplace); None without a KV size."""
    size = _offload_bytes(ea)
    if not size:
        if req.kv_tmpfs is True:
            raise UsageError(
                "--kv-tmpfs needs the KV size to size the tmpfs", hint="add --kv-size SIZE or --kv-size auto"
            )
        return None
    cxl = ns.cxl or nearest_cxl(inv, ns.cpu_nodes)
    if dd is not None:
        return kvplace.fixed("devdax", f"the devdax device {dd.path} (device memory, on no NUMA node)", {}, cxl, None)
    if feats is not None and feats.backend == "cpu":
        cpu = policy.cpus[0] if policy.cpus else None
        node = next((n.id for n in inv.nodes if cpu in n.cpus), None)
        return kvplace.fixed(
            "engine",
            f"vLLM's CPU worker binds its memory, KV cache included, to node {node} (its first CPU's)",
            {node: size} if node is not None else {},
            cxl,
            "vLLM's CPU backend keeps the KV cache in its workers' own memory, bound to their CPUs' node: "
            "a CPU-less CXL node never gets it (no mechanism in cxlctl moves it)",
        )
    name = {"vllm": "vLLM", "sglang": "SGLang", "exec": "the program"}[req.engine]
    lm = (
        "LMCache's CPU cache is anonymous memory of the engine: it follows the process policy",
        "run LMCache's server with its L1 on a devdax device (cxlctl launch lmcache --devdax auto -- server ...)",
    )
    if req.lmcache:
        why, fix = lm
    elif req.engine == "sglang":
        why = "SGLang's hierarchical cache (--hicache-size) is pinned anonymous memory of its schedulers: it follows their policy"
        fix = (
            "--policy preferred (the nearest CXL node first, the engine's own memory too), or a Mooncake store "
            "on a devdax device as SGLang's L3 (--devdax DEV --mooncake, and --hicache-storage-backend mooncake "
            "to SGLang)"
        )
    else:
        ver = feats.version if feats is not None else None
        why = f"vLLM {ver or ''} pins its offload as anonymous memory (a /dev/shm file only since 0.28)".replace(
            "vLLM  ", "vLLM "
        )
        fix = "upgrade vLLM to 0.28 or later (its offload is then a /dev/shm file cxlctl binds to CXL)"
    shm = not req.lmcache and (req.engine == "exec" or (req.engine == "vllm" and ea.shm_bytes is not None))
    # mounting needs CAP_SYS_ADMIN on the machine cxlctl runs on; a recorded tree's dry run is the plan of
    # its caller (root's, or an unprivileged entrypoint's: a pod's, which cannot mount)
    can_mount = has_cap(preflight.CAP_SYS_ADMIN)
    # vLLM on a GPU registers its shared offload region with cudaHostRegister (vllm/v1/kv_offload/cpu/
    # host_register.py host_register()), a FOLL_LONGTERM pin in NVIDIA's driver; exec says so with --pinned
    pinned = req.pinned if req.engine == "exec" else (req.engine == "vllm" and shm and ea.pins)
    choice = kvplace.Choice(
        shm,
        req.kv_tmpfs,
        can_mount,
        req.force,
        why,
        fix,
        pinned,
        req.allow_unpinnable,
        _shm_policy(host) if shm else None,
    )
    kp = kvplace.decide(inv, ns, policy, size, choice)
    if kp.mechanism == "policy" and ea.placement[0] == "engine":
        return kvplace.fixed(
            "engine",
            f"{name}'s own NUMA binding ({ea.placement[1]})",
            {},
            cxl,
            f"{name} binds its memory itself; the offload follows that binding",
        )
    return kp


def _shm_policy(host: Host) -> Optional[TmpfsPolicy]:
    """The /dev/shm this process has, when the kernel shows it as a tmpfs with an ``mpol=``
    (/proc/self/mountinfo; in a pod, the node's KV pool)."""
    from cxlctl.hostio import mounts, paths

    return mounts.policy_at(host, paths.DEV_SHM)


def _kv_tokens(model: Optional[kvsize.ModelKv], ea: eng.EngineArgs, notes: List[str]) -> Optional[int]:
    """How many tokens the KV cache holds, when the model's shape is known."""
    if model is None or not ea.kv_bytes:
        return None
    per = model.bytes_per_token * (ea.ranks if model.mla and ea.ranks > 1 else 1)
    toks = kvsize.tokens(ea.kv_bytes, per)
    notes.append(
        f"KV cache: {model.bytes_per_token} B/token ({model.formula}, {model.dtype})"
        + (f"; the MLA latent is replicated on each of {ea.ranks} ranks" if model.mla and ea.ranks > 1 else "")
        + f": {format_size(ea.kv_bytes)} holds {toks:,} tokens"
    )
    return toks


class _Weights(NamedTuple):
    plan: Optional[sysweights.WeightPlan]
    weights: Tuple[Tuple[int, int], ...]
    users: Tuple[Tuple[int, str], ...]  # processes already using weighted interleave (they see the change)


def _system_weights(
    host: Host,
    inv: Inventory,
    ns: NodeSets,
    mode: str,
    pnodes: Tuple[int, ...],
    ratio: Optional[Tuple[int, int]],
    notes: List[str],
    warnings: List[str],
    asked: bool = False,
) -> _Weights:
    """The system-wide weighted-interleave weights this launch needs, and who else they affect.
    A launch writes them only when ``asked`` (--set-weights, --ratio): else it uses the weights in
    effect and says what --set-weights would change."""
    if not (mode == "weighted-interleave" and inv.weighted_interleave.supported and pnodes):
        return _Weights(plan=None, weights=(), users=())
    wp = sysweights.plan(host, inv, ns, pnodes, ratio)
    if wp.writes and not asked:
        cur = {n: wp.current[n] for n in wp.nodes}
        would = ", ".join(f"{s.split('.')[-1]} {a}->{b}" for s, a, b in wp.changes)
        notes.append(
            "weights not changed (they are system-wide; a launch changes the host only when asked): using the "
            "weights in effect (" + " ".join(f"node{n}={x}" for n, x in sorted(cur.items())) + "); "
            f"--set-weights would set them from {wp.source} ({would}), journaled"
        )
        wp = wp._replace(source="current", weights=cur, changes=(), transaction=None, notes=(), warnings=())
    notes.extend(wp.notes)
    warnings.extend(wp.warnings)
    users: List[Tuple[int, str]] = []
    if wp.writes:
        users = sysweights.wi_users(host, exclude=(os.getpid(),))
        who = ", ".join(f"{p} ({n})" for p, n in users[:8]) + (f" and {len(users) - 8} more" if len(users) > 8 else "")
        warnings.append(
            "weighted-interleave weights are system-wide: "
            + ", ".join(f"{s.split('.')[-1]} {a}->{b}" for s, a, b in wp.changes)
            + " applies to every process using weighted interleave"
            + (f", including the running {who}" if users else "")
            + "; set through the tuning engine (journaled): `cxlctl tune revert` restores them"
        )
    return _Weights(plan=wp, weights=tuple(sorted(wp.weights.items())), users=tuple(users))


def _exec_argv(
    policy: Policy, ea: eng.EngineArgs, environ: Dict[str, str], notes: List[str]
) -> Tuple[Numactl, str, Tuple[str, ...]]:
    """(numactl, method, argv): numactl applies the policy when it can, else cxlctl does before exec."""
    mode = policy.mode
    numactl = detect_numactl(environ)
    if numactl.supports(mode):
        assert numactl.path is not None
        notes.append(f"policy applied by {numactl.path}")
        return numactl, "numactl", tuple(numactl_argv(policy, numactl.path)) + ea.argv
    why = (
        "numactl is not installed"
        if numactl.path is None
        else f"{numactl.path} has no {'--' + mode if mode != 'local' else '--localalloc'} option"
        + (" (needs numactl 2.0.19+)" if mode == "weighted-interleave" else "")
    )
    notes.append(f"policy applied by cxlctl itself (set_mempolicy, sched_setaffinity, then exec): {why}")
    return numactl, "direct", ea.argv


def _env_added(
    req: Request, ns: NodeSets, ea: eng.EngineArgs, policy: Policy, environ: Dict[str, str], warnings: List[str]
) -> Dict[str, str]:
    """The variables the launch sets on top of the caller's environment."""
    added = dict(ea.env)
    if req.gpus is not None and ns.gpus:
        added["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        added["CUDA_VISIBLE_DEVICES"] = ",".join(str(g.ordinal) for g in ns.gpus)
        if environ.get("CUDA_VISIBLE_DEVICES") not in (None, added["CUDA_VISIBLE_DEVICES"]):
            warnings.append(f"--gpus replaces CUDA_VISIBLE_DEVICES={environ['CUDA_VISIBLE_DEVICES']}")
    added["CXLCTL_POLICY"] = policy.env_value()
    return added


def _equivalent(
    policy: Policy,
    ea: eng.EngineArgs,
    added: Dict[str, str],
    tmpfs: Optional[Tuple[int, Tuple[int, ...], str]],
    ra: Optional[runas.RunAs] = None,
) -> str:
    """The same launch as a shell command line with numactl (unshare for the CXL-bound tmpfs, and
    util-linux's setpriv for the drop to the engine's user)."""
    unset = [w for k in ea.env_unset for w in ("env", "-u", k)]
    equivalent = shell_line(_setpriv(ra) + unset + numactl_argv(policy) + list(ea.argv), added)
    if tmpfs is not None:
        opts = ",".join(TMPFS_FLAGS) + "," + tmpfs_options(*tmpfs)
        inner = "mount -t tmpfs -o " + shlex.quote(opts) + " tmpfs /dev/shm && exec " + equivalent
        equivalent = "unshare -m --propagation private sh -c " + shlex.quote(inner)
    return equivalent


def _setpriv(ra: Optional[runas.RunAs]) -> List[str]:
    """setpriv(1)'s argv for what :func:`runas.drop` does (empty when nothing is dropped)."""
    if ra is None or not ra.drop:
        return []
    groups = "--groups=" + ",".join(str(g) for g in ra.groups) if ra.groups else "--clear-groups"
    return [
        "setpriv",
        f"--reuid={ra.uid}",
        f"--regid={ra.gid}",
        groups,
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]


def _run_as(req: Request, environ: Dict[str, str], warnings: List[str]) -> runas.RunAs:
    """Who the engine runs as; a real launch that would run it as root unasked is refused here,
    before anything on the host changes (a dry run shows it and warns)."""
    ra = runas.resolve(req.user, req.group, req.allow_root, environ)
    if ra.refused:
        if not req.dry_run:
            runas.check(ra)
        warnings.append(
            f"a real launch is refused: {ra.refused}; give --user USER, run it through sudo as that user, "
            "or add --allow-root"
        )
    return ra


def _engine_args(
    req: Request,
    cmd: List[str],
    feats: Optional[eng.Features],
    kv: Optional[kvsize.KvRequest],
    dd: Optional[devdax_mod.Devdax],
    environ: Dict[str, str],
    notes: List[str],
    warnings: List[str],
) -> Tuple[eng.EngineArgs, Optional[str]]:
    """The engine's command line and environment, with Mooncake's devdax variables when asked;
    and Mooncake's version."""
    ea = eng.build_args(
        req.engine,
        cmd,
        req.args,
        feats,
        kv=kv.bytes if kv else None,
        lmcache=req.lmcache,
        keep_numa_bind=req.keep_numa_bind,
        kv_tmpfs=req.kv_tmpfs is True,
        devdax=dd,
        environ=environ,
    )
    if dd is None or not req.mooncake:
        return ea, None
    mc_env, mc_version = _mooncake(req, cmd, environ, dd, notes, warnings)
    ea = ea._replace(
        env={**ea.env, **mc_env},
        kv_bytes=dd.size,
        placement=("cxlctl", f"Mooncake maps the devdax device cxlctl picked ({dd.path}, MC_CXL_DEV_PATH)"),
    )
    return ea, mc_version


def _cpu_worker_node(inv: Inventory, policy: Policy) -> str:
    """vLLM's CPU backend: the node its (first) worker binds to, the node of the first CPU cxlctl binds."""
    cpu = policy.cpus[0] if policy.cpus else None
    node = next((n.id for n in inv.nodes if cpu in n.cpus), None)
    if node is None:
        return ""
    return f"; here CPU {cpu} (the first cxlctl binds) is on node {node}: the worker's memory, KV cache included, goes there"


def _offload_mount(
    kp: Optional[kvplace.KvPlacement], ea: eng.EngineArgs, warnings: List[str]
) -> Optional[Tuple[int, Tuple[int, ...], str]]:
    """The private /dev/shm's (size, nodes, mpol) when it is what places the offload (``kp``); the
    plan warns where the offload is not on CXL, or spills (--force)."""
    tmpfs = None
    if kp is not None and kp.mechanism == "tmpfs":
        assert kp.tmpfs_mpol is not None
        tmpfs = (eng.tmpfs_size(_offload_bytes(ea) or 0), kp.nodes, kp.tmpfs_mpol)
    if kp is not None and (kp.spill or kp.unplaced):
        warnings.append(
            "--force: the KV offload does not fit its node(s) "
            + format_nodelist(kp.nodes)
            + (f"; the rest spills: {kvplace.per_node(kp.spill)}" if kp.spill else "")
            + (f"; {format_size(kp.unplaced)} fits on no node (the kernel reclaims or swaps)" if kp.unplaced else "")
        )
    if kp is not None and kp.why_not:
        warnings.append(
            f"the KV offload is not on CXL: {kp.why_not}"
            + (f" (expected: {kvplace.per_node(kp.expected)})" if kp.expected else "")
            + (f"; fix: {kp.fix}" if kp.fix else "")
        )
    return tmpfs


def _pinned_share(host: Host, inv: Inventory, kp: Optional[kvplace.KvPlacement], warnings: List[str]) -> None:
    """A pinned offload larger than the host's pinnable share (``[capacity] pinnable``, capacity/pinnable.py):
    the share is sized from what the engines pin, so this engine outgrows what the host keeps for them."""
    if kp is None or not kp.pinned:
        return
    from cxlctl.capacity import pinnable

    sh = pinnable.load_share(host, inv, strict=False)
    size = sum(kp.before_pin.values())
    if sh.target is not None and size > sh.target:
        warnings.append(
            f"this engine long-term pins a {format_size(size)} KV offload, more than {sh.setting}: size the "
            "share from what the engines pin (docs/capacity.md, 'Splitting a host'), or the next regions are "
            "onlined movable and the pinned offloads outgrow the kernel-zone memory"
        )


def build(host: Host, req: Request, environ: Optional[Dict[str, str]] = None) -> LaunchPlan:
    """Every decision of a launch, no side effects on the host (see the module docstring)."""
    environ = dict(os.environ if environ is None else environ)
    mode, ratio, cmd = _check_request(req)
    notes: List[str] = []
    warnings: List[str] = []

    inv = scan(host)
    ns = _resolve_nodes(host, inv, req)
    pnodes = _policy_nodes(req, mode, ns, notes)
    feats = _engine_features(req, cmd, environ)
    w = _system_weights(host, inv, ns, mode, pnodes, ratio, notes, warnings, req.set_weights or ratio is not None)
    policy = Policy(mode, pnodes, ns.cpu_nodes, cpus_of(inv, ns.cpu_nodes), w.weights)
    kv = _kv_request(host, inv, req, ns, feats, notes, policy)
    dd = _devdax(inv, req)
    ea, mc_version = _engine_args(req, cmd, feats, kv, dd, environ, notes, warnings)
    model = _model_kv(req, ea, notes)
    toks = _kv_tokens(model, ea, notes)
    if feats is not None and feats.backend == "cpu":
        ea = ea._replace(placement=(ea.placement[0], ea.placement[1] + _cpu_worker_node(inv, policy)))
    kp = _kv_placement(host, inv, req, ns, policy, feats, ea, dd)
    tmpfs = _offload_mount(kp, ea, warnings)
    _pinned_share(host, inv, kp, warnings)
    checks = preflight.run(
        host,
        inv,
        policy,
        ns,
        pins=ea.pins,
        kv_bytes=ea.kv_bytes if dd is None else None,  # a devdax KV is not on a NUMA node
        shm_bytes=ea.shm_bytes,
        kv_tmpfs=tmpfs,
        engine=req.engine,
        cpu_kv=ea.kv_bytes // ea.ranks if feats is not None and feats.backend == "cpu" and ea.kv_bytes else None,
    )
    if dd is not None:
        status, message, fix = devdax_mod.node_check(host, dd)
        checks.append(preflight.Check("devdax", status, message, fix))
    numactl, method, argv = _exec_argv(policy, ea, environ, notes)
    ra = _run_as(req, environ, warnings)  # after the engine's own checks: their errors name their fixes first
    added = _env_added(req, ns, ea, policy, environ, warnings)
    added.update(runas.env_for(ra))
    env = {k: v for k, v in environ.items() if k not in ea.env_unset}
    env.update(added)
    if not host.live:
        notes.append(f"node sets come from the tree {host.root}; the policy applies to the running kernel")
    return LaunchPlan(
        request=req,
        inventory=inv,
        nodesets=ns,
        policy=policy,
        weights=w.plan,
        features=feats,
        engine=ea,
        kv=kv,
        model=model,
        tokens=toks,
        numactl=numactl,
        method=method,
        argv=argv,
        env_added=added,
        env=env,
        tmpfs=tmpfs,
        equivalent=_equivalent(policy, ea, added, tmpfs, ra),
        checks=tuple(checks),
        notes=tuple(notes) + ea.notes,
        warnings=tuple(warnings) + ea.warnings,
        wi_users=w.users,
        devdax=dd,
        mooncake_version=mc_version,
        placement=kp,
        run_as=ra,
    )


def execute(host: Host, lp: LaunchPlan) -> None:
    """Change the host as planned and exec the engine; returns only by raising."""
    from .policy import apply_in_process, get_mempolicy, unshare_shm
    from .runas import check, drop

    if lp.failed:
        raise CxlctlError(
            f"pre-flight failed ({len(lp.failed)} problem(s)); nothing was launched",
            hint="the lines above name each fix",
        )
    if lp.run_as is not None:
        check(lp.run_as)
    policy = lp.policy
    weights_set = False
    if lp.weights is not None and lp.weights.writes:
        got = sysweights.apply(host, lp.weights)
        weights_set = True
        policy = policy._replace(weights=tuple(sorted(got.items())))
        lp.env["CXLCTL_POLICY"] = policy.env_value()
    try:
        if lp.tmpfs is not None:
            unshare_shm(*lp.tmpfs)
        if lp.method == "direct":
            apply_in_process(policy)
            mode, nodes = get_mempolicy()
            # kernels before MPOL_LOCAL was a mode of its own report it as preferred with no node
            same = mode == policy.mode or (policy.mode == "local" and mode == "preferred" and not nodes)
            if not same or (policy.mode != "local" and nodes != policy.nodes):
                raise CxlctlError(
                    f"the kernel reports policy {mode} over {format_nodelist(nodes) or '-'} after setting {policy.mode}",
                    hint="report this; nothing was launched",
                )
        # last: the mount needed CAP_SYS_ADMIN; the policy and affinity are per task and stay
        if lp.run_as is not None:
            drop(lp.run_as)
    except CxlctlError as e:
        if weights_set:
            e.hint = (
                e.hint + "; " if e.hint else ""
            ) + "the weights set for this launch stay (journaled): `cxlctl tune revert` restores them"
        raise
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(lp.argv[0], list(lp.argv), lp.env)
    except OSError as e:
        raise CxlctlError(
            f"cannot exec {lp.argv[0]}: {e.strerror}",
            hint="check the program path and its permissions"
            + (f" (it runs as {lp.run_as.user})" if lp.run_as is not None and lp.run_as.drop else ""),
        ) from None


def to_json(lp: LaunchPlan, dry_run: bool) -> Dict[str, Any]:
    ns = lp.nodesets
    return {
        "schema_version": 1,
        "dry_run": dry_run,
        "engine": {
            "name": lp.request.engine,
            "version": lp.features.version if lp.features else None,
            "flags_source": lp.features.source if lp.features else None,
            "added": list(lp.engine.added),
            "dropped": list(lp.engine.dropped),
            "backend": lp.features.backend if lp.features else None,
            "placement": {"decided_by": lp.engine.placement[0], "how": lp.engine.placement[1]},
        },
        "nodes": {
            "cpu": list(ns.cpu_nodes),
            "memory": list(ns.mem_nodes),
            "dram": list(ns.dram),
            "cxl": list(ns.cxl),
            "gpus": [{"index": g.ordinal, "pci": g.bdf, "node": g.numa_node} for g in ns.gpus],
            "how": list(ns.how),
        },
        "policy": {
            "mode": lp.policy.mode,
            "nodes": list(lp.policy.nodes),
            "cpu_nodes": list(lp.policy.cpu_nodes),
            "cpus": list(lp.policy.cpus),
            "weights": {str(n): w for n, w in lp.policy.weights},
            "method": lp.method,
        },
        "weights": _weights_json(lp),
        "kv": _kv_json(lp),
        "kv_offload": _kv_offload_json(lp),
        "devdax": _devdax_json(lp),
        "tmpfs": None
        if lp.tmpfs is None
        else {
            "size": lp.tmpfs[0],
            "nodes": list(lp.tmpfs[1]),
            "mpol": lp.tmpfs[2],
            "options": tmpfs_options(*lp.tmpfs),
            "flags": list(TMPFS_FLAGS),
        },
        "run_as": lp.run_as.to_json() if lp.run_as is not None else None,
        "argv": list(lp.argv),
        "env": dict(sorted(lp.env_added.items())),
        "env_unset": list(lp.engine.env_unset),
        "numactl_command": lp.equivalent,
        "numactl": {"path": lp.numactl.path, "supports_policy": lp.numactl.supports(lp.policy.mode)},
        "checks": [c._asdict() for c in lp.checks],
        "ok": not lp.failed,
        "notes": list(lp.notes),
        "warnings": list(lp.warnings),
    }


def _weights_json(lp: LaunchPlan) -> Optional[Dict[str, Any]]:
    wp = lp.weights
    if wp is None:
        return None
    return {
        "source": wp.source,
        "current": {str(n): w for n, w in sorted(wp.current.items())},
        # null: the kernel's auto mode computes them when the apply switches auto on
        "launch": {str(n): w for n, w in sorted(wp.weights.items())} if wp.weights else None,
        "changes": [{"setting": s, "from": a, "to": b} for s, a, b in wp.changes],
        "system_wide": True,
        "journaled": wp.writes,
        "undo": "cxlctl tune revert" if wp.writes else None,
        "includes_profile": wp.base,
        "weighted_interleave_users": [{"pid": p, "name": n} for p, n in lp.wi_users],
    }


def _kv_json(lp: LaunchPlan) -> Optional[Dict[str, Any]]:
    if lp.engine.kv_bytes is None:
        return None
    return {
        "bytes": lp.engine.kv_bytes,
        "auto": bool(lp.kv and lp.kv.auto),
        "free_cxl": lp.kv.free_cxl if lp.kv else None,
        "reserve": lp.kv.reserve if lp.kv else None,
        # auto on the CXL tier: the engine's other memory its policy puts there (kept free too)
        "others_on_cxl": lp.kv.others_on_cxl if lp.kv else None,
        # auto on vLLM's CPU backend: the worker's node and what vLLM counts available there
        "worker_node": lp.kv.worker_node if lp.kv else None,
        "available": lp.kv.available if lp.kv else None,
        "ranks": lp.engine.ranks,
        "bytes_per_token": lp.model.bytes_per_token if lp.model else None,
        "tokens": lp.tokens,
        "model_config": lp.model.source if lp.model else None,
    }


def _kv_offload_json(lp: LaunchPlan) -> Optional[Dict[str, Any]]:
    """Where the KV offload lands: ``expected_bytes_per_node`` and what decides it (kvplace)."""
    kp = lp.placement
    if kp is None:
        return None
    return {
        "bytes": _offload_bytes(lp.engine),
        "mechanism": kp.mechanism,
        "decided_by": kp.decided_by,
        "nodes": list(kp.nodes),
        "expected_bytes_per_node": {str(n): b for n, b in sorted(kp.expected.items())},
        "spill_bytes_per_node": {str(n): b for n, b in sorted(kp.spill.items())},
        "over_share_bytes_per_node": {str(n): b for n, b in sorted(kp.over_share.items())},
        "unplaced_bytes": kp.unplaced,
        "on_cxl": kp.on_cxl,
        "why_not_on_cxl": kp.why_not,
        "fix": kp.fix,
        "pinned": kp.pinned,
        "before_pin_bytes_per_node": {str(n): b for n, b in sorted(kp.before_pin.items())} if kp.pinned else None,
        "pin_moved_bytes_per_node": {str(n): b for n, b in sorted(kp.pin_moved.items())} if kp.pinned else None,
    }


def _devdax_json(lp: LaunchPlan) -> Optional[Dict[str, Any]]:
    if lp.devdax is None:
        return None
    return {
        "device": lp.devdax.name,
        "path": lp.devdax.path,
        "device_size": lp.devdax.device_size,
        "size": lp.devdax.size,
        "align": lp.devdax.align,
        "offset": lp.devdax.offset,
        "pool_id": lp.devdax.pool_id,
        "region": lp.devdax.region,
        "backend": "lmcache" if lp.request.engine == "lmcache" else "mooncake",
        "mooncake_version": lp.mooncake_version,
    }
