"""Guest side of test_vm_hmat's weighted-interleave and traffic checks (7.x, ``hmat2``, both regions online).

``$PY hmat_guest_driver.py TOUCH`` inside the VM, after the status checks:

1. the weights at boot (``auto`` on: the kernel's, from HMAT/CDAT);
2. ``tune apply inference-bandwidth`` (auto mode where the kernel has it), then a program launched
   with ``launch exec --policy weighted-interleave`` over DRAM and both CXL nodes touches 16 MiB:
   its pages per node (``numa_maps``) and the weights in effect while it ran;
3. ``tune apply vm-bw-own`` (the same, ``prefer_auto = false``: cxlctl's own weights, ``auto``
   switched off), the same launch;
4. ``tune revert``: every weight file and ``auto`` as at boot;
5. traffic: a program in cgroup ``/p3hold`` holds 48 MiB on DRAM; ``stat --json --interval 20
   --count 2`` runs while ``tune reclaim 4M --cgroup /p3hold`` demotes part of it (the kernel's
   counters copied around it), and ``top --count 2`` (plain text: not a terminal) runs across a
   second cgroup reclaim; last, ``tune reclaim 16M --node 0`` (the kernel's node-reclaim gate:
   with the node's page cache below ``vm.min_unmapped_ratio`` it scans nothing), the same with
   ``vm.min_unmapped_ratio=0`` (the gate open: it scans and demotes), the ratio restored.

Every cxlctl command but the launches, ``stat`` and ``top`` runs in this process
(``cxlctl.cli.run``: a cold ``python -m cxlctl`` costs tens of seconds under TCG).  Results go to ``$OUT``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from tests.vm.guest import OUT, cx, get, log

PY = sys.executable
TOUCH = sys.argv[1]
WI = "/sys/kernel/mm/mempolicy/weighted_interleave"

OWN = """
summary = "VM test: inference-bandwidth with cxlctl's own weights (the kernel's auto mode off)"
include = "inference-bandwidth"
[knobs.weighted_interleave]
weights = "bandwidth"
nodes = ["dram", "cxl"]
prefer_auto = false
reason = "VM test: cxlctl's weights from HMAT/CDAT, auto switched off"
"""


def wi(label: str) -> None:
    with open(f"{OUT}/{label}-wi.json", "w") as f:
        json.dump({n: get(f"{WI}/{n}") for n in sorted(os.listdir(WI))}, f)


def copy(src: str, dst: str) -> None:
    with open(f"{OUT}/{dst}", "w") as f:
        f.write(get(src) + "\n")


def wait_ready(path: str, p: subprocess.Popen[bytes], seconds: float = 600) -> bool:
    end = time.time() + seconds
    while time.time() < end and p.poll() is None:
        if get(path).isdigit():
            return True
        time.sleep(0.3)
    return False


def launched(label: str, nodes: str) -> None:
    ready = f"{OUT}/{label}.ready"
    # --set-weights: the launch sets the weights from bandwidth as it did before issue 44 (a launch
    # now changes the system-wide weights only when asked)
    cmd = [
        PY,
        "-m",
        "cxlctl",
        "launch",
        "exec",
        "--allow-root",
        "--policy",
        "weighted-interleave",
        "--set-weights",
        "--cpu-nodes",
        "0",
    ]
    cmd += ["--mem-nodes", nodes, "--", TOUCH, "16", ready]
    p = subprocess.Popen(cmd, stdout=open(f"{OUT}/{label}.out", "w"), stderr=open(f"{OUT}/{label}.err", "w"))
    if wait_ready(ready, p):
        copy(f"/proc/{p.pid}/numa_maps", f"{label}.numa_maps")
        wi(f"{label}-running")
    log(f"launch {label} over {nodes}: ready={get(ready)} rc={p.poll()}")
    p.kill()
    p.wait()


def counters(label: str) -> None:
    get("/proc/sys/vm/stat_refresh")  # the per-CPU deltas folded first, as tune reclaim does
    copy("/proc/vmstat", f"{label}.vmstat")
    copy("/sys/devices/system/node/node0/vmstat", f"{label}.node0.vmstat")
    copy("/sys/devices/system/node/node0/meminfo", f"{label}.node0.meminfo")


def main() -> None:
    cx("status", "status", "--json")
    with open(f"{OUT}/status.json") as f:
        st = json.load(f)
    cxl = [n["id"] for n in st["nodes"] if n["kind"] == "cxl" and n["has_memory"]]
    nodes = ",".join(str(n) for n in [0] + cxl)
    wi("boot")
    # -- 2. the shipped profile: auto mode
    cx("apply-auto", "tune", "apply", "inference-bandwidth", "--json")
    wi("auto")
    launched("launch-auto", nodes)
    # -- 3. cxlctl's own weights, auto off
    os.makedirs("/etc/cxlctl/profiles", exist_ok=True)
    with open("/etc/cxlctl/profiles/vm-bw-own.toml", "w") as f:
        f.write(OWN.strip() + "\n")
    cx("plan-own", "tune", "plan", "vm-bw-own", "--json")
    cx("apply-own", "tune", "apply", "vm-bw-own", "--json")
    wi("own")
    cx("status-own", "tune", "status", "--json")
    launched("launch-own", nodes)
    # -- 4. revert: auto and every weight as at boot
    cx("revert", "tune", "revert", "--json")
    wi("reverted")
    # -- 5. traffic through proactive demotion (demotion on, as inference-bandwidth has it)
    demotion = get("/sys/kernel/mm/numa/demotion_enabled")
    with open("/sys/kernel/mm/numa/demotion_enabled", "w") as f:
        f.write("true\n")
    subprocess.run(
        "grep -q ' /sys/fs/cgroup cgroup2 ' /proc/mounts || mount -t cgroup2 none /sys/fs/cgroup", shell=True
    )
    subprocess.run("echo +memory > /sys/fs/cgroup/cgroup.subtree_control", shell=True)
    os.makedirs("/sys/fs/cgroup/p3hold", exist_ok=True)
    ready = f"{OUT}/hold.ready"
    hold = subprocess.Popen(
        ["sh", "-c", f"echo $$ > /sys/fs/cgroup/p3hold/cgroup.procs && exec numactl --membind=0 {TOUCH} 48 {ready}"],
        stderr=open(f"{OUT}/hold.err", "w"),
    )
    wait_ready(ready, hold)
    counters("stat-before")
    stat = subprocess.Popen(
        # the interval covers the whole reclaim: demoting 16 MiB took 38 s here, and the counters
        # showed nothing of it within a 3 s interval
        [PY, "-m", "cxlctl", "stat", "--json", "--interval", "20", "--count", "2"],
        stdout=open(f"{OUT}/stat.jsonl", "w"),
        stderr=open(f"{OUT}/stat.err", "w"),
    )
    end = time.time() + 300
    while time.time() < end and not get(f"{OUT}/stat.jsonl").strip() and stat.poll() is None:
        time.sleep(0.2)
    t0 = time.time()
    cx("reclaim", "tune", "reclaim", "4M", "--cgroup", "/p3hold", "--json")
    log(f"reclaim took {time.time() - t0:.2f} s")
    counters("stat-reclaimed")
    with open(f"{OUT}/stat.rc", "w") as f:
        f.write(f"{stat.wait()}\n")
    counters("stat-after")
    top = subprocess.Popen(
        [PY, "-m", "cxlctl", "top", "--count", "2", "--interval", "3"],
        stdout=open(f"{OUT}/top.txt", "w"),
        stderr=open(f"{OUT}/top.err", "w"),
        env=dict(os.environ, COLUMNS="100"),
    )
    end = time.time() + 300
    while time.time() < end and "cxlctl top" not in get(f"{OUT}/top.txt") and top.poll() is None:
        time.sleep(0.2)
    cx("reclaim2", "tune", "reclaim", "2M", "--cgroup", "/p3hold", "--json")
    with open(f"{OUT}/top.rc", "w") as f:
        f.write(f"{top.wait()}\n")
    # the node's own file last (kernels after 6.12): what it did here is kept as figures.  Last,
    # because with the gate open it demotes mapped page cache too -- the interpreter's and libc's
    # code -- to a CXL node, and QEMU runs code from its emulated CXL memory (not RAM) about 300
    # times slower (``python3 -c pass`` 0.35 s with its files cached on DRAM, 105 s on the CXL node,
    # in a 7.x hmat2 guest; docs/testing.md).  In one fresh-clone CI run the stat and top started
    # after it took 20 minutes to print anything (node0 Mapped 8.3 -> 3.4 MB), and the boot ran
    # out of time
    counters("node-before")
    cx("reclaim-node", "tune", "reclaim", "16M", "--node", "0", "--json")
    counters("node-after")
    if os.path.exists("/sys/devices/system/node/node0/reclaim"):
        ratio = get("/proc/sys/vm/min_unmapped_ratio")
        with open("/proc/sys/vm/min_unmapped_ratio", "w") as f:
            f.write("0\n")
        try:
            cx("reclaim-node-open", "tune", "reclaim", "16M", "--node", "0", "--json")
        finally:
            with open("/proc/sys/vm/min_unmapped_ratio", "w") as f:
                f.write(ratio + "\n")
        counters("node-open-after")
    copy(f"/proc/{hold.pid}/numa_maps", "hold.numa_maps")
    hold.kill()
    hold.wait()
    os.rmdir("/sys/fs/cgroup/p3hold")
    with open("/sys/kernel/mm/numa/demotion_enabled", "w") as f:
        f.write(demotion + "\n")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # the host reads driver.log; the exit status fails the test
        log(f"driver failed: {e!r}")
        raise
