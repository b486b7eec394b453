#!/usr/bin/env bash
# The one way to (re-)record the real-kernel fixtures under fixtures/ (docs/testing.md, fixtures/README.md).
# Each set boots QEMU guests on Debian's kernels (tests/vm/harness.py), runs `cxlctl record` in them and
# installs the trees through tests.fixture_status.install (which also replays each tree's
# cxlctl-status.json). Needs root and scripts/install-vm-deps.sh; one boot is ~1-5 min on 2 cores.
#
# Usage: scripts/record-fixtures.sh [SET] [OPTIONS]     (as root)
#        scripts/record-fixtures.sh --list              the sets, what each makes, the command it runs
#        scripts/record-fixtures.sh --dry-run [SET] ... print the command instead of running it
#   base (default)  <topology>-noregion/-region trees, every kernel and topology; OPTIONS: --kernel 6.12|6.1|7.x --topology hb2
#   telemetry       single-*-telemetry (telemetry scenario); OPTIONS: --kernel 6.12|6.1|7.x
#   ras             linux-<series>/hb2x2-region-ras and .../events (RAS event injection over QMP); OPTIONS: --kernel 6.12|7.x
#   fleet           linux-<series>/switch2-devdax (a devdax region beside a system-ram one); OPTIONS: --kernel 6.12|7.x
#   damon           single-*-damon* (the DAMON VM test, recording on)
#   doctor          single-*-doctor (the doctor VM test, recording on)
#   hmat            linux-6.12/hmat2-* and linux-7.x/hmat2-* (HMAT + generic ports + CDAT; the HMAT VM test, recording on)
#   capacity        linux-*/pool-hotadd and pool-hotremoved (QMP hot-add/remove; the capacity VM test, recording on)
#   probe           linux-7.x/hmat2-2socket (two sockets, two L3s; the probe VM test, recording on)
#   all             every set above, in that order (no OPTIONS)
# Only the status files, without booting anything: .venv/bin/python -m tests.fixture_status
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
SETS="base telemetry ras fleet damon doctor hmat capacity probe"
DRY=0

command_of() {  # $1 = set: the command line it runs (OPTIONS appended by the caller)
  case "$1" in
    base) echo "$PY -m tests.vm.record_fixtures" ;;
    telemetry) echo "$PY -m tests.vm.record_telemetry_fixtures" ;;
    ras) echo "$PY -m tests.vm.record_ras_events" ;;
    fleet) echo "$PY -m tests.vm.record_fleet" ;;
    damon) echo "env CXLCTL_RECORD_DAMON_FIXTURES=1 $PY -m pytest -q -s -p no:cacheprovider tests/vm/test_vm_damon.py tests/vm/test_vm_linux7.py::test_7x_single_damon_tiering" ;;
    doctor) echo "env CXLCTL_RECORD_FIXTURES=1 $PY -m pytest -q -s -p no:cacheprovider tests/vm/test_vm_doctor.py" ;;
    hmat) echo "env CXLCTL_RECORD_FIXTURES=1 $PY -m pytest -q -s -p no:cacheprovider tests/vm/test_vm_hmat.py" ;;
    capacity) echo "env CXLCTL_RECORD_FIXTURES=1 $PY -m pytest -q -s -p no:cacheprovider tests/vm/test_vm_capacity.py" ;;
    probe) echo "env CXLCTL_RECORD_FIXTURES=1 $PY -m pytest -q -s -p no:cacheprovider tests/vm/test_vm_probe.py" ;;
    *) return 1 ;;
  esac
}

if [ "${1:-}" = "--list" ]; then
  for s in $SETS; do printf '%-10s %s\n' "$s" "$(command_of "$s")"; done
  exit 0
fi
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
set_=base
case "${1:-}" in
  "" | -*) ;;
  all) set_=all; shift ;;
  *)
    command_of "$1" >/dev/null || { echo "record-fixtures: unknown set '$1' (one of: $SETS all; --list)" >&2; exit 2; }
    set_=$1; shift ;;
esac
if [ "$set_" = all ] && [ $# -gt 0 ]; then echo "record-fixtures: 'all' takes no options" >&2; exit 2; fi

run_set() {  # $1 = set, then its options
  local s=$1; shift
  # shellcheck disable=SC2046 # the command is words on purpose
  if [ "$DRY" = 1 ]; then echo "$(command_of "$s")" "$@"; else $(command_of "$s") "$@"; fi
}

if [ "$DRY" = 0 ]; then
  [ -x "$PY" ] || { echo "record-fixtures: no $PY; run scripts/install.sh first (or set PYTHON)" >&2; exit 1; }
  if [ "$(id -u)" != 0 ]; then echo "record-fixtures: must run as root (VM modules dir, guest root)" >&2; exit 1; fi
fi
if [ "$set_" = all ]; then
  for s in $SETS; do run_set "$s"; done
else
  run_set "$set_" "$@"
fi
