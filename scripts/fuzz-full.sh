#!/bin/sh
# The full mutation fuzz of issue 22: 435 mutated trees per recorded tree (23 trees: 10,005), every
# read command on each (tests/test_fuzz_trees.py); CI runs 25 per tree. Seed: CXLCTL_FUZZ_SEED.
set -e
cd "$(dirname "$0")/.."
CXLCTL_FUZZ_TREES="${CXLCTL_FUZZ_TREES:-435}" exec .venv/bin/python -m pytest -q -p no:cacheprovider \
    tests/test_fuzz_trees.py -k mutated_trees "$@"
