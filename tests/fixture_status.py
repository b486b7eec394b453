"""Keep each recorded tree's ``cxlctl-status.json`` equal to what cxlctl prints for it now.

``cxlctl record`` writes that file in the guest from the scan it copied, so at recording time
it is byte for byte what ``cxlctl --root TREE status --json`` prints.  When the status output
changes (a new field, a fixed value), the trees stay right but their files go stale; this is
the one command that rewrites them, by replaying each tree:

    .venv/bin/python -m tests.fixture_status            # every tree under fixtures/
    .venv/bin/python -m tests.fixture_status TREE...    # just these

Every recorder (tests/vm/record_*.py and the DAMON and doctor VM tests) puts a guest's tree
into fixtures/ through :func:`install`, which ends with :func:`refresh`; and
tests/test_fixture_status.py fails, naming this command, when a file differs from the replay.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any, List, Sequence

from tests.kit import cli, copy_fixture, fixture_roots

STATUS = "cxlctl-status.json"  # cxlctl.record.STATUS, without importing the package here
COMMAND = ".venv/bin/python -m tests.fixture_status"


def replay(tree: str) -> str:
    """What ``cxlctl --root TREE status --json`` prints now."""
    return cli("--root", os.path.abspath(tree), "status", "--json", check=True).stdout


def refresh(tree: str) -> bool:
    """Rewrite ``TREE/cxlctl-status.json`` from the replay; True when it changed."""
    path = os.path.join(tree, STATUS)
    new = replay(tree)
    try:
        with open(path) as f:
            if f.read() == new:
                return False
    except FileNotFoundError:
        pass
    with open(path, "w") as f:
        f.write(new)
    return True


def install(src: Any, dst: Any) -> str:
    """Put the record a guest made (``src``) at ``dst`` under fixtures/, replacing what was there
    (links kept as links), and refresh its status file. Returns ``dst``."""
    to = str(dst)
    if os.path.lexists(to):
        shutil.rmtree(to)
    copy_fixture(str(src), to)
    refresh(to)
    return to


def main(argv: Sequence[str]) -> int:
    trees: List[str] = list(argv) or fixture_roots()
    for t in trees:
        if not os.path.isfile(os.path.join(t, "cxlctl-record.json")):
            print(f"fixture_status: {t} is not a cxlctl record (no cxlctl-record.json)", file=sys.stderr)
            return 2
    changed = [t for t in trees if refresh(t)]
    for t in changed:
        print(f"rewrote {os.path.relpath(os.path.join(t, STATUS))}")
    print(f"{len(changed)} of {len(trees)} status files rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
