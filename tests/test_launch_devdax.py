"""devdax KV backends (LMCache's L1, Mooncake's CXL transport) and SGLang's NUMA binding, through fake engines.

The recorded 6.12 tree ``single-region`` is copied and its dax0.0 rebound to
``device_dax`` (the driver link sysfs shows after ``cxlctl region create
--online devdax``), with a file of the device's size as ``/dev/dax0.0``.  The
fake ``lmcache`` answers ``server --help`` with the help text of a build with
(or without) the devdax L1 and the shared-pool flags; a fake
``mooncake-transfer-engine`` distribution is what importlib.metadata finds.
So feature detection runs for real; the plan's argv and environment are what
a launch would exec.  The VM test (tests/vm/test_vm_fleet.py) maps a real
devdax device through these same launches.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest

from cxlctl.cli import run
from cxlctl.launch.devdax import size_gb
from tests.kit import cli, copy_fixture, fixture_roots
from tests.launch_support import HELP_LMCACHE_OLD, HELP_LMCACHE_POOL, Fakes, make_devdax, write_status

MIB = 1 << 20


@pytest.fixture
def tree(tmp_path: Any) -> str:
    t = copy_fixture(fixture_roots("linux-6.12/single-region")[0], str(tmp_path / "tree"))
    make_devdax(t)
    write_status(t, "0-1")
    return t


@pytest.fixture
def fakes(tmp_path: Any, monkeypatch: Any) -> Fakes:
    f = Fakes(str(tmp_path / "fakes"))
    for k, v in f.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("SGLANG_AUTO_NUMA_BIND", raising=False)
    return f


def dry(root: str, engine: str, opts: List[str], args: List[str]) -> Dict[str, Any]:
    p = cli("--root", root, "launch", engine, "--dry-run", "--json", *opts, "--", *args, check=True, inprocess=True)
    data: Dict[str, Any] = json.loads(p.stdout)
    return data


def usage(root: str, engine: str, opts: List[str], args: List[str], *needles: str) -> str:
    err = cli("--root", root, "launch", engine, "--dry-run", *opts, "--", *args, rc=2, inprocess=True).stderr
    assert "cxlctl: error: " in err and "Traceback" not in err, err
    for n in needles:
        assert n in err, (n, err)
    return err


def _after(argv: List[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# --------------------------------------------------------------------------- LMCache


def test_lmcache_l1_on_the_only_devdax_device(capsys: Any, tree: str, fakes: Fakes) -> None:
    d = dry(tree, "lmcache", ["--devdax", "auto"], ["server", "--eviction-policy", "LRU"])
    argv = d["argv"]
    assert argv[-len(d["engine"]["added"]) :] == d["engine"]["added"]
    assert _after(argv, "--l1-devdax-path") == "/dev/dax0.0"
    # the recorded device is 512 MiB; LMCache reads --l1-size-gb as GiB (int(v * 2**30))
    assert _after(argv, "--l1-size-gb") == "0.5"
    assert "--no-l1-use-lazy" in argv and _after(argv, "--shm-name") == ""
    assert _after(argv, "--l1-align-bytes") == str(2 * MIB)  # the device's align: mmap offsets and lengths
    assert "--cxl-pool-id" not in argv
    dd = d["devdax"]
    assert (dd["device"], dd["size"], dd["device_size"], dd["backend"]) == ("dax0.0", 512 * MIB, 512 * MIB, "lmcache")
    assert d["engine"]["flags_source"] == "probed" and fakes.help_calls() == 1
    assert [c["status"] for c in d["checks"] if c["name"] == "devdax"] == ["note"]  # a file, not a char device


def test_lmcache_kv_size_maps_part_of_the_device(capsys: Any, tree: str, fakes: Fakes) -> None:
    d = dry(tree, "lmcache", ["--devdax", "/dev/dax0.0", "--kv-size", "257M"], ["server"])
    # rounded down to the 2 MiB device alignment, then written exactly in GiB
    assert d["devdax"]["size"] == 256 * MIB
    assert _after(d["argv"], "--l1-size-gb") == "0.25" == size_gb(256 * MIB)
    assert int(float(size_gb(6 * MIB)) * (1 << 30)) == 6 * MIB


def test_lmcache_shared_pool_flags_only_where_the_build_has_them(capsys: Any, tree: str, fakes: Fakes) -> None:
    pool = ["--devdax", "dax0.0", "--devdax-pool-id", "rack0-pool0", "--devdax-offset", str(64 * MIB)]
    usage(tree, "lmcache", pool, ["server"], "no --cxl-pool-id or --cxl-pool-offset")
    fakes.set_lmcache(HELP_LMCACHE_POOL)
    d = dry(tree, "lmcache", pool, ["server"])
    assert _after(d["argv"], "--cxl-pool-id") == "rack0-pool0"
    assert _after(d["argv"], "--cxl-pool-offset") == str(64 * MIB)
    assert d["devdax"]["size"] == 448 * MIB  # the rest of the device after the offset
    usage(tree, "lmcache", pool[:4] + ["--devdax-offset", "4096"], ["server"], "alignment")


def test_lmcache_without_devdax_l1_is_refused(capsys: Any, tree: str, fakes: Fakes) -> None:
    fakes.set_lmcache(HELP_LMCACHE_OLD)
    usage(tree, "lmcache", ["--devdax", "auto"], ["server"], "has no --l1-devdax-path", "upgrade LMCache")


def test_lmcache_bad_requests(capsys: Any, tree: str, fakes: Fakes) -> None:
    usage(tree, "lmcache", [], ["server"], "--devdax is required")
    usage(tree, "lmcache", ["--devdax", "auto"], ["serve"], "multi-process server")
    usage(tree, "lmcache", ["--devdax", "auto"], ["server", "--shm-name", "x"], "--shm-name is set by cxlctl")
    usage(tree, "lmcache", ["--devdax", "auto"], ["server", "--l1-size-gb", "4"], "larger than dax0.0")
    usage(tree, "lmcache", ["--devdax", "auto", "--kv-size", "1G"], ["server"], "larger than dax0.0 holds")
    usage(tree, "lmcache", ["--devdax", "dax9.0"], ["server"], "no such DAX device", "region create")
    usage(tree, "lmcache", ["--devdax", "mem0"], ["server"], "not a DAX device name")
    usage(tree, "lmcache", ["--devdax", "auto", "--devdax-offset", "0"], ["server"], "needs --devdax-pool-id")


def test_devdax_refuses_a_device_onlined_as_system_ram(capsys: Any, fakes: Fakes) -> None:
    root = fixture_roots("linux-6.12/single-region")[0]
    usage(root, "lmcache", ["--devdax", "dax0.0"], ["server"], "system-ram mode (NUMA node 1)", "--mode devdax")
    usage(root, "lmcache", ["--devdax", "auto"], ["server"], "no DAX device in devdax mode")


# --------------------------------------------------------------------------- Mooncake


def test_mooncake_env_for_vllm(capsys: Any, tree: str, fakes: Fakes) -> None:
    fakes.add_mooncake("0.3.12")
    d = dry(tree, "vllm", ["--devdax", "auto", "--mooncake", "--kv-size", "128M"], ["serve", "m"])
    assert d["env"]["MC_CXL_DEV_PATH"] == "/dev/dax0.0"
    assert d["env"]["MC_CXL_DEV_SIZE"] == str(128 * MIB)
    assert "MC_CXL_POOL_ID" not in d["env"]
    assert "--kv-offloading-size" not in d["argv"]  # --kv-size sized the device mapping, not vLLM's offload
    assert d["devdax"]["mooncake_version"] == "0.3.12" and d["devdax"]["backend"] == "mooncake"
    assert not [w for w in d["warnings"] if "Mooncake" in w]


def test_mooncake_pool_settings_and_versions(capsys: Any, tree: str, fakes: Fakes) -> None:
    fakes.add_mooncake("0.3.12")
    opts = ["--devdax", "dax0.0", "--mooncake", "--devdax-pool-id", "p0", "--devdax-offset", str(128 * MIB)]
    d = dry(tree, "exec", opts, ["true"])
    env = d["env"]
    assert (env["MC_CXL_POOL_ID"], env["MC_CXL_BACKEND_KIND"], env["MC_CXL_MAP_OFFSET"]) == (
        "p0",
        "devdax",
        str(128 * MIB),
    )
    assert env["MC_CXL_DEV_SIZE"] == str(384 * MIB)
    assert any("CXL pool backend" in w for w in d["warnings"])


def test_mooncake_too_old_or_missing(capsys: Any, tree: str, fakes: Fakes, monkeypatch: Any) -> None:
    opts = ["--devdax", "auto", "--mooncake"]
    # not installed: a dry run plans with the assumed release and says so; a real launch refuses
    d = dry(tree, "exec", opts, ["true"])
    assert any("Mooncake not found" in w for w in d["warnings"]) and d["env"]["MC_CXL_DEV_PATH"] == "/dev/dax0.0"
    capsys.readouterr()
    assert run(["--root", tree, "launch", "exec", *opts, "--", "true"]) == 2
    assert "pip install mooncake-transfer-engine" in capsys.readouterr().err
    fakes.add_mooncake("0.3.5")
    usage(tree, "exec", opts, ["true"], "Mooncake 0.3.5 has no CXL transport")


def test_devdax_needs_a_backend(capsys: Any, tree: str, fakes: Fakes) -> None:
    usage(tree, "vllm", ["--devdax", "auto"], ["serve", "m"], "say which backend", "--mooncake")
    usage(tree, "vllm", ["--mooncake"], ["serve", "m"], "--mooncake needs --devdax")
    usage(tree, "vllm", ["--devdax", "auto", "--mooncake", "--lmcache"], ["serve", "m"], "two different")


# --------------------------------------------------------------------------- SGLang's own binding


def test_sglang_auto_numa_bind_is_switched_off_and_said(capsys: Any, tree: str, fakes: Fakes, monkeypatch: Any) -> None:
    fakes.set_sglang()
    monkeypatch.setenv("FAKE_SGLANG_VERSION", "0.5.18")
    monkeypatch.setenv("SGLANG_AUTO_NUMA_BIND", "1")
    d = dry(tree, "sglang", [], ["--model-path", "m"])
    assert d["env"]["SGLANG_AUTO_NUMA_BIND"] == "0"
    assert any("SGLANG_AUTO_NUMA_BIND=0: cxlctl's binding wins" in n and "on since 0.5.18" in n for n in d["notes"])
    assert any("SGLANG_AUTO_NUMA_BIND=1 in the environment is replaced by 0" in w for w in d["warnings"])
    capsys.readouterr()
    assert run(["--root", tree, "launch", "sglang", "--dry-run", "--", "--model-path", "m"]) == 0
    assert "cxlctl's binding wins" in capsys.readouterr().out  # the human dry run says it too


def test_lmcache_not_installed_dry_run_assumes_real_launch_refuses(capsys: Any, tree: str, monkeypatch: Any) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    d = dry(tree, "lmcache", ["--devdax", "auto"], ["server"])
    assert d["engine"]["flags_source"] == "assumed" and d["engine"]["version"] is None
    assert any("an LMCache with the devdax L1" in w for w in d["warnings"])
    assert "--l1-devdax-path" in d["argv"] and "--cxl-pool-id" not in d["argv"]
    capsys.readouterr()
    assert run(["--root", tree, "launch", "lmcache", "--devdax", "auto", "--", "server"]) == 2
    assert "lmcache engine not found" in capsys.readouterr().err


@pytest.mark.parametrize("series", ["linux-6.12", "linux-7.x"])
def test_recorded_devdax_tree(series: str, capsys: Any, tmp_path: Any, fakes: Fakes) -> None:
    """fixtures/linux-*/switch2-devdax (tests/vm/record_fleet.py): dax0.0 devdax beside dax1.0 system-ram."""
    t = copy_fixture(fixture_roots(f"{series}/switch2-devdax")[0], str(tmp_path / "rec"))
    write_status(t, "0-1")
    (tmp_path / "rec" / "dev").mkdir()
    with open(tmp_path / "rec" / "dev" / "dax0.0", "wb") as f:
        f.truncate(256 * MIB)  # the recorder copies sysfs and procfs, not /dev
    d = dry(t, "lmcache", ["--devdax", "auto"], ["server"])
    assert (d["devdax"]["device"], d["devdax"]["size"], d["devdax"]["align"]) == ("dax0.0", 256 * MIB, 2 * MIB)
    assert _after(d["argv"], "--l1-size-gb") == "0.25"
    usage(t, "lmcache", ["--devdax", "dax1.0"], ["server"], "system-ram mode (NUMA node 1)")
