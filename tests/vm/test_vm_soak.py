"""A short soak of the daemon on real 6.12 and 7.x kernels with real udevd (one boot of ``hb2x2`` each).

bench/soak.py compresses a month into an hour on a recorded tree; this is the same kind of run
where the events are the kernel's own. The guest starts ``udevadm monitor`` (the independent
count of uevents) and its own trace instance with every cxl event on (the independent count of
RAS events), applies a profile, starts ``cxlctl daemon run`` and then runs ``CYCLES`` cycles of:

1. a 1-way region on window 2 (``cxl-vmem2``), its memory hot-added ``online_movable``;
2. three ``udevadm trigger --action=change`` over the four subsystems the daemon watches (bursts
   of a hundred or so uevents each);
3. one of the new node's memory blocks offlined and onlined again;
4. poison injected into ``cxl-vmem3`` (outside every region) through the kernel's debugfs
   ``inject_poison``, then its poison list read twice (``trigger_poison_list``): cxl_poison trace
   events, one per poison record per read, plus one per injection;
5. ``vm.swappiness`` changed behind the daemon's back (drift repaired within the second);
6. ``SCRAPES`` scrapes of the metrics endpoint;
7. the region destroyed (memory offlined, decoders reset, region deleted).

The host checks that every uevent udev sent on the four subsystems was counted once by the
daemon (per subsystem), every cxl trace event the kernel wrote was counted once by its RAS
watcher, every drift was repaired once, no reconcile failed, and fds, threads and RSS from the
end of the first cycle (warm) to the end stayed flat (RSS: under 2 MiB). The figures are printed
(pytest -s) and quoted in docs/reliability.md.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List

import pytest

from tests.daemon_probe import procstat
from tests.prom import parse_exposition
from tests.vm.harness import TOPOLOGIES, kernels_for, run_guest

pytestmark = pytest.mark.vm

CYCLES = 3
SCRAPES = 50

PROFILE = """
summary = "VM soak: tiering, DRAM:CXL weights 3:2"
include = "inference-capacity"
[knobs.weighted_interleave]
weights = "3:2"
nodes = ["dram", "cxl"]
reason = "explicit ratio (QEMU gives no HMAT bandwidth for DRAM)"
"""

CONFIG = """
[reconcile]
debounce_ms = 200
max_delay_ms = 2000
rescan_interval = 0
[drift]
interval = 1
action = "reapply"
[metrics]
listen = "127.0.0.1:9862"
telemetry_interval = 0
[health]
enabled = false
"""

GUEST = r"""
now() { cut -d' ' -f1 /proc/uptime; }
log() { echo "[$(now)] $*" >> "$OUT/steps.log"; }
wait_for() {  # $1 = timeout s, rest = command; polls every 0.05 s; prints seconds waited
  local limit=$1; shift
  local t0; t0=$(now)
  while ! "$@" > /dev/null 2>&1; do
    if awk -v a="$(now)" -v b="$t0" -v l="$limit" 'BEGIN{exit !(a-b>l)}'; then echo "timeout"; return 1; fi
    sleep 0.05
  done
  awk -v a="$(now)" -v b="$t0" 'BEGIN{printf "%.3f\n", a-b}'
}
procstat() {  # $1 = label: RSS, threads, open fds, CPU ticks of the daemon
  # fds and threads are the least of 10 looks over a second: a scrape's thread closes its socket
  # just after the client has read the answer, and the drift check reads a file every second,
  # so one look can count what is gone a moment later; a leak stays in every look
  local fds=999999 thr=999999 n t i
  for i in 1 2 3 4 5 6 7 8 9 10; do
    n=$(ls /proc/$DPID/fd | wc -l); t=$(awk '/^Threads:/{print $2}' /proc/$DPID/status)
    [ "$n" -lt "$fds" ] && fds=$n && ls -l /proc/$DPID/fd > "$OUT/fds-$1.txt" 2>&1
    [ "$t" -lt "$thr" ] && thr=$t
    sleep 0.1
  done
  { echo "label $1"; echo "uptime $(now)"; grep -E '^(VmRSS|VmHWM)' /proc/$DPID/status
    echo "Threads $thr"; echo "fds $fds"
    awk '{print "utime", $14; print "stime", $15}' /proc/$DPID/stat; } >> "$OUT/procstat.txt"
}
scrape() {  # $1 = label, $2 = count: GETs in one client process, the last answer kept
  "$PY" - "$2" > "$OUT/metrics-$1.txt" 2> "$OUT/metrics-$1.err" <<'EOF'
import sys, urllib.request as u
for _ in range(int(sys.argv[1])):
    body = u.urlopen("http://127.0.0.1:9862/metrics", timeout=10).read().decode()
sys.stdout.write(body)
EOF
}

mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
TR=/sys/kernel/tracing
[ -d "$TR/instances" ] || mount -t tracefs nodev "$TR" || exit 4
K=$TR/instances/soak-kernel-view
mkdir "$K" && echo 1 > "$K/events/cxl/enable" || exit 4
echo online_movable > /sys/devices/system/memory/auto_online_blocks
mkdir -p /etc/cxlctl/profiles
cat > /etc/cxlctl/profiles/vm-soak.toml <<'EOF'
PROFILE_TEXT
EOF
cat > /etc/cxlctl/cxlctl.toml <<'EOF'
CONFIG_TEXT
EOF
"$CXLCTL" tune apply vm-soak > "$OUT/apply.out" 2>&1; echo $? > "$OUT/apply.rc"
MEMP=$(memdev_by_serial POISON_SERIAL) || exit 5
echo "$MEMP" > "$OUT/poison-memdev"
ls /sys/kernel/debug/cxl/$MEMP > "$OUT/debugfs-memdev.txt" 2>&1

udevadm monitor --udev -s cxl -s dax -s memory -s node > "$OUT/udev.log" 2> "$OUT/udev.err" &
UPID=$!
sleep 1
"$PY" -m cxlctl daemon run > "$OUT/daemon.out" 2> "$OUT/daemon.log" &
DPID=$!
wait_for 120 grep -q "ready:" "$OUT/daemon.log" > "$OUT/ready-seconds" || { echo "no ready" >&2; exit 6; }
log "ready"
procstat ready
T0=$(now)

for c in $(seq 1 CYCLES_N); do
  R=$(CREATE_A) || { echo "cycle $c: region failed" >&2; exit 11; }
  DAX=$(basename "$(ls -d /sys/bus/cxl/devices/$R/dax_region*/dax*.* | head -n1)")
  NODE=$(cat /sys/bus/dax/devices/$DAX/target_node)
  log "cycle $c: $R $DAX node $NODE"
  udevadm settle
  for i in 1 2 3; do udevadm trigger --action=change -s cxl -s dax -s memory -s node; udevadm settle; done
  B=$(ls -d /sys/devices/system/node/node$NODE/memory[0-9]* | tail -n1)
  echo offline > "$B/state" && echo online_movable > "$B/state" || log "cycle $c: $B offline/online failed"
  printf '%#x\n' $((c * 0x1000)) > /sys/kernel/debug/cxl/$MEMP/inject_poison 2>> "$OUT/poison.err" || log "cycle $c: inject failed"
  for i in 1 2; do echo 1 > /sys/bus/cxl/devices/$MEMP/trigger_poison_list 2>> "$OUT/poison.err"; done
  sysctl -qw vm.swappiness=77
  wait_for 20 grep -qx 10 /proc/sys/vm/swappiness >> "$OUT/drift-wait" || log "cycle $c: drift not repaired"
  scrape cycle-$c SCRAPES_N
  destroy_region "$R" || { echo "cycle $c: destroy failed" >&2; exit 12; }
  udevadm settle
  sleep 1  # the debounce window and the last reconcile
  procstat cycle-$c
done
T1=$(now)
sleep 2
scrape end 1
procstat end
echo "$T0 $T1" > "$OUT/cycles-time"
kill -TERM $DPID
wait $DPID
echo $? > "$OUT/daemon.rc"
sleep 0.5
kill $UPID
cat "$K/trace" > "$OUT/kernel-trace.txt"
rmdir "$K"
exit 0
"""


def _read(out: str, name: str) -> str:
    with open(os.path.join(out, name)) as f:
        return f.read()


def _udev_counts(text: str) -> Dict[str, int]:
    """uevents per subsystem in ``udevadm monitor --udev`` output (``UDEV [t] action path (sub)``)."""
    out: Dict[str, int] = {}
    for ln in text.splitlines():
        m = re.match(r"UDEV\s+\[[\d.]+\]\s+\S+\s+\S+\s+\((\w+)\)$", ln.strip())
        if m:
            out[m.group(1)] = out.get(m.group(1), 0) + 1
    return out


# 7.x in CI: it is the kernel that also writes weighted_interleave/auto (kernels_for;
# CXLCTL_VM_KERNELS=all adds 6.12)
@pytest.mark.parametrize("series", kernels_for("6.12", "7.x", ci=["7.x"]))
def test_a_short_soak_on_a_real_kernel(series: str, capsys: Any) -> None:
    t = TOPOLOGIES["hb2x2"]
    a = next(r for r in t.regions if r.window == 2)  # 1-way on cxl-vmem2, its own NUMA node
    script = (
        GUEST.replace("CREATE_A", a.create_command(t))
        .replace("PROFILE_TEXT", PROFILE.strip())
        .replace("CONFIG_TEXT", CONFIG.strip())
        .replace("POISON_SERIAL", f"{t.serials['cxl-vmem3']:#x}")
        .replace("CYCLES_N", str(CYCLES))
        .replace("SCRAPES_N", str(SCRAPES))
    )
    res = run_guest(t, script, kernel=series, timeout=900)
    out = str(res.outdir)
    log = _read(out, "daemon.log") if os.path.exists(os.path.join(out, "daemon.log")) else ""
    ctx = f"\n--- daemon.log ---\n{log[-5000:]}\n--- steps ---\n{_read(out, 'steps.log') if os.path.exists(os.path.join(out, 'steps.log')) else ''}"
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-2000:] + ctx
    assert _read(out, "apply.rc").strip() == "0", _read(out, "apply.out")
    assert "Traceback" not in log and "internal error" not in log, ctx
    assert "failed" not in _read(out, "steps.log"), ctx
    assert _read(out, "daemon.rc").strip() == "0", ctx
    end = parse_exposition(_read(out, "metrics-end.txt"))

    # every uevent udev sent on the daemon's four subsystems counted once, per subsystem
    udev = _udev_counts(_read(out, "udev.log"))
    daemon = {s["subsystem"]: int(end.get("cxlctl_uevents_total", subsystem=s["subsystem"]) or 0)
              for s in end.series("cxlctl_uevents_total")}  # fmt: skip
    assert sum(udev.values()) > 500 and udev == daemon, (udev, daemon)
    assert end.get("cxlctl_monitor_errors_total") == 0, ctx

    # every cxl trace event the kernel wrote counted once by the RAS watcher
    kernel = [ln for ln in _read(out, "kernel-trace.txt").splitlines() if ln.strip() and not ln.startswith("#")]
    kinds: Dict[str, int] = {}
    for ln in kernel:
        m = re.search(r"\s(cxl_\w+):", ln)
        assert m, ln
        kinds[m.group(1)] = kinds.get(m.group(1), 0) + 1
    ras = sum(v for (n, _lab), v in end.samples.items() if n == "cxlctl_ras_events_total")
    assert kinds.get("cxl_poison", 0) >= CYCLES * 2, (kinds, _read(out, "debugfs-memdev.txt"))
    assert ras == len(kernel), (ras, kinds)
    assert end.get("cxlctl_ras_parse_errors_total") == 0 and end.get("cxlctl_ras_events_lost_total") in (None, 0)

    # every drift repaired once; no reconcile failed; the profile applied at the end
    assert "timeout" not in _read(out, "drift-wait"), ctx
    assert end.get("cxlctl_drift_corrections_total") == CYCLES, ctx
    assert end.get("cxlctl_reconciles_total", result="failed") in (None, 0), ctx
    assert end.get("cxlctl_profile_info", profile="vm-soak") == 1
    sets = re.findall(r"set (\S+): (\S+) -> (\S+) \(profile vm-soak\)", log)
    assert sets and all(b != c for _, b, c in sets), sets  # nothing written that already held its value

    # fds and threads flat, RSS from the end of the first (warm) cycle to the end under 2 MiB
    ps = procstat(_read(out, "procstat.txt"))
    warm, last = ps["cycle-1"], ps["end"]
    fd_lists = f"\n--- fds after cycle 1 ---\n{_read(out, 'fds-cycle-1.txt')}\n--- fds at the end ---\n{_read(out, 'fds-end.txt')}"
    assert warm["fds"] == last["fds"] and warm["Threads"] == last["Threads"], f"{ps}{fd_lists}"
    growth = last["VmRSS"] - warm["VmRSS"]
    assert growth < 2048, ps
    t0, t1 = (float(x) for x in _read(out, "cycles-time").split())
    ticks = last["utime"] + last["stime"] - ps["ready"]["utime"] - ps["ready"]["stime"]
    n_events = sum(udev.values())
    reconciles = {dict(lab)["result"]: int(v) for (n, lab), v in end.samples.items() if n == "cxlctl_reconciles_total"}
    n_series = sum(1 for ln in _read(out, "metrics-end.txt").splitlines() if ln and not ln.startswith("#"))
    lines: List[str] = [
        f"{res.kernel.release}: boot {res.boot_seconds} s, wall {res.wall_seconds} s, {CYCLES} cycles in "
        f"{t1 - t0:.1f} s of guest time",
        f"uevents: {n_events} sent by udev, {sum(daemon.values())} counted by the daemon ({udev})",
        f"RAS: {len(kernel)} cxl trace events by the kernel ({kinds}), {ras:.0f} counted by the daemon",
        f"reconciles: {reconciles}; drift repaired {end.get('cxlctl_drift_corrections_total'):.0f}/{CYCLES}; "
        f"settings written {len(sets)}; scrapes {CYCLES * SCRAPES + 1}; series at the end {n_series}",
        f"RSS ready {ps['ready']['VmRSS']:.0f} kB, after cycle 1 {warm['VmRSS']:.0f} kB, end {last['VmRSS']:.0f} kB "
        f"(+{growth:.0f} kB), peak {last['VmHWM']:.0f} kB; fds {warm['fds']:.0f} -> {last['fds']:.0f}; "
        f"threads {warm['Threads']:.0f} -> {last['Threads']:.0f}",
        f"CPU {ticks / 100:.1f} s from ready to end (USER_HZ 100): {ticks * 10 / max(1, n_events):.1f} ms per uevent, "
        f"{ticks / 100 / max(1, sum(reconciles.values())):.2f} s per reconcile",
    ]
    with capsys.disabled():
        print("\n[vm soak] " + "\n[vm soak] ".join(lines))
    with open(os.path.join(out, "measurements.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
