"""``cxlctl policy show PID``: where a process' memory really is, and whether that is what was asked.

Sources (all under ``--root``):

* ``/proc/PID/status``: ``Mems_allowed_list`` / ``Cpus_allowed_list`` (the cpuset);
* ``/proc/PID/numa_maps``: one line per mapping with the policy in effect for
  it — the task policy unless the mapping has its own — and the pages on each
  node, ``N<node>=<pages>`` (``kernelpagesize_kB`` gives their size);
* ``/proc/PID/environ``: ``CXLCTL_POLICY``, which ``cxlctl launch`` exports to
  the engine, is what was asked.  A process whose own ``environ`` has none is
  judged by its nearest ancestor's (``PPid`` in ``/proc/PID/status``): a child
  inherits the policy with the environment, and a process title written over
  the environment block (``setproctitle``: vLLM's ``VLLM::EngineCore`` and
  ``VLLM::Worker``) leaves ``/proc/PID/environ`` blank although the variables
  are still in the process' environment.

The process' policy is the one most of its mappings show.  The placement is
judged on anonymous memory (heap, stack, anonymous mappings): file pages —
shared libraries, model weights in the page cache — were placed by whoever
read them first, not by this process' policy.  Rules: ``bind``: no page
outside the nodes; ``interleave``/``weighted-interleave``: each node's share
within ±10 % of its weight's share (judged from 256 pages on).  ``kv_offload`` sums the pages of
the engine's KV offload files in ``/dev/shm`` (placed by their tmpfs' ``mpol=``, not by this
process' policy): what ``cxlctl launch``'s ``kv_offload.expected_bytes_per_node`` predicted.
"""

from __future__ import annotations

import errno
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

from cxlctl.errors import CxlctlError, UsageError
from cxlctl.hostio import paths
from cxlctl.hostio.host import Host
from cxlctl.hostio.proc import status_field
from cxlctl.hostio.reader import Reader, Unreadable
from cxlctl.hostio.root import under
from cxlctl.numa_maps import SHM_PREFIX, Mapping, is_kv_file, parse_mappings, parse_policy
from cxlctl.parse import format_nodelist, is_decimal, parse_nodelist

from .policy import Asked, parse_env_value

TOLERANCE = 0.10
MIN_PAGES = 256
WI_DIR = paths.WI_DIR


def _proc_file(r: Reader, path: str, pid: int) -> str:
    """A file of process ``pid`` that must be there; messages name it under --root, as the user gave it."""
    try:
        b = r.read(path, limit=64 << 20)
    except Unreadable as e:
        if e.errno == errno.ESRCH:
            raise UsageError(f"process {pid} exited", hint="check the PID (ps, pgrep)") from None
        hint = "run as root or as the process' owner" if e.errno == errno.EACCES else ""
        raise CxlctlError(str(e), hint=hint) from None
    if b is None:
        raise UsageError(
            f"no process with PID {pid} ({under(r.root, path)} does not exist)", hint="check the PID (ps, pgrep)"
        )
    return b.decode("utf-8", "replace")


def _environ(r: Reader, pid: int) -> Optional[str]:
    data = r.body(paths.proc_pid(pid, "environ"))
    for item in (data or "").split("\0"):
        if item.startswith("CXLCTL_POLICY="):
            return item[len("CXLCTL_POLICY=") :]
    return None


#: ancestors looked at for an inherited CXLCTL_POLICY (an engine's process tree is a few levels deep)
MAX_ANCESTORS = 32


def _asked_env(r: Reader, pid: int, status: str) -> Tuple[Optional[str], Optional[Tuple[int, str]]]:
    """(CXLCTL_POLICY, None) from the process' own environment, else (its nearest ancestor's, (PID, name))."""
    env = _environ(r, pid)
    if env is not None:
        return env, None
    seen = {pid}
    ppid = status_field(status, "PPid") or ""
    for _ in range(MAX_ANCESTORS):
        if not is_decimal(ppid) or int(ppid) <= 1 or int(ppid) in seen:
            break
        anc = int(ppid)
        seen.add(anc)
        st = r.body(paths.proc_pid(anc, "status"))
        if st is None:
            break
        env = _environ(r, anc)
        if env is not None:
            return env, (anc, status_field(st, "Name") or "?")
        ppid = status_field(st, "PPid") or ""
    return None, None


def _node_cpus(r: Reader, nodes: Tuple[int, ...]) -> Optional[set[int]]:
    out: set[int] = set()
    for n in nodes:
        text = r.body(paths.node_dir(n) + "/cpulist")
        if text is None:
            return None
        try:
            out.update(parse_nodelist(text, limit=1 << 16))
        except ValueError:
            return None
    return out


def _sys_weights(r: Reader, nodes: Tuple[int, ...]) -> Dict[int, int]:
    out = {}
    for n in nodes:
        v = (r.body(f"{WI_DIR}/node{n}") or "").strip()
        if is_decimal(v):
            out[n] = int(v)
    return out


def _sum(maps: List[Mapping], kinds: Optional[Tuple[str, ...]]) -> Dict[int, int]:
    tot: Dict[int, int] = {}
    for m in maps:
        if kinds is not None and m.kind not in kinds:
            continue
        for n, p in m.pages.items():
            tot[n] = tot.get(n, 0) + p * m.page_kb // 4
    return dict(sorted(tot.items()))


ANON = ("anon", "heap", "stack")


def _check(name: str, ok: Optional[bool], detail: str) -> Dict[str, Any]:
    """One row of the report's ``checks``: ok None is information, not a verdict."""
    return {"check": name, "status": "info" if ok is None else ("pass" if ok else "fail"), "detail": detail}


def _policy_checks(
    r: Reader, asked: Asked, mode: str, nodes: Tuple[int, ...], mems: Tuple[int, ...], cpus: Tuple[int, ...]
) -> List[Dict[str, Any]]:
    """The process' policy, cpuset and CPUs against what the launch asked for."""
    out = [_check("mode", mode == asked.mode, f"asked {asked.mode}, the process has {mode}")]
    if asked.mode != "local":
        out.append(
            _check(
                "nodes",
                nodes == asked.nodes,
                f"asked node(s) {format_nodelist(asked.nodes) or '-'}, the policy has {format_nodelist(nodes) or '-'}",
            )
        )
    outside_mems = [n for n in asked.nodes if n not in mems]
    out.append(
        _check(
            "cpuset",
            not outside_mems,
            f"Mems_allowed_list {format_nodelist(mems)}"
            + (f" excludes {format_nodelist(outside_mems)}" if outside_mems else ""),
        )
    )
    want_cpus = _node_cpus(r, asked.cpu_nodes)
    if want_cpus is not None and asked.cpu_nodes:
        extra = sorted(set(cpus) - want_cpus)
        out.append(
            _check(
                "cpus",
                not extra,
                f"Cpus_allowed_list {format_nodelist(cpus)}; CPUs of node(s) {format_nodelist(asked.cpu_nodes)}: {format_nodelist(sorted(want_cpus))}",
            )
        )
    return out


def _interleave_checks(r: Reader, asked: Asked, on: Dict[int, int], inside: int) -> List[Dict[str, Any]]:
    """Each node's share of the anonymous pages against its (weighted) interleave share."""
    a_mode, a_nodes, a_w = asked.mode, asked.nodes, asked.weights
    out: List[Dict[str, Any]] = []
    w = {n: (a_w.get(n, 1) if a_mode == "weighted-interleave" else 1) for n in a_nodes}
    tw = sum(w.values())
    shares = ", ".join(
        f"node{n} {on[n]} pages = {on[n] / inside:.1%} (weight {w[n]}/{tw} = {w[n] / tw:.1%})"
        if inside
        else f"node{n} 0 pages"
        for n in a_nodes
    )
    if inside < MIN_PAGES:
        out.append(_check("placement", None, f"too few anonymous pages to judge ({inside} < {MIN_PAGES}): {shares}"))
    else:
        ok = all(abs((on[n] / inside) / (w[n] / tw) - 1) <= TOLERANCE for n in a_nodes)
        out.append(
            _check(
                "placement",
                ok,
                f"{shares}; each within ±{TOLERANCE:.0%} of its weight's share: {'yes' if ok else 'no'}",
            )
        )
    if a_mode == "weighted-interleave":
        now = _sys_weights(r, a_nodes)
        if now and any(now.get(n) != a_w.get(n) for n in a_nodes if n in a_w):
            out.append(
                _check(
                    "weights",
                    None,
                    "the system-wide weights changed since the launch: now "
                    + " ".join(f"node{n}={x}" for n, x in sorted(now.items()))
                    + "; pages allocated from now on follow them",
                )
            )
    return out


def _placement_checks(r: Reader, asked: Asked, anon: Dict[int, int]) -> List[Dict[str, Any]]:
    """Where the anonymous pages are, judged by the mode that was asked for."""
    a_mode, a_nodes = asked.mode, asked.nodes
    on = {n: anon.get(n, 0) for n in a_nodes}
    inside = sum(on.values())
    outside = sum(p for n, p in anon.items() if n not in a_nodes)
    if a_mode == "bind":
        return [
            _check(
                "placement",
                outside == 0,
                f"{inside} anonymous page(s) on node(s) {format_nodelist(a_nodes)}, {outside} elsewhere",
            )
        ]
    if a_mode in ("interleave", "weighted-interleave") and a_nodes:
        return _interleave_checks(r, asked, on, inside)
    if a_nodes:
        tot = sum(anon.values())
        share = ", ".join(f"node{n} {on[n] / tot:.1%}" for n in a_nodes) if tot else "no anonymous pages yet"
        return [_check("placement", None, f"{a_mode}: {share} of {tot} anonymous page(s)")]
    return []


def _asked_checks(
    r: Reader,
    asked: Optional[Asked],
    origin: Optional[Tuple[int, str]],
    mode: str,
    nodes: Tuple[int, ...],
    mems: Tuple[int, ...],
    cpus: Tuple[int, ...],
    anon: Dict[int, int],
) -> List[Dict[str, Any]]:
    """Every check against what was asked; with an inherited ``CXLCTL_POLICY``, a first row naming its origin."""
    if asked is None:
        return []
    checks = _policy_checks(r, asked, mode, nodes, mems, cpus) + _placement_checks(r, asked, anon)
    if origin is not None:
        changed = mode != asked.mode or (asked.mode != "local" and nodes != asked.nodes)
        checks.insert(
            0,
            _check(
                "inherited",
                None,
                f"CXLCTL_POLICY read from ancestor {origin[0]} ({origin[1]}): this process' own environ has none "
                "(a process title written over it, as vLLM's setproctitle does, or an environment it replaced)"
                + (
                    f"; it has set a policy of its own since ({mode}"
                    + (f" over node(s) {format_nodelist(nodes)}" if nodes else "")
                    + "), as vLLM's CPU worker does (it binds its memory to its first CPU's node)"
                    if changed
                    else ""
                ),
            ),
        )
    return checks


def show(host: Host, pid: int) -> Dict[str, Any]:
    """The policy report of process ``pid`` (JSON-ready; ``match`` False means drift)."""
    if pid <= 0:
        raise UsageError(f"PID {pid} is not a process id", hint="give a positive PID")
    r = host.reader
    status = _proc_file(r, paths.proc_pid(pid, "status"), pid)
    maps = parse_mappings(_proc_file(r, paths.proc_pid(pid, "numa_maps"), pid))
    name = status_field(status, "Name") or "?"
    try:
        mems = parse_nodelist(status_field(status, "Mems_allowed_list") or "", limit=1 << 16)
        cpus = parse_nodelist(status_field(status, "Cpus_allowed_list") or "", limit=1 << 16)
    except ValueError:
        mems, cpus = (), ()
    policies = Counter(m.policy for m in maps)
    main = policies.most_common(1)[0][0] if policies else None
    parsed = parse_policy(main) if main else None
    mode, nodes, flags = parsed if parsed else ("unknown", (), "")
    anon = _sum(maps, ANON)
    total = _sum(maps, None)
    file = _sum(maps, ("file",))
    kv = [m for m in maps if m.file and m.file.startswith(SHM_PREFIX) and is_kv_file(m.file)]
    kv_pages: Dict[int, int] = {}
    for m in kv:
        for n, p in m.pages.items():
            kv_pages[n] = kv_pages.get(n, 0) + p
    env, origin = _asked_env(r, pid, status)
    asked = parse_env_value(env) if env else None
    checks = _asked_checks(r, asked, origin, mode, nodes, mems, cpus, anon)
    fails = [c for c in checks if c["status"] == "fail"]
    return {
        "pid": pid,
        "name": name,
        "mems_allowed": list(mems),
        "cpus_allowed": list(cpus),
        "policy": {"mode": mode, "nodes": list(nodes), "flags": flags or None, "numa_maps": main},
        "policies": [{"policy": p, "mappings": c} for p, c in policies.most_common()],
        "pages": {
            "anon": {str(n): p for n, p in anon.items()},
            "file": {str(n): p for n, p in file.items()},
            "total": {str(n): p for n, p in total.items()},
        },
        # the engine's KV offload files in /dev/shm (what cxlctl launch's kv_offload expects per node)
        "kv_offload": {
            "files": sorted({m.file for m in kv if m.file}),
            "pages": {str(n): p for n, p in sorted(kv_pages.items())},
        },
        "page_size": 4096,
        "mappings": [
            {
                "address": m.address,
                "policy": m.policy,
                "kind": m.kind,
                "file": m.file,
                "pages": {str(n): p for n, p in sorted(m.pages.items())},
                "kernel_page_kb": m.page_kb,
            }
            for m in maps
        ],
        "asked": None
        if asked is None
        else {
            "env": env,
            "from_pid": origin[0] if origin else pid,
            "mode": asked.mode,
            "nodes": list(asked.nodes),
            "cpu_nodes": list(asked.cpu_nodes),
            "weights": {str(k): v for k, v in sorted(asked.weights.items())},
        },
        "checks": checks,
        "match": None if asked is None else not fails,
    }
