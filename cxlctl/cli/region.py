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

import re
import sys
from typing import TYPE_CHECKING, List, Optional, Tuple

import typer

from cxlctl.errors import EXIT_USAGE, CxlctlError, UsageError
from cxlctl.parse import decimal_suffix

from .common import JSON_OPT, WAIT_OPT, emit_json, group, host_root, logger, need_root, progress_bar
from .params import Command, argument, integer

if TYPE_CHECKING:
    from cxlctl.model import Inventory
    from cxlctl.regions.batch import Batch
    from cxlctl.regions.dax import Reconfigured
    from cxlctl.regions.planner import Plan, Request

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
    help="Zone for system-ram memory (default normal; not with devdax). normal: suits pinned buffers (CUDA pinned host memory, RDMA, KV-offload), "
    "which the kernel migrates out of ZONE_MOVABLE; but the memory can rarely be offlined again. movable: keeps "
    "hot-unplug and region destroy possible; long-term pins will not stay on it.",
)


def _zone(zone: Optional[str], mode: str, opt: str) -> str:
    """``--zone`` (default normal) for system-ram; with devdax, where no memory is onlined, a usage error
    rather than a silently ignored option."""
    if zone is not None and mode == "devdax":
        raise UsageError(
            f"--zone {zone} has no effect with {opt} devdax: a devdax device is not onlined as memory",
            hint=f"drop --zone, or use {opt} system-ram",
        )
    return _choice(zone or "normal", ("normal", "movable"), "--zone")


def _choice(value: str, allowed: Tuple[str, ...], opt: str) -> str:
    v = value.strip().lower()
    if v not in allowed:
        raise UsageError(f"{opt} {value!r} is not one of {', '.join(allowed)}", hint=f"use {opt} {allowed[0]}")
    return v


def _request(
    memdevs: Optional[str],
    ways: Optional[int],
    size: Optional[str],
    granularity: Optional[str],
    decoder: Optional[str],
    rtype: str,
) -> Request:
    from cxlctl.parse import parse_name_list, parse_size
    from cxlctl.regions.planner import Request

    names: Tuple[str, ...] = ()
    if memdevs is not None:
        if not memdevs.replace(",", "").strip():
            raise UsageError("--memdevs is empty", hint="e.g. --memdevs mem0,mem1")
        try:  # as strict as --mem-nodes: "mem0,,mem1" is an error, not "mem0,mem1"
            names = tuple(parse_name_list(memdevs, "memdev", "mem"))
        except ValueError as e:
            raise UsageError(
                f"--memdevs: {e}", hint="memdevs are named memN, comma-separated (cxlctl status)"
            ) from None
        given = [p.strip() for p in memdevs.split(",")]
        if len(given) != len(names):  # parse_name_list drops repeats; a region cannot use a memdev twice
            twice = sorted({n for n in given if given.count(n) > 1})
            raise UsageError(
                f"--memdevs {memdevs!r} names {', '.join(twice)} more than once",
                hint="name each memdev once; --ways N alone lets cxlctl pick N",
            )
    if ways is not None and ways <= 0:
        raise UsageError(f"--ways {ways} must be positive")
    sz: Optional[int] = None
    if size is not None:
        try:
            sz = parse_size(size)
        except ValueError as e:
            raise UsageError(f"--size: {e}", hint="e.g. --size 512M or --size 4G") from None
        if sz == 0:
            raise UsageError("--size 0: a region needs a size", hint="leave --size out to use all that fits")
    g: Optional[int] = None
    if granularity is not None:
        try:
            g = parse_size(granularity)
        except ValueError as e:
            raise UsageError(f"--granularity: {e}", hint="e.g. --granularity 4096 or 4K") from None
    if decoder is not None and not re.fullmatch(r"decoder[0-9]+\.[0-9]+", decoder):
        raise UsageError(
            f"--decoder {decoder!r} is not a decoder name", hint="root decoders are named decoderX.Y (cxlctl status)"
        )
    return Request(memdevs=names, ways=ways, size=sz, granularity=g, decoder=decoder, type=rtype.strip().lower())


def _plans(inv: Inventory, req: Request, use_all: bool) -> List[Plan]:
    from cxlctl.regions.planner import plan, plan_all

    if use_all:
        if req.memdevs or req.ways is not None or req.size is not None:
            raise UsageError(
                "--all picks memdevs, ways and sizes itself", hint="drop --memdevs/--ways/--size, or drop --all"
            )
        return plan_all(inv, req)
    return [plan(inv, req)]


# ------------------------------------------------------------------------------ rendering


def _render_plan(p: Plan, title: str = "plan") -> None:
    from cxlctl.regions import render
    from cxlctl.term import console

    render.plan(p, console(), title)


# ------------------------------------------------------------------------------- commands


@region_app.command("plan")
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
    from cxlctl.hostio.host import Host
    from cxlctl.inventory import scan
    from cxlctl.regions import region_json

    req = _request(memdevs, ways, size, granularity, decoder, rtype)
    plans = _plans(scan(Host(host_root())), req, use_all)
    if json_out:
        emit_json(region_json.plans(plans))
        return
    for i, p in enumerate(plans):
        _render_plan(p, f"plan {i + 1}/{len(plans)}" if len(plans) > 1 else "plan")


@region_app.command("create")
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
    from cxlctl.hostio.host import Host
    from cxlctl.inventory import scan
    from cxlctl.regions import region_json
    from cxlctl.regions.batch import create_regions

    online = _choice(online, ("system-ram", "devdax"), "--online")
    zone = _zone(zone, online, "--online")
    req = _request(memdevs, ways, size, granularity, decoder, rtype)
    root = host_root()
    plans = _plans(scan(Host(root)), req, use_all)
    if dry_run:
        if json_out:
            emit_json(region_json.dry_run(plans, online, zone))
        else:
            for i, p in enumerate(plans):
                _render_plan(p, f"would create {i + 1}/{len(plans)}" if len(plans) > 1 else "would create")
            typer.echo(
                f"then: DAX device → {online}"
                + (f" in ZONE_{zone.upper()}" if online == "system-ram" else "")
                + "; dry run, nothing written"
            )
        return
    need_root("region create")
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
    wait: Optional[float] = WAIT_OPT,
    verbose: bool = VERBOSE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Destroy a region: offline its memory (--force), unbind, decommit, free the decoders and DPA, delete it.

    Refuses while its memory is online unless --force; stops without changing anything if a block cannot be offlined.
    """
    from cxlctl.hostio.host import Host
    from cxlctl.inventory import scan
    from cxlctl.regions import region_json
    from cxlctl.regions.batch import destroy_region
    from cxlctl.regions.planner import destroy_blockers

    if decimal_suffix(region, "region") is None:
        raise UsageError(f"{region!r} is not a region name", hint="regions are named regionN (cxlctl status)")
    root = host_root()
    inv = scan(Host(root))
    if inv.region(region) is None:
        known = ", ".join(r.name for r in inv.regions) or "none"
        raise CxlctlError(f"no region {region} (regions: {known})", code=EXIT_USAGE)
    blockers = destroy_blockers(inv, region)
    if blockers:
        raise CxlctlError(
            f"{region} cannot be torn down before "
            + "; ".join(blockers)
            + ": the kernel releases a port's decoders in reverse commit order",
            code=EXIT_USAGE,
            hint="destroy the later region(s) first",
        )
    need_root("region destroy")
    with progress_bar(json_out) as progress:
        d = destroy_region(root, region, force, logger(verbose), wait=wait, progress=progress)
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

    mode = _choice(mode, ("system-ram", "devdax"), "--mode")
    zone = _zone(zone, mode, "--mode")
    if not (device.startswith("dax") and "." in device):
        raise UsageError(f"{device!r} is not a DAX device name", hint="DAX devices are named daxX.Y (cxlctl status)")
    root = host_root()
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
