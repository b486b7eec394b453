"""Run INSIDE an engine's venv: parse the argv and environment cxlctl built with the engine's own parser.

    $VENV/bin/python tests/engines/judge.py vllm|sglang|lmcache < [{"argv": [...], "env": {...}}, ...]

``argv`` is what follows the engine's command (``serve MODEL ...`` for vLLM, SGLang's server
arguments, ``server ...`` for LMCache); ``env`` is what cxlctl adds to the environment, applied
to this process before the engine is imported.  Prints a JSON list, an object per request: ``ok`` and the values the
engine ended up with, or ``ok: false`` and the engine's own error message (an unknown flag is
argparse's ``unrecognized arguments`` exit, status 2).  Imports nothing of cxlctl: this runs on the
engine's Python, with the engine's packages.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from typing import Any, Dict, List


def _vllm(argv: List[str]) -> Dict[str, Any]:
    """vLLM's own CLI up to the point it would serve: its parser, its validation, then EngineArgs."""
    import vllm.entrypoints.cli.main as cli_main
    import vllm.entrypoints.cli.serve as serve
    from vllm.engine.arg_utils import AsyncEngineArgs

    got: Dict[str, Any] = {}

    def capture(args: Any) -> None:
        ea = AsyncEngineArgs.from_cli_args(args)
        fields = (
            "model",
            "tensor_parallel_size",
            "pipeline_parallel_size",
            "kv_offloading_size",
            "kv_offloading_backend",
            "kv_cache_memory_bytes",
            "kv_transfer_config",
            "swap_space",
            "numa_bind",
            "numa_bind_nodes",
            "kv_cache_dtype",
        )
        for f in fields:
            if hasattr(ea, f):
                v = getattr(ea, f)
                got[f] = v if isinstance(v, (int, float, str, bool, list, type(None))) else str(v)
        ktc = getattr(ea, "kv_transfer_config", None)
        if ktc is not None and not isinstance(ktc, (str, dict)):
            got["kv_transfer_config"] = {"kv_connector": ktc.kv_connector, "kv_role": ktc.kv_role}
        import vllm.envs as envs

        got["env.VLLM_CPU_KVCACHE_SPACE"] = envs.VLLM_CPU_KVCACHE_SPACE
        if os.environ.get("JUDGE_ENGINE_CONFIG"):
            # the whole configuration, as the engine builds it before starting workers (the CPU
            # platform applies VLLM_CPU_KVCACHE_SPACE here); needs a local model directory
            cfg = ea.create_engine_config()
            got["config.kv_cache_memory_bytes"] = cfg.cache_config.kv_cache_memory_bytes
            got["config.kv_transfer_config"] = (
                None if cfg.kv_transfer_config is None else cfg.kv_transfer_config.kv_connector
            )
            got["config.device"] = str(cfg.device_config.device_type)

    serve.ServeSubcommand.cmd = staticmethod(capture)
    sys.argv = ["vllm", *argv]
    cli_main.main()
    return got


def _sglang(argv: List[str]) -> Dict[str, Any]:
    """SGLang's ServerArgs from its own parser, and the NUMA node its scheduler would bind to."""
    from sglang.srt.server_args import prepare_server_args

    sa = prepare_server_args(argv)
    got: Dict[str, Any] = {}
    for f in (
        "model_path",
        "tp_size",
        "pp_size",
        "enable_hierarchical_cache",
        "hicache_size",
        "hicache_ratio",
        "enable_lmcache",
        "numa_node",
        "kv_cache_dtype",
    ):
        got[f] = getattr(sa, f, None)
    from sglang.srt.environ import envs

    got["env.SGLANG_AUTO_NUMA_BIND"] = envs.SGLANG_AUTO_NUMA_BIND.get()
    try:
        from sglang.srt.utils.numa_utils import get_numa_node_if_available

        # what the scheduler of GPU 0 would bind itself to (None: it leaves the policy alone)
        got["numa_bind_node_gpu0"] = get_numa_node_if_available(sa, 0)
    except Exception as e:  # no GPU to query: the function got past the switches that matter
        got["numa_bind_node_gpu0"] = f"queried the GPU ({type(e).__name__})"
    return got


def _lmcache(argv: List[str]) -> Dict[str, Any]:
    """LMCache's own ``lmcache`` parser, then the storage configuration ``lmcache server`` builds from it."""
    import argparse

    from lmcache.cli.commands import register_commands

    parser = argparse.ArgumentParser(prog="lmcache")
    register_commands(parser.add_subparsers(dest="command"), argv)
    args = parser.parse_args(argv)
    got: Dict[str, Any] = {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, bool, type(None)))}
    from lmcache.v1.distributed.config import parse_args_to_config

    cfg = parse_args_to_config(args)  # the server's own validation (devdax needs no lazy L1, no shm)
    l1 = getattr(cfg, "l1_manager_config", None) or getattr(cfg, "l1_config", None)
    got["config"] = repr(cfg)
    got["config.l1"] = repr(l1)
    return got


def judge(engine: str, req: Dict[str, Any]) -> Dict[str, Any]:
    saved = dict(os.environ)
    os.environ.update(req.get("env", {}))
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            got = {"vllm": _vllm, "sglang": _sglang, "lmcache": _lmcache}[engine](list(req["argv"]))
    except SystemExit as e:
        return {"ok": False, "status": e.code, "error": err.getvalue()[-4000:]}
    except Exception as e:
        return {"ok": False, "status": None, "error": f"{type(e).__name__}: {e}"[-4000:]}
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return {"ok": True, "values": got}


def main() -> int:
    """A JSON list of requests in, a JSON list of answers out: one engine import for many command lines."""
    reqs = json.load(sys.stdin)
    answers = [judge(sys.argv[1], r) for r in reqs]
    sys.stdout.write(json.dumps(answers, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
