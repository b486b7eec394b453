"""``stat``/``top``'s DAMON view and HMAT block on a real 6.12 kernel, plus a try at ``promotion-throttled`` (a check of test_vm_linux612.py's shared ``single`` boot).

In the guest (``single`` topology, the RAM region online as a CPU-less CXL node):

1. the kernel's access coordinates are dumped (``nodeN/access{0,1}/initiators/*``,
   ``regionN/access{0,1}/*``) and ``cxlctl stat --json`` is run: each node's
   ``hmat`` block must be what those files say (null when there are none);
2. two C helpers run in cgroup ``/damon-test`` (``cold``: 4 MiB on DRAM, touched
   once; ``hot``: 1 MiB on the CXL node, touched in a loop) and ``tune apply
   vm-damon`` (inference-damon with short ages, as in test_vm_damon.py) starts
   DAMON; after 20 s ``update_schemes_stats`` is written to every kdamond, the
   schemes' ``stats/`` files are dumped, ``stat --json`` runs and they are dumped
   again (equal: nothing refreshed them in between) -- ``stat``'s ``damon[]``
   must equal them; the text report shows the schemes at 80 columns;
3. ``cxlctl top`` runs three refreshes on a pseudo-terminal (``script``, 80x50):
   the screen must show the DAMON section with both schemes;
4. ``tune revert``; then the promotion try: NUMA balancing in tiering mode
   (``numa_balancing=2``), ``numa_balancing_promote_rate_limit_MBps=1``, the
   DRAM node filled through a tmpfs (in /tmp: the guest's / is the host's, read-only)
   bound to it until less than 1 GiB is free
   (the kernel counts ``pgpromote_candidate`` and applies the rate limit only
   when the destination node has not "enough" free memory: max(1 GiB, 1/16 of
   the node) above its promo watermark, ``pgdat_free_space_enough()`` in
   kernel/sched/fair.c), faster NUMA scanning (debugfs), and a helper touching
   32 MiB it moved to the CXL node with move_pages(2) (see HOT_C); ``stat --interval 15`` reports what happened.  That
   part is printed (pytest -s) and checked for consistency, not required to fire.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Optional

from tests.vm.harness import GuestResult, Topology, build_c, out_text
from tests.vm.test_vm_damon import TIER_C, VM_PROFILE

#: the promotion try's helper: its pages are moved to the CXL node with move_pages(2), so their VMA keeps
#: the default policy -- NUMA balancing scans only VMAs whose policy allows migrate-on-fault (MPOL_F_MOF),
#: and an mbind(2) policy (the tier helper's) does not: the first try of this test saw 0 hint faults
HOT_C = r"""
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
/* cxlhot MIB NODE READY: touch MIB MiB of anonymous memory, move it to NODE, write our PID and
   the number of pages that landed there to READY, then keep touching the pages. */
int main(int argc, char **argv) {
    if (argc < 4) return 2;
    size_t len = (size_t)atoi(argv[1]) << 20, n = len / 4096, on = 0;
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    madvise(p, len, MADV_NOHUGEPAGE);
    memset(p, 1, len);
    void **pages = calloc(n, sizeof *pages);
    int *nodes = calloc(n, sizeof *nodes), *status = calloc(n, sizeof *status);
    for (size_t i = 0; i < n; i++) { pages[i] = p + i * 4096; nodes[i] = atoi(argv[2]); }
    if (syscall(SYS_move_pages, 0, n, pages, nodes, status, 2 /* MPOL_MF_MOVE */) < 0) perror("move_pages");
    for (size_t i = 0; i < n; i++) on += status[i] == atoi(argv[2]);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[3]);
    FILE *f = fopen(tmp, "w");
    if (!f) { perror(tmp); return 1; }
    fprintf(f, "%d %zu\n", (int)getpid(), on);
    fclose(f);
    rename(tmp, argv[3]);
    for (unsigned char v = 0;; v++)
        for (size_t i = 0; i < len; i += 4096) p[i] = (char)v;
}
"""

STATS = ("nr_tried", "sz_tried", "nr_applied", "sz_applied", "qt_exceeds")
COORDS = ("read_bandwidth", "write_bandwidth", "read_latency", "write_latency")
PROMOTE_S = 15

GUEST = r"""
R=$(@CREATE@) || { echo "region creation failed" >&2; exit 10; }
udevadm settle --timeout=30 || true
CXL=$(cxlvm_cxl_node) || exit 11
echo "$CXL" > "$OUT/cxl-node"
D=/sys/kernel/mm/damon/admin/kdamonds
TOOLS=@TOOLS@

# 1. access coordinates as the kernel shows them
for n in /sys/devices/system/node/node*; do
  for a in access0 access1; do for f in @COORDS@; do
    [ -r $n/$a/initiators/$f ] && echo "${n##*/} $a $f $(cat $n/$a/initiators/$f)"
  done; done
done > "$OUT/hmat.txt"
ls -d /sys/devices/system/node/node*/access* > "$OUT/access-dirs.txt" 2>&1
for r in /sys/bus/cxl/devices/region*; do
  for a in access0 access1; do for f in @COORDS@; do
    [ -r $r/$a/$f ] && echo "${r##*/} $a $f $(cat $r/$a/$f)"
  done; done
done > "$OUT/region-access.txt"
"$CXLCTL" stat --json > "$OUT/hmat-stat.json" 2> "$OUT/hmat-stat.err"; echo $? > "$OUT/hmat-stat.rc"

# 2. DAMON running for two helpers in /damon-test
grep -q " /sys/fs/cgroup cgroup2 " /proc/mounts || mount -t cgroup2 none /sys/fs/cgroup
echo +memory > /sys/fs/cgroup/cgroup.subtree_control
CG=/sys/fs/cgroup/damon-test
mkdir -p $CG
helper() {  # $1 = cold|hot, $2 = MiB, $3 = node, $4 = cgroup dir or "": start it, wait until it is ready
  rm -f "$OUT/$1-$2.ready"
  ( [ -n "$4" ] && echo $BASHPID > $4/cgroup.procs; exec $TOOLS/tier $1 $2 $3 "$OUT/$1-$2.ready" ) 2> "$OUT/$1-$2.err" &
  for i in $(seq 1 1200); do [ -s "$OUT/$1-$2.ready" ] && break; sleep 0.1; done
}
helper cold 4 0 $CG; COLD=$(cat "$OUT/cold-4.ready")
helper hot 1 $CXL $CG; HOT=$(cat "$OUT/hot-1.ready")
mkdir -p /etc/cxlctl/profiles
cat > /etc/cxlctl/profiles/vm-damon.toml <<'EOF'
@PROFILE@
EOF
"$CXLCTL" tune apply vm-damon --json > "$OUT/apply.json" 2> "$OUT/apply.err"; echo $? > "$OUT/apply.rc"
sleep 20
dump() { for s in $D/*/contexts/*/schemes/*/stats; do for f in @STATS@; do echo "$s/$f $(cat $s/$f)"; done; done; }
for try in 1 2 3; do
  for k in $D/[0-9]*; do echo update_schemes_stats > $k/state; done
  dump > "$OUT/damon-before.txt"
  "$CXLCTL" stat --json > "$OUT/damon-stat.json" 2> "$OUT/damon-stat.err"; echo $? > "$OUT/damon-stat.rc"
  dump > "$OUT/damon-after.txt"
  cmp -s "$OUT/damon-before.txt" "$OUT/damon-after.txt" && break
done
echo $try > "$OUT/damon-tries"
COLUMNS=80 "$CXLCTL" stat > "$OUT/damon-stat.txt" 2>&1

# 3. top on a pseudo-terminal
script -qec "stty cols 80 rows 50; \"$PY\" -m cxlctl top --interval 1 --count 3 --rows 3" /dev/null > "$OUT/top.pty" 2> "$OUT/top.err"
echo $? > "$OUT/top.rc"

# 4. promotion under the rate limit
"$CXLCTL" tune revert --json > "$OUT/revert.json" 2> "$OUT/revert.err"; echo $? > "$OUT/revert.rc"
kill $COLD $HOT; wait $COLD $HOT 2>/dev/null
echo true > /sys/kernel/mm/numa/demotion_enabled
free_mb=$(( $(awk '/MemFree/ {print $4}' /sys/devices/system/node/node0/meminfo) / 1024 ))
fill=$(( free_mb > 800 ? free_mb - 700 : 0 ))
mkdir -p /tmp/fill && mount -t tmpfs -o size=3G,mpol=bind:0 fill /tmp/fill 2> "$OUT/fill-mount.err"
[ $fill -gt 0 ] && dd if=/dev/zero of=/tmp/fill/f bs=1M count=$fill 2> "$OUT/fill.err"
echo "$free_mb $fill" > "$OUT/fill"
cat /sys/devices/system/node/node0/meminfo > "$OUT/fill.meminfo"
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
NB=/sys/kernel/debug/sched/numa_balancing
for kv in scan_delay_ms=100 scan_period_min_ms=100 scan_period_max_ms=1000; do
  [ -w $NB/${kv%%=*} ] && echo ${kv#*=} > $NB/${kv%%=*}
done
grep -r . $NB > "$OUT/numa-debugfs.txt" 2>&1
echo 1 > /proc/sys/kernel/numa_balancing_promote_rate_limit_MBps
echo 2 > /proc/sys/kernel/numa_balancing
cat /proc/sys/kernel/numa_balancing /proc/sys/kernel/numa_balancing_promote_rate_limit_MBps > "$OUT/nb"
$TOOLS/cxlhot 32 $CXL "$OUT/cxlhot.ready" 2> "$OUT/cxlhot.err" &
for i in $(seq 1 1200); do [ -s "$OUT/cxlhot.ready" ] && break; sleep 0.1; done
HOT=$(cut -d' ' -f1 "$OUT/cxlhot.ready")
"$CXLCTL" stat --json --interval @PROMOTE_S@ --count 2 --pid $HOT > "$OUT/P.json" 2> "$OUT/P.err"; echo $? > "$OUT/P.rc"
cat /sys/devices/system/node/node0/vmstat > "$OUT/P.node0.vmstat"
cat /sys/devices/system/node/node$CXL/vmstat > "$OUT/P.cxl.vmstat"
cat /proc/vmstat > "$OUT/P.vmstat"
cat /sys/devices/system/node/node0/meminfo > "$OUT/P.meminfo"
COLUMNS=80 "$CXLCTL" stat --interval 5 --count 2 > "$OUT/P.txt" 2>&1
kill $HOT; wait $HOT 2>/dev/null
exit 0
"""


def _keyvals(text: str) -> Dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in text.splitlines())}


def _dump(text: str) -> Dict[str, Dict[str, int]]:
    """``.../kdamonds/K/contexts/C/schemes/S/stats/NAME VALUE`` lines → {"K/C/S": {NAME: VALUE}}."""
    out: Dict[str, Dict[str, int]] = {}
    for line in text.splitlines():
        path, value = line.rsplit(" ", 1)
        m = re.search(r"kdamonds/(\d+)/contexts/(\d+)/schemes/(\d+)/stats/(\w+)$", path)
        assert m, line
        out.setdefault(f"{m[1]}/{m[2]}/{m[3]}", {})[m[4]] = int(value)
    return out


def _coords(text: str, kind: str) -> Dict[str, Dict[str, int]]:
    """``node1 access1 read_bandwidth 1234`` lines → {"node1": {"read_bandwidth": 1234}} (access1 only: the
    CPU class, the one the kernel weights and tiers by)."""
    out: Dict[str, Dict[str, int]] = {}
    for line in text.splitlines():
        name, access, field, value = line.split()
        if access == "access1" and name.startswith(kind):
            out.setdefault(name, {})[field] = int(value)
    return out


def _json_lines(out: Path, name: str) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in out_text(out, name).splitlines()]


def _rate(rep: Dict[str, Any], name: str) -> Optional[float]:
    v = rep["system"]["rates"].get(name)
    return None if v is None else round(v, 1)


def guest_script(tools: Path, t: Topology) -> str:
    """The guest side (a check of test_vm_linux612.py's shared ``single`` boot, last: it leaves NUMA
    balancing in tiering mode and DRAM filled); ``tools`` is where its C helpers are built."""
    region = t.widest
    assert region is not None
    build_c(tools, "tier", TIER_C)
    build_c(tools, "cxlhot", HOT_C)
    return (
        GUEST.replace("@CREATE@", region.create_command(t))
        .replace("@TOOLS@", str(tools))
        .replace("@PROFILE@", VM_PROFILE.strip())
        .replace("@STATS@", " ".join(STATS))
        .replace("@COORDS@", " ".join(COORDS))
        .replace("@PROMOTE_S@", str(PROMOTE_S))
    )


def check(res: GuestResult, tmp_path: Path) -> None:
    """Every assertion of the check, on its guest run's results."""
    out = res.outdir
    assert res.returncode == 0, out_text(out, "hmat-stat.err", missing_ok=True) + res.stderr[-3000:]
    cxl = int(out_text(out, "cxl-node"))
    report = [f"guest {res.kernel.release}, boot {res.boot_seconds} s, wall {res.wall_seconds} s, CXL node {cxl}"]

    # 1. HMAT/CDAT: stat's block per node is what the kernel's files say, null where there are none
    assert out_text(out, "hmat-stat.rc").strip() == "0", out_text(out, "hmat-stat.err", missing_ok=True)
    (doc,) = _json_lines(out, "hmat-stat.json")
    nodes = _coords(out_text(out, "hmat.txt"), "node")
    regions = _coords(out_text(out, "region-access.txt"), "region")
    for n in doc["nodes"]:
        files = nodes.get(f"node{n['id']}")
        if files:
            assert n["hmat"]["from"] == "node"
            assert [n["hmat"][f"{k}_mbps" if "bandwidth" in k else f"{k}_ns"] for k in COORDS] == [
                files.get(k) for k in COORDS
            ]
        elif n["kind"] == "cxl" and regions and len(regions) == 1:
            (rc,) = regions.values()
            assert n["hmat"]["from"] == "regions" and n["hmat"]["read_bandwidth_mbps"] == rc.get("read_bandwidth")
        else:
            assert n["hmat"] is None, n
    report.append(
        f"HMAT/CDAT: node access files {nodes or 'none'} ({out_text(out, 'access-dirs.txt', missing_ok=True).strip()}); "
        f"region access1 {regions or 'none'}; stat: "
        + ", ".join(f"node {n['id']} hmat {n['hmat']}" for n in doc["nodes"])
    )

    # 2. DAMON: stat's damon[] equals the schemes' stats files right after update_schemes_stats
    assert out_text(out, "apply.rc").strip() == "0", out_text(out, "apply.err", missing_ok=True)
    assert out_text(out, "damon-stat.rc").strip() == "0", out_text(out, "damon-stat.err", missing_ok=True)
    before, after = _dump(out_text(out, "damon-before.txt")), _dump(out_text(out, "damon-after.txt"))
    assert before == after, "the stats files changed while stat ran (refreshed by someone?)"
    (doc,) = _json_lines(out, "damon-stat.json")
    mine = {f"{d['kdamond']}/{d['context']}/{d['scheme']}": d for d in doc["damon"]}
    assert set(mine) == set(after) and len(after) >= 2, (sorted(mine), sorted(after))
    for key, files in after.items():
        assert mine[key]["stats"] == files, (key, mine[key]["stats"], files)
    actions = {d["action"]: d for d in doc["damon"]}
    assert {"migrate_cold", "migrate_hot"} <= set(actions)
    assert actions["migrate_cold"]["target_nid"] == cxl and actions["migrate_cold"]["state"] == "on"
    assert actions["migrate_cold"]["stats"]["sz_applied"] > 0, "DAMON moved nothing in 20 s"
    text = out_text(out, "damon-stat.txt")
    assert max(len(line) for line in text.splitlines()) <= 80
    assert f"migrate_cold -> node {cxl}: applied" in text.replace("\n  ", " ") and "migrate_hot -> node 0" in text
    report.append(
        f"DAMON ({out_text(out, 'damon-tries', missing_ok=True).strip()} try): "
        + "; ".join(f"{k} {mine[k]['action']} {mine[k]['stats']}" for k in sorted(mine))
    )

    # 3. top on a pty shows the DAMON section
    assert out_text(out, "top.rc").strip() == "0", out_text(out, "top.err", missing_ok=True)
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out_text(out, "top.pty"))
    assert "DAMON scheme" in screen and "migrate_cold" in screen and "migrate_hot" in screen, screen[-3000:]
    assert "read bw" in screen and "q quit" in screen
    report.append(f"top on a pty: {screen.count('cxlctl top')} screens, DAMON section shown")

    # 4. the promotion try: consistent counters, and what happened
    assert out_text(out, "revert.rc").strip() == "0", out_text(out, "revert.err", missing_ok=True)
    assert out_text(out, "P.rc").strip() == "0", out_text(out, "P.err", missing_ok=True)
    p0, p1 = _json_lines(out, "P.json")
    k0, kc, ks = (_keyvals(out_text(out, n)) for n in ("P.node0.vmstat", "P.cxl.vmstat", "P.vmstat"))
    n0 = next(n for n in p1["nodes"] if n["id"] == 0)
    nc = next(n for n in p1["nodes"] if n["id"] == cxl)
    for name in ("pgpromote_candidate", "pgpromote_success"):  # counters only grow after the report
        assert n0["counters"][name] <= k0[name] and p1["system"]["counters"][name] <= ks[name]
    cand0 = (
        n0["counters"]["pgpromote_candidate"]
        - next(n for n in p0["nodes"] if n["id"] == 0)["counters"]["pgpromote_candidate"]
    )
    cand_cxl = (
        nc["counters"]["pgpromote_candidate"]
        - next(n for n in p0["nodes"] if n["id"] == cxl)["counters"]["pgpromote_candidate"]
    )
    ids = [v["id"] for v in p1["verdicts"]]
    pages0 = p0["processes"][0]["pages_per_node"]
    pages1 = p1["processes"][0]["pages_per_node"]
    free_mb, fill = out_text(out, "fill").split()
    moved = out_text(out, "cxlhot.ready").split()[-1]
    report.append(
        f"promotion try: nb {' / '.join(out_text(out, 'nb').split())} (mode / limit MB/s), DRAM free {free_mb} MiB, "
        f"filled {fill} MiB -> MemFree {_keyvals_meminfo(out_text(out, 'fill.meminfo'))} kB; over {p1['interval']:.1f} s: "
        f"hint faults {_rate(p1, 'numa_hint_faults')}/s, pgpromote_candidate {_rate(p1, 'pgpromote_candidate')}/s "
        f"(node 0 +{cand0}, node {cxl} +{cand_cxl}), pgpromote_success {_rate(p1, 'pgpromote_success')}/s; "
        f"helper ({moved} of 8192 pages moved to node {cxl}) pages {pages0} -> {pages1}; verdicts {ids}; "
        f"cxl_traffic {p1['cxl_traffic']}; "
        f"kernel totals: node0 candidate {k0.get('pgpromote_candidate')}, success {k0.get('pgpromote_success')}; "
        f"cxl node candidate {kc.get('pgpromote_candidate')}"
    )
    # the kernel counts candidates on the destination (DRAM) node: the verdict reads the system-wide sum
    assert cand_cxl == 0
    if "promotion-throttled" in ids:
        assert (_rate(p1, "pgpromote_candidate") or 0) >= 10 * max(_rate(p1, "pgpromote_success") or 0, 1)
    print("\n".join(report))
    (tmp_path / "measured.txt").write_text("\n".join(report) + "\n")


def _keyvals_meminfo(text: str) -> Optional[int]:
    m = re.search(r"MemFree:\s+(\d+) kB", text)
    return int(m[1]) if m else None
