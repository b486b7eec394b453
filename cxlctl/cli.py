"""The typer application: global options and the command groups.

Command groups live in their own modules and are attached here; their heavy
imports happen inside the command functions.  ``run()`` is the single place that
turns :class:`CxlctlError` into a one-line message and an exit code, so no user
error ever shows a traceback.
"""

from __future__ import annotations

import os
import sys
from typing import List, Optional

import typer

from .cli_daemon import daemon_app
from .cli_launch import launch_app, policy_app
from .cli_params import Command, argument
from .cli_region import dax_app, region_app
from .cli_shell import completing, completion, enable
from .cli_tune import tune_app
from .errors import EXIT_FAILURE, EXIT_USAGE, CxlctlError
from .hostio.root import resolve_root

app = typer.Typer(
    name="cxlctl",
    help="Inventory, tune and use CXL memory on Linux hosts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(tune_app, name="tune")
app.add_typer(region_app, name="region")
app.add_typer(dax_app, name="dax")
app.add_typer(launch_app, name="launch")
app.add_typer(policy_app, name="policy")
app.add_typer(daemon_app, name="daemon")
app.command(cls=Command)(completion)


class State:
    root: str = "/"


STATE = State()


def _version(value: bool) -> None:
    if value:
        from . import __version__

        typer.echo(f"cxlctl {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    root: Optional[str] = typer.Option(
        None,
        "--root",
        metavar="PATH",
        help="Read sysfs/procfs under PATH instead of / (env CXLCTL_ROOT). Use with trees from `cxlctl record`.",
    ),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Inventory, tune and use CXL memory on Linux hosts."""
    STATE.root = resolve_root(root)


@app.command()
def status(
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output (docs/json-schema.md)."),
) -> None:
    """Show CXL devices, regions, DAX devices, NUMA nodes, memory tiers and knobs."""
    from .inventory import scan

    inv = scan(STATE.root)
    if json_out:
        from .jsonview import dumps

        sys.stdout.write(dumps(inv))
        return
    from rich.console import Console

    from .render import render_status

    render_status(inv, Console())


@app.command(cls=Command)
def record(
    dest: str = argument(..., "DEST", "Directory to create (must be new or empty)."),
    force: bool = typer.Option(False, "--force", help="Write into a non-empty directory."),
) -> None:
    """Copy the part of sysfs/procfs that cxlctl reads into DEST (fixture / bug report)."""
    from .record import RecordError
    from .record import record as do_record

    try:
        m = do_record(STATE.root, dest, force=force)
    except RecordError as e:
        raise CxlctlError(str(e), code=EXIT_USAGE) from None
    except OSError as e:
        raise CxlctlError(f"cannot write the record to {dest}: {e.strerror}") from None
    typer.echo(
        f"recorded {m['files']} files from {m['source_root']} (kernel {m['kernel']}) into {dest}"
        + ("" if m["as_root"] else "; not root: root-only attributes are missing")
    )


def run(argv: List[str]) -> int:
    """Run the app; map every expected failure to a message and an exit code."""
    if completing():
        enable()
    try:
        app(args=argv, prog_name="cxlctl", standalone_mode=False)
    except CxlctlError as e:
        sys.stderr.write(e.render() + "\n")
        return e.code
    except typer.Exit as e:  # --version, --help
        return int(e.exit_code or 0)
    except typer.Abort:
        sys.stderr.write("cxlctl: aborted\n")
        return EXIT_FAILURE
    except Exception as e:  # click usage errors and real bugs
        usage = _usage_error(e)
        if usage is not None:
            return usage
        if os.environ.get("CXLCTL_DEBUG"):
            raise
        sys.stderr.write(
            f"cxlctl: internal error: {type(e).__name__}: {e}\n  rerun with CXLCTL_DEBUG=1 for a traceback\n"
        )
        return EXIT_FAILURE
    return 0


def _usage_error(e: Exception) -> Optional[int]:
    """typer vendors click; its usage errors have ``show()`` and ``exit_code``."""
    show = getattr(e, "show", None)
    code = getattr(e, "exit_code", None)
    if callable(show) and isinstance(code, int):
        show()
        return EXIT_USAGE if code == 2 else code
    return None
