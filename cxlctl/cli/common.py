"""What every command module shares: the options, the emitters, the state, the error mapping.

One module so the command modules depend on it and on nothing else of the CLI
(:mod:`cxlctl.cli.app` imports them, never the other way: no import cycle).

* State: the global ``--root`` is resolved once by the app's callback into a
  :class:`~cxlctl.hostio.host.Host`, kept in the click context (``ctx.obj``, a
  :class:`CliState`); :func:`host` reads it back through a context variable that
  the callback sets and the context's close resets (typer has no public "current
  context"; its vendored click is private).  Commands pass it to the engines.
* ``--json`` (:data:`JSON_OPT`) and ``--wait`` (:data:`WAIT_OPT`) mean the same
  on every command; :func:`emit_json` writes one document with its
  ``schema_version``; messages go to stderr (:func:`note`) so stdout stays
  parseable.
* :func:`run_app` turns click's usage errors into cxlctl's own and runs the app
  under :func:`cxlctl.emit.guarded`, the one mapping of errors to a message and an
  exit code that the fast path (:mod:`cxlctl.__main__`) shares.
* :func:`progress_bar`: a rich bar on stderr for long work, only on a terminal
  and never with ``--json`` (the engines take a plain callback, see
  :mod:`cxlctl.progress`).
"""

from __future__ import annotations

import os
import sys
import weakref
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional

import typer

from cxlctl.emit import SCHEMA_VERSION as SCHEMA_VERSION
from cxlctl.emit import emit_json as emit_json
from cxlctl.emit import fold_for_terminal as fold_for_terminal
from cxlctl.emit import guarded, root_first
from cxlctl.errors import EXIT_USAGE, CxlctlError, UsageError
from cxlctl.helptext import Group
from cxlctl.hostio.host import Host
from cxlctl.progress import ProgressFn
from cxlctl.term import isatty as isatty

from .params import seconds

JSON_OPT = typer.Option(False, "--json", help="One JSON document on stdout (messages go to stderr).")
WAIT_OPT = typer.Option(
    None, "--wait", metavar="SECONDS", parser=seconds, help="How long to wait for the cxlctl lock (default 5)."
)


class CliState:
    """What the global options decided, kept in ``ctx.obj`` for the commands: the
    :class:`~cxlctl.hostio.host.Host` the command acts on, resolved once from ``--root``."""

    def __init__(self, host: Host) -> None:
        self.host = host

    @property
    def root(self) -> str:
        return self.host.root


#: the state of the command being run: set by :func:`enter`, reset when its click context closes
_CURRENT: ContextVar[Optional[CliState]] = ContextVar("cxlctl_cli_state", default=None)


def enter(ctx: typer.Context, state: CliState) -> None:
    """Make ``state`` the running command's (``ctx.obj``, and :func:`host`'s until ``ctx`` closes)."""
    ctx.obj = state
    token = _CURRENT.set(state)
    ctx.call_on_close(lambda: _CURRENT.reset(token))
    ctx.call_on_close(state.host.close)


def group(name: str, help: str) -> typer.Typer:
    """A command group with the settings every group shares (no typer extras, no pretty tracebacks)."""
    return typer.Typer(
        name=name, help=help, cls=Group, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False
    )


def host() -> Host:
    """The host the app callback resolved from ``--root`` (the click context's ``obj``): one per
    command, handed to the engine functions."""
    state = _CURRENT.get()
    if state is None:  # a command invoked without the app callback: only in tests of a lone group
        return Host.resolve(None)
    return state.host


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
        console=Console(stderr=True, emoji=False),
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


def _json_requested(argv: List[str]) -> bool:
    """``--json`` among the options (not in a launched program's arguments after ``--``)."""
    return "--json" in (argv[: argv.index("--")] if "--" in argv else argv)


def run_app(app: typer.Typer, argv: List[str]) -> int:
    """Run ``app``; map every expected failure to a message and an exit code.

    The message goes to stderr; with ``--json`` the same error is also one JSON object
    on stdout (docs/json-schema.md), unless the command had already printed its document."""
    return guarded(lambda: _run(app, argv), _json_requested(argv))


#: the click command typer builds from each app, built once per process: typer rebuilds the
#: whole tree (every command's signature and type hints) on each call of the app, 20 ms for
#: cxlctl's; in-process runs (the fuzzer's thousands, the tests') paid that on every command
_COMMANDS: weakref.WeakKeyDictionary[typer.Typer, Any] = weakref.WeakKeyDictionary()


def command_of(app: typer.Typer) -> Any:
    """The click command of ``app`` (``typer.main.get_command``), built on first use."""
    cmd = _COMMANDS.get(app)
    if cmd is None:
        cmd = _COMMANDS[app] = typer.main.get_command(app)
    return cmd


def _run(app: typer.Typer, argv: List[str]) -> int:
    try:
        # without standalone mode click *returns* the code of a ``typer.Exit(code)``
        # raised inside a command instead of raising it: dropping that return value
        # made ``cxlctl daemon``'s failures and ``health``'s errors exit 0
        rv = command_of(app)(args=root_first(argv), prog_name="cxlctl", standalone_mode=False)
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
