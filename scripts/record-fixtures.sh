#!/usr/bin/env bash
# Re-record the real-kernel fixtures under fixtures/linux-<major.minor>/ by booting
# every VM topology (tests/vm/harness.py) on Debian's 6.12 and 6.1 kernels: one
# boot per (kernel, topology), `cxlctl record` before and after creating the
# widest region, plus cxl/daxctl/numactl output as peers.  Needs root and
# scripts/install-vm-deps.sh; takes ~1-3 min per boot on 2 cores.
# Usage: scripts/record-fixtures.sh [--kernel 6.12] [--topology hb2] ...
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || { echo "record-fixtures: no $PY; run scripts/install.sh first (or set PYTHON)" >&2; exit 1; }
if [ "$(id -u)" != 0 ]; then echo "record-fixtures: must run as root (VM modules dir, guest root)" >&2; exit 1; fi
exec "$PY" -m tests.vm.record_fixtures "$@"
