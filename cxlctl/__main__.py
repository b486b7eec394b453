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
    from typing import Any, Callable, Dict, List, Optional, Tuple, Union

    from .errors import CxlctlError


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


def _json_doc(doc: Dict[str, Any], indent: Optional[int]) -> str:
    """What :func:`cxlctl.cli.common.emit_json` writes (tests/test_core_install.py compares them)."""
    import json

    from .status_json import SCHEMA_VERSION

    return json.dumps({"schema_version": SCHEMA_VERSION, **doc}, indent=indent) + "\n"


def _writer(text: str) -> Callable[[], None]:
    def write() -> None:
        sys.stdout.write(text)

    return write


def _run_fast(cmd: Tuple[str, ...], root: str) -> Tuple[Callable[[], None], Union[CxlctlError, int, None]]:
    """The command ``cmd`` of :data:`_FAST`, as its typer command (cli/status.py, cli/doctor.py,
    cli/stat.py) runs it without options: (what writes its output, the error to exit with after it)."""
    if cmd[0] == "status":
        from .hostio.host import Host
        from .inventory import scan

        inv = scan(Host(root))
        if cmd == ("status", "--json"):
            from .status_json import dumps

            text = dumps(inv)
            return _writer(text), 1 if inv.unknown else None  # a directory listed was unreadable
        from .render import render_status
        from .term import console

        return lambda: render_status(inv, console(highlight=True)), 1 if inv.unknown else None  # as cli/status.py
    if cmd[0] == "doctor":
        from .doctor.gather import gather
        from .doctor.report import exit_code, failure, run, to_json
        from .hostio.host import Host

        facts = gather(Host(root), engine=None)
        checks = run(facts)
        text = _json_doc(to_json(facts, checks), 2)
        return _writer(text), failure(checks) if exit_code(checks) else None
    # stat --json: one report, the totals since boot
    from .hostio.host import Host
    from .telemetry.report import to_dict
    from .telemetry.sample import node_kinds, read_sample
    from .telemetry.verdicts import judge

    host = Host(root)
    kinds = node_kinds(host)
    s = read_sample(host.reader, kinds, nodes=None, cgroups=[], pids=(), top=0)
    text = _json_doc(to_dict(s, None, judge(s, None), 0), None)
    return _writer(text), None


def _fast(argv: List[str]) -> Optional[int]:
    """Run a command line of :data:`_FAST`; None = not ours (typer decides).  Errors as cli.run
    maps them: the message on stderr, with ``--json`` also a JSON error object on stdout
    (docs/json-schema.md, "Errors") unless the document was printed; a failing stdout is exit 1."""
    parsed = _fast_args(argv)
    if parsed is None:
        return None
    roots, cmd = parsed
    from .errors import CxlctlError
    from .hostio.root import resolve_root

    try:
        write, after = _run_fast(cmd, resolve_root(roots[-1] if roots else None))  # click: the last --root wins
    except KeyboardInterrupt:  # stat's loop ends quietly on Ctrl-C; click reports the others as aborted
        if cmd[0] == "stat":
            return 0
        sys.stderr.write("\ncxlctl: aborted\n")
        return 1
    except Exception as e:
        if not isinstance(e, CxlctlError):  # a bug: the same one-line report as cli.run, never a traceback
            if os.environ.get("CXLCTL_DEBUG"):
                raise
            from .errors import InternalError

            e = InternalError(e)
        sys.stderr.write(e.render() + "\n")
        if cmd[-1] == "--json":
            from .errors import json_error

            try:
                sys.stdout.write(json_error(e))
            except (OSError, ValueError, AttributeError):
                pass
        return e.code
    try:
        write()
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError) as e:  # closed (None: AttributeError), full, or a left pipe
        from .errors import StdoutError

        err = StdoutError.of(None if sys.stdout is None else e)
        if not err.broken_pipe:
            sys.stderr.write(err.render() + "\n")
        return err.code
    if isinstance(after, int):
        return after
    if after is not None:
        sys.stderr.write(after.render() + "\n")
        return after.code
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    rc = _fast(args)
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
