"""1,000 interleaved rounds of cxlctl processes on a copy of a recorded tree (issue 22).

CLI ``tune apply/revert/try/confirm/verify``, ``daemon run --once`` and a second ``daemon run``,
2-4 at a time, beside one long-running daemon; after every round the journal must load, hold the
boot values, and match the knobs (tests/concurrency_support.py).  The unit tier runs a seeded
slice of the same rounds (tests/test_reliab_concurrency.py).

    .venv/bin/python bench/concurrency.py [--rounds 1000] [--seed 22] [--tree linux-6.12/single-region]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--tree", default="linux-6.12/single-region")
    a = ap.parse_args()
    sys.path.insert(0, HERE)
    from tests.concurrency_support import rounds
    from tests.tune_support import work_copy

    with tempfile.TemporaryDirectory(prefix="cxlctl-concurrency-") as d:
        root = work_copy(a.tree, os.path.join(d, "t"))
        res = rounds(root, a.rounds, a.seed, log=lambda m: print(m, file=sys.stderr, flush=True))
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
