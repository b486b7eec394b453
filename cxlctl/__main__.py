"""``python -m cxlctl`` / the ``cxlctl`` console script.

``status --json`` (optionally with ``--root``) is served by a fast path that never
imports typer or rich: scripts and the daemon's consumers call it often, and the
CLI framework alone costs several times the interpreter's start-up.  Everything
else goes to the typer application in :mod:`cxlctl.cli`.
"""

from __future__ import annotations

import os
import sys

# typing costs ~5 ms of start-up: only mypy needs it here
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Optional


def _fast_args(argv: List[str]) -> Optional[List[Optional[str]]]:
    """The ``--root`` values of ``[--root R | --root=R]... status --json``, or None.

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
    if argv[i:] != ["status", "--json"]:
        return None
    return roots


def _fast_status_json(argv: List[str]) -> Optional[int]:
    """Handle exactly ``[--root R] status --json``; None = not ours (typer decides)."""
    roots = _fast_args(argv)
    if roots is None:
        return None
    root = roots[-1] if roots else None  # click: the last occurrence wins
    from .errors import CxlctlError
    from .hostio.root import resolve_root
    from .inventory import scan
    from .status_json import dumps

    try:
        inv = scan(resolve_root(root))
    except Exception as e:
        if not isinstance(e, CxlctlError):  # a bug: the same one-line report as cli.run, never a traceback
            if os.environ.get("CXLCTL_DEBUG"):
                raise
            from .errors import InternalError

            e = InternalError(e)
        from .errors import json_error

        sys.stderr.write(e.render() + "\n")
        try:  # as cli.run does for every --json command (docs/json-schema.md, "Errors")
            sys.stdout.write(json_error(e))
        except (OSError, ValueError, AttributeError):
            pass
        return e.code
    try:
        sys.stdout.write(dumps(inv))
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError) as e:  # closed (None: AttributeError), full, or a left pipe
        from .errors import StdoutError

        err = StdoutError.of(None if sys.stdout is None else e)
        if not err.broken_pipe:
            sys.stderr.write(err.render() + "\n")
        return err.code
    return 1 if inv.unknown else 0  # a directory the inventory is listed from was unreadable


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    rc = _fast_status_json(args)
    if rc is not None:
        return rc
    from .cli import run

    return run(args)


def entry() -> None:
    """Console-script entry point (same behaviour as ``python -m cxlctl``).

    A stdout that failed (``>/dev/full``, a pipe whose reader left) was reported by the
    command (exit 1); what it could not take is still buffered, and the interpreter's
    last flush would fail again (a second message, exit 120): fd 1 becomes /dev/null."""
    try:
        rc = main()
    except BrokenPipeError:  # `cxlctl status --json | head`
        rc = 1
    if sys.stdout is not None:
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            rc = rc or 1
    sys.exit(rc)


if __name__ == "__main__":
    entry()
