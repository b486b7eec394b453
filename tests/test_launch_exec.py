"""Real launches on this machine: fake engines on PATH report what they really received.

Each launch runs ``python -m cxlctl launch ...`` as a subprocess (it execs, so
it cannot run in-process) against the live host (``--root /``: the policy is
set on this kernel, so the nodes must be this kernel's).  The fake engine
writes its argv, environment, PID, CPU affinity and the policy it inherited
(get_mempolicy through ctypes) — so the tests see what the engine got, not
what cxlctl meant to give it.  The PID equals that of the launched cxlctl
process: the engine replaced it (exec), it is not a child.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any, Dict, List, Tuple

import pytest

from cxlctl.launch.policy import MODES, numactl_argv
from tests.kit import REPO, cli
from tests.launch_support import Fakes

HOST_WI = os.path.isdir("/sys/kernel/mm/mempolicy/weighted_interleave")
#: the host's first node with memory and CPUs (node 0 on these machines)
with open("/sys/devices/system/node/has_memory") as _f:
    HOST_NODE = int(_f.read().strip().split(",")[0].split("-")[0])


def launch(fakes: Fakes, *argv: str, extra: Dict[str, str] = {}) -> Tuple[int, str, str, int]:  # noqa: B006
    """(exit code, stdout, stderr, pid) of one real launch."""
    env = dict(os.environ)
    env.pop("CXLCTL_ROOT", None)
    env.update(fakes.env(**extra))
    p = subprocess.Popen(
        [sys.executable, "-m", "cxlctl", *argv],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = p.communicate(timeout=120)
    return p.returncode, out, err, p.pid


def _cpus(node: int) -> List[int]:
    from cxlctl.parse import parse_nodelist

    with open(f"/sys/devices/system/node/node{node}/cpulist") as f:
        return list(parse_nodelist(f.read(), limit=1 << 16))


@pytest.fixture
def fakes(tmp_path: Any) -> Fakes:
    return Fakes(str(tmp_path / "fakes"))


def _dry_argv(fakes: Fakes, *opts: str) -> Dict[str, Any]:
    rc, out, err, _ = launch(fakes, "launch", *opts[:1], "--dry-run", "--json", *opts[1:])
    assert rc == 0, err
    data: Dict[str, Any] = json.loads(out)
    return data


def test_vllm_direct_policy_is_inherited_through_exec(fakes: Fakes) -> None:
    mode = "weighted-interleave" if HOST_WI else "interleave"
    n = str(HOST_NODE)
    opts = (
        "vllm",
        "--policy",
        mode,
        "--mem-nodes",
        n,
        "--cpu-nodes",
        n,
        "--kv-size",
        "64M",
        "--",
        "serve",
        "org/m",
        "-tp",
        "1",
    )
    plan = _dry_argv(fakes, *opts)
    rc, out, err, pid = launch(fakes, "launch", *opts)
    assert rc == 0, err
    rep = fakes.report()
    assert rep["pid"] == pid, "the engine must replace cxlctl (exec), not run as its child"
    assert rep["argv"][1:] == [
        "serve",
        "org/m",
        "-tp",
        "1",
        "--kv-offloading-size",
        "0.06",
        "--kv-offloading-backend",
        "native",
    ]
    assert [os.path.basename(rep["argv"][0])] + rep["argv"][1:] == [os.path.basename(plan["argv"][0])] + plan["argv"][
        1:
    ]
    assert rep["mempolicy"] == {"mode": MODES[mode], "nodes": [HOST_NODE]}
    assert rep["affinity"] == _cpus(HOST_NODE)
    assert rep["env"]["CXLCTL_POLICY"].startswith(f"mode={mode} nodes={n} cpunodes={n}")
    assert "policy:   " not in out and f"cxlctl: policy {mode}" in err, (
        "the plan goes to stderr, the engine owns stdout"
    )
    if mode == "weighted-interleave":
        assert "has no --weighted-interleave" in err  # bookworm's numactl 2.0.16: set directly


def test_vllm_through_installed_numactl(fakes: Fakes) -> None:
    n = str(HOST_NODE)
    rc, out, err, pid = launch(fakes, "launch", "vllm", "--policy", "bind", "--mem-nodes", n, "--", "serve", "m")
    assert rc == 0, err
    rep = fakes.report()
    assert rep["pid"] == pid  # numactl execs too: still the same process
    assert rep["mempolicy"] == {"mode": MODES["bind"], "nodes": [HOST_NODE]} and rep["argv"][1:] == ["serve", "m"]
    if shutil.which("numactl"):
        assert "policy applied by " in err and "numactl" in err
    else:
        assert "numactl is not installed" in err


def test_new_numactl_gets_weighted_interleave(fakes: Fakes, tmp_path: Any) -> None:
    f = Fakes(str(tmp_path / "f2"), new_numactl=True)
    n = str(HOST_NODE)
    rc, out, err, pid = launch(f, "launch", "vllm", "--mem-nodes", n, "--cpu-nodes", n, "--", "serve", "m")
    assert rc == 0, err
    with open(f.numactl_out) as fh:
        got = json.load(fh)
    assert (
        got[:3] == [f"--cpunodebind={n}", f"--weighted-interleave={n}", "--"]
        and got[3].endswith("vllm")
        and got[4:] == ["serve", "m"]
    )
    assert f.report()["pid"] == pid


def test_numactl_argv_matches_dry_run_equivalent(fakes: Fakes) -> None:
    from cxlctl.launch.policy import Policy

    p = Policy("weighted-interleave", (0, 1), (0,), (0, 1), ((0, 3), (1, 1)))
    assert numactl_argv(p) == ["numactl", "--cpunodebind=0", "--weighted-interleave=0-1", "--"]
    assert numactl_argv(p._replace(mode="local", nodes=())) == ["numactl", "--cpunodebind=0", "--localalloc", "--"]


def test_sglang_fake_package_receives_flags_env_and_policy(fakes: Fakes) -> None:
    fakes.set_sglang()
    n = str(HOST_NODE)
    rc, out, err, pid = launch(
        fakes, "launch", "sglang", "--policy", "bind", "--mem-nodes", n, "--kv-size", "2G", "--", "--model-path", "m"
    )
    assert rc == 0, err
    rep = fakes.report()
    assert rep["pid"] == pid
    assert rep["argv"][0].endswith("launch_server.py")
    assert rep["argv"][1:] == [
        "--model-path",
        "m",
        "--enable-hierarchical-cache",
        "--hicache-size",
        "2",
    ]
    assert rep["env"]["SGLANG_AUTO_NUMA_BIND"] == "0"
    assert rep["mempolicy"] == {"mode": MODES["bind"], "nodes": [HOST_NODE]}
    assert rep["affinity"] == _cpus(HOST_NODE), "CPUs always bound: SGLang skips its own NUMA binding then"


def test_exec_with_lmcache_env(fakes: Fakes) -> None:
    script = os.path.join(fakes.bin, "vllm")
    n = str(HOST_NODE)
    rc, out, err, pid = launch(
        fakes,
        "launch",
        "exec",
        "--policy",
        "preferred",
        "--mem-nodes",
        n,
        "--kv-size",
        "3G",
        "--lmcache",
        "--",
        script,
        "serve",
        "x",
    )
    assert rc == 0, err
    rep = fakes.report()
    assert rep["pid"] == pid and rep["mempolicy"] == {"mode": MODES["preferred"], "nodes": [HOST_NODE]}
    assert rep["env"]["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "3" and rep["env"]["LMCACHE_LOCAL_CPU"] == "True"


def test_feature_detection_cached_across_runs(fakes: Fakes) -> None:
    n = str(HOST_NODE)
    for _ in range(2):
        rc, _, err, _ = launch(fakes, "launch", "vllm", "--policy", "bind", "--mem-nodes", n, "--", "serve", "m")
        assert rc == 0, err
    assert fakes.help_calls() == 1


def test_bad_input_exits_2_and_launches_nothing(fakes: Fakes) -> None:
    for argv, needle in (
        (["launch", "vllm", "--mem-nodes", "77", "--", "serve", "m"], "unknown node 77"),
        (["launch", "vllm", "--mem-nodes", "", "--", "serve", "m"], "is empty"),
        (["launch", "vllm", "--cpu-nodes", "0-", "--", "serve", "m"], "bad element"),
        (["launch", "vllm", "--kv-size", "12Q", "--", "serve", "m"], "bad size"),
        (["launch", "vllm", "--engine-cmd", "/no/such/vllm", "--", "serve", "m"], "not on PATH"),
        (["launch", "exec", "--", "/no/such/program"], "program not found"),
    ):
        rc, out, err, _ = launch(fakes, *argv)
        assert rc == 2, (argv, rc, err)
        assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2, err
    assert not os.path.exists(fakes.out)


def test_policy_show_matches_and_detects_drift(fakes: Fakes) -> None:
    n = str(HOST_NODE)
    env = dict(os.environ)
    env.update(fakes.env())
    p = subprocess.Popen(
        [sys.executable, "-m", "cxlctl", "launch", "exec", "--policy", "bind", "--mem-nodes", n, "--", "sleep", "60"],
        cwd=REPO,
        env=env,
        stderr=subprocess.DEVNULL,
    )
    other = subprocess.Popen(["sleep", "60"], env={**env, "CXLCTL_POLICY": f"mode=interleave nodes={n} cpunodes={n}"})
    try:
        for _ in range(100):
            with open(f"/proc/{p.pid}/cmdline", "rb") as f:
                if f.read().startswith(b"sleep"):
                    break
            time.sleep(0.05)
        r = cli("policy", "show", str(p.pid), "--json")
        assert r.returncode == 0, r.stderr
        rep = json.loads(r.stdout)
        assert rep["policy"]["mode"] == "bind" and rep["policy"]["nodes"] == [HOST_NODE] and rep["match"] is True
        assert {c["check"]: c["status"] for c in rep["checks"]} == {
            "mode": "pass",
            "nodes": "pass",
            "cpuset": "pass",
            "cpus": "pass",
            "placement": "pass",
        }
        assert sum(rep["pages"]["anon"].values()) > 0 and list(rep["pages"]["anon"]) == [n]
        human = cli("policy", "show", str(p.pid))
        assert human.returncode == 0 and "matches what was asked" in human.stdout
        # a process whose policy is not what its CXLCTL_POLICY says: drift, exit 3
        r = cli("policy", "show", str(other.pid), "--json")
        assert r.returncode == 3, r.stderr
        rep = json.loads(r.stdout)
        assert rep["match"] is False and rep["policy"]["mode"] == "default"
        assert next(c for c in rep["checks"] if c["check"] == "mode")["status"] == "fail"
    finally:
        p.kill()
        other.kill()
        p.wait()
        other.wait()
    for pid, code, needle in (("999999999", 2, "no process with PID"), ("0", 2, "not a process id"), ("x", 2, "")):
        r = cli("policy", "show", pid)
        assert r.returncode == code and needle in r.stderr and "Traceback" not in r.stderr, r.stderr
