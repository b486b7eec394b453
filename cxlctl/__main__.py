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
    from typing import Any, Dict, List, Optional, Tuple


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


def _json_doc(doc: Dict[str, Any], indent: Optional[int]) -> None:
    """What :func:`cxlctl.cli.common.emit_json` writes (tests/test_core_install.py compares them)."""
    import json

    from .status_json import SCHEMA_VERSION

    sys.stdout.write(json.dumps({"schema_version": SCHEMA_VERSION, **doc}, indent=indent) + "\n")


def _run_fast(cmd: Tuple[str, ...], root: str) -> None:
    """The command ``cmd`` of :data:`_FAST`, as its typer command (cli/status.py, cli/doctor.py,
    cli/stat.py) runs it without options."""
    if cmd[0] == "status":
        from .inventory import scan

        inv = scan(root)
        if cmd == ("status", "--json"):
            from .status_json import dumps

            sys.stdout.write(dumps(inv))
            return
        from .render import render_status
        from .term import markup_console

        render_status(inv, markup_console())  # as cli/status.py
    elif cmd[0] == "doctor":
        from .doctor.gather import gather
        from .doctor.report import exit_code, failure, run, to_json

        facts = gather(root, engine=None)
        checks = run(facts)
        _json_doc(to_json(facts, checks), 2)
        sys.stdout.flush()
        if exit_code(checks):
            raise failure(checks)
    else:  # stat --json: one report, the totals since boot
        from .hostio.reader import Reader
        from .telemetry.report import to_dict
        from .telemetry.sample import node_kinds, read_sample
        from .telemetry.verdicts import judge

        kinds = node_kinds(root)
        s = read_sample(Reader(root), kinds, nodes=None, cgroups=[], pids=(), top=0)
        _json_doc(to_dict(s, None, judge(s, None), 0), None)
        sys.stdout.flush()


def _fast(argv: List[str]) -> Optional[int]:
    """Run a command line of :data:`_FAST`; None = not ours (typer decides)."""
    parsed = _fast_args(argv)
    if parsed is None:
        return None
    roots, cmd = parsed
    from .errors import CxlctlError
    from .hostio.root import resolve_root

    try:
        _run_fast(cmd, resolve_root(roots[-1] if roots else None))  # click: the last --root wins
    except CxlctlError as e:
        sys.stderr.write(e.render() + "\n")
        return e.code
    except BrokenPipeError:
        raise  # entry() handles it
    except KeyboardInterrupt:  # stat's loop ends quietly on Ctrl-C; click reports the others as aborted
        if cmd[0] == "stat":
            return 0
        sys.stderr.write("\ncxlctl: aborted\n")
        return 1
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
    rc = _fast(args)
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
