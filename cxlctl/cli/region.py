"""``cxlctl region …`` and ``cxlctl dax …``: build and remove CXL RAM regions, switch DAX modes.

Thin on purpose: ``plan`` calls the pure planner (:mod:`cxlctl.regions.planner`)
on a fresh scan; ``create`` programs the plan (:mod:`cxlctl.regions.program`,
full undo on failure) and then puts the region's DAX device in the requested
mode and zone (:mod:`cxlctl.regions.dax`); ``destroy`` and ``dax reconfigure``
likewise.  Everything that writes needs root and holds the tuning lock
(``/run/cxlctl/lock``), because onlining memory may briefly hold the
``auto_online_blocks`` knob.  Exit codes: 0 ok, 1 failed (and undone), 2
impossible request or bad arguments (nothing written), 4 locked.
See docs/regions.md.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Optional

import typer

from .common import JSON_OPT, WAIT_OPT, emit_json, group, host, logger, need_root, progress_bar
from .params import Command, argument, integer

if TYPE_CHECKING:
    from cxlctl.regions.batch import Batch
    from cxlctl.regions.dax import Reconfigured
    from cxlctl.regions.planner import Plan

region_app = group("region", "Plan, create and destroy interleaved CXL RAM regions (docs/regions.md).")
dax_app = group("dax", "Switch DAX devices between devdax and system-ram, onlining in the chosen zone.")

MEMDEVS_OPT = typer.Option(
    None, "--memdevs", "-m", metavar="MEM,MEM", help="Memdevs to interleave (any order; cxlctl orders them)."
)
WAYS_OPT = typer.Option(
    None,
    "--ways",
    "-w",
    metavar="N",
    parser=integer(0),  # 0: _request says "must be positive"
    help="Number of memdevs; without --memdevs, cxlctl picks free ones.",
)
SIZE_OPT = typer.Option(
    None, "--size", "-s", metavar="SIZE", help="Region size, K/M/G/T = powers of 1024 (default: all that fits)."
)
GRAN_OPT = typer.Option(
    None, "--granularity", "-g", metavar="BYTES", help="Interleave granularity (default: the window's)."
)
DECODER_OPT = typer.Option(
    None,
    "--decoder",
    "-d",
    metavar="DECODER",
    help="Root decoder (CXL window, decoderX.Y) to use (default: the first that fits).",
)
TYPE_OPT = typer.Option("ram", "--type", "-t", metavar="TYPE", help="Region type; only ram is supported.")
ALL_OPT = typer.Option(False, "--all", help="Use all unused CXL RAM capacity, widest valid interleave per window.")
VERBOSE_OPT = typer.Option(False, "--verbose", "-v", help="Print every sysfs write to stderr.")
ONLINE_OPT = typer.Option(
    "system-ram",
    "--online",
    metavar="MODE",
    help="What the region's DAX device becomes: system-ram (a CPU-less NUMA node) or devdax (a character device).",
)
ZONE_OPT = typer.Option(
    None,
    "--zone",
    metavar="ZONE",
    help="Zone for system-ram memory (not with devdax; default normal, for region create the host's split: the pinnable setting of the daemon's configuration). normal: suits pinned buffers (CUDA pinned host memory, RDMA, KV-offload), "
    "which the kernel migrates out of ZONE_MOVABLE; but the memory can rarely be offlined again. movable: keeps "
    "hot-unplug and region destroy possible; long-term pins will not stay on it.",
)


# ------------------------------------------------------------------------------ rendering


def _render_plan(p: Plan, title: str = "plan") -> None:
    from cxlctl.regions import render
    from cxlctl.term import console

    render.plan(p, console(), title)


# ------------------------------------------------------------------------------- commands


@region_app.command("plan", cls=Command)
def plan_cmd(
    memdevs: Optional[str] = MEMDEVS_OPT,
    ways: Optional[int] = WAYS_OPT,
    size: Optional[str] = SIZE_OPT,
    granularity: Optional[str] = GRAN_OPT,
    decoder: Optional[str] = DECODER_OPT,
    rtype: str = TYPE_OPT,
    use_all: bool = ALL_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Show how a region would be built (positions, decoders, size), or exactly why it cannot be. No root needed."""
    from cxlctl.inventory import scan
    from cxlctl.regions import region_json
    from cxlctl.regions.planner import NOTHING_TO_DO
    from cxlctl.regions.request import plans as plans_for
    from cxlctl.regions.request import request

    plans = plans_for(scan(host()), request(memdevs, ways, size, granularity, decoder, rtype), use_all)
    if json_out:
        emit_json(region_json.plans(plans))
        return
    if not plans:
        typer.echo(NOTHING_TO_DO)
    for i, p in enumerate(plans):
        _render_plan(p, f"plan {i + 1}/{len(plans)}" if len(plans) > 1 else "plan")


@region_app.command("create", cls=Command)
def create_cmd(
    memdevs: Optional[str] = MEMDEVS_OPT,
    ways: Optional[int] = WAYS_OPT,
    size: Optional[str] = SIZE_OPT,
    granularity: Optional[str] = GRAN_OPT,
    decoder: Optional[str] = DECODER_OPT,
    rtype: str = TYPE_OPT,
    use_all: bool = ALL_OPT,
    online: str = ONLINE_OPT,
    zone: Optional[str] = ZONE_OPT,
    dry_run: bool = typer.Option(False, "--dry-run", help="Plan and print; write nothing (no root needed)."),
    wait: Optional[float] = WAIT_OPT,
    verbose: bool = VERBOSE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Create a region: program it through sysfs, commit, bind, then online its memory as asked.

    On any failure every step is undone (targets, DPA, the region itself), so no half-built region remains.
    """
    from cxlctl.inventory import scan
    from cxlctl.regions import region_json
    from cxlctl.regions.batch import create_regions
    from cxlctl.regions.planner import NOTHING_TO_DO
    from cxlctl.regions.request import MODES, choice, request, zone_default
    from cxlctl.regions.request import plans as plans_for

    online = choice(online, MODES, "--online")
    req = request(memdevs, ways, size, granularity, decoder, rtype)
    root = host()
    inv = scan(root)
    zone, why = zone_default(root, inv, zone, online, "--online")  # the host's split (capacity/pinnable.py)
    plans = plans_for(inv, req, use_all)
    if not plans:  # --all with no unused capacity: idempotent, needs no root
        if json_out:
            emit_json(region_json.dry_run(plans, online, zone) if dry_run else region_json.created_all([], None, True))
        else:
            typer.echo(NOTHING_TO_DO)
        return
    if dry_run:
        if json_out:
            emit_json(dict(region_json.dry_run(plans, online, zone), zone_decided_by=why))
        else:
            from cxlctl.regions.render import would_online

            for i, p in enumerate(plans):
                _render_plan(p, f"would create {i + 1}/{len(plans)}" if len(plans) > 1 else "would create")
            typer.echo(would_online(online, zone, why))
        return
    need_root("region create")
    if why:
        sys.stderr.write(f"cxlctl: ZONE_{zone.upper()}: {why} (--zone chooses)\n")
    with progress_bar(json_out) as progress:
        batch = create_regions(
            root,
            plans,
            req,
            use_all=use_all,
            online=online,
            zone=zone,
            log=logger(verbose),
            wait=wait,
            progress=progress,
        )
    _report_created(batch, json_out)
    if batch.error is not None:
        raise batch.error


def _report_created(batch: Batch, json_out: bool) -> None:
    from cxlctl.regions import region_json

    partial = batch.error is not None
    if json_out:
        emit_json(region_json.created_all(batch.built, batch.block_size, complete=not partial))
        return
    from cxlctl.regions import render

    for line in render.created(batch):
        typer.echo(line)
    if partial:
        sys.stderr.write("cxlctl: --all stopped early; the regions above were created and stay\n")


@region_app.command("destroy", cls=Command)
def destroy_cmd(
    region: str = argument(..., "REGION", "The region to destroy (regionN, as cxlctl status lists it)."),
    force: bool = typer.Option(
        False, "--force", "-f", help="Offline the region's memory first (it must not be in use)."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would be done; change nothing (no root needed)."),
    wait: Optional[float] = WAIT_OPT,
    verbose: bool = VERBOSE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Destroy a region: offline its memory (--force), unbind, decommit, free the decoders and DPA, delete it.

    Refuses while its memory is online unless --force; stops without changing anything if a block cannot be offlined.
    """
    from cxlctl.regions import region_json
    from cxlctl.regions.batch import destroy_region
    from cxlctl.regions.request import check_destroy_target

    h = host()
    check_destroy_target(h, region)
    if dry_run:
        from cxlctl.regions.program import destroy_plan

        plan = destroy_plan(h, region, force)
        emit_json(plan) if json_out else typer.echo("".join(f"would {s}\n" for s in plan["steps"]), nl=False)
        return
    need_root("region destroy")
    with progress_bar(json_out) as progress:
        d = destroy_region(h, region, force, logger(verbose), wait=wait, progress=progress)
    if json_out:
        emit_json(region_json.destroyed(d))
        return
    from cxlctl.regions import render

    typer.echo(render.destroyed(d))


@dax_app.command("reconfigure", cls=Command)
def reconfigure_cmd(
    device: str = argument(..., "DEVICE", "The DAX device (daxX.Y, as cxlctl status lists it)."),
    mode: str = typer.Option(..., "--mode", "-m", metavar="MODE", help="system-ram (online as a NUMA node) or devdax."),
    zone: Optional[str] = ZONE_OPT,
    force: bool = typer.Option(False, "--force", "-f", help="To devdax: offline online memory first."),
    wait: Optional[float] = WAIT_OPT,
    verbose: bool = VERBOSE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Switch a DAX device between devdax and system-ram, like daxctl reconfigure-device.

    system-ram onlines every block in the chosen zone (holding the kernel's auto-online policy off while
    kmem binds, when that policy would pick the other zone); devdax needs the memory offline (--force).
    """
    from cxlctl.regions.batch import reconfigure_dax
    from cxlctl.regions.dax import block_size, read_dax
    from cxlctl.regions.request import MODES, check_dax_name, choice
    from cxlctl.regions.request import zone as zone_for

    mode = choice(mode, MODES, "--mode")
    zone = zone_for(zone, mode, "--mode")
    check_dax_name(device)
    root = host()
    read_dax(root, device)  # a clear error for unknown devices, before the root check
    need_root("dax reconfigure")
    with progress_bar(json_out) as progress:
        r = reconfigure_dax(root, device, mode, zone, force, logger(verbose), wait=wait, progress=progress)
    _report_reconfigured(r, block_size(root), json_out)


def _report_reconfigured(r: Reconfigured, bs: Optional[int], json_out: bool) -> None:
    from cxlctl.regions import region_json

    doc = region_json.reconfigured(r, bs)
    if json_out:
        emit_json(doc)
        return
    from cxlctl.regions import render

    typer.echo(render.reconfigured(r, doc))
