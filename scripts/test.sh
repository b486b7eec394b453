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
# /var/cache/cxlctl-engines.  Opt-in for now (CXLCTL_ENGINES=1): a cold install takes ~35 min here and the
# tier still has failing cases (docs/testing.md)
SKIP_ENGINES=1; [ "${CXLCTL_ENGINES:-0}" = 1 ] && SKIP_ENGINES=0
if [ "$SKIP_ENGINES" != 1 ]; then
  t0=$(date +%s)
  bash scripts/install-engines.sh || echo "== engines: install failed; the engines tier will skip what is missing"
  echo "== engines: install took $(($(date +%s) - t0)) s"
fi
echo "== ruff"; .venv/bin/ruff check cxlctl tests bench; .venv/bin/ruff format --check cxlctl tests bench
echo "== mypy"; .venv/bin/mypy
echo "== pytest"
if [ "$SKIP_VM" = 1 ]; then
  .venv/bin/python -m pytest -q -m 'not vm and not engines' "$@"
else
  # --durations: the slowest tests in CI's log, to keep the run inside its time budget
  .venv/bin/python -m pytest -q --durations=20 -m 'not engines' "$@"
fi
if [ "$SKIP_ENGINES" != 1 ]; then
  echo "== pytest -m engines"
  t0=$(date +%s)
  .venv/bin/python -m pytest -q -rs -m engines tests/test_engines_judge.py "$@"
  echo "== engines tier took $(($(date +%s) - t0)) s"
fi
