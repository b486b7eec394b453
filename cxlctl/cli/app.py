"""The typer application: the global options and the command groups, assembled once.

The command modules depend only on :mod:`.common` (options, emitters, state,
error mapping); this module imports them and attaches them, so the package has
no import cycle.  The global ``--root`` is resolved here and handed to every
command through the click context (``ctx.obj``).
"""

from __future__ import annotations

from typing import Any, List, Optional

import typer

from cxlctl.errors import CxlctlError

from .capacity import capacity_app
from .common import CliState, enter, run_app
from .daemon import daemon_app
from .doctor import doctor
from .k8s import k8s_app
from .launch import launch_app, policy_app
from .params import Command, Group
from .probe import probe
from .ras import events, health
from .record import record
from .region import dax_app, region_app
from .shell import completing, completion, enable
from .stat import stat
from .status import list_cmd, status
from .top import top
from .tune import tune_app


class _RootedHints(Group):
    """The application's group: an error's hint naming a cxlctl command names ``--root TREE`` too
    when the command ran under one (``see `cxlctl --root TREE tune status```), so it runs as
    printed against the tree the command acted on."""

    def invoke(self, ctx: Any) -> Any:  # click's Context, which typer vendors and asks not to import
        try:
            return super().invoke(ctx)
        except CxlctlError as e:
            if isinstance(ctx.obj, CliState):
                raise ctx.obj.host.hinted(e) from e.__cause__
            raise


def _version(value: bool) -> None:
    if value:
        from cxlctl import __version__

        typer.echo(f"cxlctl {__version__}")
        raise typer.Exit()


def main(
    ctx: typer.Context,
    root: Optional[str] = typer.Option(
        None,
        "--root",
        metavar="PATH",
        help="Read sysfs/procfs under PATH instead of / (env CXLCTL_ROOT). Use with trees from `cxlctl record`.",
    ),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Inventory, tune and use CXL memory on Linux hosts."""
    from cxlctl.hostio.host import Host

    enter(ctx, CliState(Host.resolve(root)))


def make_app() -> typer.Typer:
    """The ``cxlctl`` application: global options, top-level commands, the groups."""
    a = typer.Typer(
        name="cxlctl",
        cls=_RootedHints,
        help="Inventory, tune and use CXL memory on Linux hosts.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    a.callback()(main)
    a.command(cls=Command)(status)
    a.command("list", cls=Command)(list_cmd)
    a.command(cls=Command)(record)
    a.command(cls=Command)(stat)
    a.command(cls=Command)(top)
    a.command(cls=Command)(doctor)
    a.command(cls=Command)(probe)
    a.command(cls=Command)(events)
    a.command(cls=Command)(health)
    a.add_typer(tune_app, name="tune")
    a.add_typer(region_app, name="region")
    a.add_typer(capacity_app, name="capacity")
    a.add_typer(dax_app, name="dax")
    a.add_typer(launch_app, name="launch")
    a.add_typer(policy_app, name="policy")
    a.add_typer(daemon_app, name="daemon")
    a.add_typer(k8s_app, name="k8s")
    a.command(cls=Command)(completion)
    return a


app = make_app()


def run(argv: List[str]) -> int:
    """Run the app as ``cxlctl ARGV``; the exit code (errors mapped by :func:`.common.run_app`)."""
    if completing():
        enable()
    return run_app(app, argv)
