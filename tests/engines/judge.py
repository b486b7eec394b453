"""Run INSIDE an engine's venv: parse the argv and environment cxlctl built with the engine's own parser.

    $VENV/bin/python tests/engines/judge.py vllm|sglang|lmcache < [{"argv": [...], "env": {...}}, ...]

``argv`` is what follows the engine's command (``serve MODEL ...`` for vLLM, SGLang's server
arguments, ``server ...`` for LMCache); ``env`` is what cxlctl adds to the environment, applied
to this process before the engine is imported.  An LMCache request with ``connector`` (a key of
:data:`LMCACHE_LOADERS`) instead has ``env`` judged by the configuration loader that engine's LMCache
connector calls (:func:`_lmcache_connector`); its ``argv`` is ignored.  Prints a JSON list, an object per request: ``ok`` and the values the
engine ended up with, or ``ok: false`` and the engine's own error message (an unknown flag is
argparse's ``unrecognized arguments`` exit, status 2).  Imports nothing of cxlctl: this runs on the
engine's Python, with the engine's packages.  Each request runs in a fork of a process that
imported the engine once (:func:`forked`).
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
        # what ServeSubcommand.cmd does first (0.17.1 and 0.32.0): the positional model wins
        if getattr(args, "model_tag", None) is not None:
            args.model = args.model_tag
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


#: LMCache 0.5.6's configuration loaders, by the engine connector that calls them when no
#: LMCACHE_CONFIG_FILE is set (each one is LMCache's own function, called as the connector calls it)
LMCACHE_LOADERS = {
    # vLLM's LMCacheConnectorV1 (without "use_native") -> lmcache.integration.vllm.vllm_v1_adapter
    # LMCacheConnectorV1Impl.__init__ -> lmcache_get_or_create_config(): from_env() + validate()
    "vllm": ("lmcache.integration.vllm.utils", "lmcache_get_or_create_config", ()),
    # SGLang 0.5.23's --enable-lmcache -> LMCacheUnifiedRadixCache -> UnifiedLMCacheMPConnector, which
    # calls load_engine_config_with_overrides(config_file_path=<--lmcache-config-file, default None>)
    "sglang-mp": ("lmcache.v1.config", "load_engine_config_with_overrides", (None,)),
    # LMCache's in-process SGLang adapter (sglang_adapter.py, what SGLang's radix cache called before the
    # MP connector): lmcache_get_config(config_file) with SGLang's empty config file
    "sglang-inprocess": ("lmcache.integration.sglang.utils", "lmcache_get_config", ("",)),
}


def _lmcache_connector(loader: str) -> Dict[str, Any]:
    """The configuration an engine's LMCache connector builds from the ``LMCACHE_*`` environment, and
    the bytes LMCache's ``LocalCPUBackend.initialize_allocator`` would pin for it (per rank).

    The connectors themselves need a GPU and a running engine; their configuration loaders and the
    allocator's size computation do not.  Only the allocation is left out: ``MixedMemoryAllocator``
    (pinned host memory) is replaced, in this forked child only, by a recorder of the size it is given.
    ``_user_set_keys`` is LMCache's own record of which keys came from the environment: a variable
    it does not read is absent from it."""
    import importlib
    import logging

    module, func, args = LMCACHE_LOADERS[loader]
    warnings: List[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warnings.append(record.getMessage())

    for name in list(logging.Logger.manager.loggerDict):
        if name.startswith("lmcache"):
            logging.getLogger(name).addHandler(Capture(logging.WARNING))
    cfg = getattr(importlib.import_module(module), func)(*args)
    got: Dict[str, Any] = {
        "local_cpu": cfg.local_cpu,
        "max_local_cpu_size": cfg.max_local_cpu_size,
        "mp_host": cfg.mp_host,
        "from_env": sorted(getattr(cfg, "_user_set_keys", ())),
    }
    import lmcache.v1.storage_backend.local_cpu_backend as lcb

    sizes: List[int] = []

    class Recorder:
        def __init__(self, size: int, **_kw: Any) -> None:
            sizes.append(size)

    lcb.MixedMemoryAllocator = Recorder
    backend = lcb.LocalCPUBackend.__new__(lcb.LocalCPUBackend)
    lcb.LocalCPUBackend.initialize_allocator(backend, cfg, None)  # no metadata: no MLA first-rank special case
    got["allocator_bytes"] = sizes[0] if sizes else None
    got["warnings"] = warnings
    return got


def judge(engine: str, req: Dict[str, Any]) -> Dict[str, Any]:
    saved = dict(os.environ)
    os.environ.update(req.get("env", {}))
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            if engine == "lmcache" and "connector" in req:
                got = _lmcache_connector(req["connector"])
            else:
                got = {"vllm": _vllm, "sglang": _sglang, "lmcache": _lmcache}[engine](list(req["argv"]))
    except SystemExit as e:
        return {"ok": False, "status": e.code, "error": err.getvalue()[-4000:]}
    except Exception as e:
        return {"ok": False, "status": None, "error": f"{type(e).__name__}: {e}"[-4000:]}
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return {"ok": True, "values": got}


#: what each engine's judge imports; loaded once, before the forks, so each request costs a fork
PRELOAD = {
    "vllm": ["vllm.entrypoints.cli.main", "vllm.entrypoints.cli.serve", "vllm.engine.arg_utils"],
    "sglang": ["sglang.srt.server_args"],
    "lmcache": [
        "lmcache.cli.commands",
        "lmcache.v1.distributed.config",
        *(m for m, _, _ in LMCACHE_LOADERS.values()),
        "lmcache.v1.storage_backend.local_cpu_backend",
    ],
}


def forked(engine: str, req: Dict[str, Any]) -> Dict[str, Any]:
    """One request in a child of this process: vLLM's ``main()`` registers its subcommands into
    process-wide state (a second call dies on ``KeyError: 'serve'``) and ``vllm.envs`` may cache
    what it read, so every request starts from the same freshly imported, untouched engine (LMCache's
    vLLM loader keeps its first configuration in a process-wide singleton, ``_config_instance``)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: judge, write the answer, leave without running the parent's atexit
        os.close(r)
        try:
            data = json.dumps(judge(engine, req), default=str).encode()
        except BaseException as e:  # noqa: BLE001 - anything at all goes back as the answer
            data = json.dumps({"ok": False, "status": None, "error": f"{type(e).__name__}: {e}"}).encode()
        with os.fdopen(w, "wb") as f:
            f.write(data)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        return {"ok": False, "status": status, "error": f"the judge's child died (wait status {status})"}
    answer: Dict[str, Any] = json.loads(data)
    return answer


def main() -> int:
    """A JSON list of requests in, a JSON list of answers out: one engine import, a fork per request.

    With ``--serve`` (after ENGINE) the judge stays: one JSON list of requests per line in, one JSON
    list of answers per line out, until end of input -- the whole engines tier then imports each
    engine once, not once per test (an import of vLLM is most of a test's time)."""
    import importlib

    engine = sys.argv[1]
    serve = sys.argv[2:] == ["--serve"]
    reqs = None if serve else json.load(sys.stdin)
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        for mod in PRELOAD[engine]:
            importlib.import_module(mod)
    if not serve:
        sys.stdout.write(json.dumps([forked(engine, r) for r in reqs or []], default=str))
        return 0
    for line in sys.stdin:
        if line.strip():
            sys.stdout.write(json.dumps([forked(engine, r) for r in json.loads(line)], default=str) + "\n")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
