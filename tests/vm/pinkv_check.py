"""A long-term pinned KV offload in a real guest (issue 42): the check the ``hb2x2`` shared boots run last.

No VM test here: ``tests/vm/test_vm_linux612.py`` (6.12) and ``tests/vm/test_vm_linux7_daemon_ras.py``
(7.x) run :func:`guest_script` after the daemon and RAS checks, and call :func:`check` on its files.
What those checks leave is what this one needs: region B (``cxl-vmem0`` + ``cxl-vmem1``, window 1,
onlined ``online_movable`` while the daemon ran: ZONE_MOVABLE, the lendable share), region A
(``cxl-vmem2``, window 2) in devdax mode, and ``cxl-vmem3`` free.

The stand-in engine (``PINKV_C``) keeps its KV offload in a ``/dev/shm`` file, faults every page, then
pins it the way NVIDIA's driver pins ``cudaHostRegister`` memory on x86: ``FOLL_LONGTERM``, here
through io_uring's fixed buffers (``io_uring_register(IORING_REGISTER_BUFFERS)``, raw syscalls;
io_uring/rsrc.c ``io_pin_pages()`` -> ``pin_user_pages_fast(FOLL_WRITE | FOLL_LONGTERM)``).  mm/gup.c
``check_and_migrate_movable_pages_or_folios()`` migrates every folio ``folio_is_longterm_pinnable()``
rejects (ZONE_MOVABLE) before the pin holds.  It copies its own ``numa_maps`` before and after the
pin.  Steps:

1. **only movable CXL** (region B): ``launch exec --pinned --kv-size 8M`` is refused (exit 2, naming
   the cause and the fix); with ``--allow-unpinnable`` the dry run's bytes per node (after the pin) are
   where the pin puts the pages (DRAM);
2. **the split**: ``[capacity] pinnable = "256M"`` in the configuration, ``region create`` of
   ``cxl-vmem3`` without ``--zone``: the host's split picks ZONE_NORMAL (it has no kernel-zone CXL
   memory yet), and ``capacity --json`` then shows the target met;
3. **pinnable and lendable**: the same launch without ``--allow-unpinnable``: the private ``/dev/shm``
   binds to the pinnable node only; after the pin >= 95 % of the offload is there and the dry run's bytes
   per node match numa_maps within 5 %; while it runs, ``capacity --json`` shows region B's memdevs
   still ``releasable``;
4. **the pin's own fallback**: the same launch bound to the movable node (``--mem-nodes``): the pin moves
   each page to a kernel zone along that node's zonelist (mm/page_alloc.c ``find_next_best_node()``: at
   equal distances the CPU-less pinnable node before DRAM), where the dry run says.

Then the engine is stopped, region P destroyed (best effort: a ZONE_NORMAL block may keep an unmovable
page) and the configuration removed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

from cxlctl.numa_maps import parse_mappings
from tests.vm.harness import GuestResult, Topology, build_c, out_json, out_text

KV_MIB = 8
SHM_FILE = "/dev/shm/kvpin_offload.mmap"

PINKV_C = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
/* pinkv READY MIB: a stand-in engine that keeps its KV offload in a /dev/shm file and long-term pins it.
   The file (SHMFILE) is created, ftruncate'd to MIB MiB, mapped MAP_SHARED and every page written (the
   faults place it: the tmpfs mpol=); /proc/self/numa_maps is copied to READY.before; then the mapping is
   registered as an io_uring fixed buffer (io_uring_setup + io_uring_register(IORING_REGISTER_BUFFERS),
   raw syscalls: io_uring/rsrc.c pins it with FOLL_LONGTERM, as NVIDIA's driver pins cudaHostRegister
   memory) and numa_maps is copied to READY.after; then "PID BYTES" goes to READY and it sleeps. */
static int copy(const char *from, const char *to) {
    char buf[65536];
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0) return -1;
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, n) != n) return -1;
    close(in);
    close(out);
    return 0;
}
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    size_t len = (size_t)atoi(argv[2]) << 20;
    char path[4096];
    int fd = open("SHMFILE", O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) { perror("SHMFILE"); return 1; }
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    for (size_t i = 0; i < len; i += 4096) p[i] = 1;
    snprintf(path, sizeof path, "%s.before", argv[1]);
    if (copy("/proc/self/numa_maps", path)) { perror(path); return 1; }
    struct io_uring_params params;
    memset(&params, 0, sizeof params);
    int ring = (int)syscall(__NR_io_uring_setup, 1, &params);
    if (ring < 0) { perror("io_uring_setup"); return 3; }
    struct iovec iov = { p, len };
    if (syscall(__NR_io_uring_register, ring, IORING_REGISTER_BUFFERS, &iov, 1) != 0) {
        perror("io_uring_register(IORING_REGISTER_BUFFERS)");
        return 3;
    }
    snprintf(path, sizeof path, "%s.after", argv[1]);
    if (copy("/proc/self/numa_maps", path)) { perror(path); return 1; }
    snprintf(path, sizeof path, "%s.tmp", argv[1]);
    int out = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || dprintf(out, "%d %zu\n", (int)getpid(), len) < 0 || close(out) || rename(path, argv[1])) {
        perror(path);
        return 1;
    }
    for (;;) pause();
}
"""

GUEST = r"""
cx() {  # $1 = name, rest = cxlctl's arguments: NAME.out, NAME.err, NAME.rc (the warm $CXLCTL: no exec here,
  # only dry runs, a refusal, region and capacity commands; the launches that exec stay "$PY" -m cxlctl)
  local n=$1; shift
  "$CXLCTL" "$@" > "$OUT/$n.out" 2> "$OUT/$n.err"
  echo $? > "$OUT/$n.rc"
}
L="launch exec --allow-root --pinned --policy bind --cpu-nodes 0 --mem-nodes 0 --kv-size KVSIZE"
MEMP=$(memdev_by_serial 0x4004) || exit 10
echo "$MEMP" > "$OUT/memdev-p"
for d in /sys/bus/dax/devices/dax*; do echo "$(basename $d) $(cat $d/target_node 2>/dev/null)"; done > "$OUT/dax-before.txt"

# 1. only movable CXL: refused; with --allow-unpinnable the dry run says where the pin puts it
cx mov.refused $L -- "$PINKV" "$OUT/never.ready" KVMIB
cx movf.dry $L --allow-unpinnable --dry-run --json -- "$PINKV" "$OUT/movf.ready" KVMIB
"$PY" -m cxlctl $L --allow-unpinnable -- "$PINKV" "$OUT/movf.ready" KVMIB > "$OUT/movf.out" 2> "$OUT/movf.err" &
pid=$!
cxlvm_wait_ready "$OUT/movf.ready" $pid
kill $pid; wait $pid 2>/dev/null
rm -f SHMFILE

# 2. the split: [capacity] pinnable, and a region whose zone it picks
mkdir -p /etc/cxlctl
printf '[capacity]\npinnable = "256M"\n' > /etc/cxlctl/cxlctl.toml
cx split.dry region create --memdevs "$MEMP" --dry-run --json
cx split.create region create --memdevs "$MEMP" --json
udevadm settle --timeout=30 || true

# 3. pinnable and lendable: the pinned offload on the pinnable node, the lendable memdevs still releasable
cx pin.dry $L --dry-run --json -- "$PINKV" "$OUT/pin.ready" KVMIB
"$PY" -m cxlctl $L -- "$PINKV" "$OUT/pin.ready" KVMIB > "$OUT/pin.out" 2> "$OUT/pin.err" &
pid=$!
cxlvm_wait_ready "$OUT/pin.ready" $pid && cx pin.cap capacity --json
kill $pid; wait $pid 2>/dev/null
rm -f SHMFILE

# 4. the pin's own fallback: the offload bound to the movable node (--mem-nodes), the pin moves each page to a
#    kernel zone along that node's zonelist (find_next_best_node(): the CPU-less pinnable node before DRAM)
NODEB=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["kv_offload"]["nodes"][0])' "$OUT/movf.dry.out")
L4="launch exec --allow-root --pinned --allow-unpinnable --policy bind --cpu-nodes 0 --mem-nodes $NODEB --kv-size KVSIZE"
cx zl.dry $L4 --dry-run --json -- "$PINKV" "$OUT/zl.ready" KVMIB
"$PY" -m cxlctl $L4 -- "$PINKV" "$OUT/zl.ready" KVMIB > "$OUT/zl.out" 2> "$OUT/zl.err" &
pid=$!
cxlvm_wait_ready "$OUT/zl.ready" $pid
kill $pid; wait $pid 2>/dev/null

# put the guest back: the region (best effort: ZONE_NORMAL), the configuration
RP=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["regions"][0]["region"])' "$OUT/split.create.out" 2>/dev/null)
[ -n "$RP" ] && cx destroy region destroy "$RP" --force
rm -f /etc/cxlctl/cxlctl.toml
exit 0
"""


def guest_script(work: Path, t: Topology) -> str:
    """The guest side on ``hb2x2`` (after the daemon and RAS checks), the stand-in built under ``work``."""
    assert t.name == "hb2x2" and t.serials["cxl-vmem3"] == 0x4004
    tool = build_c(work, "pinkv", PINKV_C.replace("SHMFILE", SHM_FILE))
    return f"export PINKV={tool}\n" + (
        GUEST.replace("KVSIZE", f"{KV_MIB}M").replace("KVMIB", str(KV_MIB)).replace("SHMFILE", SHM_FILE)
    )


def _offload_pages(out: Path, name: str) -> Dict[int, int]:
    """Pages per node of the offload file's mapping in a numa_maps copy (exactly one such mapping)."""
    maps = [m for m in parse_mappings(out_text(out, name)) if m.file == SHM_FILE]
    assert len(maps) == 1, out_text(out, name)
    return dict(maps[0].pages)


def _expected(doc: Dict[str, object], key: str) -> Dict[int, int]:
    ko = doc["kv_offload"]
    assert isinstance(ko, dict)
    return {int(n): int(b) for n, b in (ko[key] or {}).items()}


def _match(got_pages: Dict[int, int], expected: Dict[int, int], size: int) -> None:
    """numa_maps' bytes per node against the dry run's, within 5 % of the offload."""
    got = {n: p * 4096 for n, p in got_pages.items()}
    for n in set(got) | set(expected):
        assert abs(got.get(n, 0) - expected.get(n, 0)) <= 0.05 * size, (got, expected)


def _launched(out: Path, name: str) -> Tuple[int, int]:
    assert (out / f"{name}.ready").exists(), out_text(out, f"{name}.err", missing_ok=True)
    pid, size = (int(x) for x in out_text(out, f"{name}.ready").split())
    return pid, size


def check(res: GuestResult) -> List[str]:
    """The host's assertions on the guest's files; returns the measured lines (printed)."""
    res.check()
    out = res.outdir
    size = KV_MIB << 20
    lines = [f"pinned KV on {res.kernel.release} (hb2x2, after daemon and RAS): {res.wall_seconds} s in the guest"]

    # 1. only movable CXL memory: refused, naming the cause and the fix
    assert out_text(out, "mov.refused.rc").strip() == "2", out_text(out, "mov.refused.err", missing_ok=True)
    err = out_text(out, "mov.refused.err")
    assert "would not stay on CXL" in err and "migrate_longterm_unpinnable_folios" in err, err
    assert "--zone normal" in err and "--allow-unpinnable" in err and "Traceback" not in err, err
    assert not (out / "never.ready").exists()
    dry = out_json(out, "movf.dry.out")
    ko = dry["kv_offload"]
    cxl_nodes = set(dry["nodes"]["cxl"]) | set(ko["nodes"])
    assert ko["pinned"] is True and ko["on_cxl"] is False, ko
    before_plan, after_plan = _expected(dry, "before_pin_bytes_per_node"), _expected(dry, "expected_bytes_per_node")
    assert set(before_plan) <= set(ko["nodes"]) and not set(after_plan) & cxl_nodes, ko
    _pid, got_size = _launched(out, "movf")
    assert got_size == size
    before, after = _offload_pages(out, "movf.ready.before"), _offload_pages(out, "movf.ready.after")
    lines.append(
        f"  only movable CXL: refused (exit 2); --allow-unpinnable: before the pin {before}, after {after} pages "
        f"(numa_maps); dry run {after_plan} bytes after the pin"
    )
    assert sum(before.values()) == sum(after.values()) == size // 4096
    assert set(before) <= cxl_nodes, before  # the faults put it on the movable CXL node
    _match(after, after_plan, size)

    # 2. the split picks the kernel zone for the region of cxl-vmem3
    sp = out_json(out, "split.dry.out")
    assert sp["zone"] == "normal" and "below [capacity] pinnable = 256 MiB" in sp["zone_decided_by"], sp
    assert out_text(out, "split.create.rc").strip() == "0", out_text(out, "split.create.err", missing_ok=True)
    (made,) = out_json(out, "split.create.out")["regions"]
    (dax,) = made["dax"]
    node_p = dax["target_node"]
    assert set(dax["zones"]) == {"Normal"}, dax
    assert "ZONE_NORMAL" in out_text(out, "split.create.err")

    # 3. pinnable and lendable: the offload stays on the pinnable node after the pin
    dry = out_json(out, "pin.dry.out")
    ko = dry["kv_offload"]
    assert ko["pinned"] and ko["on_cxl"] and dry["tmpfs"]["nodes"] == [node_p], (ko, dry["tmpfs"])
    planned = _expected(dry, "expected_bytes_per_node")
    _pid, _ = _launched(out, "pin")
    before, after = _offload_pages(out, "pin.ready.before"), _offload_pages(out, "pin.ready.after")
    on = after.get(node_p, 0) / sum(after.values())
    lines.append(
        f"  pinnable node {node_p} + lendable: before the pin {before}, after {after} pages (numa_maps), "
        f"{on:.1%} on node {node_p}; dry run {planned} bytes"
    )
    assert on >= 0.95, after
    _match(after, planned, size)
    cap = out_json(out, "pin.cap.out")
    share = cap["pinnable_share"]
    assert share["target"] == 256 << 20 and share["pinnable"] >= 256 << 20 and share["next_zone"] == "movable"
    lend = [m for m in cap["memdevs"] if m["movable"] and m["memdev"] != out_text(out, "memdev-p").strip()]
    assert lend and all(m["state"] == "releasable" for m in lend), [(m["memdev"], m["blockers"]) for m in lend]
    mp = next(m for m in cap["memdevs"] if m["memdev"] == out_text(out, "memdev-p").strip())
    assert mp["state"] == "blocked" and mp["releasable"] == 0, mp
    lines.append(
        f"  while it runs: {', '.join(m['memdev'] for m in lend)} releasable ({sum(m['releasable'] for m in lend)} B); "
        f"split {share['pinnable']} B pinnable / {share['lendable']} B lendable, target {share['target']} B; "
        f"region destroy after: rc {out_text(out, 'destroy.rc', missing_ok=True).strip()}"
    )
    # 4. bound to the movable node: the pin moves the pages along its zonelist, to the pinnable node
    dry = out_json(out, "zl.dry.out")
    planned = _expected(dry, "expected_bytes_per_node")
    _launched(out, "zl")
    before, after = _offload_pages(out, "zl.ready.before"), _offload_pages(out, "zl.ready.after")
    lines.append(
        f"  bound to the movable node {dry['kv_offload']['nodes']}: before the pin {before}, after {after} pages "
        f"(numa_maps); dry run {planned} bytes after the pin (the source node's zonelist)"
    )
    assert set(before) == set(dry["kv_offload"]["nodes"]), before
    _match(after, planned, size)
    print("\n".join(lines))
    return lines
