"""What ``cxlctl capacity`` does after parsing: the report, as a grid or one JSON document."""

from __future__ import annotations

import sys
from typing import Any, Callable, ContextManager, Dict, List, Optional

from cxlctl.hostio.host import Host
from cxlctl.progress import ProgressFn


def show(host: Host, json_out: bool) -> None:
    """``cxlctl capacity [--json]``: the report on stdout."""
    from .report import gather, to_json

    rep = gather(host)
    if json_out:
        from cxlctl.emit import emit_json

        emit_json(to_json(rep))
        return
    from cxlctl.term import console

    from .render import render

    render(rep, console())


def release(
    host: Host,
    memdevs: List[str],
    size: Optional[str],
    dry_run: bool,
    json_out: bool,
    log: Callable[[str], None],
    wait: Optional[float],
    bar: ContextManager[Optional[ProgressFn]],
    need_root: Callable[[str], None],
) -> None:
    """``cxlctl capacity release``: refusals (exit 2) before the root check and the lock; the plan with
    ``--dry-run``; else the release and its report."""
    from cxlctl.regions.request import _size

    from . import release as rel

    n = _size(size, "--size", "16G")
    p, done = rel.release(host, memdevs, n, log, dry_run=True)
    if not dry_run:
        need_root("capacity release")
        with bar as progress:
            p, done = rel.release(host, memdevs, n, log, wait=wait, progress=progress)
    _emit(json_out, lambda: rel.to_json(p, done), lambda: rel.lines(p, done))


def _emit(json_out: bool, doc: Callable[[], Dict[str, Any]], lines: Callable[[], List[str]]) -> None:
    """One JSON document, or the lines folded at the terminal's width."""
    if json_out:
        from cxlctl.emit import emit_json

        emit_json(doc())
        return
    from cxlctl.term import fold, width

    for line in lines():
        sys.stdout.write(fold(line, width()) + "\n")


def adopt(
    host: Host,
    memdevs: List[str],
    mode: str,
    zone: Optional[str],
    dry_run: bool,
    json_out: bool,
    log: Callable[[str], None],
    wait: Optional[float],
    bar: ContextManager[Optional[ProgressFn]],
    need_root: Callable[[str], None],
) -> None:
    """``cxlctl capacity adopt``: refusals (exit 2) before the root check and the lock; the plan with
    ``--dry-run``; else each memdev built into a region and onlined."""
    from cxlctl.errors import UsageError
    from cxlctl.regions.dax import block_size
    from cxlctl.regions.request import choice

    from . import adopt as ad

    if not memdevs:
        raise UsageError(
            "name the memdevs to adopt",
            hint="e.g. `cxlctl capacity adopt mem1` (`cxlctl capacity` lists the free ones)",
        )
    mode = choice(mode, ad.MODES, "--mode")
    if zone is not None and mode == "devdax":  # as region create refuses it (regions.request.zone)
        raise UsageError(
            f"--zone {zone} has no effect with --mode devdax: a devdax device is not onlined as memory",
            hint="drop --zone, or use --mode system-ram",
        )
    zone = choice(zone or "movable", ad.ZONES, "--zone")
    done = ad.adopt(host, memdevs, mode, zone, log, dry_run=True)
    if not dry_run:
        need_root("capacity adopt")
        with bar as progress:
            done = ad.adopt(host, memdevs, mode, zone, log, wait=wait, progress=progress)
    bs = block_size(host)
    doc = {
        "dry_run": dry_run,
        "mode": mode,
        "zone": zone if mode == "system-ram" else None,
        "memdevs": [ad.summary(a, bs) for a in done],
    }
    _emit(json_out, lambda: doc, lambda: [ad.line(a, mode, zone, bs) for a in done])
