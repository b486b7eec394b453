"""``python -m cxlctl`` / the ``cxlctl`` console script.

``status --json`` and ``status`` (optionally with ``--root``) are served by a fast
path that never imports typer: scripts and the daemon's consumers call the JSON
form often, people the human one first, and the CLI framework alone (typer and
its vendored click) costs about four times the interpreter's start-up
(bench/README.md).  The JSON form imports no rich either.  Everything else goes to
the typer application in :mod:`cxlctl.cli`.
"""

from __future__ import annotations

import os
import sys

# typing costs ~5 ms of start-up: only mypy needs it here
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Optional, Tuple


def _fast_args(argv: List[str]) -> Optional[Tuple[List[Optional[str]], bool]]:
    """``(the --root values, --json given)`` of ``[--root R | --root=R]... status [--json]``, or None.

    This is exactly typer's grammar for that command line: global options before
    the command, the command's own options after it.  Anything else (an option in
    the wrong place, ``--help``, a repeated flag, ``--``) is left to typer, which
    either runs it or prints the usage error, so both paths accept the same input.
    """
    roots: List[Optional[str]] = []
    i = 0
    while i < len(argv) and argv[i] != "status":
        a = argv[i]
        if a == "--root" and i + 1 < len(argv):
            roots.append(argv[i + 1])
            i += 2
        elif a.startswith("--root="):
            roots.append(a[len("--root=") :])
            i += 1
        else:
            return None
    rest = argv[i:]
    if rest not in (["status"], ["status", "--json"]):
        return None
    return roots, len(rest) == 2


def _fast_status(argv: List[str]) -> Optional[int]:
    """Handle exactly ``[--root R] status [--json]``; None = not ours (typer decides).

    What it prints is what :func:`cxlctl.cli.status.status` prints (tests/test_cli.py
    compares both paths on every fixture)."""
    parsed = _fast_args(argv)
    if parsed is None:
        return None
    roots, json_out = parsed
    root = roots[-1] if roots else None  # click: the last occurrence wins
    from .errors import CxlctlError
    from .hostio.root import resolve_root
    from .inventory import scan

    try:
        inv = scan(resolve_root(root))
        if json_out:
            from .jsonview import dumps

            sys.stdout.write(dumps(inv))
        else:
            from rich.console import Console

            from .render import render_status

            render_status(inv, Console())
    except CxlctlError as e:
        sys.stderr.write(e.render() + "\n")
        return e.code
    except BrokenPipeError:
        raise  # entry() handles it, as for the typer path
    except Exception as e:  # a bug: the same one-line report as cli.run, never a traceback
        if os.environ.get("CXLCTL_DEBUG"):
            raise
        sys.stderr.write(
            f"cxlctl: internal error: {type(e).__name__}: {e}\n  rerun with CXLCTL_DEBUG=1 for a traceback\n"
        )
        return 1
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    rc = _fast_status(args)
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
