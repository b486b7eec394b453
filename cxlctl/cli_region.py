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

import json
import os
import re
import sys
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

import typer

from .cli_params import Command, argument, seconds
from .errors import EXIT_USAGE, CxlctlError, UsageError
from .parse import decimal_suffix

if TYPE_CHECKING:
    from .model import Inventory
    from .regions.dax import Reconfigured
    from .regions.planner import Plan, Request
    from .regions.program import Created

SCHEMA_VERSION = 1

region_app = typer.Typer(
    name="region",
    help="Plan, create and destroy interleaved CXL RAM regions (docs/regions.md).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
dax_app = typer.Typer(
    name="dax",
    help="Switch DAX devices between devdax and system-ram, onlining in the chosen zone.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

JSON_OPT = typer.Option(False, "--json", help="One JSON document on stdout (messages go to stderr).")
MEMDEVS_OPT = typer.Option(
    None, "--memdevs", "-m", metavar="MEM,MEM", help="Memdevs to interleave (any order; cxlctl orders them)."
)
WAYS_OPT = typer.Option(
    None, "--ways", "-w", metavar="N", help="Number of memdevs; without --memdevs, cxlctl picks free ones."
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
WAIT_OPT = typer.Option(
    None, "--wait", metavar="SECONDS", parser=seconds, help="How long to wait for the cxlctl lock (default 5)."
)
VERBOSE_OPT = typer.Option(False, "--verbose", "-v", help="Print every sysfs write to stderr.")
ONLINE_OPT = typer.Option(
    "system-ram",
    "--online",
    metavar="MODE",
    help="What the region's DAX device becomes: system-ram (a CPU-less NUMA node) or devdax (a character device).",
)
ZONE_OPT = typer.Option(
    "normal",
    "--zone",
    metavar="ZONE",
    help="Zone for system-ram memory. normal: suits pinned buffers (CUDA pinned host memory, RDMA, KV-offload), "
    "which the kernel migrates out of ZONE_MOVABLE; but the memory can rarely be offlined again. movable: keeps "
    "hot-unplug and region destroy possible; long-term pins will not stay on it.",
)


def _root() -> str:
    from .cli import STATE

    return STATE.root


def _emit(doc: Dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"schema_version": SCHEMA_VERSION, **doc}, indent=2) + "\n")


def _logger(verbose: bool) -> Callable[[str], None]:
    def log(msg: str) -> None:
        if verbose:
            sys.stderr.write(f"cxlctl: {msg}\n")

    return log


def _need_root(cmd: str) -> None:
    if os.geteuid() != 0:
        raise CxlctlError(
            f"{cmd} needs root: it writes CXL region and memory-hotplug attributes under /sys; nothing was changed",
            hint=f"run it as root (sudo cxlctl {cmd} ...); `cxlctl region plan` shows the plan without root",
        )


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
    from .parse import parse_name_list, parse_size
    from .regions.planner import Request

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
    from .regions.planner import plan, plan_all

    if use_all:
        if req.memdevs or req.ways is not None or req.size is not None:
            raise UsageError(
                "--all picks memdevs, ways and sizes itself", hint="drop --memdevs/--ways/--size, or drop --all"
            )
        return plan_all(inv, req)
    return [plan(inv, req)]


# ------------------------------------------------------------------------------ rendering


def plan_json(p: Plan) -> Dict[str, Any]:
    index = {(lv.port, t): i for lv in p.levels for i, t in enumerate(lv.targets)}
    return {
        "decoder": p.root_decoder,
        "type": p.type,
        "size": p.size,
        "interleave_ways": p.ways,
        "interleave_granularity": p.granularity,
        "resource": p.resource,
        "window": {"size": p.window_size, "max_available_extent": p.window_free},
        "targets": [t.memdev for t in p.targets],
        "mappings": [
            {
                "position": t.position,
                "memdev": t.memdev,
                "decoder": t.decoder,
                "endpoint": t.endpoint,
                "dpa_size": t.dpa_size,
                "mode": t.mode,
                "route": [{"port": h.port, "dport": h.dport, "index": index.get((h.port, h.dport))} for h in t.hops],
            }
            for t in p.targets
        ],
        "port_decoders": [
            {
                "port": lv.port,
                "decoder": lv.decoder,
                "interleave_ways": lv.ways,
                "interleave_granularity": lv.granularity,
                "targets": list(lv.targets),
            }
            for lv in p.levels[1:]
        ],
        "notes": list(p.notes),
    }


def _render_plan(p: Plan, title: str = "plan") -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from .parse import format_size

    c = Console(highlight=False)
    at = f" at {p.resource:#x}" if p.resource is not None else ""
    c.print(
        f"[bold]{title}[/bold]: {p.ways}-way RAM region of {format_size(p.size)} on {p.root_decoder}{at}, "
        f"granularity {p.granularity}"
        + (
            f"  (window {format_size(p.window_size)}, largest free extent {format_size(p.window_free)})"
            if p.window_size
            else ""
        )
    )
    index = {(lv.port, t): i for lv in p.levels for i, t in enumerate(lv.targets)}
    t = Table(title_justify="left")
    for col in ("position", "memdev", "endpoint decoder", "DPA", "route (port: dport → target index)"):
        t.add_column(col)
    for tg in p.targets:
        route = "  ".join(f"{h.port}: {escape(str(h.dport))} → {index.get((h.port, h.dport), '?')}" for h in tg.hops)
        dec = tg.decoder + (f" (mode {escape(str(tg.mode))} → ram)" if tg.mode != "ram" else "")
        t.add_row(str(tg.position), tg.memdev, dec, format_size(tg.dpa_size), route)
    c.print(t)
    for lv in p.levels[1:]:
        c.print(
            f"  {lv.port}: {lv.decoder} will interleave {lv.ways}-way at {lv.granularity} across dports "
            + ",".join(map(str, lv.targets))
        )
    for n in p.notes:
        c.print(f"[yellow]note:[/yellow] {escape(n)}")


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
    from .inventory import scan

    req = _request(memdevs, ways, size, granularity, decoder, rtype)
    plans = _plans(scan(_root()), req, use_all)
    if json_out:
        _emit({"plans": [plan_json(p) for p in plans]})
        return
    for i, p in enumerate(plans):
        _render_plan(p, f"plan {i + 1}/{len(plans)}" if len(plans) > 1 else "plan")


def _dax_step(root: str, online: str, zone: str, log: Callable[[str], None]) -> Callable[[Created], None]:
    from .regions import dax

    def step(made: Created) -> None:
        if not made.dax_devices:
            raise dax.DaxError(
                f"no DAX device appeared for {made.region} (is the dax_cxl driver loaded?)",
                hint="modprobe dax_cxl, then create the region again",
            )
        for dev in made.dax_devices:
            dax.reconfigure(root, dev, online, zone, force=True, log=log)

    return step


def _created_json(made: Created, root: str) -> Dict[str, Any]:
    from .regions import dax

    doc = plan_json(made.plan)
    bs = dax.block_size(root)
    doc.update(
        {
            "region": made.region,
            "resource": made.resource,
            "decode_state": "commit",
            "mappings": [dict(m, memdev=mm, decoder=dd) for m, (_, mm, dd) in zip(doc["mappings"], made.mappings)],
            "targets": [mm for _, mm, _ in made.mappings],
            "dax": [dax.as_json(dax.read_dax(root, d), bs) for d in made.dax_devices],
            "steps": list(made.steps),
        }
    )
    return doc


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
    zone: str = ZONE_OPT,
    dry_run: bool = typer.Option(False, "--dry-run", help="Plan and print; write nothing (no root needed)."),
    wait: Optional[float] = WAIT_OPT,
    verbose: bool = VERBOSE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Create a region: program it through sysfs, commit, bind, then online its memory as asked.

    On any failure every step is undone (targets, DPA, the region itself), so no half-built region remains.
    """
    from .hostio.lock import TuneLock
    from .inventory import scan
    from .regions import dax
    from .regions.program import create

    online = _choice(online, ("system-ram", "devdax"), "--online")
    zone = _choice(zone, ("normal", "movable"), "--zone")
    req = _request(memdevs, ways, size, granularity, decoder, rtype)
    root = _root()
    plans = _plans(scan(root), req, use_all)
    if dry_run:
        if json_out:
            _emit({"dry_run": True, "online": online, "zone": zone, "plans": [plan_json(p) for p in plans]})
        else:
            for i, p in enumerate(plans):
                _render_plan(p, f"would create {i + 1}/{len(plans)}" if len(plans) > 1 else "would create")
            typer.echo(
                f"then: DAX device → {online}"
                + (f" in ZONE_{zone.upper()}" if online == "system-ram" else "")
                + "; dry run, nothing written"
            )
        return
    _need_root("region create")
    log = _logger(verbose)
    done: List[Dict[str, Any]] = []
    with TuneLock(root, wait):
        hold = dax.needs_hold(root, online, zone)
        current = plans[0]
        while True:
            try:
                made = create(root, current, log, on_bound=_dax_step(root, online, zone, log), hold=hold)
            except CxlctlError:
                if done:  # --all: earlier regions stay; say so before the error
                    _report_created(done, json_out, partial=True)
                raise
            done.append(_created_json(made, root))
            if not use_all or len(done) >= 64:
                break
            # re-plan on the real state: the kernel's names and addresses replace the prediction
            try:
                nxt = _plans(scan(root), req, True)
            except CxlctlError:
                break
            current = nxt[0]
    _report_created(done, json_out, partial=False)


def _report_created(done: List[Dict[str, Any]], json_out: bool, partial: bool) -> None:
    from .parse import format_size

    if json_out:
        _emit({"dry_run": False, "complete": not partial, "regions": done})
        return
    for d in done:
        nodes = sorted({x["target_node"] for x in d["dax"] if x["target_node"] is not None})
        daxs = ", ".join(
            f"{x['chardev']} {x['mode']}"
            + (
                f" node {x['target_node']} {x['online_memblocks']}/{x['total_memblocks']} blocks online {'/'.join(x['zones'])}"
                if x["mode"] == "system-ram"
                else ""
            )
            for x in d["dax"]
        )
        typer.echo(
            f"created {d['region']}: {d['interleave_ways']}-way, {format_size(d['size'])}, granularity "
            f"{d['interleave_granularity']}, on {d['decoder']}, targets {' '.join(d['targets'])}"
            + (f"; {daxs}" if daxs else "")
            + (f"; NUMA node {', '.join(map(str, nodes))}" if nodes else "")
        )
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
    from .hostio.lock import TuneLock
    from .inventory import scan
    from .regions.planner import destroy_blockers
    from .regions.program import destroy

    if decimal_suffix(region, "region") is None:
        raise UsageError(f"{region!r} is not a region name", hint="regions are named regionN (cxlctl status)")
    root = _root()
    inv = scan(root)
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
    _need_root("region destroy")
    log = _logger(verbose)
    with TuneLock(root, wait):
        d = destroy(root, region, force, log)
    if json_out:
        _emit(
            {
                "region": d.region,
                "destroyed": True,
                "offlined": [{"chardev": dev, "memory_blocks": list(ids)} for dev, ids in d.offlined],
                "freed_decoders": list(d.freed_decoders),
                "steps": list(d.steps),
            }
        )
        return
    n = sum(len(ids) for _, ids in d.offlined)
    typer.echo(
        f"destroyed {d.region}"
        + (f" (offlined {n} memory block(s) first)" if n else "")
        + (f"; freed {', '.join(d.freed_decoders)}" if d.freed_decoders else "")
    )


@dax_app.command("reconfigure", cls=Command)
def reconfigure_cmd(
    device: str = argument(..., "DEVICE", "The DAX device (daxX.Y, as cxlctl status lists it)."),
    mode: str = typer.Option(..., "--mode", "-m", metavar="MODE", help="system-ram (online as a NUMA node) or devdax."),
    zone: str = ZONE_OPT,
    force: bool = typer.Option(False, "--force", "-f", help="To devdax: offline online memory first."),
    wait: Optional[float] = WAIT_OPT,
    verbose: bool = VERBOSE_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Switch a DAX device between devdax and system-ram, like daxctl reconfigure-device.

    system-ram onlines every block in the chosen zone (holding the kernel's auto-online policy off while
    kmem binds, when that policy would pick the other zone); devdax needs the memory offline (--force).
    """
    from .hostio.lock import TuneLock
    from .regions.dax import block_size, reconfigure

    mode = _choice(mode, ("system-ram", "devdax"), "--mode")
    zone = _choice(zone, ("normal", "movable"), "--zone")
    if not (device.startswith("dax") and "." in device):
        raise UsageError(f"{device!r} is not a DAX device name", hint="DAX devices are named daxX.Y (cxlctl status)")
    root = _root()
    from .regions.dax import read_dax

    read_dax(root, device)  # a clear error for unknown devices, before the root check
    _need_root("dax reconfigure")
    log = _logger(verbose)
    with TuneLock(root, wait):
        r = reconfigure(root, device, mode, zone, force, log)
    _report_reconfigured(r, block_size(root), json_out)


def _report_reconfigured(r: Reconfigured, bs: Optional[int], json_out: bool) -> None:
    from .regions.dax import as_json

    doc = as_json(r.state, bs)
    if json_out:
        _emit({"device": doc, "before": r.before, "changed": r.changed, "actions": list(r.actions)})
        return
    if r.mode == "system-ram":
        typer.echo(
            f"{r.name}: {r.before} → system-ram, node {doc['target_node']}, "
            f"{doc['online_memblocks']}/{doc['total_memblocks']} blocks online in {'/'.join(doc['zones']) or '-'}"
            + ("" if r.changed else " (already so)")
        )
    else:
        typer.echo(f"{r.name}: {r.before} → devdax" + ("" if r.changed else " (already so)"))
