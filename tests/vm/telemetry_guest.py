"""The guest scenario of the telemetry proof and of the telemetry fixtures (one boot each).

Why shared: ``test_vm_telemetry`` checks what ``cxlctl stat`` says in this
scenario, and ``record_telemetry_fixtures`` records the same scenario's end
state as fixture trees, so the unit tests replay a host where pages really were
demoted.

The scenario (6.12, ``single`` topology): create the RAM region (a CPU-less CXL
node appears), turn demotion and NUMA balancing off, then

A. ``stat`` with tiering off: verdicts ``tiering-off`` and ``cxl-idle``;
B. a C helper in cgroup ``/cxltel`` touches ANON MiB of anonymous memory and a
   SHM MiB ``/dev/shm/vllm_offload_cxltel.mmap`` file on the DRAM node; demotion
   on; ``stat`` again (``kv-offload-not-on-cxl`` fires; ``tiering-off`` gone);
C. while ``stat --interval`` runs, ``memory.reclaim`` on the cgroup demotes
   pages to the CXL node; the kernel's files are copied right after each
   ``stat`` so the test can compare;
D. (6.12) promotion: ``numa_balancing=2`` and the helper keeps touching its
   pages for a while; what the counters said is kept;
E. ``cxlctl record`` of the end state (the fixture driver copies it out).

On a kernel without ``create_ram_region`` (6.1) there is no CXL node: the
scenario still runs (helper, cgroup, reclaim without a demotion target) so the
record holds that kernel's counters.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

HELPER_C = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
/* tel_helper ANON_MIB SHM_MIB SHMFILE READY: touch ANON_MIB MiB of anonymous memory and a
   SHM_MIB MiB shared mapping of SHMFILE, write our PID to READY, then sleep; after SIGUSR1
   keep touching the anonymous pages (for NUMA-balancing promotion) until killed. */
static volatile sig_atomic_t busy;
static void on_usr1(int s) { (void)s; busy = 1; }
int main(int argc, char **argv) {
    if (argc < 5) return 2;
    size_t alen = (size_t)atoi(argv[1]) << 20, slen = (size_t)atoi(argv[2]) << 20;
    char *a = mmap(NULL, alen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED) { perror("mmap"); return 1; }
    madvise(a, alen, MADV_NOHUGEPAGE);
    for (size_t i = 0; i < alen; i += 4096) a[i] = 1;
    int fd = open(argv[3], O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)slen) != 0) { perror(argv[3]); return 1; }
    char *s = mmap(NULL, slen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s == MAP_FAILED) { perror("mmap shm"); return 1; }
    for (size_t i = 0; i < slen; i += 4096) s[i] = 1;
    /* the signal frame goes to an mlocked alternate stack: reclaim demotes this process's own
       stack to the CXL node too, and the kernel writes the frame with XSAVE, which QEMU 10's TCG
       segfaults on when the page is CXL memory (docs/testing.md; seen on 7.3.4 in 2 boots of 4) */
    stack_t ss = {.ss_size = 1 << 16};
    ss.ss_sp = mmap(NULL, ss.ss_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ss.ss_sp == MAP_FAILED || mlock(ss.ss_sp, ss.ss_size) != 0 || sigaltstack(&ss, NULL) != 0) {
        perror("sigaltstack"); return 1;
    }
    struct sigaction sa = {.sa_handler = on_usr1, .sa_flags = SA_ONSTACK};
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) != 0) { perror("sigaction"); return 1; }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[4]);
    FILE *f = fopen(tmp, "w");
    if (!f) { perror(tmp); return 1; }
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
    rename(tmp, argv[4]);
    while (!busy) pause();
    for (;;)
        for (size_t i = 0; i < alen; i += 4096) a[i]++;
}
"""

ANON_MIB = 16
SHM_MIB = 2
RECLAIM = "12M"
CGROUP = "/cxltel"
SHM_FILE = "/dev/shm/vllm_offload_cxltel.mmap"
#: the promotion window (step F): the helper keeps touching its pages, so every second of it is guest CPU;
#: ~90 pages/s are promoted under TCG (docs/telemetry.md), ~1,000 in 12 s (30 s until 2026-12-07)
PROMOTE_SECONDS = 12

GUEST = r"""
# (no `set -u`: guest-lib.sh relies on unset variables)
CG=/sys/fs/cgroup@CGROUP@
kfiles() {  # $1 = label: the kernel's own files, right after a stat run
  cat /sys/devices/system/node/node0/vmstat > "$OUT/$1.node0.vmstat"
  [ -n "$CXL" ] && cat /sys/devices/system/node/node$CXL/vmstat > "$OUT/$1.cxl.vmstat"
  [ -n "$CXL" ] && cat /sys/devices/system/node/node$CXL/meminfo > "$OUT/$1.cxl.meminfo"
  cat /proc/vmstat > "$OUT/$1.vmstat"
  cat $CG/memory.numa_stat > "$OUT/$1.numa_stat" 2>/dev/null
  cat $CG/memory.stat > "$OUT/$1.memory.stat" 2>/dev/null
  [ -n "$HP" ] && cat /proc/$HP/numa_maps > "$OUT/$1.numa_maps"
}
stat1() {  # $1 = label: one stat report (JSON) + the text form + the kernel's files
  ARGS="--cgroup @CGROUP@"; [ -n "$HP" ] && ARGS="$ARGS --pid $HP"
  "$CXLCTL" stat --json $ARGS > "$OUT/$1.json" 2> "$OUT/$1.err"; echo $? > "$OUT/$1.rc"
  kfiles $1
}
if [ -n "$REGION" ]; then
  R=$(eval "$REGION") || { echo "region creation failed" >&2; exit 10; }
  udevadm settle --timeout=30 || true
  echo "$R" > "$OUT/region"
fi
uname -r > "$OUT/uname"
CXL=$(cxlvm_cxl_node) || exit 11
echo "$CXL" > "$OUT/cxl-node"
grep -q " /sys/fs/cgroup cgroup2 " /proc/mounts || mount -t cgroup2 none /sys/fs/cgroup
echo +memory > /sys/fs/cgroup/cgroup.subtree_control
mkdir -p $CG
# the boot's tiering settings, put back at the end: a shared boot's later checks (launch) start from them
NB_BOOT=$(cat /proc/sys/kernel/numa_balancing)
DEM_BOOT=$(cat /sys/kernel/mm/numa/demotion_enabled 2>/dev/null || echo false)
echo 0 > /proc/sys/kernel/numa_balancing
echo false > /sys/kernel/mm/numa/demotion_enabled 2>/dev/null

# A. tiering off, nothing on CXL
stat1 A
COLUMNS=80 "$CXLCTL" stat > "$OUT/A.txt" 2>&1

# B. the helper in its cgroup, on DRAM; demotion on
( echo $BASHPID > $CG/cgroup.procs; exec "$HELPER" @ANON@ @SHM@ @SHMFILE@ "$OUT/helper.ready" ) 2> "$OUT/helper.err" &
HP=$!
for i in $(seq 1 1200); do [ -s "$OUT/helper.ready" ] && break; sleep 0.1; done
echo $HP > "$OUT/helper.pid"
echo true > /sys/kernel/mm/numa/demotion_enabled 2>/dev/null
cat /sys/kernel/mm/numa/demotion_enabled > "$OUT/demotion_enabled" 2>/dev/null
stat1 B

# C. demote through memory.reclaim while stat runs with an interval
"$CXLCTL" stat --json --interval 4 --count 2 --cgroup @CGROUP@ --pid $HP > "$OUT/C.json" 2> "$OUT/C.err" &
SP=$!
for i in $(seq 1 1200); do [ -s "$OUT/C.json" ] && break; sleep 0.1; done
kfiles C0
echo @RECLAIM@ > $CG/memory.reclaim 2> "$OUT/reclaim.err"; echo $? > "$OUT/reclaim.rc"
wait $SP; echo $? > "$OUT/C.rc"
kfiles C1
stat1 D
COLUMNS=80 "$CXLCTL" stat --cgroup @CGROUP@ --pid $HP > "$OUT/D.txt" 2>&1

# top on a pseudo-terminal (script(1)), 80x30, three refreshes a second apart
if [ -n "$PROMOTE" ]; then
  script -qec "stty cols 80 rows 30; \"$PY\" -m cxlctl top --interval 1 --count 3" /dev/null > "$OUT/top.pty" 2> "$OUT/top.err"
  echo $? > "$OUT/top.rc"
fi

# E. record the end state (onto the guest's tmpfs, then one copy out)
rm -rf /tmp/telrec
"$CXLCTL" record --include-process-data /tmp/telrec > "$OUT/record.log" 2>&1 && cp -a /tmp/telrec "$OUT/record"
# the peers every recorded fixture carries (tests/test_inventory_fixtures.py compares with them)
cxlvm_peers "$OUT/record/peers"
numastat -m > "$OUT/record/peers/numastat-m.txt" 2>&1

# F. promotion: NUMA balancing in tiering mode, the helper keeps touching its (partly demoted) pages
if [ -n "$CXL" ] && [ -n "$PROMOTE" ]; then
  echo 2 > /proc/sys/kernel/numa_balancing 2> "$OUT/nb2.err"; cat /proc/sys/kernel/numa_balancing > "$OUT/nb2"
  "$CXLCTL" stat --json --interval @PROMOTE_S@ --count 2 --cgroup @CGROUP@ --pid $HP > "$OUT/F.json" 2> "$OUT/F.err" &
  SP=$!
  for i in $(seq 1 1200); do [ -s "$OUT/F.json" ] && break; sleep 0.1; done
  kill -USR1 $HP
  wait $SP; echo $? > "$OUT/F.rc"
  kfiles F1
fi
kill $HP; wait $HP 2>/dev/null
echo "$NB_BOOT" > /proc/sys/kernel/numa_balancing
echo "$DEM_BOOT" > /sys/kernel/mm/numa/demotion_enabled 2>/dev/null
exit 0
"""


def build_helper(tools: Path) -> Path:
    """Compile the helper with the host's cc (the guest runs it from the host's file system)."""
    tools.mkdir(parents=True, exist_ok=True)
    (tools / "tel_helper.c").write_text(HELPER_C)
    exe = tools / "tel_helper"
    subprocess.run(["cc", "-O1", "-Wall", "-o", str(exe), str(tools / "tel_helper.c")], check=True)
    return exe


def script(helper: Path, region_command: str, promote: bool) -> str:
    """The guest script; ``region_command`` empty: no region (6.1)."""
    body = (
        GUEST.replace("@CGROUP@", CGROUP)
        .replace("@ANON@", str(ANON_MIB))
        .replace("@SHM@", str(SHM_MIB))
        .replace("@SHMFILE@", SHM_FILE)
        .replace("@RECLAIM@", RECLAIM)
        .replace("@PROMOTE_S@", str(PROMOTE_SECONDS))
    )
    env = f"export HELPER={helper} PROMOTE={'1' if promote else ''}\nREGION='{region_command}'\n"
    return env + body
