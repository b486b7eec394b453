#!/usr/bin/env bash
# Install everything the test suite needs and run all of it: format, lint, types,
# unit tests on recorded real-kernel fixtures, and the VM tier (QEMU + Debian
# kernels, real cxl/daxctl/numactl inside the guest).  The VM tier needs root
# (apt, the kernels' modules directory, QEMU); this script re-runs itself under
# sudo for it.  CXLCTL_SKIP_VM=1 leaves the VM tier out and needs no root and no
# system-wide install (unless python3-venv itself is missing).  Extra arguments
# go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
SKIP_VM=${CXLCTL_SKIP_VM:-0}
if [ "$SKIP_VM" != 1 ] && [ "$(id -u)" != 0 ]; then exec sudo -E bash "$0" "$@"; fi
export DEBIAN_FRONTEND=noninteractive
# CI runs with an empty environment (no HOME, PATH=/usr/sbin:/usr/bin:/sbin:/bin):
# give pip and virtme-ng a HOME; everything else finds its tools by full path.
export HOME="${HOME:-/root}"
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
# The test venv's interpreter: the distribution's own /usr/bin/python3 where there is one, whatever
# python3 PATH finds first (CXLCTL_PYTHON names another).  The VM tier runs this venv inside the guests,
# over their 9p root, where a pyenv-built Python (a 23 MB shared libpython) was measured starting
# several times more slowly in one guest: `python -c pass` 3-4 s against 0.5 s (docs/testing.md; whole
# runs show it less clearly than that).  An existing .venv is kept whatever it was made from: a running guest may be
# executing from it.
PYTHON=${CXLCTL_PYTHON:-}
if [ -z "$PYTHON" ]; then
  if [ -x /usr/bin/python3 ]; then PYTHON=/usr/bin/python3; else PYTHON=python3; fi
fi
if ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq python3-venv python3-pip >/dev/null
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
echo "== test venv: $(.venv/bin/python -c 'import sys; print(sys.version.split()[0], sys._base_executable)')"
# editable_mode=compat: a plain .pth line (the checkout on sys.path) instead of setuptools' import
# hook, which imports pathlib, typing and importlib.util at every interpreter start: under TCG in
# the guests that hook cost ~0.19 s of each `python -c pass` (0.41-0.46 s -> 0.22-0.26 s, measured
# 2026-12-07 in a 6.12 `single` guest; docs/testing.md)
.venv/bin/pip install -q -e '.[test]' --config-settings editable_mode=compat
if [ "$SKIP_VM" != 1 ]; then
  bash scripts/install-vm-deps.sh "$PWD/.venv"
  # C compiler for the launcher's tiny guest-side test program
  command -v cc >/dev/null 2>&1 || apt-get install -y -qq gcc libc6-dev >/dev/null
  # promtool for the metrics and alert-rule tests (tests/test_telemetry_metrics.py)
  bash scripts/install-promtool.sh
fi
# the real inference engines for the engines tier (pytest -m engines), each in a venv of its own under
# /var/cache/cxlctl-engines (scripts/install-engines.sh; idempotent, wheels cached).  On by default
# for root (CXLCTL_ENGINES=0 leaves it out; without root it is off unless CXLCTL_ENGINES=1 and the cache
# directory is writable).  The install runs in the background while the static checks and the
# unit and VM tiers run (it is mostly download and unpacking; a cold install took 28 min here, a warm one
# seconds), and the engines tier waits for it at the end.  docs/testing.md gives the figures.
ENGINES_DEFAULT=0; [ "$(id -u)" = 0 ] && ENGINES_DEFAULT=1
ENGINES=${CXLCTL_ENGINES:-$ENGINES_DEFAULT}
ENGINES_LOG=${TMPDIR:-/tmp}/cxlctl-engines-install.$$.log
ENGINES_PID=""
if [ "$ENGINES" = 1 ]; then
  engines_t0=$(date +%s)
  # the install's own duration goes to $ENGINES_LOG.secs (the tier waits for it later, after other work)
  setsid nice -n 5 bash -c 't=$(date +%s); rc=0; bash scripts/install-engines.sh || rc=$?
    echo $(($(date +%s) - t)) >"$0.secs"; exit $rc' "$ENGINES_LOG" >"$ENGINES_LOG" 2>&1 &
  ENGINES_PID=$!
  # a failing tier must not leave the install running behind CI
  trap '[ -n "$ENGINES_PID" ] && kill -- "-$ENGINES_PID" 2>/dev/null; true' EXIT
fi
echo "== ruff"; .venv/bin/ruff check cxlctl tests bench; .venv/bin/ruff format --check cxlctl tests bench
echo "== mypy"; .venv/bin/mypy
# exit 5 is "no test selected", which extra pytest arguments (-k …) can make of a tier
ok() { [ "$1" = 0 ] || [ "$1" = 5 ]; }
engines_tier() {
  rc=0; wait "$ENGINES_PID" || rc=$?
  ENGINES_PID=""
  echo "== engines: install took $(cat "$ENGINES_LOG.secs" 2>/dev/null || echo '?') s in the background; the tier starts $(($(date +%s) - engines_t0)) s after the install began, exit $rc"
  tail -n 8 "$ENGINES_LOG"
  # an engine this run means to judge and could not install fails the run (the tier's tests fail rather
  # than skip: CXLCTL_ENGINES_REQUIRED, tests/engines/__init__.py need_installed)
  install_rc=$rc
  [ "$rc" = 0 ] || echo "== engines: install failed (exit $rc): the engines tier fails what is missing"
  echo "== pytest -m engines"
  t0=$(date +%s)
  # (a machine the install cannot serve -- not x86_64 with Python 3.11 -- skips the tier, as the install says)
  required=1; grep -q 'the engines tier will be skipped' "$ENGINES_LOG" && required=0
  rc=0; CXLCTL_ENGINES_REQUIRED=$required .venv/bin/python -m pytest -q -rs -p no:cacheprovider -m engines tests "$@" || rc=$?
  [ "$install_rc" = 0 ] || rc=1
  echo "== engines tier took $(($(date +%s) - t0)) s, exit $rc"
  ok "$rc"
}
# host side: the unit tier (recorded trees, fuzzer, fault injection), then the engines tier
host_tiers() {
  echo "== pytest: unit tier"
  t0=$(date +%s)
  # --durations: the slowest tests in CI's log, to keep the run inside its time budget
  rc=0; .venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 -m 'not vm and not engines' "$@" || rc=$?
  echo "== unit tier took $(($(date +%s) - t0)) s, exit $rc"
  ok "$rc" || return "$rc"
  if [ "$ENGINES" = 1 ]; then engines_tier "$@"; fi
}
# The VM tier: one pytest per test file, taken from a queue by two workers, heaviest files first
# (VM_ORDER; files not named there follow in collection order).  In two lanes (run_lanes below) worker a
# starts at once, beside the host tiers; worker b starts when the host tiers are done, so two guests (one
# vCPU each, the harness's CXLCTL_VM_SLOTS=2) share the two cores only then: a TCG guest keeps about one
# core busy, and two 1-vCPU guests side by side each take what one takes alone (docs/testing.md).  In one
# lane worker a alone takes the queue after the host tiers.
# Every line of a worker is prefixed "[vm-a] " or "[vm-b] " (-v: a line per test as it ends).
# The files with a 2-vCPU guest (test_vm_linux7.py: the 7.x DAMON goal check, test_vm_damon.DAMON_CPUS;
# the probe's two-socket boot) come last: such a guest takes both guest slots, so it waits for the other
# worker's guest and then runs with nothing beside it -- beside the unit tier the 7.x file's guest used
# 365 s of QEMU CPU against 234 s alone (docs/testing.md), one vCPU spinning while the host runs
# something else in place of the other.
VM_ORDER="test_vm_hmat test_vm_damon test_vm_linux612 test_vm_linux7_telemetry_launch test_vm_capacity
  test_vm_region test_vm_status test_vm_linux7_daemon_ras test_vm_doctor test_vm_systemd test_vm_linux61 test_vm_soak
  test_vm_fleet test_vm_damon_retarget test_vm_linux7 test_vm_probe"
vm_queue() {
  # the files holding VM tests that the arguments select, heaviest first
  rc=0; listing=$(.venv/bin/python -m pytest --collect-only -q -p no:cacheprovider -m vm "$@" 2>&1) || rc=$?
  # a collection error must fail the tier, not empty its queue
  if ! ok "$rc"; then echo "$listing" >&2; return "$rc"; fi
  collected=$(echo "$listing" | sed -n 's/::.*//p' | sort -u)
  for name in $VM_ORDER; do echo "$collected" | grep -x "tests/vm/$name.py" || true; done
  for f in $collected; do
    case " $(echo $VM_ORDER) " in *" $(basename "$f" .py) "*) ;; *) echo "$f" ;; esac
  done
}
vm_worker() {
  # take files from the queue until it is empty; fail if any file failed.  Each file's output also
  # goes to $VM_LOGS/<file>.log, and a line "<file> <seconds> <exit> <worker>" to $VM_LOGS/files, for
  # the recap.
  name=$1; shift
  failed=0
  while :; do
    f=$(flock "$VM_QUEUE.lock" sh -c 'head -n 1 "$0"; sed -i 1d "$0"' "$VM_QUEUE")
    [ -n "$f" ] || break
    t0=$(date +%s); rc=0
    log="$VM_LOGS/$(basename "$f" .py).log"
    .venv/bin/python -m pytest -v -p no:cacheprovider --durations=5 -m vm "$f" "$@" 2>&1 |
      tee "$log" | sed -u "s/^/[$name] /" || rc=$?
    secs=$(($(date +%s) - t0))
    echo "[$name] == $f took $secs s, exit $rc"
    echo "$f $secs $rc $name" >>"$VM_LOGS/files"
    ok "$rc" || failed=1
  done
  return "$failed"
}
vm_recap() {
  # CI keeps only the end of a long log: repeat every VM file's time and exit, and for each file that
  # failed its pytest summary and the end of its first failure, so the end of the log says what broke.
  if [ "${host_rc:-0}" != 0 ]; then
    echo "== the host tiers failed (exit $host_rc): their short test summaries"
    sed -n '/short test summary info/,/^=\{5,\}.* in [0-9.]*s/p' "$VM_LOGS/host.log" | head -n 60
  fi
  echo "== VM tier recap (file, seconds, exit, worker)"
  sed 's/^/   /' "$VM_LOGS/files" 2>/dev/null || true
  # what the guests cost in CPU, which is what a machine short of CPU waits for (docs/testing.md)
  echo "== guests' QEMU CPU seconds per file (boots, wall seconds, CPU seconds; tests/vm/harness.py _account)"
  awk '{ n[$1]++; w[$1] += $5; c[$1] += $6; tn++; tw += $5; tc += $6 }
    END { for (f in n) printf "   %-44s %3d %7.0f %7.0f\n", f, n[f], w[f], c[f]; printf "   %-44s %3d %7.0f %7.0f\n", "all", tn, tw, tc }' \
    "$VM_LOGS/guests" 2>/dev/null | sort -k4 -n || true
  while read -r f secs rc _; do
    ok "$rc" && continue
    log="$VM_LOGS/$(basename "$f" .py).log"
    echo "== $f failed (exit $rc): its short test summary"
    sed -n '/short test summary info/,$p' "$log" | head -n 40
    echo "== $f: the end of its first failure (up to 60 lines)"
    awk '/^___+ .* ___+$/ { n++ } n == 1' "$log" | tail -n 60
  done <"$VM_LOGS/files"
}
# The CPUs this run may use: the cores it may run on (nproc: affinity, cpuset) or, when lower, the CPU
# time its cgroup allows per period (cgroup v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us), on
# its own cgroup and each ancestor -- a container started with --cpus 1, a CI runner's pod limit, or
# scripts/ci-fresh.sh --cpus 1.  Prints "CPUS (WHY)", CPUS with two decimals.
usable_cpus() {
  local n best why path d q p rest
  n=$(nproc); best=$n; why="$n core(s) (nproc)"
  if [ -r /sys/fs/cgroup/cgroup.controllers ]; then  # v2: "0::/path"
    path=$(sed -n 's/^0:://p' /proc/self/cgroup)
    d=/sys/fs/cgroup${path%/}
    while :; do
      if [ -r "$d/cpu.max" ] && read -r q p <"$d/cpu.max" && [ "$q" != max ]; then
        best=$(awk -v b="$best" -v q="$q" -v p="$p" 'BEGIN { c = q / p; printf "%s", (c < b ? c : b) }')
        why="$why, cgroup quota $q/$p us ($d/cpu.max)"
      fi
      [ "$d" = /sys/fs/cgroup ] || [ "$d" = / ] && break
      d=$(dirname "$d")
    done
  else  # v1: "N:cpu,cpuacct:/path" (or "N:cpu:/path"), the hierarchy mounted with the cpu option
    path=$(awk -F: '{ n = split($2, c, ","); for (i = 1; i <= n; i++) if (c[i] == "cpu") print $3 }' /proc/self/cgroup | head -n 1)
    rest=$(awk '$9 == "cgroup" && $NF ~ /(^|,)cpu(,|$)/ { print $5; exit }' /proc/self/mountinfo)
    if [ -n "$path" ] && [ -n "$rest" ]; then
      d=$rest$path
      while :; do
        if [ -r "$d/cpu.cfs_quota_us" ] && read -r q <"$d/cpu.cfs_quota_us" && [ "$q" -gt 0 ] 2>/dev/null &&
           read -r p <"$d/cpu.cfs_period_us" && [ "$p" -gt 0 ] 2>/dev/null; then
          best=$(awk -v b="$best" -v q="$q" -v p="$p" 'BEGIN { c = q / p; printf "%s", (c < b ? c : b) }')
          why="$why, cgroup quota $q/$p us ($d)"
        fi
        [ "$d" = "$rest" ] || [ "$d" = / ] && break
        d=$(dirname "$d")
      done
    fi
  fi
  awk -v b="$best" -v w="$why" 'BEGIN { printf "%.2f (%s)\n", b, w }'
}
# Lanes of work at once: two (the VM tier's worker a beside the host tiers, two guests after them) where
# two CPUs are usable, else one (everything in turn).  CXLCTL_TEST_LANES=1|2 chooses.  Why one on one
# CPU: a TCG guest that is descheduled costs CPU for it (docs/testing.md "One lane": the 6.1 file used
# 53.7 s of QEMU CPU alone, 61.1 s under a half-CPU quota, 73.3 s with that quota in 10 ms periods).
run_lanes() {  # $1 = usable_cpus's answer
  [ -n "${CXLCTL_TEST_LANES:-}" ] && { echo "$CXLCTL_TEST_LANES"; return; }
  echo "$1" | awk '{ print ($1 >= 1.95 ? 2 : 1) }'
}
case ${CXLCTL_TEST_LANES:-} in
  ''|1|2) ;;
  *) echo "test.sh: CXLCTL_TEST_LANES must be 1 or 2, not $CXLCTL_TEST_LANES" >&2; exit 2 ;;
esac
# steal_seconds BASE: the steal time of all CPUs (/proc/stat, in USER_HZ) in seconds, less BASE
steal_seconds() {
  awk -v base="$1" -v hz="$(getconf CLK_TCK)" '$1 == "cpu" { printf "%d", $9 / hz - base; exit }' /proc/stat
}
if [ "$SKIP_VM" = 1 ]; then
  host_tiers "$@"
else
  vm_t0=$(date +%s)
  steal0=$(steal_seconds 0)
  VM_QUEUE=$(mktemp "${TMPDIR:-/tmp}/cxlctl-vm-queue.XXXXXX")
  VM_LOGS=$(mktemp -d "${TMPDIR:-/tmp}/cxlctl-vm-logs.XXXXXX")
  export CXLCTL_VM_CPU_LOG="$VM_LOGS/guests"
  vm_queue "$@" >"$VM_QUEUE" || { echo "== VM tier: collection failed"; exit 1; }
  usable=$(usable_cpus)
  lanes=$(run_lanes "$usable")
  echo "== usable CPUs: $usable; lanes of work: $lanes (CXLCTL_TEST_LANES sets it)"
  if [ "$lanes" -ge 2 ]; then
    export CXLCTL_VM_SLOTS=2
    echo "== VM tier: $(wc -l <"$VM_QUEUE") files, two workers: $(echo $(sed 's,.*/,,' "$VM_QUEUE"))"
    ( rc=0; vm_worker vm-a "$@" || rc=$?; echo "[vm-a] == worker a done after $(($(date +%s) - vm_t0)) s"; exit $rc ) &
    VM_A=$!
    # (through tee in a process substitution: host_tiers must run in this shell, which owns ENGINES_PID)
    host_rc=0; host_tiers "$@" > >(tee "$VM_LOGS/host.log") 2>&1 || host_rc=$?
    echo "== host tiers done after $(($(date +%s) - vm_t0)) s, exit $host_rc; VM worker b starts"
    vm_b=0; vm_worker vm-b "$@" || vm_b=1
    echo "[vm-b] == worker b done after $(($(date +%s) - vm_t0)) s"
    vm_a=0; wait "$VM_A" || vm_a=1
  else
    # one lane: the host tiers, then the VM files one at a time, one guest at a time (nothing beside
    # a guest to deschedule it; docs/testing.md "One lane")
    export CXLCTL_VM_SLOTS=1
    host_rc=0; host_tiers "$@" > >(tee "$VM_LOGS/host.log") 2>&1 || host_rc=$?
    echo "== host tiers done after $(($(date +%s) - vm_t0)) s, exit $host_rc"
    echo "== VM tier: $(wc -l <"$VM_QUEUE") files, one worker: $(echo $(sed 's,.*/,,' "$VM_QUEUE"))"
    vm_a=0; vm_worker vm-a "$@" || vm_a=1
    echo "[vm-a] == worker a done after $(($(date +%s) - vm_t0)) s"
    vm_b=0
  fi
  rm -f "$VM_QUEUE" "$VM_QUEUE.lock"
  vm_recap
  rm -rf "$VM_LOGS"
  echo "== pytest: host tiers exit $host_rc, VM workers a $vm_a b $vm_b, $(($(date +%s) - vm_t0)) s for all"
  # (the builtin in this shell, not in a pipe's subshell, which has no children of its own)
  times >"$VM_QUEUE.times"
  echo "== CPU time of every process this run waited for (user, system): $(tail -n 1 "$VM_QUEUE.times")"
  # steal: time this machine's vCPUs were runnable while its hypervisor ran something else -- a guest
  # descheduled so pays CPU for it as under a quota (docs/testing.md "One lane")
  echo "== CPU steal while the tiers ran: $(steal_seconds "$steal0") s of all CPUs ($(nproc) here)"
  rm -f "$VM_QUEUE.times"
  [ "$host_rc" = 0 ] && [ "$vm_a" = 0 ] && [ "$vm_b" = 0 ]
fi
