"""Inference readiness (``doctor --for vllm|sglang``): would ``cxlctl launch`` put the engine's KV on CXL?

Pure over what :func:`.gather.gather` planned: the launcher's own dry-run
plan (:func:`cxlctl.launch.build.build`: node sets, KV size, engine flags and
its pre-flight checks -- /dev/shm, memlock, cpuset, ZONE_MOVABLE), plus the
THP setting and this process' memlock limit read from procfs/sysfs.  Reusing
the launcher's plan is the point: doctor must say what a launch would meet,
not a second opinion of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional

from cxlctl.hostio import paths
from cxlctl.parse import format_size

from .model import CANNOT, FAIL, NOTE, OK, WARN, Check, Evidence, Facts, Result

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
            )
        ]
    out: List[Check] = []
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
    return out


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


def _memlock(f: Facts, lp: LaunchPlan) -> Check:
    ml = f.memlock
    shown = f"soft {ml[0]}, hard {ml[1]}" if ml else "unreadable"
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
    sel = thp[thp.find("[") + 1 : thp.find("]")] if "[" in thp and "]" in thp else thp
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
