#!/usr/bin/env bash
# Boot one VM test topology (tests/vm/harness.py) and run a bash script in it, as
# the tests do: drivers loaded, memdevs enumerated, guest-lib.sh functions defined,
# $OUT/$REPO/$PY set.  For poking at a real CXL kernel by hand.  Needs root and
# scripts/install-vm-deps.sh.
#   scripts/vm-run.sh hb2 -c 'R=$(create_ram_region decoder0.0 8192 mem0 mem1); cxl list -R'
#   scripts/vm-run.sh switch2 -k 6.1 -f my-script.sh
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-.venv/bin/python}" -m tests.vm.harness "$@"
