"""Guest side of tests/vm/test_vm_damon.py: ``$PY damon_guest_driver.py MODE TOOLS`` inside the VM.

MODE ``full`` (6.12 and 7.x, a CXL node online):

0. (7.x) DAMON_STAT runs from boot: ``tune plan inference-damon`` refuses beside it, naming the
   fix; the driver stops it that way and starts it again at the end;
1. record DAMON's sysfs with no kdamond (``single-region-damon-idle``);
2. start a kdamond by hand the way damo or a script would (paddr, one ``stat``
   scheme), record it (``single-region-damon-running``), and check that cxlctl
   refuses to apply inference-damon beside it; then stop and remove it by hand;
3. start two C helpers in the cgroup ``/damon-test``: ``cold`` touches 4 MiB once
   on the DRAM node and sleeps, ``hot`` keeps touching 1 MiB placed on the CXL node;
4. apply ``vm-damon`` (inference-damon with short ages, scoped to that cgroup and
   to anonymous pages), verify, poll the helpers' ``numa_maps`` until the pages
   moved (or a deadline), ``tune status``; record ``single-region-damon-tiering``;
5. stop cxlctl's kdamond 0 by hand → ``tune verify`` reports drift; ``tune revert``
   → no kdamond left, the sysctls back at their boot values;
6. plan and apply ``vm-damon-goals`` (``hot_on_dram``, 7.2+): refused on a kernel without the
   metric (exit 2, nothing written), reverted where it applied.

MODE ``goals`` (7.x): see :func:`goals`.

MODE ``old`` (6.1): record ``single-noregion-damon``; plan/apply inference-damon
(DAMON reported unavailable, the rest applies); revert.

Every cxlctl command runs in this one process (``cxlctl.cli.run``): a cold
``python -m cxlctl`` costs 30-50 s under TCG.  Results go to ``$OUT``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from typing import Dict, List

from cxlctl.hostio.host import Host
from cxlctl.record import record
from tests.vm.guest import DAMON_STAT, OUT, cx, get, log, put, save, sh, stop_damon_stat

MODE = sys.argv[1]
TOOLS = sys.argv[2] if len(sys.argv) > 2 else ""
D = "/sys/kernel/mm/damon/admin/kdamonds"
CG = "/sys/fs/cgroup/damon-test"
SYSCTLS = ("kernel.numa_balancing", "vm.swappiness", "vm.zone_reclaim_mode")
#: the goal check's hot set (MiB), placed on the CXL node and kept hot (see :func:`goals`)
HOT_MIB = 32


def snap(name: str) -> None:
    """``cxlctl record`` onto the guest's tmpfs, then one copy to $OUT (9p is slow under TCG).

    Only when recording (``CXLCTL_RECORD_DAMON_FIXTURES=1``, passed in by the test's script): a
    record costs about a minute under TCG, three per boot."""
    if os.environ.get("CXLCTL_RECORD_DAMON_FIXTURES") != "1":
        return
    tmp = f"/tmp/damon-record/{name}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.dirname(tmp), exist_ok=True)
    record(Host("/"), tmp, include_process_data=True)
    peers = os.path.join(tmp, "peers")
    os.makedirs(peers)
    with open(os.path.join(peers, "damon-tree.txt"), "w") as f:
        f.write(sh(f"cd {D} && grep -r . . 2>&1 | sort"))
    with open(os.path.join(peers, "uname-r.txt"), "w") as f:
        f.write(os.uname().release + "\n")
    # the same peers as every recorded tree (tests/test_inventory_fixtures.py compares with them)
    for cmd, peer in (("cxl list -vvv", "cxl-list"), ("daxctl list -iDRM", "daxctl-list"), ("numactl -H", "numactl-H")):
        done = subprocess.run(cmd, shell=True, capture_output=True, text=True)
        with open(os.path.join(peers, f"{peer}.{'txt' if peer == 'numactl-H' else 'json'}"), "w") as f:
            f.write(done.stdout)
        if done.stderr.strip():
            with open(os.path.join(peers, f"{peer}.err"), "w") as f:
                f.write(done.stderr)
    shutil.copytree(tmp, f"{OUT}/fixtures/{name}", symlinks=True)
    log(f"recorded {name}")


def readback(label: str) -> None:
    lines = [f"sysctl {k} {sh(f'sysctl -n {k}')}" for k in SYSCTLS]
    lines.append(f"demotion_enabled {get('/sys/kernel/mm/numa/demotion_enabled')}")
    lines.append(f"nr_kdamonds {get(D + '/nr_kdamonds')}")
    lines.append("kdamonds " + (" ".join(sorted(os.listdir(D))) if os.path.isdir(D) else "ABSENT"))
    with open(f"{OUT}/{label}-readback.txt", "w") as f:
        f.write("\n".join(lines) + "\n")


def numa_maps(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/numa_maps") as f:
            return f.read()
    except OSError as e:
        return f"ERR {e.strerror}"


DAMON_RECLAIM = "/sys/module/damon_reclaim/parameters/enabled"


def beside_damon_reclaim() -> None:
    """DAMON_RECLAIM on: what cxlctl's plan says, and what the kernel itself does with a sysfs
    kdamond's ``state=on`` beside it (the module starts exclusively: EBUSY expected); then off."""
    if not os.path.exists(DAMON_RECLAIM):
        return
    put(DAMON_RECLAIM, "Y")
    cx("reclaim-module-plan", "tune", "plan", "inference-damon", "--json")
    bare_kdamond()
    try:
        put(f"{D}/0/state", "on")
        kernel = "started"
    except OSError as e:
        kernel = f"errno {e.errno}"
    save("reclaim-module-kernel.json", {"state_on": kernel, "state": get(f"{D}/0/state")})
    if kernel == "started":
        put(f"{D}/0/state", "off")
    put(f"{D}/nr_kdamonds", "0")
    put(DAMON_RECLAIM, "N")
    log(f"DAMON_RECLAIM beside a sysfs kdamond: {kernel}")


def bare_kdamond() -> None:
    """One sysfs kdamond, off: one paddr context with one target, no scheme."""
    put(f"{D}/nr_kdamonds", "1")
    put(f"{D}/0/contexts/nr_contexts", "1")
    put(f"{D}/0/contexts/0/operations", "paddr")
    put(f"{D}/0/contexts/0/targets/nr_targets", "1")


def foreign_kdamond() -> None:
    """A kdamond set up by hand, as damo or a script does: paddr, one ``stat`` scheme, on."""
    bare_kdamond()
    put(f"{D}/0/contexts/0/schemes/nr_schemes", "1")
    put(f"{D}/0/contexts/0/schemes/0/action", "stat")
    put(f"{D}/0/state", "on")
    time.sleep(3)
    put(f"{D}/0/state", "update_schemes_stats")


def helper(mode: str, mib: int, node: int) -> subprocess.Popen:  # type: ignore[type-arg]
    """Start a helper inside the test cgroup; returns once it has touched its pages."""
    ready = f"{OUT}/{mode}.ready"
    cmd = f"echo $$ > {CG}/cgroup.procs && exec {TOOLS}/tier {mode} {mib} {node} {ready}"
    p = subprocess.Popen(["sh", "-c", cmd], stderr=open(f"{OUT}/{mode}.err", "w"))
    for _ in range(600):
        if os.path.exists(ready) and get(ready).isdigit():
            break
        time.sleep(0.5)
    log(f"helper {mode} pid {p.pid} ready={get(ready)}")
    return p


def pages(pid: int) -> Dict[int, int]:
    """Pages per node of the helper's biggest anonymous mapping (``numa_maps`` N<node>=<pages>)."""
    best: Dict[int, int] = {}
    for line in numa_maps(pid).splitlines():
        if " anon=" not in line:
            continue
        cur = {}
        for w in line.split():
            if w.startswith("N") and "=" in w and w[1:].split("=")[0].isdigit():
                n, v = w[1:].split("=")
                cur[int(n)] = int(v)
        if sum(cur.values()) > sum(best.values()):
            best = cur
    return best


def full() -> None:
    cx("status-inventory", "status", "--json")
    with open(f"{OUT}/status-inventory.json") as f:
        status = json.load(f)
    cxl = [n["id"] for n in status.get("nodes", []) if n.get("kind") == "cxl" and n.get("has_memory")]
    put(f"{OUT}/cxl-node", str(cxl[0] if cxl else -1))
    readback("boot")
    snap("single-region-damon-idle")
    cx("recommend", "tune", "recommend", "--json")
    had_stat = stop_damon_stat()
    beside_damon_reclaim()
    # -- someone else's kdamond
    foreign_kdamond()
    snap("single-region-damon-running")
    cx("foreign-plan", "tune", "plan", "inference-damon", "--json")
    cx("foreign-apply", "tune", "apply", "inference-damon", "--json")
    readback("foreign")
    put(f"{D}/0/state", "off")
    put(f"{D}/nr_kdamonds", "0")
    # -- tiering, scoped to the helpers' cgroup
    sh("grep -q ' /sys/fs/cgroup cgroup2 ' /proc/mounts || mount -t cgroup2 none /sys/fs/cgroup")
    sh("echo +memory > /sys/fs/cgroup/cgroup.subtree_control")
    os.makedirs(CG, exist_ok=True)
    node = cxl[0]
    cold_mib, hot_mib = 4, 1
    cold = helper("cold", cold_mib, 0)
    hot = helper("hot", hot_mib, node)
    with open(f"{OUT}/pages-start.json", "w") as f:
        json.dump({"cold": pages(cold.pid), "hot": pages(hot.pid)}, f)
    cx("plan", "tune", "plan", "vm-damon", "--json")
    t0 = time.time()
    cx("apply", "tune", "apply", "vm-damon", "--json")
    readback("applied")
    sh(f"cd {D} && grep -r . . > {OUT}/applied-tree.txt 2>&1")
    cx("verify", "tune", "verify", "--json")
    trace: List[Dict[str, object]] = []
    cold_done = hot_done = False
    # 6.16+: a node_mem_free_bp goal on the cold scheme that this guest's mostly free DRAM meets keeps
    # its quota at zero; then only the hot set is waited for (and 45 s at least, to see nothing move)
    free_goal = get(f"{D}/0/contexts/0/schemes/0/quotas/goals/0/target_metric") == "node_mem_free_bp"
    while time.time() - t0 < 180 and not ((cold_done or (free_goal and time.time() - t0 >= 45)) and hot_done):
        time.sleep(3)
        c, h = pages(cold.pid), pages(hot.pid)
        trace.append({"t": round(time.time() - t0, 1), "cold": c, "hot": h})
        # against the 4 KiB pages mapped, not the pages numa_maps counts now: a page in
        # mid-migration is a migration entry there, counted on no node
        cold_done = c.get(node, 0) >= 0.9 * cold_mib * 256
        hot_done = h.get(0, 0) >= 0.5 * hot_mib * 256 and sum(h.values()) == hot_mib * 256
        with open(f"{OUT}/pages-trace.json", "w") as f:
            json.dump(trace, f)
    with open(f"{OUT}/numa_maps-cold.txt", "w") as f:
        f.write(numa_maps(cold.pid))
    with open(f"{OUT}/numa_maps-hot.txt", "w") as f:
        f.write(numa_maps(hot.pid))
    cx("status", "tune", "status", "--json")
    snap("single-region-damon-tiering")
    # -- drift: cxlctl's kdamond stopped by hand
    put(f"{D}/0/state", "off")
    cx("drift-verify", "tune", "verify", "--json")
    cx("revert", "tune", "revert", "--json")
    readback("reverted")
    cx("after-revert-status", "tune", "status", "--json")
    for p in (cold, hot):
        p.kill()
    # -- a goal statement this kernel may lack (hot_on_dram: 7.2+): a kernel without it refuses
    if os.path.exists("/etc/cxlctl/profiles/vm-damon-goals.toml"):
        cx("goals-plan", "tune", "plan", "vm-damon-goals", "--json")
        if cx("goals-apply", "tune", "apply", "vm-damon-goals", "--json") == 0:
            cx("goals-revert", "tune", "revert", "--json")
        readback("goals")
    if had_stat:
        put(DAMON_STAT, "Y")


def goal_state(k: int) -> Dict[str, str]:
    """What the kernel says about kdamond ``k``'s scheme 0: its goals' current values and the quota it tuned."""
    for cmd in ("update_schemes_stats", "update_schemes_effective_quotas"):
        try:
            put(f"{D}/{k}/state", cmd)
        except OSError as e:
            log(f"{cmd} > kdamond {k}: {e.strerror}")
    s = f"{D}/{k}/contexts/0/schemes/0"
    got = {"effective_bytes": get(f"{s}/quotas/effective_bytes"), "sz_applied": get(f"{s}/stats/sz_applied")}
    for g in sorted(os.listdir(f"{s}/quotas/goals")) if os.path.isdir(f"{s}/quotas/goals") else []:
        if g.isdigit():
            got[f"goal{g}"] = (
                f"{get(f'{s}/quotas/goals/{g}/target_metric')}={get(f'{s}/quotas/goals/{g}/current_value')}"
            )
    return got


def goals() -> None:
    """MODE ``goals`` (6.16+/7.x, a CXL node online): the ``hot_on_dram`` statement converging.

    ``cold`` touches 4 MiB on DRAM once, ``hot`` keeps touching :data:`HOT_MIB` placed on the CXL
    node; with ``vm-damon-goals`` (vm-damon's ages and scope, no fixed-goal defaults, ``hot_on_dram``
    70 %) the hot set's share on DRAM is traced from ``numa_maps`` every 3 s for up to 300 s (ending once it
    has stayed at 65 % or more for 45 s), with the kernel's own goal ``current_value`` and tuned
    quota beside it; then revert.
    """
    cx("status-inventory", "status", "--json")
    with open(f"{OUT}/status-inventory.json") as f:
        status = json.load(f)
    cxl = [n["id"] for n in status.get("nodes", []) if n.get("kind") == "cxl" and n.get("has_memory")]
    node = cxl[0]
    put(f"{OUT}/cxl-node", str(node))
    readback("boot")
    had_stat = stop_damon_stat()
    sh("grep -q ' /sys/fs/cgroup cgroup2 ' /proc/mounts || mount -t cgroup2 none /sys/fs/cgroup")
    sh("echo +memory > /sys/fs/cgroup/cgroup.subtree_control")
    os.makedirs(CG, exist_ok=True)
    # the kernel measures the hot share over every LRU page in the regions it finds hot, the
    # scope's or not (mm/damon/core.c damos_calc_eligible_bytes): with a 2 MiB hot set, about 2 MiB
    # of other memory in DRAM's hot regions met the goal at 38 % of the set on DRAM under load.  A
    # 32 MiB set outweighs that (the same 2 MiB would meet it at 68 %)
    cold_mib, hot_mib = 4, HOT_MIB
    save("sizes.json", {"cold_mib": cold_mib, "hot_mib": hot_mib})
    cold = helper("cold", cold_mib, 0)
    hot = helper("hot", hot_mib, node)
    with open(f"{OUT}/pages-start.json", "w") as f:
        json.dump({"cold": pages(cold.pid), "hot": pages(hot.pid)}, f)
    cx("plan", "tune", "plan", "vm-damon-goals", "--json")
    t0 = time.time()
    cx("apply", "tune", "apply", "vm-damon-goals", "--json")
    sh(f"cd {D} && grep -r . . > {OUT}/applied-tree.txt 2>&1")
    trace: List[Dict[str, object]] = []
    settled = 0  # samples in a row with the hot set at its goal (stop after 45 s of it)
    while time.time() - t0 < 300 and settled < 15:
        time.sleep(3)
        c, h = pages(cold.pid), pages(hot.pid)
        kernel = {str(k): goal_state(k) for k in (0, 1)}
        trace.append({"t": round(time.time() - t0, 1), "cold": c, "hot": h, "kernel": kernel})
        with open(f"{OUT}/pages-trace.json", "w") as f:
            json.dump(trace, f)
        settled = settled + 1 if sum(h.values()) and h.get(0, 0) >= 0.65 * sum(h.values()) else 0
    with open(f"{OUT}/numa_maps-hot.txt", "w") as f:
        f.write(numa_maps(hot.pid))
    cx("status", "tune", "status", "--json")
    cx("revert", "tune", "revert", "--json")
    readback("reverted")
    for p in (cold, hot):
        p.kill()
    if had_stat:
        put(DAMON_STAT, "Y")


def old() -> None:
    readback("boot")
    snap("single-noregion-damon")
    cx("plan", "tune", "plan", "inference-damon", "--json")
    cx("apply", "tune", "apply", "inference-damon", "--json")
    readback("applied")
    cx("revert", "tune", "revert", "--json")
    readback("reverted")


if __name__ == "__main__":
    try:
        {"full": full, "old": old, "goals": goals}[MODE]()
    except Exception as e:  # the host reads driver.log; the exit status fails the test
        log(f"driver failed: {e!r}")
        raise
