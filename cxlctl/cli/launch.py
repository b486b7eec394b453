"""``cxlctl launch exec|vllm|sglang`` and ``cxlctl policy show``: the launcher's command line.

Thin: :mod:`cxlctl.launch.build` plans and executes, :mod:`cxlctl.launch.proof`
reports; this module parses options, renders, and maps outcomes to exit codes
(2 bad input, 1 a failed pre-flight or apply — nothing launched, 3 a process
whose placement differs from what was asked).  A real launch never returns:
the engine replaces cxlctl.  Its plan goes to stderr, so the engine's stdout
is the engine's alone; ``--dry-run`` prints it on stdout.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from typing import TYPE_CHECKING, Any, Dict, List, Optional, TextIO, Tuple

import typer

from cxlctl.errors import EXIT_DRIFT, CxlctlError

from .common import JSON_OPT as JSON_DOC_OPT
from .common import emit_json, fold_lines, group, host_root, isatty
from .params import Command, argument

if TYPE_CHECKING:
    from cxlctl.launch.build import LaunchPlan

launch_app = group(
    "launch",
    "Run a program, vLLM, SGLang or LMCache's server with its host memory on DRAM+CXL (node sets, policy, KV offload size, devdax, pre-flight).",
)
policy_app = group("policy", "Show a process' memory policy and where its pages are.")

_CTX = {"allow_interspersed_args": False}

POLICY_OPT = typer.Option(
    None,
    "--policy",
    metavar="MODE",
    help="bind | preferred | preferred-many | interleave | weighted-interleave (default) | local.",
)
CPU_OPT = typer.Option(
    None,
    "--cpu-nodes",
    metavar="NODES",
    help="CPU nodes (numactl syntax: 0-1,3 | all | !N | +N). Default: the GPUs' socket.",
)
MEM_OPT = typer.Option(
    None,
    "--mem-nodes",
    metavar="NODES",
    help="Memory nodes (numactl syntax). Default: that socket's DRAM + nearest CXL nodes.",
)
RATIO_OPT = typer.Option(
    None,
    "--ratio",
    metavar="D:C",
    help="Weighted-interleave weights DRAM:CXL (system-wide; journaled, undone by `cxlctl tune revert`).",
)
GPUS_OPT = typer.Option(
    None, "--gpus", metavar="LIST", help="GPUs in use: indices in PCI order (0,1 | 0-3 | all) or PCI addresses."
)
KV_OPT = typer.Option(
    None,
    "--kv-size",
    metavar="SIZE|auto",
    help="CPU KV cache size (K/M/G/T = powers of 1024), or auto = free CXL minus --reserve.",
)
RESERVE_OPT = typer.Option(
    None, "--reserve", metavar="SIZE", help="With --kv-size auto: CXL memory kept free (default 10 % of it)."
)
MODELCFG_OPT = typer.Option(
    None, "--model-config", metavar="PATH", help="Model config.json (or directory) for KV bytes per token."
)
DRY_OPT = typer.Option(
    False, "--dry-run", help="Print argv, environment, policy and the numactl equivalent; change and launch nothing."
)
JSON_OPT = typer.Option(
    False, "--json", help="The plan as one JSON document (stdout with --dry-run, else stderr before exec)."
)
ENGINE_CMD_OPT = typer.Option(
    None, "--engine-cmd", metavar="CMD", help="The engine command (default: `vllm`, `python3 -m sglang.launch_server`)."
)
TMPFS_OPT = typer.Option(
    False, "--kv-tmpfs", help="vLLM: private /dev/shm tmpfs bound to the CXL nodes, sized for the offload (root)."
)
KEEP_NB_OPT = typer.Option(
    False, "--keep-numa-bind", help="vLLM: keep --numa-bind* (it replaces cxlctl's policy with a DRAM bind)."
)
LMCACHE_OPT = typer.Option(False, "--lmcache", help="Size LMCache's CPU cache with --kv-size (LMCACHE_* environment).")
DEVDAX_OPT = typer.Option(
    None,
    "--devdax",
    metavar="DEV|auto",
    help="KV cache on a devdax device (daxX.Y, /dev/daxX.Y, auto = the only one); --kv-size maps part of it.",
)
POOL_OPT = typer.Option(
    None,
    "--devdax-pool-id",
    metavar="ID",
    help="With --devdax: the shared CXL pool's id (LMCache/Mooncake pool builds).",
)
OFFSET_OPT = typer.Option(
    None, "--devdax-offset", metavar="BYTES", help="With --devdax-pool-id: this process' offset in the pool."
)
MOONCAKE_OPT = typer.Option(
    False, "--mooncake", help="Give --devdax to Mooncake's CXL transport (MC_CXL_DEV_PATH, MC_CXL_DEV_SIZE)."
)
ARGS = argument(None, "[-- COMMAND ARGS...]", "What to run (after --).")


def _lines(lp: LaunchPlan) -> List[Tuple[str, str]]:
    """(label, text) lines describing a plan, shared by the dry run and the real launch."""
    from cxlctl.parse import format_nodelist, format_size

    out: List[Tuple[str, str]] = []
    for line in lp.nodesets.how:
        out.append(("nodes", line))
    out.append(("policy", lp.policy.describe()))
    out.append(
        ("method", "numactl" if lp.method == "numactl" else "direct (set_mempolicy + sched_setaffinity, then exec)")
    )
    wp = lp.weights
    if wp is not None:
        if wp.writes:
            ch = ", ".join(f"{s.split('.', 1)[-1]} {a} -> {b}" for s, a, b in wp.changes)
            out.append(
                (
                    "weights",
                    f"{wp.source}: {ch} (system-wide; set by the tuning engine, journaled; undo: cxlctl tune revert)",
                )
            )
        else:
            out.append(
                (
                    "weights",
                    f"{' '.join(f'node{n}={x}' for n, x in sorted(wp.weights.items()))} ({wp.source}; no change)",
                )
            )
    if lp.engine.kv_bytes is not None:
        line = f"{format_size(lp.engine.kv_bytes)} over {lp.engine.ranks} rank(s)"
        if lp.tokens is not None:
            line += f", {lp.tokens:,} tokens"
        out.append(("kv", line))
    dd = lp.devdax
    if dd is not None:
        who = "LMCache L1" if lp.request.engine == "lmcache" else "Mooncake CXL transport"
        out.append(
            (
                "devdax",
                f"{dd.path} {format_size(dd.size)} of {format_size(dd.device_size)} for the {who}"
                + (f", pool {dd.pool_id} offset {dd.offset}" if dd.pool_id else ""),
            )
        )
    if lp.tmpfs is not None:
        out.append(
            (
                "tmpfs",
                f"/dev/shm = tmpfs {format_size(lp.tmpfs[0])}, mpol=bind:{format_nodelist(lp.tmpfs[1])} (private mount namespace)",
            )
        )
    out.append(("argv", " ".join(shlex.quote(a) for a in lp.argv)))
    out.append(("env", " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(lp.env_added.items()))))
    out.append(("numactl", lp.equivalent))
    return out


# lines that are commands to copy and paste: never wrapped
_VERBATIM = ("argv", "env", "numactl")


def _width(f: TextIO) -> int:
    """The terminal's width when ``f`` is one (COLUMNS first, as ls does), else 80: a pipe or a log
    is read at 80 columns; never narrower than 60, where wrapping would only make it worse."""
    import shutil

    cols = 80
    env = os.environ.get("COLUMNS", "")
    if env.isascii() and env.isdigit():
        cols = int(env)
    elif isatty(f):
        cols = shutil.get_terminal_size((80, 24)).columns
    return max(cols, 60)


def _wrapped(first: str, text: str, width: int, indent: str) -> str:
    """``first + text`` folded at ``width`` (:func:`fold_lines`), as lines ending in a newline."""
    return "\n".join(fold_lines(text, width, first, indent) or [first.rstrip()]) + "\n"


def _out(lp: LaunchPlan, f: TextIO, dry_run: bool) -> None:
    """Dry run: the whole plan and every check on stdout.  Real launch: a short account on stderr.

    Prose (notes, warnings, checks and their fixes) is folded at the terminal's width, 80 for a
    pipe; the command lines (argv, env, numactl) stay whole so they can be copied.  The real
    launch's account on stderr is folded only on a terminal: under systemd it is journal records."""
    w = f.write
    width = _width(f)
    if not dry_run and not isatty(f):
        width = 1 << 20  # the account on stderr, in the journal: one record per line (docs/cli.md)
    if dry_run:
        w(f"cxlctl launch {lp.request.engine} (dry run: nothing changed, nothing launched)\n")
        prev = ""
        for label, text in _lines(lp):
            head = f"{(label + ':') if label != prev else '':9} "
            w(f"{head}{text}\n" if label in _VERBATIM else _wrapped(head, text, width, " " * 12))
            prev = label
        if lp.checks:
            w("checks:\n")
        for c in lp.checks:
            w(_wrapped(f"  {c.status.upper():5} ", f"{c.name}: {c.message}", width, " " * 10))
            if c.fix and c.status in ("fail", "warn"):
                w(_wrapped("        fix: ", c.fix, width, " " * 13))
        for n in lp.notes:
            w(_wrapped("note: ", n, width, "      "))
        for x in lp.warnings:
            w(_wrapped("warning: ", x, width, "         "))
        return
    keep = ("policy", "weights", "kv", "devdax", "tmpfs")
    for label, text in _lines(lp):
        if label in keep:
            w(_wrapped(f"cxlctl: {label} ", text, width, "  "))
    for c in lp.checks:
        if c.status in ("fail", "warn"):
            w(_wrapped(f"cxlctl: {c.status}: ", f"{c.name}: {c.message}", width, "  "))
            if c.fix:
                w(_wrapped("  fix: ", c.fix, width, "    "))
    for n in lp.notes:
        w(_wrapped("cxlctl: note: ", n, width, "  "))
    for x in lp.warnings:
        w(_wrapped("cxlctl: warning: ", x, width, "  "))
    if not lp.failed:
        w("cxlctl: exec " + " ".join(shlex.quote(a) for a in lp.argv) + "\n")


def _launch(
    engine: str,
    args: Optional[List[str]],
    *,
    engine_cmd: Optional[str] = None,
    policy: Optional[str],
    cpu_nodes: Optional[str],
    mem_nodes: Optional[str],
    ratio: Optional[str],
    gpus: Optional[str],
    kv_size: Optional[str],
    reserve: Optional[str],
    model_config: Optional[str],
    dry_run: bool,
    json_out: bool,
    kv_tmpfs: bool = False,
    keep_numa_bind: bool = False,
    lmcache: bool = False,
    devdax: Optional[str] = None,
    devdax_pool_id: Optional[str] = None,
    devdax_offset: Optional[str] = None,
    mooncake: bool = False,
) -> None:
    from cxlctl.launch.build import Request, build, execute, to_json

    req = Request(
        engine=engine,
        args=tuple(args or ()),
        engine_cmd=engine_cmd,
        policy=policy,
        cpu_nodes=cpu_nodes,
        mem_nodes=mem_nodes,
        ratio=ratio,
        gpus=gpus,
        kv_size=kv_size,
        reserve=reserve,
        model_config=model_config,
        kv_tmpfs=kv_tmpfs,
        keep_numa_bind=keep_numa_bind,
        lmcache=lmcache,
        dry_run=dry_run,
        devdax=devdax,
        devdax_pool_id=devdax_pool_id,
        devdax_offset=devdax_offset,
        mooncake=mooncake,
    )
    lp = build(host_root(), req)
    if json_out:
        (sys.stdout if dry_run else sys.stderr).write(
            json.dumps(to_json(lp, dry_run), indent=2 if dry_run else None) + "\n"
        )
    else:
        _out(lp, sys.stdout if dry_run else sys.stderr, dry_run)
    if lp.failed:
        raise CxlctlError(
            f"pre-flight failed ({len(lp.failed)} problem(s)); nothing was launched",
            hint="each problem above names its fix",
        )
    if dry_run:
        return
    execute(host_root(), lp)


@launch_app.command("exec", context_settings=_CTX)
def exec_cmd(
    args: Optional[List[str]] = ARGS,
    policy: Optional[str] = POLICY_OPT,
    cpu_nodes: Optional[str] = CPU_OPT,
    mem_nodes: Optional[str] = MEM_OPT,
    ratio: Optional[str] = RATIO_OPT,
    gpus: Optional[str] = GPUS_OPT,
    kv_size: Optional[str] = KV_OPT,
    reserve: Optional[str] = RESERVE_OPT,
    kv_tmpfs: bool = typer.Option(
        False, "--kv-tmpfs", help="Private /dev/shm tmpfs bound to the CXL nodes, sized --kv-size (root)."
    ),
    lmcache: bool = LMCACHE_OPT,
    devdax: Optional[str] = DEVDAX_OPT,
    devdax_pool_id: Optional[str] = POOL_OPT,
    devdax_offset: Optional[str] = OFFSET_OPT,
    mooncake: bool = MOONCAKE_OPT,
    dry_run: bool = DRY_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Run any program under the policy: cxlctl launch exec OPTIONS -- PROGRAM ARGS..."""
    _launch(
        "exec",
        args,
        policy=policy,
        cpu_nodes=cpu_nodes,
        mem_nodes=mem_nodes,
        ratio=ratio,
        gpus=gpus,
        kv_size=kv_size,
        reserve=reserve,
        model_config=None,
        dry_run=dry_run,
        devdax=devdax,
        devdax_pool_id=devdax_pool_id,
        devdax_offset=devdax_offset,
        mooncake=mooncake,
        json_out=json_out,
        kv_tmpfs=kv_tmpfs,
        lmcache=lmcache,
    )


@launch_app.command("vllm", context_settings=_CTX)
def vllm_cmd(
    args: Optional[List[str]] = ARGS,
    policy: Optional[str] = POLICY_OPT,
    cpu_nodes: Optional[str] = CPU_OPT,
    mem_nodes: Optional[str] = MEM_OPT,
    ratio: Optional[str] = RATIO_OPT,
    gpus: Optional[str] = GPUS_OPT,
    kv_size: Optional[str] = KV_OPT,
    reserve: Optional[str] = RESERVE_OPT,
    model_config: Optional[str] = MODELCFG_OPT,
    kv_tmpfs: bool = TMPFS_OPT,
    keep_numa_bind: bool = KEEP_NB_OPT,
    lmcache: bool = LMCACHE_OPT,
    engine_cmd: Optional[str] = ENGINE_CMD_OPT,
    devdax: Optional[str] = DEVDAX_OPT,
    devdax_pool_id: Optional[str] = POOL_OPT,
    devdax_offset: Optional[str] = OFFSET_OPT,
    mooncake: bool = MOONCAKE_OPT,
    dry_run: bool = DRY_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Run vLLM with its CPU KV offload on CXL: cxlctl launch vllm OPTIONS -- serve MODEL ..."""
    _launch(
        "vllm",
        args,
        engine_cmd=engine_cmd,
        policy=policy,
        cpu_nodes=cpu_nodes,
        mem_nodes=mem_nodes,
        ratio=ratio,
        gpus=gpus,
        kv_size=kv_size,
        reserve=reserve,
        model_config=model_config,
        dry_run=dry_run,
        devdax=devdax,
        devdax_pool_id=devdax_pool_id,
        devdax_offset=devdax_offset,
        mooncake=mooncake,
        json_out=json_out,
        kv_tmpfs=kv_tmpfs,
        keep_numa_bind=keep_numa_bind,
        lmcache=lmcache,
    )


@launch_app.command("sglang", context_settings=_CTX)
def sglang_cmd(
    args: Optional[List[str]] = ARGS,
    policy: Optional[str] = POLICY_OPT,
    cpu_nodes: Optional[str] = CPU_OPT,
    mem_nodes: Optional[str] = MEM_OPT,
    ratio: Optional[str] = RATIO_OPT,
    gpus: Optional[str] = GPUS_OPT,
    kv_size: Optional[str] = KV_OPT,
    reserve: Optional[str] = RESERVE_OPT,
    model_config: Optional[str] = MODELCFG_OPT,
    lmcache: bool = LMCACHE_OPT,
    engine_cmd: Optional[str] = ENGINE_CMD_OPT,
    devdax: Optional[str] = DEVDAX_OPT,
    devdax_pool_id: Optional[str] = POOL_OPT,
    devdax_offset: Optional[str] = OFFSET_OPT,
    mooncake: bool = MOONCAKE_OPT,
    dry_run: bool = DRY_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Run SGLang with its hierarchical cache on CXL: cxlctl launch sglang OPTIONS -- --model-path M ..."""
    _launch(
        "sglang",
        args,
        engine_cmd=engine_cmd,
        policy=policy,
        cpu_nodes=cpu_nodes,
        mem_nodes=mem_nodes,
        ratio=ratio,
        gpus=gpus,
        kv_size=kv_size,
        reserve=reserve,
        model_config=model_config,
        dry_run=dry_run,
        devdax=devdax,
        devdax_pool_id=devdax_pool_id,
        devdax_offset=devdax_offset,
        mooncake=mooncake,
        json_out=json_out,
        lmcache=lmcache,
    )


@launch_app.command("lmcache", context_settings=_CTX)
def lmcache_cmd(
    args: Optional[List[str]] = ARGS,
    devdax: Optional[str] = DEVDAX_OPT,
    devdax_pool_id: Optional[str] = POOL_OPT,
    devdax_offset: Optional[str] = OFFSET_OPT,
    kv_size: Optional[str] = typer.Option(
        None, "--kv-size", metavar="SIZE", help="Bytes of the device to map (K/M/G/T); default the whole device."
    ),
    policy: Optional[str] = POLICY_OPT,
    cpu_nodes: Optional[str] = CPU_OPT,
    mem_nodes: Optional[str] = MEM_OPT,
    ratio: Optional[str] = RATIO_OPT,
    gpus: Optional[str] = GPUS_OPT,
    engine_cmd: Optional[str] = typer.Option(
        None, "--engine-cmd", metavar="CMD", help="The LMCache command (default: `lmcache`)."
    ),
    dry_run: bool = DRY_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Run LMCache's server with its L1 on a CXL devdax device: cxlctl launch lmcache --devdax DEV -- server ..."""
    _launch(
        "lmcache",
        args,
        engine_cmd=engine_cmd,
        policy=policy,
        cpu_nodes=cpu_nodes,
        mem_nodes=mem_nodes,
        ratio=ratio,
        gpus=gpus,
        kv_size=kv_size,
        reserve=None,
        model_config=None,
        dry_run=dry_run,
        json_out=json_out,
        devdax=devdax,
        devdax_pool_id=devdax_pool_id,
        devdax_offset=devdax_offset,
    )


@policy_app.command("show", cls=Command)
def show_cmd(
    pid: int = argument(..., "PID", "Process id.", integer=True),
    json_out: bool = JSON_DOC_OPT,
) -> None:
    """A process' memory policy, its pages per node, and how that compares with what cxlctl launch asked."""
    from cxlctl.launch.proof import show

    rep = show(host_root(), pid)
    if json_out:
        emit_json(rep)
    else:
        _render_proof(rep)
    if rep["match"] is False:
        bad = ", ".join(c["check"] for c in rep["checks"] if c["status"] == "fail")
        raise CxlctlError(
            f"process {pid} differs from what was asked ({bad})",
            code=EXIT_DRIFT,
            hint="a child may have set its own policy (vLLM --numa-bind, SGLang NUMA binding), or the weights/cpuset changed",
        )


def _render_proof(rep: Dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    from cxlctl.parse import PAGE_SIZE, format_nodelist, format_size

    c = Console(highlight=False)
    pol = rep["policy"]
    c.print(
        f"[bold]{rep['pid']}[/bold] {rep['name']}: policy [bold]{pol['mode']}[/bold]"
        + (f" over node(s) {format_nodelist(pol['nodes'])}" if pol["nodes"] else "")
    )
    c.print(f"Mems_allowed {format_nodelist(rep['mems_allowed'])}, Cpus_allowed {format_nodelist(rep['cpus_allowed'])}")
    if len(rep["policies"]) > 1:
        c.print("mappings by policy: " + ", ".join(f"{p['policy']} x{p['mappings']}" for p in rep["policies"]))
    t = Table(title="Pages per node", title_justify="left")
    for col in ("node", "anonymous", "file", "total", "share of anonymous"):
        t.add_column(col, justify="right", overflow="fold")
    pages = rep["pages"]
    nodes = sorted({int(n) for k in ("anon", "file", "total") for n in pages[k]})
    anon_total = sum(pages["anon"].values()) or 1
    for n in nodes:
        a, f, tot = (pages[k].get(str(n), 0) for k in ("anon", "file", "total"))
        t.add_row(
            str(n),
            f"{a} ({format_size(a * PAGE_SIZE)})",
            f"{f} ({format_size(f * PAGE_SIZE)})",
            f"{tot} ({format_size(tot * PAGE_SIZE)})",
            f"{a / anon_total:.1%}",
        )
    c.print(t)
    if rep["asked"] is None:
        c.print("[dim]not launched by cxlctl (no CXLCTL_POLICY in its environment): nothing to compare with[/dim]")
        return
    c.print(f"asked: {rep['asked']['env']}")
    style = {"pass": "green", "fail": "bold red", "info": "dim"}
    for ch in rep["checks"]:
        st = style[ch["status"]]
        c.print(f"  [{st}]{ch['status']:4}[/{st}] {ch['check']}: {ch['detail']}")
    c.print(
        "[green]matches what was asked[/green]" if rep["match"] else "[bold red]differs from what was asked[/bold red]"
    )
