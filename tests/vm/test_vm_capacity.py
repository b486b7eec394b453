"""Capacity that comes and goes, on real 6.12 and 7.x kernels (issues 36, 41): one boot of ``pool`` each.

The host plays the fabric manager over QMP (docs/capacity.md): ``object-add`` +
``device_add cxl-type3`` on the empty root port is the FM's bind, ``device_del``
its unbind (the attention button: the guest powers the slot off about 5 s later).

In the guest:

1. the boot device's region is built into ZONE_NORMAL (the kernel's default):
   ``capacity release`` of it must exit 2 naming ``zone-normal`` and change
   nothing (status before and after equal);
2. hot-add (host): the new memdev appears; with ``CXLCTL_RECORD_FIXTURES=1``
   (set by ``scripts/record-fixtures.sh capacity``) ``cxlctl record`` keeps the
   tree as ``fixtures/linux-*/pool-hotadd``; it is adopted by hand
   (``capacity adopt``: the second window, its own node, ZONE_MOVABLE); then the
   daemon starts (``[capacity] adopt = "system-ram"``, ``pool_member = true``,
   ``adopt_serials`` the hot device's serial, a persisted profile with
   DRAM:CXL weights 3:2): a memdev present at its start is left as it is;
3. a program writes a 16 MiB pattern preferring that node (``mbind``
   MPOL_PREFERRED on its buffer only: its stack stays on DRAM, see
   docs/testing.md on TCG and CXL memory) and sums it;

   before it, issue 41's held pages: a program vmsplices 4 MiB it placed on that
   node (``mbind`` MPOL_PREFERRED, its stack on DRAM, polling files, no signal)
   into pipes nobody reads, so their migration fails and ``offline_pages()``
   retries until a signal.  ``capacity release --timeout 8``: exit 1 naming the
   bound, the kernel log's pages and the processes on the node; rolled back.  Then
   a release with a signal sent once a block of the node shows ``going-offline``:
   SIGINT on 6.12 (exit 130), SIGTERM on 7.x (exit 143), rolled back.  One signal
   per kernel: the kernel's part is the same for any signal (``offline_pages()``
   backs off with -EINTR on ``signal_pending()``), the rest is cxlctl's handler,
   which tests/test_capacity_interrupt.py drives for both.  After each, the journal
   is ``rolled-back`` and ``capacity --json`` is as before (every block online,
   the region as it was); the pattern's release below finds nothing to recover;
4. ``capacity release MEMDEV --no-sanitize --json``: exit 0, "released, not sanitized
   (--no-sanitize): safe to unbind at the fabric manager; …"; the program re-reads its pattern: every word intact, none
   of its pages left on the node (the kernel moved them to the next node in
   that node's fallback order); the memdev has no region and no DPA;
5. hot-remove (host ``device_del``): the memdev goes; status is clean;
   (recording) ``cxlctl record`` keeps the tree (``fixtures/linux-*/pool-hotremoved``); the
   daemon logs a clean removal (no region: nothing lost) and stays up;
6. hot-add again: the daemon adopts the memdev (region, node, every block
   online in ZONE_MOVABLE, the new node's weight 2 and ``tune verify``
   passing); then a second device (serial 0x5003) on the bridge's third root
   port, adopted after it: the bridge's next decoder (issue 41, decoder order).
   ``capacity`` reports the first ``blocked`` (``decoder-order``, depending on the
   second); ``capacity release FIRST`` exits 2 naming both and changes nothing;
   ``capacity release FIRST SECOND`` tears the later region down first;
   ``capacity --json`` shows no ``port_holes``; ``device_del`` of both;
7. hot-add a third time: the daemon adopts it again, its region on the
   bridge's decoder the release freed (the first device's);
8. its DAX device switched to devdax and held open by a process: ``capacity
   release`` exits 2 naming ``devdax-open`` and the PID, nothing changed; the
   daemon stops cleanly (SIGTERM, exit 0) and never logged a surprise removal
   or an internal error.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Dict, List, Set, Tuple

import pytest

from cxlctl.parse import format_size
from tests.daemon_support import RATIO_PROFILE
from tests.fixture_status import install
from tests.vm.harness import REPO, build_c, out_json, out_text, run_guest
from tests.vm.qmp import QmpSession
from tests.vm.record_fixtures import SNAP

pytestmark = pytest.mark.vm

#: the hot-plugged device: its serial, its QEMU ids, the root port it goes on
HOT_SERIAL = 0x5002
HOT_ID = "cxl-vmem1"
HOT_BACKEND = "vmem1"
HOT_PORT = "rp1"
PATTERN_MIB = 16
#: the second device, hot-added beside the first through the same host bridge (issue 41: decoder order)
HOT2_SERIAL = 0x5003
HOT2_ID = "cxl-vmem2"
HOT2_PORT = "rp2"
#: the held pages (vmsplice) and the bound of the release they block: the kernel retries the offline
#: (busy) until the bound, so every second of it is guest CPU (15 s until 2026-12-07); the kernel log lines
#: the hint quotes come from the first failed pass (mm/memory_hotplug.c do_migrate_range(): a pr_warn
#: "migrating pfn ... failed" for each page migrate_pages() left)
HOLD_MIB = 4
HOLD_TIMEOUT = 8
#: the signal each kernel's held-pages release gets (check_hold; the module docstring says why one each)
HOLD_SIGNALS = {"6.12": "INT", "7.x": "TERM"}

HOLDER_C = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
/* holder NODE MIB DIR: a buffer preferring NODE (mbind MPOL_PREFERRED, the buffer only: the stack stays
   on DRAM), every page written, then vmspliced (no SPLICE_F_GIFT) into pipes nobody reads: each page keeps
   an extra reference, its migration fails, and offline_pages() retries until the offlining task gets a
   signal.  DIR/holder.ready gets the pid and the bytes spliced; on DIR/holder.stop it exits (the pipes
   close, the references go).  Polls files: no signal (docs/testing.md). */
int main(int argc, char **argv) {
    if (argc < 4) return 2;
    int node = atoi(argv[1]);
    size_t size = (size_t)atoi(argv[2]) << 20, pipe_sz = 1 << 20, spliced = 0;
    const char *dir = argv[3];
    char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    unsigned long mask = 1UL << node;
    if (syscall(SYS_mbind, p, size, 1 /* MPOL_PREFERRED */, &mask, sizeof(mask) * 8, 0)) { perror("mbind"); return 1; }
    for (size_t i = 0; i < size; i += 4096) p[i] = (char)(i >> 12 | 1);
    for (size_t off = 0; off < size; off += pipe_sz) {
        int fd[2];
        if (pipe(fd)) { perror("pipe"); return 1; }
        fcntl(fd[1], F_SETPIPE_SZ, (int)pipe_sz);
        struct iovec iov = { p + off, size - off < pipe_sz ? size - off : pipe_sz };
        while (iov.iov_len) {
            ssize_t n = vmsplice(fd[1], &iov, 1, SPLICE_F_NONBLOCK);
            if (n <= 0) break;
            iov.iov_base = (char *)iov.iov_base + n; iov.iov_len -= (size_t)n; spliced += (size_t)n;
        }
    }
    char buf[256], path[4096], tmp[4096];
    snprintf(buf, sizeof buf, "pid=%d\nspliced=%zu\n", (int)getpid(), spliced);
    snprintf(path, sizeof path, "%s/holder.ready", dir);
    snprintf(tmp, sizeof tmp, "%s/.holder.ready.tmp", dir);
    FILE *f = fopen(tmp, "w");
    if (!f) return 1;
    fputs(buf, f); fclose(f); rename(tmp, path);
    snprintf(path, sizeof path, "%s/holder.stop", dir);
    for (int i = 0; i < 6000 && access(path, F_OK) != 0; i++) usleep(200000);
    return 0;
}
"""

PATTERN_C = r"""
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
/* pattern NODE MIB DIR: a buffer preferring NODE (mbind MPOL_PREFERRED, the buffer only), filled
   from a xorshift sequence; DIR/pattern.ready gets pid and sum; on DIR/pattern.check it compares
   every word again and writes DIR/pattern.result; it exits on DIR/pattern.stop. Polls files:
   no signal (docs/testing.md: a signal frame on CXL memory crashed QEMU's TCG). */
static int wait_for(const char *dir, const char *name) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    for (int i = 0; i < 6000; i++) { if (access(p, F_OK) == 0) return 0; usleep(200000); }
    return -1;
}
static void put(const char *dir, const char *name, const char *text) {
    char p[4096], t[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    snprintf(t, sizeof t, "%s/.%s.tmp", dir, name);
    FILE *f = fopen(t, "w");
    if (!f) return;
    fputs(text, f);
    fclose(f);
    rename(t, p);
}
int main(int argc, char **argv) {
    if (argc < 4) return 2;
    int node = atoi(argv[1]);
    size_t size = (size_t)atoi(argv[2]) << 20;
    const char *dir = argv[3];
    uint64_t *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    unsigned long mask = 1UL << node;
    if (syscall(SYS_mbind, p, size, 1 /* MPOL_PREFERRED */, &mask, sizeof(mask) * 8, 0)) { perror("mbind"); return 1; }
    uint64_t x = 0x9E3779B97F4A7C15ULL, sum = 0;
    size_t words = size / 8;
    for (size_t i = 0; i < words; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; p[i] = x; sum += x * (i + 1); }
    char buf[256];
    snprintf(buf, sizeof buf, "pid=%d\nsum=%llu\nwords=%zu\n", (int)getpid(), (unsigned long long)sum, words);
    put(dir, "pattern.ready", buf);
    if (wait_for(dir, "pattern.check")) return 3;
    uint64_t sum2 = 0; size_t bad = 0;
    x = 0x9E3779B97F4A7C15ULL;
    for (size_t i = 0; i < words; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        if (p[i] != x) bad++;
        sum2 += p[i] * (i + 1);
    }
    snprintf(buf, sizeof buf, "sum=%llu\nbad=%zu\n", (unsigned long long)sum2, bad);
    put(dir, "pattern.result", buf);
    wait_for(dir, "pattern.stop");
    return 0;
}
"""

GUEST = r"""
cx() {  # $1 = label, rest = cxlctl arguments: stdout, stderr, rc in $OUT
  local label=$1; shift
  "$CXLCTL" "$@" > "$OUT/$label.out" 2> "$OUT/$label.err"
  echo $? > "$OUT/$label.rc"
}
wait_host() {  # $1 = the host's file: wait for it (the host did its QMP step)
  for _ in $(seq 1 600); do [ -e "$OUT/$1" ] && return 0; sleep 0.5; done
  echo "no $1 from the host" >&2; exit 1
}
memdev_named() {  # $1 = serial: the memdev's name, or nothing
  for m in /sys/bus/cxl/devices/mem*; do
    [ "$(cat "$m/serial" 2>/dev/null)" = "$(printf '%#x' "$1")" ] && { basename "$m"; return 0; }
  done
  return 0
}
wait_memdev() {  # $1 = serial, $2 = present|absent, $3 = label for the time it took
  local t0=$SECONDS
  for _ in $(seq 1 240); do
    m=$(memdev_named "$1")
    if [ "$2" = present ] && [ -n "$m" ] && [ -e "/sys/bus/cxl/devices/$m/driver" ]; then break; fi
    if [ "$2" = absent ] && [ -z "$m" ]; then break; fi
    sleep 0.5
  done
  echo $((SECONDS - t0)) > "$OUT/$3.seconds"
}

# 1. the boot device in ZONE_NORMAL: release refused, nothing changed
BOOT=$(memdev_named $BOOT_SERIAL)
cx boot-region region create --memdevs "$BOOT" --decoder decoder0.0 --online system-ram --zone normal --json
cx status-0 status --json
cx refuse capacity release "$BOOT" --json
cx status-1 status --json

# 2. hot-add: the FM's bind
touch "$OUT/ready-add"; wait_host done-add
wait_memdev $HOT_SERIAL present add-1
HOT=$(memdev_named $HOT_SERIAL); echo "$HOT" > "$OUT/hot-name-1"
udevadm settle --timeout=30 || true
# the tree as a fixture only when recording (a record and its peers: ~10 s of guest CPU, checked by no test)
[ -n "$RECORD_FIXTURES" ] && { mkdir -p "$OUT/fixtures"; snap fixtures/pool-hotadd; }
cx adopt-1 capacity adopt "$HOT" --json
NODE=$("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["memdevs"][0]["nodes"][0])' "$OUT/adopt-1.out")
echo "$NODE" > "$OUT/hot-node"
cx capacity-1 capacity --json

# the daemon, from here on: [capacity] adopt = "system-ram", a persisted profile (weights 3:2)
mkdir -p /etc/cxlctl/profiles
cat > /etc/cxlctl/profiles/vm-capacity.toml <<'XEOF'
PROFILE_TEXT
XEOF
cat > /etc/cxlctl/cxlctl.toml <<'XEOF'
CONFIG_TEXT
XEOF
cx persist tune apply --persist vm-capacity --json
"$PY" -m cxlctl daemon run > "$OUT/daemon.out" 2> "$OUT/daemon.log" &
DPID=$!
for _ in $(seq 1 240); do grep -q "found " "$OUT/daemon.log" 2>/dev/null && break; sleep 0.5; done
sleep 2

# 2b. (issue 41) an offline held up by page references (vmsplice): the bound ends it, SIGINT and SIGTERM
# too; each is rolled back (every block online, the region as before, the journal rolled-back)
"$HOLDER" "$NODE" $HOLD_MIB "$OUT" > "$OUT/holder.log" 2>&1 &
HOLDPID=$!
for _ in $(seq 1 300); do [ -e "$OUT/holder.ready" ] && break; sleep 0.2; done
cp "/proc/$(sed -n 's/^pid=//p' "$OUT/holder.ready")/numa_maps" "$OUT/holder-numa.txt"
cx hold-cap-0 capacity --json
T0=$SECONDS
cx hold-bound capacity release "$HOT" --no-sanitize --timeout $HOLD_TIMEOUT --json
echo $((SECONDS - T0)) > "$OUT/hold-bound.seconds"
cp /run/cxlctl/capacity.json "$OUT/hold-bound.journal"
cx hold-cap-bound capacity --json
going_offline() {  # $1 = node: wait (60 s) until one of its blocks has been going-offline for a second
  local st="/sys/devices/system/node/node$1/memory*/state"
  for _ in $(seq 1 300); do
    # shellcheck disable=SC2086
    if grep -qs going-offline $st; then sleep 1; grep -qs going-offline $st && return 0; fi
    sleep 0.2
  done
  return 1
}
for SIG in $HOLD_SIGNALS; do
  "$PY" -m cxlctl capacity release "$HOT" --no-sanitize --timeout 120 --json > "$OUT/hold-$SIG.out" 2> "$OUT/hold-$SIG.err" &
  RPID=$!
  T0=$SECONDS
  going_offline "$NODE" && echo $((SECONDS - T0)) > "$OUT/hold-$SIG.seen"
  kill -$SIG $RPID
  wait $RPID; echo $? > "$OUT/hold-$SIG.rc"
  echo $((SECONDS - T0)) > "$OUT/hold-$SIG.seconds"
  cp /run/cxlctl/capacity.json "$OUT/hold-$SIG.journal"
  cx hold-cap-$SIG capacity --json
done
touch "$OUT/holder.stop"; wait $HOLDPID

# 3. a pattern on that node
"$PATTERN" "$NODE" $PATTERN_MIB "$OUT" > "$OUT/pattern.log" 2>&1 &
PATPID=$!
for _ in $(seq 1 600); do [ -e "$OUT/pattern.ready" ] && break; sleep 0.2; done
PID=$(sed -n 's/^pid=//p' "$OUT/pattern.ready")
cp "/proc/$PID/numa_maps" "$OUT/numa-before.txt"
cat "/sys/devices/system/node/node$NODE/meminfo" > "$OUT/node-before.txt"
cx capacity-2 capacity --json

# 4. give it back
# --timeout 600: each block's offline is bounded (120 s by default); under TCG a block with the
# pattern's pages (served as MMIO) can take a good part of that on a slow machine
cx release capacity release "$HOT" --no-sanitize --timeout 600 --json
cp "/proc/$PID/numa_maps" "$OUT/numa-after.txt"
cat "/sys/devices/system/node/node$NODE/meminfo" > "$OUT/node-after.txt" 2>&1
touch "$OUT/pattern.check"
for _ in $(seq 1 600); do [ -e "$OUT/pattern.result" ] && break; sleep 0.2; done
touch "$OUT/pattern.stop"; wait $PATPID  # not the daemon, also a job of this shell
cx status-2 status --json
cp /run/cxlctl/capacity.json "$OUT/journal.json" 2>/dev/null

# 5. hot-remove: the FM's unbind
touch "$OUT/ready-del"; wait_host done-del
wait_memdev $HOT_SERIAL absent del
cx status-3 status --json
cx capacity-3 capacity --json
[ -n "$RECORD_FIXTURES" ] && snap fixtures/pool-hotremoved
dmesg | grep -iE 'pciehp|cxl|offline|memory' | tail -60 > "$OUT/dmesg.txt"

kill -0 $DPID && echo alive > "$OUT/daemon-alive-1"

# 6. hot-add again: the daemon adopts it; release; unbind
adopted() {  # $1 = label: wait (300 s) for the daemon's next adoption line; seconds since the host's device_add
  local t0=$SECONDS n0=$2
  for _ in $(seq 1 1200); do
    [ "$(grep -c " adopted: " "$OUT/daemon.log")" -gt "$n0" ] && break; sleep 0.25
  done
  echo $((SECONDS - t0)) > "$OUT/$1.seconds"
}
N0=$(grep -c " adopted: " "$OUT/daemon.log")
touch "$OUT/ready-add2"; wait_host done-add2
adopted adopt-2 "$N0"
wait_memdev $HOT_SERIAL present add-2
HOT=$(memdev_named $HOT_SERIAL); echo "$HOT" > "$OUT/hot-name-2"
# (issue 41) a second device through the same host bridge, adopted after the first: the bridge's next decoder
N0=$(grep -c " adopted: " "$OUT/daemon.log")
touch "$OUT/ready-add2b"; wait_host done-add2b
adopted adopt-2b "$N0"
wait_memdev $HOT2_SERIAL present add-2b
HOT2=$(memdev_named $HOT2_SERIAL); echo "$HOT2" > "$OUT/hot2-name"
sleep 3  # the daemon's pass after the adoption: the profile for the new node
cx capacity-4 capacity --json
cx status-4 status --json
cx verify-2 tune verify --json
for f in /sys/kernel/mm/mempolicy/weighted_interleave/node*; do echo "$(basename $f) $(cat $f)"; done > "$OUT/weights-2.txt"
# the first released alone: refused (decoder-order), nothing changed; then both in one release (the plan
# tears the later region down first), no port left with a hole
cx refuse-order capacity release "$HOT" --no-sanitize --json
cx status-4b status --json
cx release-2 capacity release "$HOT" "$HOT2" --no-sanitize --timeout 600 --json
cx capacity-4b capacity --json
touch "$OUT/ready-del2"; wait_host done-del2
wait_memdev $HOT_SERIAL absent del-2
wait_memdev $HOT2_SERIAL absent del-2b
sleep 3
cx status-5 status --json
kill -0 $DPID && echo alive > "$OUT/daemon-alive-2"

# 7. a third bind: adopted again
N0=$(grep -c " adopted: " "$OUT/daemon.log")
touch "$OUT/ready-add3"; wait_host done-add3
adopted adopt-3 "$N0"
sleep 3
cx capacity-5 capacity --json
cx status-8 status --json
cx metrics daemon metrics

# 8. its DAX device as devdax, held open by a process: release refused, nothing changed
HOT=$(memdev_named $HOT_SERIAL); echo "$HOT" > "$OUT/hot-name-3"
DAX=$("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print([m for m in d["memdevs"] if m["memdev"]==sys.argv[2]][0]["dax_devices"][0])' "$OUT/capacity-5.out" "$HOT")
cx devdax dax reconfigure "$DAX" --mode devdax --force --json
"$PY" -c 'import os,sys,time; fd=os.open("/dev/"+sys.argv[1], os.O_RDWR); open(sys.argv[2],"w").write(str(os.getpid())); time.sleep(600)' "$DAX" "$OUT/holder.pid" &
HOLDER=$!
for _ in $(seq 1 100); do [ -s "$OUT/holder.pid" ] && break; sleep 0.1; done
cx status-6 status --json
cx refuse-devdax capacity release "$HOT" --json
cx status-7 status --json
kill $HOLDER; wait $HOLDER
kill -TERM $DPID; wait $DPID; echo $? > "$OUT/daemon.rc"
exit 0
"""

#: the daemon's profile: DRAM:CXL weights 3:2, so a new CXL node's weight (2) shows the pass after adoption
PROFILE = RATIO_PROFILE

CONFIG = """
[reconcile]
debounce_ms = 300
max_delay_ms = 3000
rescan_interval = 10
[drift]
interval = 0
[metrics]
listen = ""
[health]
enabled = false
[capacity]
adopt = "system-ram"
zone = "movable"
pool_member = true
adopt_serials = ["0x5002", "0x5003"]
"""


def _fm(session: QmpSession) -> None:
    """The fabric manager: bind (hot-add), unbind (hot-remove); bind again with a second device beside it on
    the same host bridge, unbind both; then bind a third time."""
    dev = {"driver": "cxl-type3", "bus": HOT_PORT, "id": HOT_ID, "sn": HOT_SERIAL}
    dev2 = {"driver": "cxl-type3", "bus": HOT2_PORT, "id": HOT2_ID, "sn": HOT2_SERIAL}

    def bind(step: str, device: Dict[str, Any], backend: str) -> None:
        # each bind on a new backend: QEMU 10 keeps a backend marked in use after the unplug ("memory backend
        # vmem1 can't be used multiple times"), as a pool hands out other memory on the next bind anyway
        session.wait_file(f"ready-add{step}", timeout=900)
        session.execute(
            "object-add", {"qom-type": "memory-backend-ram", "id": backend, "size": 256 << 20, "share": True}
        )
        session.execute("device_add", dict(device, **{"volatile-memdev": backend}))
        session.signal(f"done-add{step}")

    def unbind(step: str, ids: List[str]) -> None:
        session.wait_file(f"ready-del{step}", timeout=1200)
        t0 = time.monotonic()
        for i in ids:
            session.execute("device_del", {"id": i})
        # QEMU frees an id once the guest has powered the slot off (the attention button's 5 s)
        session.wait_until(lambda: not set(ids) & _present(session), 120, f"the removal of {', '.join(ids)}")
        session.signal(f"done-del{step}", f"{time.monotonic() - t0:.1f}\n")

    bind("", dev, HOT_BACKEND)
    unbind("", [HOT_ID])
    bind("2", dev, HOT_BACKEND + "b")
    bind("2b", dev2, "vmem2")
    unbind("2", [HOT_ID, HOT2_ID])
    bind("3", dev, HOT_BACKEND + "c")


def _present(session: QmpSession) -> Set[str]:
    return {p["name"] for p in session.execute("qom-list", {"path": "/machine/peripheral"})}


def _rc(out: Path, label: str) -> int:
    return int(out_text(out, f"{label}.rc").strip())


def _pages(numa_maps: str, node: int) -> int:
    return sum(
        int(f.split("=")[1]) for line in numa_maps.splitlines() for f in line.split() if f.startswith(f"N{node}=")
    )


def _kv(text: str) -> Dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _memdev(status: Dict[str, Any], serial: int) -> Any:
    return next((m for m in status["memdevs"] if m.get("serial") == serial), None)


@pytest.mark.parametrize("series", ["6.12", "7.x"])
def test_capacity_cycle(series: str, tmp_path: Path) -> None:
    work = tmp_path / "vm"
    tools = work / "tools"
    pattern = build_c(tools, "pattern", PATTERN_C)
    holder = build_c(tools, "holder", HOLDER_C)
    script = (
        f"export PATTERN={pattern} PATTERN_MIB={PATTERN_MIB} BOOT_SERIAL={0x5001} HOT_SERIAL={HOT_SERIAL}\n"
        f"export HOLDER={holder} HOLD_MIB={HOLD_MIB} HOLD_TIMEOUT={HOLD_TIMEOUT} HOT2_SERIAL={HOT2_SERIAL}\n"
        f"export HOLD_SIGNALS={HOLD_SIGNALS[series]}\n"
        f"export RECORD_FIXTURES={'1' if os.environ.get('CXLCTL_RECORD_FIXTURES') else ''}\n"
        + SNAP
        + GUEST.replace("PROFILE_TEXT", PROFILE.strip()).replace("CONFIG_TEXT", CONFIG.strip())
    )
    res = run_guest("pool", script, kernel=series, workdir=work, timeout=1800, qmp=_fm).check()
    if os.environ.get("CXLCTL_RECORD_FIXTURES"):  # scripts/record-fixtures.sh capacity
        install_fixtures(res.outdir, series, res.kernel.release)
    report = [f"guest {res.kernel.release}, boot {res.boot_seconds} s, wall {res.wall_seconds} s"]
    report += check(res.outdir, series)
    print("\n".join(report))
    (tmp_path / "measured.txt").write_text("\n".join(report) + "\n")


#: what each recorded tree holds (peers/recorded.txt)
RECORDED = {
    "pool-hotadd": "right after the host's device_add (serial 0x5002 on rp1) once its memdev was bound; the boot "
    "device's region built by `cxlctl region create --memdevs MEM --decoder decoder0.0 --zone normal`",
    "pool-hotremoved": "after `cxlctl capacity release` of that memdev and the host's device_del, once it was gone",
}


def install_fixtures(out: Path, series: str, release: str) -> None:
    """Put the guest's two records into fixtures/linux-SERIES/ (tests/fixture_status.install), with recorded.txt."""
    from tests.vm.harness import TOPOLOGIES
    from tests.vm.record_fixtures import package_of, tool_version

    for name, what in RECORDED.items():
        dst = Path(install(out / "fixtures" / name, REPO / "fixtures" / f"linux-{series}" / name))
        about = [
            f"kernel: {release} ({package_of(release)})",
            f"qemu: {tool_version(['qemu-system-x86_64', '--version'])}",
            f"recorded: {time.strftime('%Y-%m-%d')} in tests/vm/test_vm_capacity.py's guest (snap), installed by its install_fixtures",
            f"topology: pool: {TOPOLOGIES['pool'].description}",
            f"state: {what}",
        ]
        (dst / "peers" / "recorded.txt").write_text("\n".join(about) + "\n")


def check(out: Path, series: str) -> List[str]:
    """The host's checks of what the guest left in ``out``."""
    report: List[str] = []
    # 1. refusal: exit 2, zone-normal named, nothing changed
    assert _rc(out, "boot-region") == 0, out_text(out, "boot-region.err", missing_ok=True)
    assert _rc(out, "refuse") == 2, out_text(out, "refuse.err", missing_ok=True)
    err = out_json(out, "refuse.out")["error"]
    assert err["exit"] == 2 and "ZONE_NORMAL" in err["message"] and "nothing was changed" in err["message"], err
    assert out_json(out, "status-0.out")["regions"] == out_json(out, "status-1.out")["regions"]
    report.append(f"refusal: {err['message'][:110]}…")

    # 2. hot-add and adoption by hand (`capacity adopt`: the window without a region, movable)
    hot = out_text(out, "hot-name-1").strip()
    assert hot, "the hot-added memdev did not appear"
    assert _rc(out, "adopt-1") == 0, out_text(out, "adopt-1.err", missing_ok=True)
    (a1,) = out_json(out, "adopt-1.out")["memdevs"]
    assert (a1["adopted"], a1["root_decoder"]) == (True, "decoder0.1"), a1
    assert all(d["zones"] == ["Movable"] and d["online_memblocks"] == d["total_memblocks"] for d in a1["dax"]), a1
    node = int(out_text(out, "hot-node").strip())
    cap = out_json(out, "capacity-1.out")
    m = next(x for x in cap["memdevs"] if x["memdev"] == hot)
    assert (m["state"], m["releasable"], m["nodes"], m["movable"]) == ("releasable", 256 << 20, [node], 256 << 20), m
    report.append(
        f"hot-add: {hot} (serial {HOT_SERIAL:#x}) in {out_text(out, 'add-1.seconds').strip()} s, adopted on node {node}"
    )

    report += check_hold(out, hot, node, series)

    # 3-4. the pattern, the release
    before = _pages(out_text(out, "numa-before.txt"), node)
    assert before * 4096 >= (PATTERN_MIB << 20) * 9 // 10, f"the pattern is not on node {node}: {before} pages"
    assert _rc(out, "release") == 0, out_text(out, "release.err", missing_ok=True)
    rel = out_json(out, "release.out")
    (md,) = rel["memdevs"]
    assert (
        md["released"] is True
        and md["message"]
        == f"{hot} (serial {HOT_SERIAL:#x}) released, not sanitized (--no-sanitize): safe to unbind at the fabric manager; "
        "its media keeps this host's pages"
    )
    (mv,) = rel["moved"]
    assert mv["node"] == node and mv["bytes"] >= (PATTERN_MIB << 20) * 9 // 10, mv
    ready, result = _kv(out_text(out, "pattern.ready")), _kv(out_text(out, "pattern.result"))
    assert result["bad"] == "0" and result["sum"] == ready["sum"], (ready, result)
    # offline_pages() -> do_migrate_range(): the pages go to another node in the released node's fallback
    # order (the nearest; on this guest the boot device's CXL node before DRAM), none stay
    after_text = out_text(out, "numa-after.txt")
    others = {n: _pages(after_text, n) - _pages(out_text(out, "numa-before.txt"), n) for n in range(8) if n != node}
    assert _pages(after_text, node) == 0 and sum(others.values()) >= before, after_text[:2000]
    landed = ", ".join(f"node {n} +{p}" for n, p in sorted(others.items()) if p > 0)
    status = out_json(out, "status-2.out")
    # the node shrank to nothing: try_remove_memory() -> try_offline_node() unregisters it once empty
    assert node not in [n["id"] for n in status["nodes"]], status["nodes"]
    assert "MemTotal" not in out_text(out, "node-after.txt"), f"node{node} should be gone"
    dev = _memdev(status, HOT_SERIAL)
    assert dev is not None and not dev.get("regions"), dev
    eps = [d for d in status["decoders"] if d.get("memdev") == hot] if "decoders" in status else []
    assert all(not d.get("region") and not d.get("dpa_size") for d in eps), eps
    journal = json.loads(out_text(out, "journal.json"))
    assert journal["state"] == "released", journal
    assert rel["recovered"] == [], rel  # the interrupted releases before it left nothing to roll back
    report.append(
        f"release: {format_size(mv['bytes'])} in use on node {node} moved ("
        + ", ".join(f"node {t['node']} +{format_size(t['bytes'])}" for t in mv["to"])
        + ")"
        + f"; pattern of {PATTERN_MIB} MiB intact (sum {ready['sum']}); its pages: {before} on node {node} before, "
        + f"0 after ({landed})"
    )

    # 5. hot-remove: gone, clean
    assert _memdev(out_json(out, "status-3.out"), HOT_SERIAL) is None
    assert all(x["memdev"] != hot for x in out_json(out, "capacity-3.out")["memdevs"])
    took = out_text(out, "done-del").strip() or "?"
    report.append(f"hot-remove: {hot} gone {took} s after device_del (QEMU's id freed: the slot powered off)")

    report += check_daemon(out)
    return report


def _as_before(cap: Dict[str, Any]) -> Dict[str, Any]:
    """What a rolled-back release must leave as it was: every memdev's state, online bytes, zones, regions,
    blockers; the ports' holes; the host's state (the nodes' bytes in use move with the guest's own work)."""
    return {k: cap[k] for k in ("memdevs", "port_holes", "host_state", "totals")}


def check_hold(out: Path, hot: str, node: int, series: str) -> List[str]:
    """Step 2b (issue 41): an offline held up by vmspliced pages, ended by the bound and by the kernel's signal:
    each exits naming the cause and is rolled back (every block online, the region as before, the journal
    rolled-back, nothing left for the next release)."""
    report: List[str] = []
    held = _pages(out_text(out, "holder-numa.txt"), node)
    assert held * 4096 >= (HOLD_MIB << 20) // 2, f"the held pages are not on node {node}: {held}"
    holder = _kv(out_text(out, "holder.ready"))
    assert holder["spliced"] == str(HOLD_MIB << 20), holder
    before = out_json(out, "hold-cap-0.out")
    m = next(x for x in before["memdevs"] if x["memdev"] == hot)
    assert (m["state"], m["online"], m["movable"]) == ("releasable", 256 << 20, 256 << 20), m
    signals = {"INT": (128 + 2, "SIGINT received"), "TERM": (128 + 15, "SIGTERM received")}
    sig = HOLD_SIGNALS[series]
    assert not [s for s in signals if s != sig and os.path.exists(os.path.join(out, f"hold-{s}.rc"))]
    for label, code, why in (
        ("bound", 1, f"an offline took longer than {HOLD_TIMEOUT} s (the bound)"),
        (sig, *signals[sig]),
    ):
        rc = _rc(out, f"hold-{label}")
        err = out_text(out, f"hold-{label}.err", missing_ok=True)
        assert rc == code, (label, rc, err[-3000:])
        e = out_json(out, f"hold-{label}.out")["error"]
        assert e["exit"] == code and e["message"].startswith(f"capacity release failed: {why}"), e
        assert "rolled back: every region and block is as it was, nothing was lost" in e["message"], e
        # the cause: the processes with pages on the node, the holder first, and the kernel's word on the
        # pages it could not migrate (do_migrate_range())
        assert f"processes with pages on node {node} (a page one of them holds by an extra reference" in e["hint"], e
        assert f"PID {holder['pid']} (holder) {HOLD_MIB} MiB" in e["hint"] and "migrat" in e["hint"], e
        journal = json.loads(out_text(out, f"hold-{label}.journal"))
        assert journal["state"] == "rolled-back", journal
        after = out_json(out, f"hold-cap-{label}.out")
        assert _as_before(after) == _as_before(before), (label, after["memdevs"], before["memdevs"])
        took = out_text(out, f"hold-{label}.seconds").strip()
        seen = ""
        if label != "bound":  # the signal went while the offline ran
            seen = out_text(out, f"hold-{label}.seen", missing_ok=True).strip()
            assert seen.isdigit(), f"{label}: no block of node {node} was seen going-offline"
        report.append(
            f"held pages ({HOLD_MIB} MiB vmspliced), {label}: exit {rc} after {took} s"
            + (f" (signal {seen} s in)" if seen else "")
            + f", rolled back; hint: {e['hint'][:90]}…"
        )
    return report


def _bridge_decoder(status: Dict[str, Any], region: str) -> str:
    """The host bridge's (switch-kind port) decoder of ``region``."""
    (d,) = [d["decoder"] for d in status["decoders"] if d["kind"] == "switch" and d.get("region") == region]
    return str(d)


def check_order(out: Path) -> Tuple[List[str], str]:
    """Step 6 (issue 41): two devices adopted through one host bridge; the first alone is refused
    (``decoder-order``, naming the later memdev), nothing changed; both in one release go later-first; no port
    is left with a hole."""
    cap = out_json(out, "capacity-4.out")
    first = next(x for x in cap["memdevs"] if x["serial"] == HOT_SERIAL)
    second = next(x for x in cap["memdevs"] if x["serial"] == HOT2_SERIAL)
    assert second["memdev"] == out_text(out, "hot2-name").strip()
    for m in (first, second):
        assert (m["movable"], m["online"]) == (256 << 20, 256 << 20), m
    (r1,), (r2,) = first["regions"], second["regions"]
    status = out_json(out, "status-4.out")
    d1, d2 = _bridge_decoder(status, r1), _bridge_decoder(status, r2)
    assert d1.split(".")[0] == d2.split(".")[0] and int(d1.split(".")[1]) < int(d2.split(".")[1]), (d1, d2)
    # the report says it before anyone tries: the first is blocked by decoder order, depends on the second
    assert first["state"] == "blocked" and first["depends_on"] == [second["memdev"]], first
    assert [b["code"] for b in first["blockers"]] == ["decoder-order"], first["blockers"]
    assert second["state"] == "releasable", second
    assert _rc(out, "refuse-order") == 2, out_text(out, "refuse-order.err", missing_ok=True)
    err = out_json(out, "refuse-order.out")["error"]
    assert f"cannot release {first['memdev']} (decoder-order)" in err["message"], err
    assert "nothing was changed" in err["message"] and second["memdev"] in err["hint"], err
    assert status["regions"] == out_json(out, "status-4b.out")["regions"]
    assert _rc(out, "release-2") == 0, out_text(out, "release-2.err", missing_ok=True)
    rel = out_json(out, "release-2.out")
    assert [r["region"] for r in rel["regions"]] == [r2, r1], rel["regions"]  # the later region first
    assert all(m["released"] for m in rel["memdevs"]), rel["memdevs"]
    after = out_json(out, "capacity-4b.out")
    assert after["port_holes"] == [], after["port_holes"]
    assert {
        m["memdev"]: m["state"] for m in after["memdevs"] if m["memdev"] in (first["memdev"], second["memdev"])
    } == {
        first["memdev"]: "free",
        second["memdev"]: "free",
    }, after["memdevs"]
    return [
        f"decoder order: {first['memdev']} ({r1} on {d1}) and {second['memdev']} ({r2} on {d2}) through one bridge; "
        f"{first['memdev']} alone refused ({err['message'][:80]}…); both released as {r2}, {r1}; no port hole"
    ], d1


def check_daemon(out: Path) -> List[str]:
    """Steps 5-7 as the daemon saw them: a clean removal, two adoptions, the profile on the new node."""
    report: List[str] = []
    log = out_text(out, "daemon.log")
    ctx = f"\n--- daemon.log ---\n{log[-6000:]}"
    assert out_text(out, "daemon-alive-1", missing_ok=True).strip() == "alive", ctx
    hot = out_text(out, "hot-name-1").strip()
    assert f"memdev {hot} (serial {HOT_SERIAL:#x}) left; it had no region: nothing was lost" in log, ctx
    # 6. the daemon's adoption
    assert out_text(out, "hot-name-2").strip(), "the memdev did not come back"
    # the promise is the adoption itself, at the daemon's next pass after the memdev arrives; how
    # long the guest took (probe, region, onlining under TCG) is a figure in the report (issue 44)
    took = int(out_text(out, "adopt-2.seconds").strip())
    lines = [ln for ln in log.splitlines() if " adopted: " in ln]
    assert len(lines) == 3, f"the daemon did not adopt three times ({took} s waited){ctx}"
    assert "on decoder0.1" in lines[0] and "in Movable" in lines[0], ctx
    assert "adopt = system-ram, zone = movable" in lines[0], ctx
    assert "on decoder0.2" in lines[1] and "in Movable" in lines[1], ctx  # the second device: its own window
    cap = out_json(out, "capacity-4.out")
    again = next(x for x in cap["memdevs"] if x["serial"] == HOT_SERIAL)
    (node,) = again["nodes"]
    weights = dict(ln.split() for ln in out_text(out, "weights-2.txt").splitlines())
    assert weights.get(f"node{node}") == "2", (weights, ctx)
    assert _rc(out, "verify-2") == 0, out_text(out, "verify-2.out")
    order, first_decoder = check_order(out)
    report += order
    assert _memdev(out_json(out, "status-5.out"), HOT_SERIAL) is None
    assert _memdev(out_json(out, "status-5.out"), HOT2_SERIAL) is None
    assert out_text(out, "daemon-alive-2", missing_ok=True).strip() == "alive", ctx
    report.append(
        f"daemon adoption: {again['memdev']} on node {node} {took} s after the host's device_add (to the log "
        f"line), 256 MiB in ZONE_MOVABLE, weight node{node} = 2, tune verify ok; the second device "
        f"{int(out_text(out, 'adopt-2b.seconds').strip())} s after its device_add; both unbound "
        f"({out_text(out, 'done-del2').strip()} s from device_del to gone)"
    )
    # 7. the third bind
    took3 = int(out_text(out, "adopt-3.seconds").strip())
    third = next(x for x in out_json(out, "capacity-5.out")["memdevs"] if x["serial"] == HOT_SERIAL)
    assert third["state"] == "releasable", third
    # its region on the bridge's decoder the release freed, the lowest: no hole kept it from the kernel
    (region3,) = third["regions"]
    assert _bridge_decoder(out_json(out, "status-8.out"), region3) == first_decoder, (region3, first_decoder)
    assert _rc(out, "daemon") == 0, ctx
    assert "surprise removal" not in log and "internal error" not in log and "Traceback" not in log, ctx
    metrics = out_text(out, "metrics.out")
    assert f'cxlctl_capacity_releasable_bytes{{memdev="{third["memdev"]}"' in metrics, metrics[-3000:]
    report.append(
        f"daemon adoption again: {third['memdev']} {took3} s after device_add, {region3} on {first_decoder} "
        "(the freed decoder); daemon stopped with exit 0"
    )
    # 8. devdax held open
    assert _rc(out, "devdax") == 0, out_text(out, "devdax.err", missing_ok=True)
    assert _rc(out, "refuse-devdax") == 2, out_text(out, "refuse-devdax.err", missing_ok=True)
    err = out_json(out, "refuse-devdax.out")["error"]
    holder = out_text(out, "holder.pid").strip()
    assert "is open by PID " + holder in err["message"] and "nothing was changed" in err["message"], err
    assert out_json(out, "status-6.out")["regions"] == out_json(out, "status-7.out")["regions"]
    report.append(f"devdax open: {err['message'][:100]}…")
    return report
