#!/bin/sh
# The full mutation fuzz of issue 22: at least 10,000 mutated trees spread evenly over every recorded
# tree (tests/test_fuzz_trees.py's fixture_roots(): 40 trees today, so 250 each = 10,000), every read
# command on each; CI runs 25 per tree. Seed: CXLCTL_FUZZ_SEED. One line per recorded tree (pytest -v),
# so a run that is stopped still says how far it got.
set -e
cd "$(dirname "$0")/.."
if [ -z "${CXLCTL_FUZZ_TREES:-}" ]; then
  roots=$(.venv/bin/python -c 'import sys; sys.path.insert(0, "."); from tests.kit import fixture_roots; print(len(fixture_roots()))')
  CXLCTL_FUZZ_TREES=$(( (10000 + roots - 1) / roots ))
fi
echo "fuzz-full: $CXLCTL_FUZZ_TREES mutated trees per recorded tree" >&2
CXLCTL_FUZZ_TREES=$CXLCTL_FUZZ_TREES PYTHONUNBUFFERED=1 exec .venv/bin/python -u -m pytest -v -p no:cacheprovider \
    tests/test_fuzz_trees.py -k mutated_trees "$@"
