"""End-to-end launcher on a real 6.12 kernel with a CXL node (one boot).

In the guest: create a RAM region (a CPU-less CXL node appears), then

1. ``launch exec --ratio 3:1`` a tiny C program (compiled here with the host's
   cc; the guest runs it from the host's file system) that maps and touches
   12 MiB, writes its PID and sleeps: its pages must sit on DRAM and CXL in
   3:1 (±10 %), read from ``/proc/PID/numa_maps`` and ``policy show``; the
   weights must be in the tuning journal, and ``tune revert`` must restore them;
2. ``launch exec --policy bind --mem-nodes <cxl>``: every anonymous page on the
   CXL node (this one goes through the installed numactl, 2.0.16);
3. ``launch vllm --kv-tmpfs`` with a fake vllm (shell script) that maps a
   ``/dev/shm/vllm_offload_*.mmap`` file like vLLM does: the process is bound
   to DRAM, yet the file's pages land on CXL (tmpfs ``mpol=bind``), in a
   mount namespace of its own;
3b. ``launch vllm --kv-size 16M`` with no placement option (issue 34): a stand-in for vLLM
   0.34.0 that allocates its offload as vLLM's own code does (``OFFLOAD_C`` below) runs under
   the default weighted interleave over DRAM+CXL, yet ≥ 95 % of the offload file's pages are on
   the CXL node (cxlctl mounted a CXL-bound private /dev/shm for it, as root), the process'
   anonymous memory stays DRAM-first (the host's weights set to 3:1 first, as bandwidth figures
   would: DRAM pages ≥ CXL pages × 3, -10 %; the boot weights restored after), the
   dry run's ``kv_offload.expected_bytes_per_node`` is within 5 % of numa_maps, and
   ``policy show``'s ``kv_offload`` pages and ``stat --pid``'s ``shm`` pages agree (no
   ``kv-offload-not-on-cxl`` verdict);
4. pre-flight in a cgroup v2 cpuset without the CXL node: refused, exit 1, the
   message names the cgroup.

CXL memory under TCG costs about a second per MiB touched, so the program is C
and small, and Python (cxlctl) never runs under a CXL policy: it sets the
policy and execs.  The measured ratios are printed (pytest -s shows them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Tuple

from cxlctl.numa_maps import parse_mappings
from tests.launch_support import HELP_VLLM
from tests.vm.harness import GuestResult, Topology, build_c, out_json, out_text

# no VM test here: the guest side runs in the shared boots (test_vm_linux612.py, test_vm_linux7.py)

TOUCH_C = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
/* touch MIB READY [SHMFILE]: map MIB MiB (anonymous, or SHMFILE shared), touch every page,
   write our PID to READY, then sleep until killed. */
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    size_t len = (size_t)atoi(argv[1]) << 20;
    char *p;
    if (argc > 3) {
        int fd = open(argv[3], O_RDWR | O_CREAT, 0600);
        if (fd < 0 || ftruncate(fd, (off_t)len) != 0) { perror(argv[3]); return 1; }
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    } else {
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        /* base pages: one huge page would take 512 interleave slots at once */
        if (p != MAP_FAILED) madvise(p, len, MADV_NOHUGEPAGE);
    }
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    for (size_t i = 0; i < len; i += 4096) p[i] = 1;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[2]);
    FILE *f = fopen(tmp, "w");
    if (!f) { perror(tmp); return 1; }
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
    rename(tmp, argv[2]);
    for (;;) pause();
}
"""

OFFLOAD_C = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
/* offload READY OWN_MIB ARGS...: a stand-in for vLLM 0.34.0's CPU KV offload, one worker (TP 1).
   Sizing, as vLLM computes it: cpu_bytes_to_use = --kv-offloading-size x (1 << 30)
   (vllm/config/vllm.py VllmConfig, kv_offloading_backend "native"); num_chunks = cpu_bytes_to_use
   // the page-aligned chunk (vllm/v1/kv_offload/cpu/spec.py CPUOffloadingSpec.__init__; CHUNK
   stands for kv_bytes_per_block x blocks_per_chunk of a small model).  Allocation, as
   vllm/v1/kv_offload/cpu/shared_offload_region.py SharedOffloadRegion.__init__ does for the
   creating worker: open /dev/shm/vllm_offload_<engine_id>.mmap O_CREAT|O_EXCL|O_RDWR 0600,
   ftruncate to num_chunks x chunk (one segment: less than 1 GiB), mmap MAP_SHARED, unlink once
   the workers mapped it (the barrier; one worker here), then MADV_POPULATE_WRITE over this
   worker's slots (rank 0 of 1: every chunk).  Then OWN_MIB MiB of anonymous memory touched: the
   engine's own memory.  Writes its PID to READY and sleeps. */
#define CHUNK (64 << 10)
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    double gib = -1;
    for (int i = 3; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--kv-offloading-size")) gib = atof(argv[i + 1]);
    if (gib <= 0) { fprintf(stderr, "no --kv-offloading-size\n"); return 2; }
    size_t cpu_bytes = (size_t)(gib * (double)(1 << 30));
    size_t total = cpu_bytes / CHUNK * CHUNK;
    const char *path = "/dev/shm/vllm_offload_cxlctltest.mmap";
    int fd = open(path, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)total) != 0) { perror(path); return 1; }
    char *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    unlink(path);
    if (madvise(p, total, MADV_POPULATE_WRITE) != 0) {
        if (errno != EINVAL) { perror("madvise"); return 1; }
        for (size_t i = 0; i < total; i += 4096) p[i] |= 0;  /* vLLM's fallback: one byte per page */
    }
    size_t own = (size_t)atoi(argv[2]) << 20;
    char *q = mmap(NULL, own, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (q == MAP_FAILED) { perror("mmap"); return 1; }
    madvise(q, own, MADV_NOHUGEPAGE);
    for (size_t i = 0; i < own; i += 4096) q[i] = 1;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
    FILE *f = fopen(tmp, "w");
    if (!f) { perror(tmp); return 1; }
    fprintf(f, "%d %zu\n", (int)getpid(), total);
    fclose(f);
    rename(tmp, argv[1]);
    for (;;) pause();
}
"""

FAKE_VLLM34_SH = r"""#!/bin/bash
# stand-in vLLM 0.34.0: answers the launcher's probes (help: the recorded 0.32.0, whose offload flags 0.34.0 keeps),
# then allocates its offload as 0.34.0 does (OFFLOAD_C)
case "$1" in --version) echo 0.34.0; exit 0 ;; esac
if [ "$1" = serve ] && [[ "$*" == *--help* ]]; then cat "@HELP@"; exit 0; fi
exec "@OFFLOAD@" "$OUT/kvdef.ready" 4 "$@"
"""

FAKE_VLLM_SH = r"""#!/bin/bash
# fake vLLM: answers the launcher's probes, then allocates its "offload" in /dev/shm like vLLM >= 0.28 (help: the recorded 0.32.0)
case "$1" in --version) echo 0.32.0; exit 0 ;; esac
if [ "$1" = serve ] && [[ "$*" == *--help* ]]; then cat "@HELP@"; exit 0; fi
exec "@TOUCH@" 4 "$OUT/tmpfs.ready" /dev/shm/vllm_offload_cxlctltest.mmap
"""

GUEST = r"""
# (no `set -u`: guest-lib.sh relies on unset variables)
snap() {  # $1 = label, $2 = pid: what the kernel says about the process
  cat /proc/$2/numa_maps > "$OUT/$1.numa_maps"
  cat /proc/$2/status > "$OUT/$1.status"
  tr '\0' ' ' < /proc/$2/cmdline > "$OUT/$1.cmdline"
  cat /proc/$2/mountinfo > "$OUT/$1.mountinfo"
  "$CXLCTL" policy show $2 --json > "$OUT/$1.show.json" 2> "$OUT/$1.show.err"
  echo $? > "$OUT/$1.show.rc"
}
waitfor() {  # $1 = file, $2 = pid of the launch (guest-lib.sh cxlvm_wait_ready: 180 s of guest time)
  cxlvm_wait_ready "$1" $2 && return 0
  kill -0 $2 2>/dev/null || return 1
  # what the kernel says the process is doing, for the failure message
  { for f in status wchan syscall stack; do echo "== /proc/$2/$f"; cat /proc/$2/$f 2>&1; done
    echo "== numa_maps"; cat /proc/$2/numa_maps 2>&1
    echo "== node meminfo"; grep -h "MemFree" /sys/devices/system/node/node*/meminfo
    echo "== dmesg"; dmesg | tail -n 40; } > "$1.stuck" 2>&1
  return 1
}
weights() { for f in /sys/kernel/mm/mempolicy/weighted_interleave/node*; do echo "$(basename $f) $(cat $f)"; done; }

R=$(CREATE) || { echo "region creation failed" >&2; exit 10; }
udevadm settle --timeout=30 || true
echo "$R" > "$OUT/region"
numactl -H > "$OUT/numactl.txt"
"$CXLCTL" status --json > "$OUT/status.json"
CXL=$("$PY" -c 'import json,sys; print([n["id"] for n in json.load(open(sys.argv[1]))["nodes"] if n["kind"]=="cxl"][0])' "$OUT/status.json")
echo $CXL > "$OUT/cxl-node"
weights > "$OUT/weights-boot.txt"
# 6.16+: auto mode (reads true at boot, with or without bandwidth figures)
cat /sys/kernel/mm/mempolicy/weighted_interleave/auto > "$OUT/auto-boot.txt" 2>/dev/null || true

# 1. weighted interleave 3:1 (weights through the tuning engine; cxlctl sets the policy itself)
"$CXLCTL" launch exec --allow-root --ratio 3:1 --cpu-nodes 0 --mem-nodes 0,$CXL --dry-run --json > "$OUT/wi.dry.json" 2> "$OUT/wi.dry.err" -- "$TOUCH" 12 "$OUT/wi.ready"
"$PY" -m cxlctl launch exec --allow-root --ratio 3:1 --cpu-nodes 0 --mem-nodes 0,$CXL -- "$TOUCH" 12 "$OUT/wi.ready" > "$OUT/wi.out" 2> "$OUT/wi.err" &
pid=$!
echo $pid > "$OUT/wi.launch-pid"
waitfor "$OUT/wi.ready" $pid && snap wi $pid
weights > "$OUT/weights-launched.txt"
"$CXLCTL" tune status --json > "$OUT/tune-status.json"
kill $pid; wait $pid 2>/dev/null
"$CXLCTL" tune revert --json > "$OUT/revert.json" 2> "$OUT/revert.err"
echo $? > "$OUT/revert.rc"
weights > "$OUT/weights-reverted.txt"

# 2. bind to the CXL node (through numactl --membind)
"$PY" -m cxlctl launch exec --allow-root --policy bind --cpu-nodes 0 --mem-nodes $CXL -- "$TOUCH" 8 "$OUT/bind.ready" > "$OUT/bind.out" 2> "$OUT/bind.err" &
pid=$!
echo $pid > "$OUT/bind.launch-pid"
waitfor "$OUT/bind.ready" $pid && snap bind $pid
kill $pid; wait $pid 2>/dev/null

# 3. vLLM offload in a CXL-bound private /dev/shm while the engine is bound to DRAM
"$CXLCTL" launch vllm --allow-root --policy bind --cpu-nodes 0 --mem-nodes 0 --kv-size auto --reserve 384M --kv-tmpfs --dry-run --json \
  --engine-cmd "$FAKEVLLM" -- serve m > "$OUT/tmpfs.dry.json" 2> "$OUT/tmpfs.dry.err"
"$PY" -m cxlctl launch vllm --allow-root --policy bind --cpu-nodes 0 --mem-nodes 0 --kv-size 64M --kv-tmpfs \
  --engine-cmd "$FAKEVLLM" -- serve m > "$OUT/tmpfs.out" 2> "$OUT/tmpfs.err" &
pid=$!
echo $pid > "$OUT/tmpfs.launch-pid"
waitfor "$OUT/tmpfs.ready" $pid && snap tmpfs $pid
cat /proc/self/mountinfo > "$OUT/global.mountinfo"
ls /dev/shm > "$OUT/global-shm.txt"
kill $pid; wait $pid 2>/dev/null

# 3b. --kv-size with no placement option: the offload on CXL, the engine's own memory DRAM-first.
# The host's weights 3:1 first (what bandwidth figures give a DRAM+CXL host; this guest has none, so
# its weights are 1:1): the launch keeps the weights in effect, and the engine's memory follows them
WI=/sys/kernel/mm/mempolicy/weighted_interleave
echo 3 > $WI/node0 && echo 1 > $WI/node$CXL
weights > "$OUT/kvdef.weights.txt"
"$CXLCTL" launch vllm --allow-root --kv-size 16M --dry-run --json --engine-cmd "$FAKEVLLM34" -- serve m \
  > "$OUT/kvdef.dry.json" 2> "$OUT/kvdef.dry.err"
"$PY" -m cxlctl launch vllm --allow-root --kv-size 16M --engine-cmd "$FAKEVLLM34" -- serve m > "$OUT/kvdef.out" 2> "$OUT/kvdef.err" &
pid=$!
echo $pid > "$OUT/kvdef.launch-pid"
waitfor "$OUT/kvdef.ready" $pid && snap kvdef $pid
"$CXLCTL" stat --json --pid $pid > "$OUT/kvdef.stat.json" 2> "$OUT/kvdef.stat.err"
kill $pid; wait $pid 2>/dev/null
while read -r n w; do echo "$w" > $WI/$n; done < "$OUT/weights-boot.txt"
[ "$(cat "$OUT/auto-boot.txt")" = true ] && echo true > $WI/auto

# 4. pre-flight: a cgroup v2 cpuset without the CXL node
grep -q " /sys/fs/cgroup cgroup2 " /proc/mounts || mount -t cgroup2 none /sys/fs/cgroup
echo +cpuset > /sys/fs/cgroup/cgroup.subtree_control
mkdir -p /sys/fs/cgroup/cxltest
echo 0 > /sys/fs/cgroup/cxltest/cpuset.mems
cat /sys/fs/cgroup/cxltest/cpuset.mems.effective > "$OUT/cgroup-mems.txt"
( echo $BASHPID > /sys/fs/cgroup/cxltest/cgroup.procs
  exec "$PY" -m cxlctl launch exec --allow-root --policy bind --mem-nodes $CXL -- "$TOUCH" 1 "$OUT/never.ready"
) > "$OUT/cpuset.out" 2> "$OUT/cpuset.err"
echo $? > "$OUT/cpuset.rc"
exit 0
"""


def _weights(out: Path, name: str) -> Dict[int, int]:
    return {int(a[4:]): int(b) for a, b in (line.split() for line in out_text(out, name).splitlines())}


def _big_mapping(out: Path, label: str, file: Any = None) -> Dict[int, int]:
    maps = parse_mappings(out_text(out, f"{label}.numa_maps"))
    cands = [m for m in maps if (m.file == file if file else m.kind == "anon")]
    big = max(cands, key=lambda m: sum(m.pages.values()))
    return big.pages


def _ratio(pages: Dict[int, int], dram: int, cxl: int) -> Tuple[float, str]:
    d, c = pages.get(dram, 0), pages.get(cxl, 0)
    return d / c, f"DRAM node{dram} {d} pages, CXL node{cxl} {c} pages = {d / c:.3f}:1"


def check_kv_default(out: Path, cxl: int) -> List[str]:
    """Step 3b's assertions (issue 34 row 1); returns the measured lines."""
    dry = out_json(out, "kvdef.dry.json")
    ko = dry["kv_offload"]
    assert ko["mechanism"] == "tmpfs" and ko["on_cxl"] and dry["tmpfs"]["nodes"] == [cxl], ko
    assert dry["policy"]["mode"] == "weighted-interleave" and cxl in dry["policy"]["nodes"]
    assert (out / "kvdef.ready").exists(), out_text(out, "kvdef.err", missing_ok=True) + out_text(
        out, "kvdef.ready.stuck", missing_ok=True
    )
    pid, total = (int(x) for x in out_text(out, "kvdef.ready").split())
    assert pid == int(out_text(out, "kvdef.launch-pid"))
    maps = parse_mappings(out_text(out, "kvdef.numa_maps"))
    shm = [m for m in maps if m.file and m.file.startswith("/dev/shm/vllm_offload_cxlctltest.mmap")]
    assert len(shm) == 1, [m.file for m in maps]
    pages = shm[0].pages
    on_cxl = pages.get(cxl, 0) / sum(pages.values())
    expected = {int(n): b for n, b in ko["expected_bytes_per_node"].items()}
    got = {n: p * 4096 for n, p in pages.items()}
    lines = [
        f"--kv-size 16M, no placement option: vLLM 0.34.0 stand-in's offload ({total} B, {shm[0].file}): "
        f"{pages} pages (numa_maps), {on_cxl:.1%} on CXL node{cxl}; dry run expected {expected}"
    ]
    assert sum(pages.values()) * 4096 == total and on_cxl >= 0.95
    for n in set(expected) | set(got):
        assert abs(got.get(n, 0) - expected.get(n, 0)) <= 0.05 * expected[cxl], (got, expected)
    # the engine's own anonymous memory: the default weighted interleave by the host's 3:1, DRAM-first
    assert _weights(out, "kvdef.weights.txt")[0] == 3
    weights = {int(n): w for n, w in dry["policy"]["weights"].items()}
    assert weights == {0: 3, cxl: 1} and dry["weights"]["changes"] == [], dry["weights"]
    anon = _big_mapping(out, "kvdef")
    d, c = anon.get(0, 0), anon.get(cxl, 0)
    lines.append(f"  its own 4 MiB anonymous: node0 {d}, node{cxl} {c} pages (weights {weights})")
    assert d + c == 1024 and d >= 0.9 * c * weights[0] / weights[cxl] and d > c
    show = out_json(out, "kvdef.show.json")
    assert out_text(out, "kvdef.show.rc").strip() == "0", out_text(out, "kvdef.show.err", missing_ok=True)
    assert show["kv_offload"]["pages"] == {str(n): p for n, p in sorted(pages.items())}
    assert any(f.startswith("/dev/shm/vllm_offload_cxlctltest.mmap") for f in show["kv_offload"]["files"])
    # stat reads the same mappings: the file's pages per node, and no kv-offload-not-on-cxl verdict
    stat = out_json(out, "kvdef.stat.json")
    (proc,) = [p for p in stat["processes"] if p["pid"] == pid]
    shm_files = {f: v for f, v in proc["shm"].items() if f.startswith("/dev/shm/vllm_offload_cxlctltest.mmap")}
    assert list(shm_files.values()) == [{str(n): p for n, p in sorted(pages.items())}], proc["shm"]
    assert not any(v["id"] == "kv-offload-not-on-cxl" for v in stat["verdicts"]), stat["verdicts"]
    return lines


def guest_script(work: Path, t: Topology) -> str:
    """The guest side of this check on ``t`` (its widest region), tools built under ``work``."""
    region = t.widest
    assert region is not None
    tools = work / "tools"
    build_c(tools, "touch", TOUCH_C)
    (tools / "help.txt").write_text(HELP_VLLM["0.32.0"])
    fake = tools / "vllm"
    fake.write_text(FAKE_VLLM_SH.replace("@HELP@", str(tools / "help.txt")).replace("@TOUCH@", str(tools / "touch")))
    fake.chmod(0o755)
    build_c(tools, "offload", OFFLOAD_C)
    fake34 = tools / "vllm34"
    fake34.write_text(
        FAKE_VLLM34_SH.replace("@HELP@", str(tools / "help.txt")).replace("@OFFLOAD@", str(tools / "offload"))
    )
    fake34.chmod(0o755)
    return (
        f"export TOUCH={tools / 'touch'} FAKEVLLM={fake} FAKEVLLM34={fake34} CXLCTL_CACHE_DIR={work / 'cache'}\n"
        + GUEST.replace("CREATE", region.create_command(t))
    )


def check(res: GuestResult, tmp_path: Path) -> None:
    """The host's assertions on the guest's files; the measured lines go to ``tmp_path/measured.txt``."""
    res.check()
    out = res.outdir
    cxl = int(out_text(out, "cxl-node"))
    report: List[str] = [f"guest {res.kernel.release}, boot {res.boot_seconds} s, wall {res.wall_seconds} s"]

    # -- 1. weighted interleave 3:1
    assert (out / "wi.ready").exists(), out_text(out, "wi.err", missing_ok=True)
    dry = out_json(out, "wi.dry.json")
    assert dry["policy"]["mode"] == "weighted-interleave" and dry["policy"]["method"] == "direct"
    changes = [{"setting": "weighted_interleave.node0", "from": "1", "to": "3"}]
    auto_at_boot = out_text(out, "auto-boot.txt").strip()  # empty before 6.16 (no such file)
    if auto_at_boot == "true":  # a weight written switches auto mode off (7.x): the plan says so
        changes.append({"setting": "weighted_interleave.auto", "from": "true", "to": "false"})
    assert dry["weights"]["changes"] == changes
    assert int(out_text(out, "wi.ready")) == int(out_text(out, "wi.launch-pid")), (
        "the program replaced cxlctl (exec), same PID"
    )
    assert out_text(out, "wi.cmdline").split()[0].endswith("/touch")
    assert _weights(out, "weights-launched.txt") == {0: 3, cxl: 1}
    err = out_text(out, "wi.err")
    assert "system-wide" in err and "cxlctl tune revert" in err and "has no --weighted-interleave" in err
    pages = _big_mapping(out, "wi")
    assert sum(pages.values()) == 12 * 256
    r, text = _ratio(pages, 0, cxl)
    report.append(f"weighted interleave --ratio 3:1, 12 MiB: {text} (numa_maps)")
    assert abs(r / 3 - 1) <= 0.10, text
    show = out_json(out, "wi.show.json")
    assert out_text(out, "wi.show.rc").strip() == "0", out_text(out, "wi.show.err", missing_ok=True)
    assert (
        show["policy"]["mode"] == "weighted-interleave"
        and show["policy"]["nodes"] == [0, cxl]
        and show["match"] is True
    )
    assert show["asked"]["weights"] == {"0": 3, str(cxl): 1}
    placement = next(c for c in show["checks"] if c["check"] == "placement")
    assert placement["status"] == "pass", placement
    anon = {int(k): v for k, v in show["pages"]["anon"].items()}
    report.append(
        f"  policy show, all anonymous pages: node0 {anon.get(0, 0)}, node{cxl} {anon.get(cxl, 0)} = {anon.get(0, 0) / anon[cxl]:.3f}:1"
    )
    tune = out_json(out, "tune-status.json")
    assert tune["active_profile"] == "launch-weights" and tune["journal"]["state"] == "applied"
    assert out_text(out, "revert.rc").strip() == "0", out_text(out, "revert.err", missing_ok=True)
    assert _weights(out, "weights-reverted.txt") == _weights(out, "weights-boot.txt")
    if auto_at_boot == "true":  # the kernel refuses auto = true without figures (ENODEV): said why
        assert any("auto stays false" in m for m in out_json(out, "revert.json")["messages"]), out_json(
            out, "revert.json"
        )

    # -- 2. bind to the CXL node
    assert (out / "bind.ready").exists(), out_text(out, "bind.err", missing_ok=True)
    assert int(out_text(out, "bind.ready")) == int(out_text(out, "bind.launch-pid"))
    assert "policy applied by" in out_text(out, "bind.err") and "numactl" in out_text(out, "bind.err")
    pages = _big_mapping(out, "bind")
    report.append(f"bind --mem-nodes {cxl}, 8 MiB: {pages} (numa_maps)")
    assert pages == {cxl: 8 * 256}
    show = out_json(out, "bind.show.json")
    assert show["policy"] == {"mode": "bind", "nodes": [cxl], "flags": None, "numa_maps": f"bind:{cxl}"}
    assert show["match"] is True and list(show["pages"]["anon"]) == [str(cxl)]

    # -- 3. --kv-tmpfs: DRAM-bound process, offload file on CXL
    dry = out_json(out, "tmpfs.dry.json")
    free = next(n["mem_free"] for n in out_json(out, "status.json")["nodes"] if n["id"] == cxl)
    assert (
        dry["kv"]["auto"]
        and dry["kv"]["bytes"] == dry["kv"]["free_cxl"] - (384 << 20)
        and dry["tmpfs"]["nodes"] == [cxl]
    )
    assert abs(dry["kv"]["free_cxl"] - free) < (64 << 20)
    assert (out / "tmpfs.ready").exists(), out_text(out, "tmpfs.err", missing_ok=True)
    assert int(out_text(out, "tmpfs.ready")) == int(out_text(out, "tmpfs.launch-pid"))
    shm = _big_mapping(out, "tmpfs", file="/dev/shm/vllm_offload_cxlctltest.mmap")
    report.append(f"--kv-tmpfs, process bound to node0, 4 MiB /dev/shm offload file: {shm} (numa_maps)")
    assert shm == {cxl: 4 * 256}
    anon = _big_mapping(out, "tmpfs")
    assert set(anon) == {0}, "the process itself stays on DRAM"
    mine = [line for line in out_text(out, "tmpfs.mountinfo").splitlines() if " /dev/shm " in line]
    assert mine and f"mpol=bind:{cxl}" in mine[-1], mine
    assert not any(f"mpol=bind:{cxl}" in line for line in out_text(out, "global.mountinfo").splitlines()), (
        "private mount namespace"
    )
    assert "vllm_offload_cxlctltest.mmap" not in out_text(out, "global-shm.txt")

    # -- 3b. --kv-size alone: the offload on CXL, the engine's own memory DRAM-first
    report.extend(check_kv_default(out, cxl))

    # -- 4. pre-flight refuses a node outside the cgroup's cpuset
    assert out_text(out, "cgroup-mems.txt").strip() == "0"
    assert out_text(out, "cpuset.rc").strip() == "1"
    err = out_text(out, "cpuset.err")
    assert f"node(s) {cxl} are outside this process' cpuset (Mems_allowed_list 0)" in err and "cgroup /cxltest" in err
    assert "nothing was launched" in err and not (out / "never.ready").exists()
    print("\n".join(report))
    (tmp_path / "measured.txt").write_text("\n".join(report) + "\n")
