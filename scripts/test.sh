#!/usr/bin/env bash
# Install everything the test suite needs and run all of it: lint, types, unit tests
# on recorded real-kernel fixtures, and the VM tier (QEMU + Debian kernels, real
# cxl/daxctl/numactl inside the guest).  Needs root (apt, kernel modules dir).
# Set CXLCTL_SKIP_VM=1 to leave out the VM tier on a laptop (CI never does).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then exec sudo -E bash "$0" "$@"; fi
export DEBIAN_FRONTEND=noninteractive
# CI runs with an empty environment (no HOME, PATH=/usr/sbin:/usr/bin:/sbin:/bin):
# give pip and virtme-ng a HOME; everything else finds its tools by full path.
export HOME="${HOME:-/root}"
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq python3-venv python3-pip >/dev/null
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q -e '.[test]'
if [ "${CXLCTL_SKIP_VM:-0}" != 1 ]; then
  bash scripts/install-vm-deps.sh "$PWD/.venv"
fi
# C compiler for the launcher's tiny guest-side test program
command -v cc >/dev/null 2>&1 || apt-get install -y -qq gcc libc6-dev >/dev/null
echo "== ruff"; .venv/bin/ruff check cxlctl tests bench; .venv/bin/ruff format --check cxlctl tests bench
echo "== mypy"; .venv/bin/mypy
echo "== pytest"
if [ "${CXLCTL_SKIP_VM:-0}" = 1 ]; then
  .venv/bin/python -m pytest -q -m 'not vm' "$@"
else
  .venv/bin/python -m pytest -q "$@"
fi
