"""What every command module shares: the options, the emitters, the state, the error mapping.

One module so the command modules depend on it and on nothing else of the CLI
(:mod:`cxlctl.cli.app` imports them, never the other way: no import cycle).

* State: the global ``--root`` is resolved once by the app's callback and kept
  in the click context (``ctx.obj``, a :class:`CliState`); :func:`host_root` reads it
  back through a context variable that the callback sets and the context's close
  resets (typer has no public "current context"; its vendored click is private).
* ``--json`` (:data:`JSON_OPT`) and ``--wait`` (:data:`WAIT_OPT`) mean the same
  on every command; :func:`emit_json` writes one document with its
  ``schema_version``; messages go to stderr (:func:`note`) so stdout stays
  parseable.
* :func:`run_app` is the one place turning :class:`CxlctlError`, click's usage
  errors and a stdout that cannot be written into a one-line message and an exit
  code, so no user error shows a traceback; with ``--json`` it also prints the
  error as a JSON object on stdout (:func:`cxlctl.errors.json_error`).
* :func:`progress_bar`: a rich bar on stderr for long work, only on a terminal
  and never with ``--json`` (the engines take a plain callback, see
  :mod:`cxlctl.progress`).
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, TextIO

import typer

from cxlctl.errors import EXIT_USAGE, CxlctlError, InternalError, StdoutError, UsageError, json_error
from cxlctl.progress import ProgressFn
from cxlctl.term import isatty as isatty

from .params import seconds

SCHEMA_VERSION = 1

JSON_OPT = typer.Option(False, "--json", help="One JSON document on stdout (messages go to stderr).")
WAIT_OPT = typer.Option(
    None, "--wait", metavar="SECONDS", parser=seconds, help="How long to wait for the cxlctl lock (default 5)."
)


class CliState:
    """What the global options decided, kept in ``ctx.obj`` for the commands."""

    def __init__(self, root: str) -> None:
        self.root = root


#: the state of the command being run: set by :func:`enter`, reset when its click context closes
_CURRENT: ContextVar[Optional[CliState]] = ContextVar("cxlctl_cli_state", default=None)


def enter(ctx: typer.Context, state: CliState) -> None:
    """Make ``state`` the running command's (``ctx.obj``, and :func:`host_root`'s until ``ctx`` closes)."""
    ctx.obj = state
    token = _CURRENT.set(state)
    ctx.call_on_close(lambda: _CURRENT.reset(token))


def group(name: str, help: str) -> typer.Typer:
    """A command group with the settings every group shares (no typer extras, no pretty tracebacks)."""
    return typer.Typer(name=name, help=help, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


def host_root() -> str:
    """The ``--root`` the app callback resolved (from the click context's ``obj``)."""
    state = _CURRENT.get()
    if state is None:  # a command invoked without the app callback: only in tests of a lone group
        from cxlctl.hostio.root import resolve_root

        return resolve_root(None)
    return state.root


def interval_option(value: str, minimum: float, example: str) -> float:
    """``--interval`` of a command that reports repeatedly (``stat``, ``top``): seconds, at least ``minimum``."""
    from cxlctl.parse import parse_seconds

    try:
        s = parse_seconds(value)
    except ValueError as e:
        raise UsageError(f"--interval {value!r}: {e}", hint=f"give seconds, e.g. --interval {example}") from None
    if s < minimum:
        raise UsageError(f"--interval {value!r} is too short", hint=f"use {minimum:g} s or more")
    return s


def emit_json(doc: Dict[str, Any], stream: Optional[TextIO] = None, indent: Optional[int] = 2) -> None:
    """One JSON document (with ``schema_version`` first) on stdout, or ``stream``."""
    out = sys.stdout if stream is None else stream
    out.write(json.dumps({"schema_version": SCHEMA_VERSION, **doc}, indent=indent) + "\n")


def fold_for_terminal(text: str, stream: Optional[TextIO] = None) -> str:
    """``text`` folded at the terminal's width when ``stream`` (stderr) is a terminal;
    unchanged otherwise.

    Messages on stderr are one line each in a pipe, a log or the journal, where a line is a
    record that grep and journalctl keep whole; on a person's terminal a 200-column error
    is folded on spaces (paths and flags never broken), continuation lines indented."""
    from cxlctl.term import fold, width

    if not isatty(stream or sys.stderr):
        return text
    cols = max(width(), 60)
    return "\n".join(fold(line, cols) for line in text.split("\n"))


def note(msgs: Iterable[str]) -> None:
    for m in msgs:
        sys.stderr.write(fold_for_terminal(f"cxlctl: {m}") + "\n")


def logger(verbose: bool) -> Callable[[str], None]:
    """``--verbose``: every engine step on stderr; otherwise nothing."""

    def log(msg: str) -> None:
        if verbose:
            sys.stderr.write(f"cxlctl: {msg}\n")

    return log


def need_root(cmd: str) -> None:
    if os.geteuid() != 0:
        raise CxlctlError(
            f"{cmd} needs root: it writes CXL region and memory-hotplug attributes under /sys; nothing was changed",
            hint=f"run it as root (sudo cxlctl {cmd} ...); `cxlctl region plan` shows the plan without root",
        )


def show_progress(json_out: bool) -> bool:
    """A bar only for a person watching: stderr is a terminal and the output is not JSON."""
    return not json_out and sys.stderr.isatty()


@contextmanager
def progress_bar(json_out: bool) -> Iterator[Optional[ProgressFn]]:
    """A callback drawing a rich progress bar on stderr, or None when nobody watches.

    rich is imported only here, when a bar is really shown.  The bar is
    transient: once the work ends the command's own report replaces it.
    """
    if not show_progress(json_out):
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    tasks: Dict[str, Any] = {}

    def update(done: int, total: int, what: str) -> None:
        task = tasks.get(what)
        if task is None:
            task = tasks[what] = bar.add_task(what, total=total)
        bar.update(task, completed=done, total=total)

    with bar:
        yield update


class _Stdout:
    """``sys.stdout`` while a command runs: turns a failed write or flush into :class:`StdoutError`
    and remembers whether anything was written (then a ``--json`` failure adds no second document).

    A closed stdout (``>&-``: Python sets ``sys.stdout`` to None), a full disk
    (``>/dev/full``) or a closed pipe would otherwise surface as a traceback, an
    "internal error", or exit 0/120 once the interpreter's own last flush fails.
    """

    def __init__(self, inner: Optional[TextIO]) -> None:
        self.inner = inner
        self.written = False

    def write(self, text: str) -> int:
        if self.inner is None:
            raise StdoutError.of(None)
        if text:
            self.written = True
        try:
            return self.inner.write(text)
        except (OSError, ValueError) as e:
            raise StdoutError.of(e) from None

    def flush(self) -> None:
        if self.inner is None:
            return
        try:
            self.inner.flush()
        except (OSError, ValueError) as e:
            raise StdoutError.of(e) from None

    def isatty(self) -> bool:
        return self.inner is not None and isatty(self.inner)

    def __getattr__(self, name: str) -> Any:  # encoding, fileno, ... for rich and click
        if self.inner is None:
            raise AttributeError(name)
        return getattr(self.inner, name)


def _json_requested(argv: List[str]) -> bool:
    """``--json`` among the options (not in a launched program's arguments after ``--``)."""
    return "--json" in (argv[: argv.index("--")] if "--" in argv else argv)


def run_app(app: typer.Typer, argv: List[str]) -> int:
    """Run ``app``; map every expected failure to a message and an exit code.

    The message goes to stderr; with ``--json`` the same error is also one JSON object
    on stdout (docs/json-schema.md), unless the command had already printed its document."""
    out = _Stdout(sys.stdout)
    sys.stdout = out
    try:
        code = _run(app, argv)
        out.flush()
        return code
    except CxlctlError as e:
        err = e
    finally:
        sys.stdout = out.inner
    if isinstance(err, StdoutError):
        if not err.broken_pipe:  # `cxlctl … | head`: the reader left, nobody to tell
            sys.stderr.write(fold_for_terminal(err.render()) + "\n")
        return err.code
    sys.stderr.write(fold_for_terminal(err.render()) + "\n")
    if _json_requested(argv) and not out.written and out.inner is not None:
        try:
            out.inner.write(json_error(err))
            out.inner.flush()
        except (OSError, ValueError):
            pass  # stdout itself fails: the message on stderr says enough
    return err.code


def _run(app: typer.Typer, argv: List[str]) -> int:
    try:
        # without standalone mode click *returns* the code of a ``typer.Exit(code)``
        # raised inside a command instead of raising it: dropping that return value
        # made ``cxlctl daemon``'s failures and ``health``'s errors exit 0
        rv = app(args=argv, prog_name="cxlctl", standalone_mode=False)
    except CxlctlError:
        raise
    except typer.Exit as e:  # --version, --help
        return int(e.exit_code or 0)
    except typer.Abort:
        raise CxlctlError("aborted") from None
    except typer.TyperException as e:  # click's usage errors (typer's vendored click derives them from it)
        if type(e).__name__ == "NoArgsIsHelpError":  # `cxlctl tune`: the group's help, as `cxlctl tune -h`
            e.show()  # type: ignore[attr-defined]
            return EXIT_USAGE
        raise _usage_error(e) from None
    except Exception as e:  # real bugs
        if os.environ.get("CXLCTL_DEBUG"):
            raise
        raise InternalError(e) from None
    if isinstance(rv, int) and not isinstance(rv, bool):
        return rv
    return 0


def _usage_error(e: typer.TyperException) -> CxlctlError:
    """click's usage error as cxlctl's own: one line ``cxlctl: error: …`` and a hint, exit 2.

    click prints three lines (usage, "Try …", "Error: …"); a usage error of cxlctl's
    own (a :class:`UsageError`) is one line and a hint, and scripts grep for one shape."""
    msg = " ".join(e.format_message().split())
    if getattr(e, "exit_code", None) != EXIT_USAGE:
        return CxlctlError(msg)
    path = getattr(getattr(e, "ctx", None), "command_path", "") or "cxlctl"
    return UsageError(msg, hint=f"see `{path} --help`")
