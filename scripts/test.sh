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
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq python3-venv python3-pip >/dev/null
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q -e '.[test]'
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
  [ "$rc" = 0 ] || echo "== engines: install failed; the engines tier skips what is missing"
  echo "== pytest -m engines"
  t0=$(date +%s)
  rc=0; .venv/bin/python -m pytest -q -rs -p no:cacheprovider -m engines tests "$@" || rc=$?
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
if [ "$SKIP_VM" = 1 ]; then
  host_tiers "$@"
else
  # The VM tier runs beside the host tiers: a TCG guest keeps about one of the two cores busy (the
  # harness runs one guest at a time), the unit and engines tiers the other, so side by side they take
  # the VM tier's time instead of the sum (docs/testing.md).  Every line of the VM tier is prefixed
  # "[vm] " (-v: a line per test as it ends, so a long run shows where it is); both exit statuses count.
  vm_t0=$(date +%s)
  (
    rc=0
    .venv/bin/python -m pytest -v -p no:cacheprovider --durations=20 -m vm "$@" 2>&1 | sed -u 's/^/[vm] /' || rc=$?
    echo "[vm] == VM tier took $(($(date +%s) - vm_t0)) s, exit $rc"
    ok "$rc"
  ) &
  VM_PID=$!
  host_rc=0; host_tiers "$@" || host_rc=$?
  vm_rc=0; wait "$VM_PID" || vm_rc=$?
  echo "== pytest: host tiers exit $host_rc, VM tier exit $vm_rc, $(($(date +%s) - vm_t0)) s for both"
  [ "$host_rc" = 0 ] && [ "$vm_rc" = 0 ]
fi
