"""``cxlctl capacity [release|adopt]``: thin; the engines are :mod:`cxlctl.capacity` (docs/capacity.md)."""

from typing import List, Optional

import typer

from cxlctl.capacity.command import adopt, release, show

from .common import JSON_OPT, WAIT_OPT, group, host, logger, need_root, progress_bar
from .params import Command, argument

capacity_app = group(
    "capacity", "CXL capacity that comes and goes: what could go back to the pool, and giving it back."
)


@capacity_app.callback(invoke_without_command=True, no_args_is_help=False)
def capacity(ctx: typer.Context, json_out: bool = JSON_OPT) -> None:
    """Per memdev and per CXL node: in use, releasable now, and each blocker with its fix. No root needed."""
    if ctx.invoked_subcommand is None:
        show(host(), json_out)


@capacity_app.command("release", cls=Command)
def release_cmd(
    memdevs: Optional[List[str]] = argument(None, "MEMDEV...", "Whole memdevs to give back (memN, as listed)."),
    size: Optional[str] = typer.Option(None, "--size", "-s", metavar="SIZE", help="Pick releasable memdevs of SIZE."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the plan; change nothing (no root needed)."),
    timeout: Optional[float] = typer.Option(
        None, "--timeout", metavar="SECONDS", help="Bound on each memory block's offline (default 120); then roll back."
    ),
    sanitize: Optional[bool] = typer.Option(
        None,
        "--sanitize/--no-sanitize",
        help="Wipe the media (security/sanitize) before 'safe to unbind'; one is required.",
    ),
    try_normal: bool = typer.Option(
        False, "--try-normal", help="Try blocks in ZONE_NORMAL too (blocker zone-normal); rolled back on EBUSY."
    ),
    wait: Optional[float] = WAIT_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Offline the memdevs' memory (the kernel migrates it), tear down DAX and region; rolled back on failure."""
    release(
        host(), memdevs or [], size, dry_run, json_out, logger(False), wait, progress_bar(json_out), need_root,
        timeout, sanitize, try_normal,
    )  # fmt: skip


@capacity_app.command("adopt", cls=Command)
def adopt_cmd(
    memdevs: Optional[List[str]] = argument(None, "MEMDEV...", "Free memdevs to build into regions (memN, as listed)."),
    zone: Optional[str] = typer.Option(
        None, "--zone", metavar="ZONE", help="movable (the default: can be given back) or normal; not with devdax."
    ),
    mode: str = typer.Option("system-ram", "--mode", metavar="MODE", help="system-ram (a NUMA node) or devdax."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the plan; change nothing (no root needed)."),
    wait: Optional[float] = WAIT_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    r"""Build each hot-added memdev into a region of its own and online it, as the daemon's \[capacity] adopt does."""
    adopt(host(), memdevs or [], mode, zone, dry_run, json_out, logger(False), wait, progress_bar(json_out), need_root)
