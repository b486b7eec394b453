"""``cxlctl launch exec|vllm|sglang`` and ``cxlctl policy show``: the launcher's command line.

Thin: :func:`cxlctl.launch.command.launch` plans, shows and executes,
:mod:`cxlctl.launch.proof` reports; this module parses options.  Exit codes
(2 bad input, 1 a failed pre-flight or apply — nothing launched, 3 a process
whose placement differs from what was asked).  A real launch never returns:
the engine replaces cxlctl.  Its plan goes to stderr, so the engine's stdout
is the engine's alone; ``--dry-run`` prints it on stdout.
"""

from __future__ import annotations

from typing import Any, List, Optional

import typer

from .common import JSON_OPT as JSON_DOC_OPT
from .common import emit_json, group, host
from .params import Command, argument, integer

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
    help="Set the weighted-interleave weights DRAM:CXL (system-wide: implies --set-weights; journaled, undone by "
    "`cxlctl tune revert`).",
)
SET_WEIGHTS_OPT = typer.Option(
    False,
    "--set-weights",
    help="Set the system-wide weighted-interleave weights from bandwidth for this launch (journaled, undone by "
    "`cxlctl tune revert`). Without it (or --ratio) a launch uses the weights in effect and changes no host setting.",
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
    None,
    "--kv-tmpfs/--no-kv-tmpfs",
    help="The engine's private /dev/shm bound to the CXL nodes, holding vLLM's offload file (root). "
    "Default: on with --kv-size where it applies and cxlctl runs as root.",
)
FORCE_OPT = typer.Option(
    False, "--force", help="Launch even when the chosen nodes cannot hold --kv-size: the rest spills (shown per node)."
)
PINNED_OPT = typer.Option(
    False,
    "--pinned",
    help="The program long-term pins its /dev/shm offload (cudaHostRegister, io_uring buffers): plan where the pin puts it.",
)
UNPINNABLE_OPT = typer.Option(
    False,
    "--allow-unpinnable",
    help="Launch although a long-term pin moves the offload off CXL (its CXL memory is ZONE_MOVABLE).",
)
KEEP_NB_OPT = typer.Option(
    False, "--keep-numa-bind", help="vLLM: keep --numa-bind* (it replaces cxlctl's policy with a DRAM bind)."
)
LMCACHE_OPT = typer.Option(False, "--lmcache", help="Size LMCache's CPU cache with --kv-size (LMCACHE_* environment).")
#: SGLang's LMCache connector has no CPU cache of its own to size (docs/launch.md): the option is kept so
#: that it is refused with the reason and the alternatives, not as an unknown option
SGLANG_LMCACHE_OPT = typer.Option(
    False, "--lmcache", help="Refused for SGLang: its LMCache connector has no CPU cache to size (docs/launch.md)."
)
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
    help="With --devdax: the shared CXL pool's id (pool builds of LMCache or Mooncake).",
)
OFFSET_OPT = typer.Option(
    None, "--devdax-offset", metavar="BYTES", help="With --devdax-pool-id: this process' offset in the pool."
)
MOONCAKE_OPT = typer.Option(
    False, "--mooncake", help="Give --devdax to Mooncake's CXL transport (MC_CXL_DEV_PATH, MC_CXL_DEV_SIZE)."
)
USER_OPT = typer.Option(
    None,
    "--user",
    metavar="USER",
    help="Who the engine runs as when cxlctl runs as root (name or uid). Default: the sudo caller (SUDO_UID).",
)
GROUP_OPT = typer.Option(
    None, "--group", metavar="GROUP", help="The engine's group (name or gid). Default: --user's, or SUDO_GID."
)
ALLOW_ROOT_OPT = typer.Option(
    False,
    "--allow-root",
    help="Run the engine as root with every capability (refused otherwise: an engine is a network server).",
)
ARGS = argument(None, "[-- COMMAND ARGS...]", "What to run (after --).")


def _launch(engine: str, args: Optional[List[str]], json_out: bool, **fields: Any) -> None:
    """Launch ``engine``: each command's options are named as :class:`~cxlctl.launch.build.Request`'s
    fields, so a command passes them on as they are (``**locals()``)."""
    from cxlctl.launch.build import Request
    from cxlctl.launch.command import launch

    launch(host(), Request(engine=engine, args=tuple(args or ()), **fields), json_out)


@launch_app.command("exec", cls=Command, context_settings=_CTX)
def exec_cmd(
    args: Optional[List[str]] = ARGS,
    policy: Optional[str] = POLICY_OPT,
    cpu_nodes: Optional[str] = CPU_OPT,
    mem_nodes: Optional[str] = MEM_OPT,
    ratio: Optional[str] = RATIO_OPT,
    set_weights: bool = SET_WEIGHTS_OPT,
    gpus: Optional[str] = GPUS_OPT,
    kv_size: Optional[str] = KV_OPT,
    reserve: Optional[str] = RESERVE_OPT,
    kv_tmpfs: Optional[bool] = TMPFS_OPT,
    force: bool = FORCE_OPT,
    pinned: bool = PINNED_OPT,
    allow_unpinnable: bool = UNPINNABLE_OPT,
    lmcache: bool = LMCACHE_OPT,
    devdax: Optional[str] = DEVDAX_OPT,
    devdax_pool_id: Optional[str] = POOL_OPT,
    devdax_offset: Optional[str] = OFFSET_OPT,
    mooncake: bool = MOONCAKE_OPT,
    user: Optional[str] = USER_OPT,
    group: Optional[str] = GROUP_OPT,
    allow_root: bool = ALLOW_ROOT_OPT,
    dry_run: bool = DRY_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Run any program under the policy: cxlctl launch exec OPTIONS -- PROGRAM ARGS..."""
    _launch("exec", **locals())


@launch_app.command("vllm", cls=Command, context_settings=_CTX)
def vllm_cmd(
    args: Optional[List[str]] = ARGS,
    policy: Optional[str] = POLICY_OPT,
    cpu_nodes: Optional[str] = CPU_OPT,
    mem_nodes: Optional[str] = MEM_OPT,
    ratio: Optional[str] = RATIO_OPT,
    set_weights: bool = SET_WEIGHTS_OPT,
    gpus: Optional[str] = GPUS_OPT,
    kv_size: Optional[str] = KV_OPT,
    reserve: Optional[str] = RESERVE_OPT,
    model_config: Optional[str] = MODELCFG_OPT,
    kv_tmpfs: Optional[bool] = TMPFS_OPT,
    force: bool = FORCE_OPT,
    allow_unpinnable: bool = UNPINNABLE_OPT,
    keep_numa_bind: bool = KEEP_NB_OPT,
    lmcache: bool = LMCACHE_OPT,
    engine_cmd: Optional[str] = ENGINE_CMD_OPT,
    devdax: Optional[str] = DEVDAX_OPT,
    devdax_pool_id: Optional[str] = POOL_OPT,
    devdax_offset: Optional[str] = OFFSET_OPT,
    mooncake: bool = MOONCAKE_OPT,
    user: Optional[str] = USER_OPT,
    group: Optional[str] = GROUP_OPT,
    allow_root: bool = ALLOW_ROOT_OPT,
    dry_run: bool = DRY_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Run vLLM with its CPU KV offload on CXL: cxlctl launch vllm OPTIONS -- serve MODEL ..."""
    _launch("vllm", **locals())


@launch_app.command("sglang", cls=Command, context_settings=_CTX)
def sglang_cmd(
    args: Optional[List[str]] = ARGS,
    policy: Optional[str] = POLICY_OPT,
    cpu_nodes: Optional[str] = CPU_OPT,
    mem_nodes: Optional[str] = MEM_OPT,
    ratio: Optional[str] = RATIO_OPT,
    set_weights: bool = SET_WEIGHTS_OPT,
    gpus: Optional[str] = GPUS_OPT,
    kv_size: Optional[str] = KV_OPT,
    reserve: Optional[str] = RESERVE_OPT,
    model_config: Optional[str] = MODELCFG_OPT,
    force: bool = FORCE_OPT,
    lmcache: bool = SGLANG_LMCACHE_OPT,
    engine_cmd: Optional[str] = ENGINE_CMD_OPT,
    devdax: Optional[str] = DEVDAX_OPT,
    devdax_pool_id: Optional[str] = POOL_OPT,
    devdax_offset: Optional[str] = OFFSET_OPT,
    mooncake: bool = MOONCAKE_OPT,
    user: Optional[str] = USER_OPT,
    group: Optional[str] = GROUP_OPT,
    allow_root: bool = ALLOW_ROOT_OPT,
    dry_run: bool = DRY_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Run SGLang with its hierarchical cache on CXL: cxlctl launch sglang OPTIONS -- --model-path M ..."""
    _launch("sglang", **locals())


@launch_app.command("lmcache", cls=Command, context_settings=_CTX)
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
    set_weights: bool = SET_WEIGHTS_OPT,
    gpus: Optional[str] = GPUS_OPT,
    engine_cmd: Optional[str] = typer.Option(
        None, "--engine-cmd", metavar="CMD", help="The LMCache command (default: `lmcache`)."
    ),
    user: Optional[str] = USER_OPT,
    group: Optional[str] = GROUP_OPT,
    allow_root: bool = ALLOW_ROOT_OPT,
    dry_run: bool = DRY_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Run LMCache's server with its L1 on a CXL devdax device: cxlctl launch lmcache --devdax DEV -- server ..."""
    _launch("lmcache", **locals())


@policy_app.command("show", cls=Command)
def show_cmd(
    pid: int = argument(..., "PID", "Process id.", number=integer(0)),  # 0: show() says "not a process id"
    json_out: bool = JSON_DOC_OPT,
) -> None:
    """A process' memory policy, its pages per node, and how that compares with what cxlctl launch asked."""
    from cxlctl.launch.command import drift
    from cxlctl.launch.proof import show

    rep = show(host(), pid)
    if json_out:
        emit_json(rep)
    else:
        from cxlctl.launch.render import proof
        from cxlctl.term import console

        proof(rep, console())
    drift(rep, pid)
