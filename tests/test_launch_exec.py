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
from typing import Any, Dict, List, Optional, Tuple

import pytest

from cxlctl.launch.policy import MODES, numactl_argv
from tests.kit import REPO, cli
from tests.launch_support import Fakes

HOST_WI = os.path.isdir("/sys/kernel/mm/mempolicy/weighted_interleave")
#: the host's first node with memory and CPUs (node 0 on these machines)
with open("/sys/devices/system/node/has_memory") as _f:
    HOST_NODE = int(_f.read().strip().split(",")[0].split("-")[0])


#: CI runs as root: an engine keeps root only when asked (issue 43); the drop has tests of its own below
AS_ROOT = ["--allow-root"] if os.geteuid() == 0 else []
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="changing the engine's user needs root")


def launch(
    fakes: Fakes,
    *argv: str,
    extra: Dict[str, str] = {},  # noqa: B006
    as_root: bool = True,
    path_tail: Optional[str] = None,
) -> Tuple[int, str, str, int]:
    """(exit code, stdout, stderr, pid) of one real launch; ``as_root``: with ``--allow-root`` when
    the tests run as root (``launch ENGINE`` commands only), and never with the runner's SUDO_*."""
    if as_root and argv[:1] == ("launch",):
        argv = (*argv[:2], *AS_ROOT, *argv[2:])
    env = dict(os.environ)
    for k in ("CXLCTL_ROOT", "SUDO_UID", "SUDO_GID", "SUDO_USER"):
        env.pop(k, None)
    env.update(fakes.env(path_tail, **extra))
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
        [sys.executable, "-m", "cxlctl", "launch", "exec", *AS_ROOT, "--policy", "bind", "--mem-nodes", n]
        + ["--", "sleep", "60"],
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


# --------------------------------------------------------------------------- the engine's user (issue 43)

#: the engine: a shell that prints its own status and NUMA map (``$$`` is the exec'd engine itself)
_SELF = [
    "/bin/sh",
    "-c",
    '/bin/cat /proc/$$/status; echo ---; /bin/cat /proc/$$/numa_maps; echo ---; echo "HOME=$HOME"',
]


def _engine_status(out: str) -> Dict[str, str]:
    status, maps, home = out.split("---\n")
    got = {k: v.strip() for k, _, v in (line.partition(":") for line in status.splitlines())}
    got["numa_maps"] = maps
    got["home"] = home.strip()
    return got


def _nobody() -> Tuple[str, int, int]:
    import pwd

    pw = pwd.getpwnam("nobody")
    return pw.pw_name, pw.pw_uid, pw.pw_gid


@ROOT_ONLY
@pytest.mark.parametrize("method", ["numactl", "direct"])
def test_engine_launched_as_root_runs_as_the_user_without_capabilities(fakes: Fakes, method: str) -> None:
    """--user: the engine has the user's ids, no capability in any set, no_new_privs, and still the memory
    policy set before the drop (direct: set_mempolicy by cxlctl as root; numactl: by numactl as the user)."""
    name, uid, gid = _nobody()
    n = str(HOST_NODE)
    # no numactl on PATH makes cxlctl set the policy itself (as root), then drop
    tail = "/nonexistent" if method == "direct" else None
    rc, out, err, pid = launch(
        fakes,
        "launch",
        "exec",
        "--user",
        name,
        "--policy",
        "bind",
        "--mem-nodes",
        n,
        "--",
        *_SELF,
        path_tail=tail,
        as_root=False,
    )
    assert rc == 0, err
    st = _engine_status(out)
    assert st["Pid"] == str(pid), "the engine replaces cxlctl"
    assert st["Uid"].split() == [str(uid)] * 4 and st["Gid"].split() == [str(gid)] * 4
    for field in ("CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"):
        assert int(st[field], 16) == 0, (field, st[field])
    assert st["NoNewPrivs"] == "1"
    assert f" bind:{n} " in st["numa_maps"], "the memory policy survives the drop"
    assert st["home"] == "HOME=" + _passwd_home(name)
    assert ("policy applied by cxlctl itself" in err) == (method == "direct")
    assert f"cxlctl: user {name} (uid {uid})" in err and "no capabilities, no_new_privs" in err


def _passwd_home(name: str) -> str:
    import pwd

    return pwd.getpwnam(name).pw_dir


@ROOT_ONLY
def test_engine_defaults_to_the_sudo_caller_and_the_plan_says_so(fakes: Fakes) -> None:
    name, uid, gid = _nobody()
    sudo = {"SUDO_UID": str(uid), "SUDO_GID": str(gid)}
    rc, out, err, _ = launch(fakes, "launch", "exec", "--dry-run", "--json", "--", *_SELF, extra=sudo, as_root=False)
    assert rc == 0, err
    plan = json.loads(out)
    assert plan["run_as"] == {
        "user": name,
        "uid": uid,
        "group": plan["run_as"]["group"],
        "gid": gid,
        "groups": [],
        "source": "sudo caller (SUDO_UID)",
        "drop_privileges": True,
        "refused": None,
    }
    assert f"setpriv --reuid={uid} --regid={gid}" in plan["numactl_command"]
    rc, out, err, _ = launch(fakes, "launch", "exec", "--dry-run", "--", "true", extra=sudo, as_root=False)
    assert rc == 0 and f"user:     {name} (uid {uid})" in out, out
    rc, out, err, _ = launch(fakes, "launch", "exec", "--", *_SELF, extra=sudo, as_root=False)
    assert rc == 0, err
    st = _engine_status(out)
    assert st["Uid"].split() == [str(uid)] * 4 and int(st["CapBnd"], 16) == 0 and st["NoNewPrivs"] == "1"


@ROOT_ONLY
def test_root_engine_refused_unless_asked(fakes: Fakes) -> None:
    """As root with no sudo caller and no --user: refused (exit 2, one line + hint, nothing run); the dry
    run warns; --allow-root keeps root; --user with --allow-root is a usage error."""
    rc, out, err, _ = launch(fakes, "launch", "exec", "--", *_SELF, as_root=False)
    assert rc == 2 and "refusing to run the engine as root" in err and "--allow-root" in err, err
    assert out == "" and "Traceback" not in err and len(err.strip().splitlines()) == 2
    rc, out, err, _ = launch(fakes, "launch", "exec", "--dry-run", "--json", "--", "true", as_root=False)
    plan = json.loads(out)
    assert rc == 0 and plan["run_as"]["uid"] == 0 and plan["run_as"]["refused"]
    assert any(w.startswith("a real launch is refused") for w in plan["warnings"])
    rc, out, err, _ = launch(fakes, "launch", "exec", "--", *_SELF)  # --allow-root
    assert rc == 0, err
    st = _engine_status(out)
    assert st["Uid"].split() == ["0"] * 4 and st["NoNewPrivs"] == "0"
    for argv in (["--allow-root", "--user", "nobody"], ["--user", "root"], ["--user", "no-such-user-43"]):
        rc, out, err, _ = launch(fakes, "launch", "exec", *argv, "--", "true", as_root=False)
        assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 2, (argv, err)


@ROOT_ONLY
def test_kv_tmpfs_is_mounted_nosuid_nodev_noexec(tmp_path: Any) -> None:
    """The private /dev/shm's flags (here on a directory of the test's, in a child's own mount namespace)."""
    target = tmp_path / "shm"
    target.mkdir()
    code = (
        "from cxlctl.launch.policy import unshare_shm\n"
        f"unshare_shm(1 << 20, [{HOST_NODE}], 'bind', target={str(target)!r})\n"
        "print(next(l for l in open('/proc/self/mounts') if ' ' + "
        f"{str(target)!r} + ' ' in l))"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    opts = p.stdout.split()[3].split(",")
    assert {"nosuid", "nodev", "noexec"} <= set(opts) and f"mpol=bind:{HOST_NODE}" in opts, p.stdout
