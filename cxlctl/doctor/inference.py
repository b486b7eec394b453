"""Inference readiness (``doctor --for vllm|sglang``): would ``cxlctl launch`` put the engine's KV on CXL?

Pure over what :func:`.gather.gather` planned: the launcher's own dry-run
plan (:func:`cxlctl.launch.build.build`: node sets, KV size, engine flags and
its pre-flight checks -- /dev/shm, memlock, cpuset, ZONE_MOVABLE), plus the
THP setting and this process' memlock limit read from procfs/sysfs.  Reusing
the launcher's plan is the point: doctor must say what a launch would meet,
not a second opinion of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from cxlctl.hostio import paths
from cxlctl.parse import format_nodelist, format_size, is_decimal, parse_nodelist, selected_word

from .model import CANNOT, FAIL, NOTE, OK, WARN, Check, Evidence, Facts, Result
from .probes import LOCALALLOC, key

if TYPE_CHECKING:
    from cxlctl.launch.build import LaunchPlan
    from cxlctl.launch.engines import Features
    from cxlctl.launch.preflight import Status

LAYER = "Inference readiness"


def check(f: Facts) -> List[Check]:
    """One check per thing a launch would meet: the engine, the flags and policy cxlctl would
    use, the launcher's own pre-flight checks, memlock, transparent hugepages."""
    if f.engine is None:
        return []
    from cxlctl.launch.build import LaunchPlan  # the launcher (ctypes, shutil...) only with --for

    lp = f.launch
    if not isinstance(lp, LaunchPlan):
        return [
            Check(
                LAYER,
                "inference.plan",
                CANNOT,
                f"cxlctl launch {f.engine} --dry-run cannot plan: {lp}",
                (Evidence(f"cxlctl launch {f.engine} --dry-run", str(lp)[:120]),),
            ),
            _seccomp(f),
        ] + _opt(_numa_env(f))
    out: List[Check] = []
    if f.launch_note:
        out.append(
            Check(
                LAYER,
                "inference.kv-auto",
                WARN,
                f"--kv-size auto cannot be planned ({f.launch_note}); the checks below plan without --kv-size",
                (Evidence(f"cxlctl launch {f.engine} --dry-run --kv-size auto", f.launch_note[:120]),),
                "give --kv-size at launch, or free memory on the CXL node(s)",
            )
        )
    if lp.features is not None:
        out.append(_engine(f.engine, lp.features))
    out.append(_flags(f.engine, lp))
    pre = _preflight(f, lp)
    out += pre
    names = {c.name for c in lp.checks}
    ea = lp.engine
    if ea.shm_bytes is None and "dev-shm" not in names and f.engine == "vllm":
        out.append(
            Check(
                LAYER,
                "inference.dev-shm",
                NOTE,
                "no /dev/shm offload planned, so /dev/shm size does not matter here",
                (Evidence(paths.DEV_SHM, "not used"),),
            )
        )
    if "memlock" not in names:
        out.append(_memlock(f, lp))
    out.append(_thp(f.thp))
    out.append(_placement(f, lp))
    out += _opt(_pinned_kv(f, lp))
    out += _opt(_cpuset_gpu(f, lp))
    out.append(_seccomp(f))
    out += _opt(_numa_env(f))
    return out


def _pinned_kv(f: Facts, lp: LaunchPlan) -> Optional[Check]:
    """An engine that long-term pins its KV offload (vLLM on a GPU: cudaHostRegister) against the CXL
    nodes' pinnable (kernel zone) and lendable (ZONE_MOVABLE) memory (capacity/pinnable.py)."""
    from cxlctl.capacity import pinnable

    kp = lp.placement
    if kp is None or not kp.pinned:
        return None
    z = pinnable.zones(f.inv, kp.nodes)
    split = "; ".join(
        f"node {n}: {format_size(v.pinnable)} pinnable (kernel zone), {format_size(v.lendable)} lendable (ZONE_MOVABLE)"
        for n, v in sorted(z.items())
    )
    ev = tuple(Evidence(f"/sys/devices/system/node/node{n}/memory*/valid_zones", split) for n in sorted(z)[:1])
    if kp.pin_moved and not kp.on_cxl:
        moved = ", ".join(f"node {n} {format_size(b)}" for n, b in sorted(kp.expected.items()))
        return Check(
            LAYER,
            "inference.pinned-kv",
            WARN,
            f"{f.engine} long-term pins its KV offload (cudaHostRegister), and the CXL memory it would use is "
            f"movable ({split}): mm/gup.c migrates the pinned pages to a kernel zone, ending at {moved}; "
            "`cxlctl launch` refuses this unless --allow-unpinnable",
            ev,
            pinnable.NORMAL_FIX,
        )
    return Check(
        LAYER,
        "inference.pinned-kv",
        OK,
        f"{f.engine} long-term pins its KV offload, and its CXL node(s) hold it in a kernel zone ({split})",
        ev,
    )


def _opt(c: Optional[Check]) -> List[Check]:
    return [] if c is None else [c]


def _engine(engine: str, feats: Features) -> Check:
    """Whether the engine is installed and its flags could be read (what the plan's flags rest on)."""
    if feats.source == "assumed":
        ev = (Evidence(f"which {engine}", "not on PATH"),)
    else:
        ev = (Evidence(f"{engine} --version", feats.version or "unknown"),)
    if feats.source == "assumed":
        return Check(
            LAYER,
            "inference.engine",
            WARN,
            f"{engine} is not installed here ({feats.error}); flags below are those of {engine} {feats.version} or later",
            ev,
            f"install {engine} in this environment (or give cxlctl launch --engine-cmd)",
        )
    if feats.source == "unavailable":
        return Check(
            LAYER,
            "inference.engine",
            WARN,
            f"{engine} {feats.version or ''}: its flags could not be read ({feats.error}); cxlctl would pass arguments through unchanged",
            ev,
        )
    return Check(
        LAYER,
        "inference.engine",
        OK,
        f"{engine} {feats.version or '(version unknown)'}: {len(feats.flags)} flags",
        ev,
    )


def _flags(engine: str, lp: LaunchPlan) -> Check:
    """The policy, KV size, flags and environment the launch would use."""
    ea = lp.engine
    kv = f"KV offload {format_size(ea.kv_bytes)}" if ea.kv_bytes else "no KV offload (no free CXL memory to size it)"
    flags = " ".join(ea.added) or "none"
    env = " ".join(f"{k}={v}" for k, v in sorted(lp.env_added.items()))
    return Check(
        LAYER,
        "inference.flags",
        NOTE,
        f"cxlctl launch {engine} would use policy {lp.policy.mode} over node(s) {','.join(str(n) for n in lp.policy.nodes) or '-'}; {kv}; adds: {flags}",
        (Evidence("cxlctl launch --dry-run", lp.equivalent),) + ((Evidence("environment", env),) if env else ()),
    )


#: a pre-flight status as a doctor result (the same words, one more: cannot-check)
_RESULT_OF: Dict[Status, Result] = {"ok": OK, "note": NOTE, "warn": WARN, "fail": FAIL}


def _preflight(f: Facts, lp: LaunchPlan) -> List[Check]:
    """The launcher's own pre-flight checks, each as a doctor check with where its evidence is."""
    out: List[Check] = []
    for c in lp.checks:
        res = _RESULT_OF[c.status]
        src = {
            "dev-shm": paths.DEV_SHM,
            "memlock": "ulimit -l",
            "cpuset-mems": paths.SELF_STATUS,
            "cpuset": paths.SELF_STATUS,
            "zone-movable": paths.MEMORY_DIR,
        }.get(c.name, "cxlctl launch --dry-run")
        value = (
            f"Mems_allowed_list {f.mems_allowed}"
            if src == paths.SELF_STATUS and f.mems_allowed
            else f"pre-flight {c.name}: {c.status}"
        )
        out.append(Check(LAYER, f"inference.{c.name}", res, c.message, (Evidence(src, value),), c.fix))
    return out


def _limit(value: str) -> str:
    """A limit of /proc/self/limits (bytes, or ``unlimited``) in the IEC units sizes are shown in."""
    return format_size(int(value)) if is_decimal(value) else value


def _memlock(f: Facts, lp: LaunchPlan) -> Check:
    ml = f.memlock
    shown = f"soft {_limit(ml[0])}, hard {_limit(ml[1])}" if ml else "unreadable"
    ea = lp.engine
    return Check(
        LAYER,
        "inference.memlock",
        OK if ml else CANNOT,
        f"memlock limit: {shown}" + ("" if ea.pins and ea.kv_bytes else " (the engine pins no KV here)"),
        (Evidence(paths.SELF_LIMITS, shown),),
    )


def _thp(thp: Optional[str]) -> Check:
    if thp is None:
        return Check(
            LAYER,
            "inference.thp",
            CANNOT,
            "transparent hugepages setting unreadable",
            (Evidence(paths.THP_ENABLED, "unreadable"),),
        )
    sel = selected_word(thp)
    if sel == "never":
        return Check(
            LAYER,
            "inference.thp",
            NOTE,
            "transparent hugepages are off: large KV and weight buffers pay 4 KiB TLB misses, on CXL too",
            (Evidence(paths.THP_ENABLED, thp),),
            f"echo madvise > {paths.THP_ENABLED}",
        )
    return Check(LAYER, "inference.thp", OK, f"transparent hugepages: {sel}", (Evidence(paths.THP_ENABLED, thp),))


#: the release whose scheduler probes ``numactl`` before exec'ing it and falls back (membind → preferred →
#: CPU only) instead of dying with exit 1 and no traceback (sglang issue 27368, fixed by PR 28401; in 0.5.23)
SGLANG_NUMACTL_FALLBACK_SINCE = (0, 5, 23)
#: what a container runtime's default seccomp profile needs to let the memory-policy syscalls through
SECCOMP_FIX = (
    "docker/podman: --cap-add SYS_NICE (the default seccomp profile allows get_mempolicy, set_mempolicy and mbind "
    "only with it), or a --security-opt seccomp=PROFILE that allows them; Kubernetes: securityContext.capabilities."
    "add: [SYS_NICE]"
)


def _placement(f: Facts, lp: LaunchPlan) -> Check:
    """Who would place the engine's KV memory (the plan's ``placement``), and whether that keeps it off CXL."""
    who, how = lp.engine.placement
    cxl = [n.id for n in f.inv.nodes if n.kind == "cxl" and (n.mem_total or 0) > 0]
    ev = (Evidence("cxlctl launch --dry-run", f"placement decided by {who}: {how}"),)
    args = " ".join(f.engine_args)
    if who == "cxlctl":
        dropped = " ".join(lp.engine.dropped)
        return Check(
            LAYER,
            "inference.placement",
            OK,
            f"cxlctl's policy places the engine's memory: {how}"
            + (f" (cxlctl drops {dropped}: it would replace the policy)" if dropped else ""),
            ev,
        )
    if who == "engine":
        return Check(
            LAYER,
            "inference.placement",
            WARN,
            f"the engine's own NUMA binding replaces cxlctl's policy ({how}): the KV cache lands on the node the "
            "engine binds to — DRAM only" + (f", never on CXL node(s) {format_nodelist(cxl)}" if cxl else ""),
            ev + ((Evidence("engine arguments", args),) if args else ()),
            "drop --numa-node (SGLang) or --keep-numa-bind (vLLM): cxlctl binds CPUs and memory itself",
        )
    return Check(  # both: vLLM's CPU backend
        LAYER,
        "inference.placement",
        WARN if cxl else NOTE,
        f"{how}" + (f": the KV cache is on DRAM, never on CXL node(s) {format_nodelist(cxl)}" if cxl else ""),
        ev,
        "on vLLM's CPU backend the KV cache follows the workers' CPUs; a GPU build offloads it to CXL" if cxl else "",
    )


def _allowed(f: Facts) -> Optional[List[int]]:
    try:
        return list(parse_nodelist(f.mems_allowed, limit=1 << 16)) if f.mems_allowed else None
    except ValueError:
        return None


def _sglang_version(lp: LaunchPlan) -> Optional[Tuple[int, ...]]:
    from cxlctl.launch.engine_args import version_tuple

    return version_tuple(lp.features.version) if lp.features is not None else None


def _cpuset_gpu(f: Facts, lp: LaunchPlan) -> Optional[Check]:
    """A cpuset that excludes a GPU's NUMA node: the engine's own binding to that node is refused."""
    gpus = [g for g in lp.nodesets.gpus if g.numa_node is not None and g.numa_node >= 0]
    gpu_nodes = sorted({g.numa_node for g in gpus if g.numa_node is not None})
    allowed = _allowed(f)
    if not gpus or allowed is None:
        return None
    out = [n for n in gpu_nodes if n not in allowed]
    ev = (Evidence(paths.SELF_STATUS, f"Mems_allowed_list {f.mems_allowed}"),) + tuple(
        Evidence(f"/sys/bus/pci/devices/{g.bdf}/numa_node", str(g.numa_node)) for g in gpus
    )
    if not out:
        return Check(
            LAYER,
            "inference.cpuset-gpu",
            OK,
            f"the GPUs' node(s) {format_nodelist(gpu_nodes)} are in this cpuset (Mems_allowed_list {f.mems_allowed})",
            ev,
        )
    nodes = format_nodelist(out)
    ver = _sglang_version(lp) if f.engine == "sglang" else None
    if f.engine == "sglang" and ver is not None and ver < SGLANG_NUMACTL_FALLBACK_SINCE:
        engine_says = (
            f"SGLang {lp.features.version if lp.features else ''}'s scheduler, wrapped in numactl --membind={out[0]} "
            "(SGLANG_NUMA_BIND_V2), dies at start-up with exit 1 and no traceback (sglang issue 27368; the fallback "
            "of PR 28401 is in 0.5.23)"
        )
    elif f.engine == "sglang":
        engine_says = (
            "SGLang's scheduler binding to the GPU's node (numactl --membind) is refused with EINVAL; 0.5.23 falls "
            "back to --preferred, then to CPUs only (PR 28401), an older SGLang dies at start-up (issue 27368)"
        )
    else:
        engine_says = (
            "vLLM's --numa-bind (numactl --membind=<the GPU's node>) is refused with EINVAL; 0.32.0 falls back to "
            "binding CPUs only (vllm/utils/numa_utils.py _resolve_numactl_args)"
        )
    return Check(
        LAYER,
        "inference.cpuset-gpu",
        FAIL,
        f"this cpuset (Mems_allowed_list {f.mems_allowed}) excludes node(s) {nodes} of the GPUs in use: no memory "
        f"near the GPU can be used, and {engine_says}",
        ev,
        f"add node(s) {nodes} to the cgroup's cpuset.mems (systemd AllowedMemoryNodes=, docker --cpuset-mems)",
    )


def _seccomp(f: Facts) -> Check:
    """Whether this process may set a memory policy: ``numactl --localalloc true`` runs set_mempolicy(2)."""
    seccomp = (f.seccomp or "").strip() or None
    where = Evidence(paths.SELF_STATUS, f"Seccomp {seccomp}" if seccomp is not None else "no Seccomp line")
    probe = (f.probes or {}).get(key(LOCALALLOC))
    cmd = key(LOCALALLOC)
    if probe is not None and probe.rc == 0:
        return Check(
            LAYER,
            "inference.seccomp",
            OK,
            f"set_mempolicy is allowed (`{cmd}` ran" + (", through a seccomp filter)" if seccomp == "2" else ")"),
            (where, Evidence(cmd, "exit 0")),
        )
    if probe is not None and probe.rc is not None:
        said = probe.out.strip().splitlines()
        blocked = "Operation not permitted" in probe.out
        return Check(
            LAYER,
            "inference.seccomp",
            FAIL if blocked else WARN,
            (
                "set_mempolicy is refused (EPERM"
                + (", a seccomp filter is on" if seccomp == "2" else "")
                + "): cxlctl launch cannot set the memory policy (numactl and cxlctl's own set_mempolicy fail before "
                "the engine starts); SGLang's scheduler binding falls back to CPUs only or, before 0.5.23, dies "
                "(sglang issue 27368); vLLM's CPU worker cannot bind its memory"
            )
            if blocked
            else f"`{cmd}` failed (exit {probe.rc}): {said[-1] if said else 'no output'}",
            (where, Evidence(cmd, f"exit {probe.rc}: {' / '.join(said[-2:])}")),
            SECCOMP_FIX if blocked else "",
        )
    why = "numactl is not installed" if probe is not None else "its answer was not recorded"
    if seccomp == "0":
        return Check(
            LAYER, "inference.seccomp", OK, "no seccomp filter (Seccomp 0): set_mempolicy is not filtered", (where,)
        )
    if seccomp == "2":
        return Check(
            LAYER,
            "inference.seccomp",
            WARN,
            f"a seccomp filter is on (Seccomp 2) and whether it lets set_mempolicy through is unknown ({why}): "
            "a container's default profile refuses it without CAP_SYS_NICE",
            (where,),
            f"install numactl and run doctor again (it probes `{cmd}`); {SECCOMP_FIX}",
        )
    return Check(
        LAYER,
        "inference.seccomp",
        CANNOT,
        f"cannot tell whether set_mempolicy is allowed: Seccomp {seccomp or 'unreadable'}, and {why}",
        (where,),
    )


def _truthy(v: str) -> bool:
    """How SGLang's EnvBool reads a variable (srt/environ.py, 0.5.23): true/1/yes/y/on, any case."""
    return v.strip().lower() in ("true", "1", "yes", "y", "on")


def _numa_env(f: Facts) -> Optional[Check]:
    """SGLang's own NUMA switches in this environment, against what cxlctl launch sets."""
    if f.engine != "sglang":
        return None
    env = dict(f.numa_env)
    ev = tuple(Evidence("environment", f"{k}={v}") for k, v in f.numa_env) or (
        Evidence("environment", "no SGLANG_*NUMA* variable"),
    )
    numa_node = "--numa-node" in f.engine_args
    v2 = _truthy(env.get("SGLANG_NUMA_BIND_V2", "true"))
    crash = _truthy(env.get("SGLANG_CRASH_ON_NUMA_BIND_FAILURE", "false"))
    how = (
        "each scheduler is exec'd under numactl --cpunodebind=N --membind=N (SGLANG_NUMA_BIND_V2 on)"
        if v2
        else "each scheduler calls numa_set_preferred(N) itself (SGLANG_NUMA_BIND_V2=0)"
    )
    parts: List[str] = []
    result: Result = OK
    fix = ""
    if numa_node:
        result = WARN
        parts.append(
            "--numa-node wins over SGLANG_AUTO_NUMA_BIND=0, which cxlctl launch sets (precedence --numa-node > "
            "SGLANG_AUTO_NUMA_BIND > the GPU's node, get_numa_node_if_available in srt/utils/numa_utils.py; 0.5.23 "
            f"has no --disable-hicache-numa-detect): {how}, replacing cxlctl's policy"
        )
        fix = "drop --numa-node: cxlctl launch binds the schedulers' CPUs and memory"
    auto = env.get("SGLANG_AUTO_NUMA_BIND")
    if auto is not None and _truthy(auto):
        parts.append(
            f"SGLANG_AUTO_NUMA_BIND={auto} here: cxlctl launch replaces it with 0; SGLang started without cxlctl "
            f"binds each scheduler to its GPU's node ({how}), so the KV host pool is on DRAM only"
        )
        result = WARN if result == OK else result
    elif auto is None and not numa_node:
        parts.append(
            "SGLANG_AUTO_NUMA_BIND is unset (SGLang 0.5.18+ defaults it to true): cxlctl launch sets it to 0, so "
            "SGLang's own binding stays off and the schedulers inherit cxlctl's policy"
        )
    else:
        parts.append(f"SGLANG_AUTO_NUMA_BIND={auto}: SGLang's automatic binding is off, as cxlctl launch sets it")
    if crash and numa_node:
        parts.append(
            "SGLANG_CRASH_ON_NUMA_BIND_FAILURE is on: a binding numactl refuses (a cpuset without the node, seccomp) "
            "kills the scheduler at start-up instead of falling back"
        )
        allowed = _allowed(f)
        seccomp_blocked = any(c.id == "inference.seccomp" and c.result == FAIL for c in [_seccomp(f)])
        if seccomp_blocked or (allowed is not None and any(n not in allowed for n in _numa_nodes(f.engine_args))):
            result = FAIL
    return Check(LAYER, "inference.numa-env", result, "; ".join(parts), ev, fix)


def _numa_nodes(args: Tuple[str, ...]) -> List[int]:
    """The node numbers after SGLang's --numa-node (one per GPU)."""
    out: List[int] = []
    if "--numa-node" in args:
        for a in args[list(args).index("--numa-node") + 1 :]:
            if not is_decimal(a):
                break
            out.append(int(a))
    return out
