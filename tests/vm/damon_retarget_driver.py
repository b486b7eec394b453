"""Guest side of tests/vm/test_vm_damon_retarget.py: ``$PY damon_retarget_driver.py`` inside the VM.

With one CXL region online (node A) and ``vm-damon2`` applied (two kdamonds):

1. start ``cxlctl daemon run`` (metrics on 127.0.0.1:9861, DAMON stats every 2 s);
2. scrape the metrics and read DAMON's stats files around the scrape (until two
   reads agree, so the scrape saw exactly those numbers);
3. create a second region (node B; ``$CREATE_B``, guest-lib.sh) and poll DAMON's
   sysfs until the kdamonds cover DRAM, A and B as cxlctl lays them out — one kdamond
   per node monitoring exactly that node's online memory blocks, ``migrate_cold``
   from DRAM to a CXL node, ``migrate_hot`` from each CXL node to DRAM, all ``on``;
4. offline node B's memory blocks and poll until the layout is DRAM + A again;
5. stop the daemon (the kdamonds stay: stopping the daemon reverts nothing), then
   ``tune revert``: no kdamond left.

Times are ``time.monotonic()`` seconds; everything lands in ``$OUT`` (layout dumps,
metrics, stats, the daemon's log).  cxlctl commands other than the daemon run in
this process (a cold ``python -m cxlctl`` costs 30-50 s under TCG).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Any, Dict, List, Optional, Set, Tuple

from cxlctl.numa_maps import parse_mappings
from tests.vm.guest import DAMON_STAT, OUT, cx, elapsed, get, lib, log, put, save, stop_damon_stat

D = "/sys/kernel/mm/damon/admin/kdamonds"
NODES = "/sys/devices/system/node"
MEM = "/sys/devices/system/memory"
METRICS = "http://127.0.0.1:9861/metrics"


# ---------------------------------------------------------------------------- what the kernel shows


def node_ranges() -> Dict[int, List[List[int]]]:
    """Merged [start, end) of each node's online memory blocks (physical addresses)."""
    bs = int(get(f"{MEM}/block_size_bytes"), 16)
    out: Dict[int, List[List[int]]] = {}
    for n in sorted(os.listdir(NODES)):
        if not (n.startswith("node") and n[4:].isdigit()):
            continue
        ids = sorted(
            int(b[6:])
            for b in os.listdir(f"{NODES}/{n}")
            if b.startswith("memory") and b[6:].isdigit() and get(f"{NODES}/{n}/{b}/state") == "online"
        )
        merged: List[List[int]] = []
        for i in ids:
            if merged and merged[-1][1] == i * bs:
                merged[-1][1] = (i + 1) * bs
            else:
                merged.append([i * bs, (i + 1) * bs])
        if merged:
            out[int(n[4:])] = merged
    return out


def _num(text: str) -> Optional[int]:
    """A sysfs number, or None for anything else (a file read as "ERR ...")."""
    return int(text) if text.isdigit() else None


def kdamonds() -> List[Dict[str, Any]]:
    out = []
    nr = get(f"{D}/nr_kdamonds")
    for k in range(_num(nr) or 0):
        c = f"{D}/{k}/contexts/0"
        s = f"{c}/schemes/0"
        regions = []
        nreg = get(f"{c}/targets/0/regions/nr_regions")
        for r in range(_num(nreg) or 0):
            # read while the daemon rewrites the kdamond, a file can be gone ("ERR No such device"):
            # None never matches a node's range, so the layout reads as "not yet" and is polled again
            regions.append([_num(get(f"{c}/targets/0/regions/{r}/start")), _num(get(f"{c}/targets/0/regions/{r}/end"))])
        stats = {n: get(f"{s}/stats/{n}") for n in ("nr_tried", "sz_tried", "nr_applied", "sz_applied", "qt_exceeds")}
        out.append(
            {
                "id": k,
                "state": get(f"{D}/{k}/state"),
                "action": get(f"{s}/action"),
                "target_nid": get(f"{s}/target_nid"),
                "dests": dests(s),
                "regions": regions,
                "stats": stats,
            }
        )
    return out


def dests(scheme: str) -> Optional[List[List[Optional[int]]]]:
    """The scheme's 6.17+ destinations as [[node, weight], ...]; None where the kernel has no dests/."""
    if not os.path.isdir(f"{scheme}/dests"):
        return None
    n = _num(get(f"{scheme}/dests/nr_dests")) or 0
    return [[_num(get(f"{scheme}/dests/{i}/id")), _num(get(f"{scheme}/dests/{i}/weight"))] for i in range(n)]


def layout_ok(cxl: Set[int]) -> Tuple[bool, str]:
    """Whether the kdamonds are cxlctl's layout for DRAM node 0 and the CXL nodes ``cxl``."""
    ranges = node_ranges()
    kds = kdamonds()
    want = {0} | cxl
    seen: Dict[int, Dict[str, Any]] = {}
    for k in kds:
        src = [n for n, r in ranges.items() if r == k["regions"]]
        if len(src) != 1:
            return False, f"kdamond {k['id']} regions {k['regions']} are no node's online memory"
        seen[src[0]] = k
    if set(seen) != want:
        return False, f"kdamonds monitor nodes {sorted(seen)}, want {sorted(want)}"
    for n, k in seen.items():
        if k["state"] != "on":
            return False, f"kdamond {k['id']} (node {n}) is {k['state']}"
        if n == 0 and not (k["action"] == "migrate_cold" and k["target_nid"].isdigit() and int(k["target_nid"]) in cxl):
            return False, f"DRAM kdamond: {k['action']} to {k['target_nid']}"
        if n != 0 and (k["action"], k["target_nid"]) != ("migrate_hot", "0"):
            return False, f"node {n} kdamond: {k['action']} to {k['target_nid']}"
    return True, "ok"


def dump(label: str) -> None:
    save(f"layout-{label}.json", {"t": elapsed(), "nodes": node_ranges(), "kdamonds": kdamonds()})


def wait_layout(label: str, cxl: Set[int], limit: float = 120.0) -> Optional[float]:
    """Seconds (since this call) until the layout is right, polling every 0.1 s; None on timeout."""
    t = time.monotonic()
    why = ""
    while time.monotonic() - t < limit:
        ok, why = layout_ok(cxl)
        if ok:
            took = round(time.monotonic() - t, 3)
            log(f"layout {label}: right after {took} s")
            dump(label)
            return took
        time.sleep(0.1)
    log(f"layout {label}: still wrong after {limit} s: {why}")
    dump(label)
    return None


# ---------------------------------------------------------------------------- metrics


def scrape() -> str:
    with urllib.request.urlopen(METRICS, timeout=20) as r:
        text: str = r.read().decode()
        return text


def metrics_and_stats(label: str) -> None:
    """A scrape with the DAMON stats files read before and after it (until both reads agree)."""
    for attempt in range(20):
        before = kdamonds()
        text = scrape()
        after = kdamonds()
        if before == after:
            with open(f"{OUT}/metrics-{label}.txt", "w") as f:
                f.write(text)
            save(f"stats-{label}.json", {"attempt": attempt, "kdamonds": after})
            log(f"metrics {label}: scraped (attempt {attempt})")
            return
        time.sleep(0.3)
    log(f"metrics {label}: the stats changed around every scrape")


def wait_ready(limit: float = 300.0) -> Optional[float]:
    t = time.monotonic()
    while time.monotonic() - t < limit:
        try:
            if "\ncxlctl_ready 1\n" in scrape():
                return round(time.monotonic() - t, 3)
        except OSError:
            pass
        time.sleep(0.5)
    return None


# ---------------------------------------------------------------------------- where cold pages go

#: a program whose 48 MiB of anonymous memory is written once and then left cold; it prints the
#: buffer's address (to find its line in numa_maps) and sleeps.  MAP_PRIVATE: Python's default
#: MAP_SHARED mapping is shmem, which the profile's anon filter skips (seen: tried, never applied)
COLD_MIB = 48
COLD_HELPER = f"""
import ctypes, mmap, os, sys, time
with open("/sys/fs/cgroup/retarget/cgroup.procs", "w") as f:  # the profile's memcg, before any page
    f.write(str(os.getpid()))
n = {COLD_MIB} << 20
m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # anonymous: the profile is anon_only
for i in range(0, n, 4096):
    m[i] = 1
print(hex(ctypes.addressof(ctypes.c_char.from_buffer(m))), flush=True)
time.sleep(1800)
"""


def pages_by_node(pid: int, addr: str) -> Dict[int, int]:
    """The pages of the mapping at ``addr`` per node, from the kernel's ``/proc/PID/numa_maps``."""
    for m in parse_mappings(get(f"/proc/{pid}/numa_maps")):
        if int(m.address, 16) == int(addr, 16):
            return m.pages
    return {}


def cold_spread(label: str, limit: float = 150.0) -> None:
    """Where the DRAM kdamond's ``migrate_cold`` puts cold pages now (issue 20: 6.17+ gives the
    scheme weighted ``dests/``; what does the kernel's ``paddr`` do with them?).

    A helper's 48 MiB go cold on DRAM; its pages per node are sampled from numa_maps every
    second until at least three quarters have left DRAM and two samples agree, or ``limit``
    seconds.  The DRAM scheme's ``target_nid`` and ``dests`` are saved beside the samples."""
    helper = subprocess.Popen([sys.executable, "-c", COLD_HELPER], stdout=subprocess.PIPE, text=True)
    try:
        assert helper.stdout is not None
        addr = helper.stdout.readline().strip()
        t = time.monotonic()
        samples: List[Dict[str, Any]] = []
        while time.monotonic() - t < limit:
            by = pages_by_node(helper.pid, addr)
            samples.append({"t": round(time.monotonic() - t, 1), "pages": by})
            total = sum(by.values())
            if total and by.get(0, 0) * 4 <= total and len(samples) > 1 and samples[-2]["pages"] == by:
                break
            time.sleep(1.0)
        dram = [k for k in kdamonds() if k["action"] == "migrate_cold"]
        save(f"cold-{label}.json", {"address": addr, "samples": samples, "dram_schemes": dram})
        log(
            f"cold pages {label}: {samples[-1] if samples else None}; DRAM scheme {[(k['target_nid'], k['dests']) for k in dram]}"
        )
    finally:
        helper.kill()
        helper.wait()


# ---------------------------------------------------------------------------- the run


def cxl_nodes() -> Set[int]:
    """Nodes with memory and no CPU (the CXL nodes in this VM)."""
    out = set()
    for n, _ in node_ranges().items():
        if get(f"{NODES}/node{n}/cpulist") == "":
            out.add(n)
    return out


def main() -> None:
    times: Dict[str, Any] = {}
    a = cxl_nodes()
    log(f"CXL nodes at start: {sorted(a)}")
    dump("boot")
    # 7.x: DAMON_STAT's kdamond from boot keeps the kernel from starting cxlctl's (EBUSY): the plan
    # says so and names the fix, which this applies; 6.12 has no DAMON_STAT
    times["damon_stat_stopped"] = stop_damon_stat()
    cx("apply", "tune", "apply", "vm-damon2", "--json")
    dump("applied")
    ok, why = layout_ok(a)
    times["applied_layout"] = why
    daemon = subprocess.Popen(
        [sys.executable, "-m", "cxlctl", "daemon", "run"],
        stdout=open(f"{OUT}/daemon.out", "w"),
        stderr=open(f"{OUT}/daemon.log", "w"),
    )
    times["ready"] = wait_ready()
    log(f"daemon ready after {times['ready']} s")
    time.sleep(10)  # a few telemetry ticks: the daemon refreshes the stats; cold DRAM regions were tried
    metrics_and_stats("one")

    # -- a second CXL node comes
    t = time.monotonic()
    p = lib(os.environ["CREATE_B"])
    times["create_b_seconds"] = round(time.monotonic() - t, 3)
    log(f"region B: rc {p.returncode} {p.stdout.strip()} {p.stderr.strip()[-300:]}")
    with open(f"{OUT}/region-b", "w") as f:
        f.write(p.stdout.strip() + "\n")
    t_online = None
    for _ in range(600):
        b = cxl_nodes() - a
        if b:
            t_online = time.monotonic()
            break
        time.sleep(0.1)
    times["node_b_online_after_create_returned"] = (
        None if t_online is None else round(t_online - t - times["create_b_seconds"], 3)
    )
    b = cxl_nodes() - a
    log(f"CXL nodes now: {sorted(a | b)}")
    save("nodes.json", {"a": sorted(a), "b": sorted(b)})
    times["grow_from_node_online"] = wait_layout("grown", a | b) if b else None
    cx("verify-grown", "tune", "verify", "--json")
    time.sleep(5)
    metrics_and_stats("two")
    # only where the DRAM scheme has 6.17+ destinations: the question is what the kernel does with them
    # (6.12 has one target, and its boot is spared the helper's up to 150 s)
    if any(k["dests"] is not None for k in kdamonds() if k["action"] == "migrate_cold"):
        cold_spread("grown")

    # -- it goes: its memory blocks offline
    t = time.monotonic()
    failed = []
    for nb in sorted(b):
        for blk in sorted(os.listdir(f"{NODES}/node{nb}")):
            if blk.startswith("memory") and blk[6:].isdigit() and get(f"{NODES}/node{nb}/{blk}/state") == "online":
                try:
                    with open(f"{NODES}/node{nb}/{blk}/state", "w") as f:
                        f.write("offline\n")
                except OSError as e:
                    failed.append(f"{blk}: {e.strerror}")
    times["offline_b_seconds"] = round(time.monotonic() - t, 3)
    times["offline_failures"] = failed
    log(f"node B offlined in {times['offline_b_seconds']} s; failures {failed}")
    times["shrink_from_offlined"] = wait_layout("shrunk", a)
    cx("verify-shrunk", "tune", "verify", "--json")
    time.sleep(5)
    metrics_and_stats("three")

    # -- stop the daemon, then revert
    daemon.send_signal(signal.SIGTERM)
    try:
        times["daemon_rc"] = daemon.wait(timeout=60)
    except subprocess.TimeoutExpired:
        daemon.kill()
        times["daemon_rc"] = "killed"
    dump("daemon-stopped")
    cx("revert", "tune", "revert", "--json")
    dump("reverted")
    cx("status-after", "tune", "status", "--json")
    if times["damon_stat_stopped"]:
        put(DAMON_STAT, "Y")
    save("times.json", times)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # the host reads driver.log; the exit status fails the test
        log(f"driver failed: {e!r}")
        raise
