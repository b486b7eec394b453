"""``python -m cxlctl`` / the ``cxlctl`` console script.

``status [--json]``, ``doctor --json`` and ``stat --json`` (optionally after
``--root``) are served by a fast path that never imports typer: scripts and the
daemon's consumers call the JSON forms often, people the human one first, and
the CLI framework alone (typer and its vendored click) costs about four times
the interpreter's start-up (bench/README.md).  The JSON forms import no rich.  Everything else goes to
the typer application in :mod:`cxlctl.cli`.  Both paths call the same command
functions (:mod:`cxlctl.commands`) and map errors in the same one place
(:mod:`cxlctl.emit`).
"""

from __future__ import annotations

import os
import sys

# typing costs ~5 ms of start-up: only mypy needs it here
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Optional, Tuple


#: the command lines served without typer: each exactly as typer parses it, no other option
_FAST = (("status",), ("status", "--json"), ("doctor", "--json"), ("stat", "--json"))


def _fast_args(argv: List[str]) -> Optional[Tuple[List[Optional[str]], Tuple[str, ...]]]:
    """``(the --root values, the command)`` of ``[--root R | --root=R]... CMD`` for a CMD in
    :data:`_FAST`, or None.

    This is exactly typer's grammar for those command lines: global options before
    the command, the command's own options after it.  Anything else (an option in
    the wrong place, ``--help``, a repeated flag, ``--``, any other option of the
    command) is left to typer, which either runs it or prints the usage error, so
    both paths accept the same input.
    """
    roots: List[Optional[str]] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--root" and i + 1 < len(argv):
            roots.append(argv[i + 1])
            i += 2
        elif a.startswith("--root="):
            roots.append(a[len("--root=") :])
            i += 1
        else:
            break
    cmd = tuple(argv[i:])
    return (roots, cmd) if cmd in _FAST else None


def _fast(argv: List[str]) -> Optional[int]:
    """Run a command line of :data:`_FAST` through its command function (:mod:`cxlctl.commands`,
    the one the typer command calls), guarded as the typer app's are (:func:`cxlctl.emit.guarded`:
    one error mapping for both); None = not ours (typer decides)."""
    parsed = _fast_args(argv)
    if parsed is None:
        return None
    roots, cmd = parsed
    import gc

    # one document and exit: the few thousand objects made hold no cycle worth collecting, and
    # the collector's passes over them (and over every module's objects) are ~0.3 ms of it
    gc.disable()
    from . import commands
    from .emit import guarded
    from .errors import CxlctlError
    from .hostio.host import Host

    json_out = cmd[-1] == "--json"

    def body() -> int:
        host = Host.resolve(roots[-1] if roots else None)  # click: the last --root wins
        try:
            if cmd[0] == "status":
                return commands.status(host, json_out)
            if cmd[0] == "doctor":
                return commands.doctor(host, json_out)
            return commands.stat(host, json_out)
        except CxlctlError as e:  # its hint as the typer path gives it (cli/app.py)
            raise host.hinted(e) from e.__cause__

    return guarded(body, json_out)


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    rc = _fast(args)
    if rc is not None:
        return rc
    return _typer(args)


def _typer(args: List[str]) -> int:
    from .cli import run

    return run(args)


def _flushed(rc: int) -> int:
    """``rc`` after the last flush of stdout.

    A stdout that failed (``>/dev/full``, a pipe whose reader left) was reported by the
    command (exit 1); what it could not take is still buffered, and the interpreter's
    last flush would fail again (a second message, exit 120): fd 1 becomes /dev/null."""
    if sys.stdout is not None:
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            rc = rc or 1
    return rc


def entry() -> None:
    """Console-script entry point (same behaviour as ``python -m cxlctl``).

    After a command of the fast path, the process ends with ``os._exit`` once stdout
    and stderr are flushed: the interpreter's teardown (every module's objects freed,
    a last collection) is ~2 ms of a ~20 ms ``status --json``, and those commands
    leave nothing for it to do -- no atexit handler, no temporary file, no thread, no
    file but the reader's directory handles (the kernel closes them).  The typer
    commands end as usual (``sys.exit``)."""
    args = sys.argv[1:]
    fast = False
    try:
        r = _fast(args)
        fast = r is not None
        rc = r if r is not None else _typer(args)
    except BrokenPipeError:  # `cxlctl status --json | head`
        rc = 1
    rc = _flushed(rc)
    if not fast:
        sys.exit(rc)
    try:
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):  # stderr closed (2>&-): nothing to say anyway
        pass
    os._exit(rc)


if __name__ == "__main__":
    entry()
