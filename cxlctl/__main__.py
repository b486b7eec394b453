"""``python -m cxlctl`` / the ``cxlctl`` console script.

``status --json`` (optionally with ``--root``) is served by a fast path that never
imports typer or rich: scripts and the daemon's consumers call it often, and the
CLI framework alone costs several times the interpreter's start-up.  Everything
else goes to the typer application in :mod:`cxlctl.cli`.
"""

from __future__ import annotations

import os
import sys
from typing import List, Optional


def _fast_status_json(argv: List[str]) -> Optional[int]:
    """Handle exactly ``[--root R] status --json`` and friends; None = not ours."""
    root: Optional[str] = None
    rest: List[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--root" and i + 1 < len(argv):
            root = argv[i + 1]
            i += 2
            continue
        if a.startswith("--root="):
            root = a[len("--root=") :]
            i += 1
            continue
        rest.append(a)
        i += 1
    if sorted(rest) != ["--json", "status"] or rest[0] != "status":
        return None
    from .errors import CxlctlError
    from .hostio.root import resolve_root
    from .inventory import scan
    from .jsonview import dumps

    try:
        inv = scan(resolve_root(root))
    except CxlctlError as e:
        sys.stderr.write(e.render() + "\n")
        return e.code
    sys.stdout.write(dumps(inv))
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    rc = _fast_status_json(args)
    if rc is not None:
        return rc
    from .cli import run

    return run(args)


def entry() -> None:
    """Console-script entry point (same behaviour as ``python -m cxlctl``)."""
    try:
        sys.exit(main())
    except BrokenPipeError:  # `cxlctl status --json | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


if __name__ == "__main__":
    entry()
