"""The daemon on a real 6.12 kernel with real udevd (one boot, topology hb2x2).

In the guest:

1. CXL memory is hot-added while the kernel's policy is ``offline`` (what a boot
   looks like before the daemon runs): a 1-way region on window 2, its memory
   offline.
2. ``tune apply --persist`` a ratio profile that also sets auto_online_blocks.
3. The daemon starts (``NOTIFY_SOCKET`` pointing at a listener, a watchdog):
   it onlines the offline CXL memory by the profile's policy, weights the node,
   says READY=1.
4. A 2-way region is created on window 1 while it runs: the new CXL node must
   get its weight within a few seconds, and the metrics endpoint show it.
5. The first region's dax device is switched to devdax: the node is dropped.
6. A hand-made ``vm.swappiness`` change is caught as drift (report), then a
   SIGHUP with ``action = "reapply"`` puts it back.
7. Idle wake-ups and RSS are measured; SIGTERM stops it (STOPPING=1) without
   rolling anything back.

The host checks the files the guest left in $OUT and prints the measurements.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, List

from tests.daemon_probe import procstat
from tests.daemon_support import unit_watchdog_seconds
from tests.prom import parse_exposition
from tests.vm.harness import GuestResult, Topology

# no VM test here: the guest side runs in the shared boots (test_vm_linux612.py, test_vm_linux7.py)

PROFILE = """
summary = "VM daemon test: tiering, DRAM:CXL weights 3:2, hot-added memory movable"
include = "inference-capacity"
[knobs.weighted_interleave]
weights = "3:2"
nodes = ["dram", "cxl"]
reason = "explicit ratio (QEMU gives no HMAT bandwidth for DRAM)"
[knobs.auto_online_blocks]
value = "online_movable"
reason = "CXL memory movable, so a dax device can be switched back to devdax"
"""

CONFIG = """
[reconcile]
debounce_ms = 300
max_delay_ms = 3000
rescan_interval = RESCAN_INTERVAL
[drift]
interval = DRIFT_INTERVAL
action = "DRIFT_ACTION"
[metrics]
listen = "127.0.0.1:9860"
[health]
interval = 300
"""

#: the shipped unit's WatchdogSec: the guest daemon runs with it as WATCHDOG_USEC
WATCHDOG_S = unit_watchdog_seconds()

GUEST = r"""
WI=/sys/kernel/mm/mempolicy/weighted_interleave
now() { cat /proc/uptime | cut -d' ' -f1; }
log() { echo "[$(now)] $*" >> "$OUT/steps.log"; }
metrics() {  # $1 = label
  "$PY" -c 'import sys, urllib.request as u; sys.stdout.write(u.urlopen("http://127.0.0.1:9860/metrics", timeout=10).read().decode())' \
    > "$OUT/metrics-$1.txt" 2> "$OUT/metrics-$1.err"
}
wait_for() {  # $1 = timeout s, rest = command; polls every 0.05 s; prints seconds waited
  local limit=$1; shift
  local t0; t0=$(now)
  while ! "$@" > /dev/null 2>&1; do
    if awk -v a="$(now)" -v b="$t0" -v l="$limit" 'BEGIN{exit !(a-b>l)}'; then echo "timeout"; return 1; fi
    sleep 0.05
  done
  awk -v a="$(now)" -v b="$t0" 'BEGIN{printf "%.3f\n", a-b}'
}
config() {  # $1 = drift interval, $2 = action, $3 = rescan interval
  sed -e "s/DRIFT_INTERVAL/$1/" -e "s/DRIFT_ACTION/$2/" -e "s/RESCAN_INTERVAL/$3/" > /etc/cxlctl/cxlctl.toml <<'EOF'
CONFIG_TEXT
EOF
}
blockstates() {  # $1 = node: "memoryN state zones" per block
  for b in /sys/devices/system/node/node$1/memory*; do
    [ -e "$b/state" ] || continue
    echo "$(basename "$b") $(cat "$b/state") $(cat "$b/valid_zones")"
  done
}
procstat() {  # $1 = label
  { echo "label $1"; echo "uptime $(now)"; grep -E '^(VmRSS|VmHWM|voluntary_ctxt_switches|nonvoluntary_ctxt_switches)' /proc/$DPID/status
    awk '{print "utime", $14; print "stime", $15}' /proc/$DPID/stat; } >> "$OUT/procstat.txt"
}

mkdir -p /etc/cxlctl/profiles /etc/kubernetes/node-feature-discovery/features.d
cat > /etc/cxlctl/profiles/vm-daemon.toml <<'EOF'
PROFILE_TEXT
EOF
config 2 report 30

# 1. memory hot-added while the kernel's policy is offline
echo offline > /sys/devices/system/memory/auto_online_blocks
RA=$(CREATE_A) || { echo "region A failed" >&2; exit 10; }
DAXA=$(basename "$(ls -d /sys/bus/cxl/devices/$RA/dax_region*/dax*.* | head -n1)")
NODEA=$(cat /sys/bus/dax/devices/$DAXA/target_node)
echo "$RA $DAXA $NODEA" > "$OUT/region-a"
blockstates "$NODEA" > "$OUT/blocks-a-before.txt"
log "region A $RA $DAXA node $NODEA"

# 2. persist the profile
"$CXLCTL" tune apply --persist vm-daemon --json > "$OUT/persist.json" 2> "$OUT/persist.err"
echo $? > "$OUT/persist.rc"

# 3. start the daemon under a fake service manager
"$PY" - > "$OUT/notify.log" 2>&1 <<'EOF' &
import socket, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("/tmp/cxlctl-notify.sock")
open("/tmp/cxlctl-notify.ready", "w").close()
while True:
    m = s.recv(4096).decode()
    print(f"{time.clock_gettime(time.CLOCK_BOOTTIME):.3f} {m!r}", flush=True)
EOF
LPID=$!
wait_for 30 test -e /tmp/cxlctl-notify.ready > /dev/null
NOTIFY_SOCKET=/tmp/cxlctl-notify.sock WATCHDOG_USEC=WATCHDOG_USEC_VALUE "$PY" -m cxlctl daemon run \
  > "$OUT/daemon.out" 2> "$OUT/daemon.log" &
DPID=$!
echo $DPID > "$OUT/daemon.pid"
log "daemon pid $DPID"
wait_for 120 grep -q READY=1 "$OUT/notify.log" > "$OUT/ready-seconds" || log "no READY"
log "ready"
procstat ready
blockstates "$NODEA" > "$OUT/blocks-a-after.txt"
cat $WI/node* > /dev/null; for f in $WI/node*; do echo "$(basename $f) $(cat $f)"; done > "$OUT/weights-ready.txt"
metrics ready

# 4. a new region while it runs: the new node must get its weight.  A watcher notes when
#    the new dax device appears, when its node's memory is online, when the weight is set.
(
  before=$(ls /sys/bus/dax/devices | sort)
  while :; do
    new=$(ls /sys/bus/dax/devices | sort | comm -13 <(echo "$before") - | head -n1)
    [ -n "$new" ] && [ -e "/sys/bus/dax/devices/$new/target_node" ] && break
    sleep 0.02
  done
  echo "dax $(now) $new" > "$OUT/b-watch"
  n=$(cat "/sys/bus/dax/devices/$new/target_node")
  until [ -e "/sys/devices/system/node/node$n/meminfo" ] && \
        [ "$(awk '/MemTotal/ {print $4}' "/sys/devices/system/node/node$n/meminfo")" != 0 ]; do sleep 0.02; done
  echo "online $(now) $n" >> "$OUT/b-watch"
  until [ "$(cat "$WI/node$n")" = 2 ]; do sleep 0.02; done
  echo "weight $(now) $n" >> "$OUT/b-watch"
) &
WATCHER=$!
log "creating region B"
T0=$(now)
RB=$(CREATE_B) || { echo "region B failed" >&2; kill $DPID; exit 11; }
T1=$(now)
NODEB=$(cat /sys/bus/dax/devices/$(basename "$(ls -d /sys/bus/cxl/devices/$RB/dax_region*/dax*.* | head -n1)")/target_node)
echo "$RB $NODEB" > "$OUT/region-b"
wait_for 30 grep -qx 2 "$WI/node$NODEB" > "$OUT/weight-b-wait" || true
T2=$(now)
wait $WATCHER
echo "create_started $T0 create_returned $T1 weight_seen $T2" > "$OUT/latency-b.txt"
log "region B $RB node $NODEB"
for f in $WI/node*; do echo "$(basename $f) $(cat $f)"; done > "$OUT/weights-b.txt"
blockstates "$NODEB" > "$OUT/blocks-b.txt"
metrics region-b
cp /etc/kubernetes/node-feature-discovery/features.d/cxlctl "$OUT/nfd-region-b.txt" 2>/dev/null

# 5. switch region A's dax device to devdax: its node loses all memory
log "daxctl reconfigure $DAXA devdax"
daxctl reconfigure-device --mode=devdax --force "$DAXA" > "$OUT/daxctl.json" 2> "$OUT/daxctl.err"
echo $? > "$OUT/daxctl.rc"
wait_for 30 grep -q "CXL node $NODEA removed" "$OUT/daemon.log" > "$OUT/removed-wait" || true
sleep 0.5
metrics devdax

# 6. drift: a hand-made change, reported; then SIGHUP with reapply
sysctl -w vm.swappiness=77 > /dev/null
log "swappiness 77"
wait_for 30 grep -q "drift: vm.swappiness is 77" "$OUT/daemon.log" > "$OUT/drift-wait" || true
sleep 0.3
metrics drift
cat /proc/sys/vm/swappiness > "$OUT/swappiness-after-report"
config 2 reapply 30
kill -HUP $DPID
wait_for 30 grep -qx 10 /proc/sys/vm/swappiness > "$OUT/reapply-wait" || true
log "reapplied"
sleep 0.5
metrics reapplied

# 7. idle, with the shipped intervals (drift 60 s, rescan 300 s, health 300 s): only the
#    watchdog (every 15 s: the shipped WatchdogSec=30, which the guest daemon runs with) should wake it
config 60 report 300
kill -HUP $DPID
sleep 3
procstat idle-start
for i in 1 2 3 4 5 6; do sleep 5; procstat "idle-$i"; done
procstat idle-end
"$CXLCTL" tune status --json > "$OUT/tune-status.json" 2>&1
kill -TERM $DPID
wait $DPID
echo $? > "$OUT/daemon.rc"
sleep 0.3
kill $LPID 2>/dev/null
cat /proc/sys/vm/swappiness > "$OUT/swappiness-after-stop"
for f in $WI/node*; do echo "$(basename $f) $(cat $f)"; done > "$OUT/weights-after-stop.txt"
exit 0
"""


def _read(out: str, name: str) -> str:
    with open(os.path.join(out, name)) as f:
        return f.read()


def _weights(text: str) -> Dict[int, int]:
    return {int(a[4:]): int(b) for a, b in (ln.split() for ln in text.splitlines() if ln.strip())}


def guest_script(t: Topology) -> str:
    """The guest side of this check on ``hb2x2`` (regions on windows 2 and 1)."""
    a = next(r for r in t.regions if r.window == 2)  # 1-way, its own NUMA node
    b = next(r for r in t.regions if r.window == 1)  # 2-way inside one bridge, another node
    return (
        GUEST.replace("CREATE_A", a.create_command(t))
        .replace("WATCHDOG_USEC_VALUE", str(WATCHDOG_S * 1_000_000))
        .replace("CREATE_B", b.create_command(t))
        .replace("PROFILE_TEXT", PROFILE.strip())
        .replace("CONFIG_TEXT", CONFIG.strip())
    )


def check(res: GuestResult, capsys: Any) -> None:
    """The host's assertions on the guest's files (prints the measurements)."""
    out = str(res.outdir)
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-2000:]
    log = _read(out, "daemon.log")
    notify = _read(out, "notify.log")
    ctx = f"\n--- daemon.log ---\n{log[-6000:]}\n--- steps ---\n{_read(out, 'steps.log')}"

    # 2-3. persisted, started, READY after onlining the offline memory and weighting it
    assert _read(out, "persist.rc").strip() == "0", _read(out, "persist.err")
    ra, daxa, node_a = _read(out, "region-a").split()
    assert all(" offline " in ln for ln in _read(out, "blocks-a-before.txt").splitlines()), _read(
        out, "blocks-a-before.txt"
    )
    after = _read(out, "blocks-a-after.txt").splitlines()
    assert after and all(ln.split()[1] == "online" and "Movable" in ln for ln in after), after
    assert re.search(
        rf"onlined {len(after)} of {len(after)} offline memory block\(s\) of {daxa} \(node {node_a}\) as online_movable",
        log,
    ), ctx
    assert "READY=1" in notify and "STATUS=profile vm-daemon (applied)" in notify, notify
    w = _weights(_read(out, "weights-ready.txt"))
    assert w[int(node_a)] == 2 and w[0] == 3, w
    ready = parse_exposition(_read(out, "metrics-ready.txt"))
    assert ready.get("cxlctl_ready") == 1 and ready.get("cxlctl_profile_info", profile="vm-daemon") == 1
    assert ready.get("cxlctl_memory_blocks_onlined_total") == len(after)

    # 4. the new node gets its weight within a few seconds; the metrics show it
    rb, node_b = _read(out, "region-b").split()
    assert node_b != node_a
    wb = _weights(_read(out, "weights-b.txt"))
    assert wb[int(node_b)] == 2 and wb[0] == 3, (wb, ctx)
    wait_b = _read(out, "weight-b-wait").strip()
    assert wait_b != "timeout", ctx
    assert f"CXL node {node_b} appeared" in log, ctx
    assert re.search(rf"set weighted_interleave\.node{node_b}: 1 -> 2 \(profile vm-daemon\)", log), ctx
    lat = [float(x) for x in re.findall(r"event-to-reconciled (\d+\.\d+) s", log)]
    assert lat, ctx
    mb = parse_exposition(_read(out, "metrics-region-b.txt"))
    assert mb.get("cxlctl_weighted_interleave_weight", node=node_b, kind="cxl") == 2
    assert (mb.get("cxlctl_node_memory_total_bytes", node=node_b, kind="cxl") or 0) > 0
    assert (mb.get("cxlctl_uevents_total", subsystem="memory") or 0) > 0, "real udev events reached the daemon"
    assert mb.get("cxlctl_health_available") == 1
    assert {s["memdev"] for s in mb.series("cxlctl_memdev_health")} >= {"mem0", "mem1", "mem2", "mem3"}
    nfd = _read(out, "nfd-region-b.txt")
    nodes_label = re.search(r"^feature\.node\.kubernetes\.io/cxl\.numa-nodes=(\S+)$", nfd, re.M)
    assert nodes_label and set(nodes_label.group(1).split("_")) == {node_a, node_b}, nfd
    assert "feature.node.kubernetes.io/cxl.present=true" in nfd and "cxl.profile=vm-daemon" in nfd

    # 5. dax device switched to devdax: node dropped
    assert _read(out, "daxctl.rc").strip() == "0", _read(out, "daxctl.err")
    assert f"dax device {daxa} switched from system-ram to devdax" in log, ctx
    assert f"CXL node {node_a} removed (" in log, ctx
    md = parse_exposition(_read(out, "metrics-devdax.txt"))
    assert md.get("cxlctl_node_memory_online_bytes", node=node_a) in (None, 0)
    assert md.get("cxlctl_topology_changes_total", kind="node-removed") == 1

    # 6. drift reported (value left), then re-applied after SIGHUP
    assert _read(out, "swappiness-after-report").strip() == "77"
    dr = parse_exposition(_read(out, "metrics-drift.txt"))
    assert dr.get("cxlctl_knob_drift", setting="vm.swappiness") == 1  # no value labels since issue 44
    assert _read(out, "reapply-wait").strip() != "timeout", ctx
    ra_ = parse_exposition(_read(out, "metrics-reapplied.txt"))
    assert ra_.get("cxlctl_knob_drift", setting="vm.swappiness") == 0
    assert ra_.get("cxlctl_drift_corrections_total") == 1 and ra_.get("cxlctl_reloads_total", result="ok") == 1
    assert "configuration reloaded" in log

    # 7. stop: STOPPING=1, exit 0, nothing rolled back; watchdog kept alive from the loop
    assert _read(out, "daemon.rc").strip() == "0", ctx
    assert "STOPPING=1" in notify
    assert _read(out, "swappiness-after-stop").strip() == "10"
    assert _weights(_read(out, "weights-after-stop.txt"))[int(node_b)] == 2
    st = json.loads(_read(out, "tune-status.json"))
    assert st["active_profile"] == "vm-daemon"
    # the promise to systemd: a keep-alive within every watchdog period (the unit's WatchdogSec,
    # which the guest daemon runs with); the pings' spacing is TCG's speed, reported, not asserted
    dogs = [float(ln.split()[0]) for ln in notify.splitlines() if "'WATCHDOG=1'" in ln]
    gaps = [b2 - a2 for a2, b2 in zip(dogs, dogs[1:])]
    assert len(dogs) >= 2 and max(gaps) < WATCHDOG_S, (WATCHDOG_S, gaps)

    # measurements (reported by the test run)
    ps = procstat(_read(out, "procstat.txt"))
    idle = ps["idle-end"]["voluntary_ctxt_switches"] - ps["idle-start"]["voluntary_ctxt_switches"]
    idle_s = ps["idle-end"]["uptime"] - ps["idle-start"]["uptime"]
    cpu_ticks = (
        ps["idle-end"]["utime"] + ps["idle-end"]["stime"] - ps["idle-start"]["utime"] - ps["idle-start"]["stime"]
    )
    subs = sorted(x["subsystem"] for x in mb.series("cxlctl_uevents_total"))
    watch = {ln.split()[0]: float(ln.split()[1]) for ln in _read(out, "b-watch").splitlines()}
    online_to_weight = watch["weight"] - watch["online"]
    # the daemon's own bound: a new node gets its weight no later than the periodic rescan would
    # give it (rescan_interval = 30 while region B is made: `config 2 report 30`); the event path
    # makes it sooner, a figure reported below, not asserted (TCG's speed: issue 44)
    assert online_to_weight < 30, watch
    samples = [ps[f"idle-{i}"]["voluntary_ctxt_switches"] for i in range(1, 7)]
    per5 = [b2 - a2 for a2, b2 in zip([ps["idle-start"]["voluntary_ctxt_switches"]] + samples, samples)]
    # the promise: nothing wakes an idle daemon periodically but its watchdog keep-alive (every
    # WatchdogSec/2).  Asserted on the median 5-s window: the keep-alive's burst lands in one or two
    # windows (seen: [0, 0, 3, 0, 0, 10]), and a loaded host made a total bound fail once (17 against
    # 16.4, issue 44), while a poll every second (5 or more in every window) still fails it
    assert sorted(per5)[len(per5) // 2] <= 3, f"{idle} wake-ups in {idle_s:.0f} s idle, per 5 s: {per5}"
    lines: List[str] = [
        f"boot {res.boot_seconds} s, wall {res.wall_seconds} s",
        f"READY after {_read(out, 'ready-seconds').strip()} s (start-up scan, onlining, apply)",
        f"event-to-reconciled (daemon, first uevent -> reconciled): {', '.join(f'{x:.3f}' for x in lat)} s",
        f"region B: create_ram_region start -> node weight visible: {_read(out, 'latency-b.txt').strip()}; polled wait after create returned {wait_b} s",
        f"region B: dax device seen -> its node's memory online {watch['online'] - watch['dax']:.2f} s -> weight set {online_to_weight:.2f} s",
        f"idle: {idle:.0f} voluntary wake-ups in {idle_s:.1f} s ({idle / idle_s * 60:.1f}/min; watchdog every {WATCHDOG_S / 2:g} s; per 5 s: {per5}), {cpu_ticks:.0f} CPU ticks",
        f"watchdog: {len(dogs)} keep-alives, largest gap {max(gaps):.2f} s (WatchdogSec {WATCHDOG_S})",
        f"RSS at ready {ps['ready']['VmRSS']:.0f} kB, at end {ps['idle-end']['VmRSS']:.0f} kB, peak {ps['idle-end']['VmHWM']:.0f} kB",
        "uevents: " + ", ".join(f"{sub}={mb.get('cxlctl_uevents_total', subsystem=sub):.0f}" for sub in subs),
    ]
    with capsys.disabled():
        print("\n[vm daemon] " + "\n[vm daemon] ".join(lines))
    with open(os.path.join(out, "measurements.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
