"""What ``cxlctl capacity`` does after parsing: the report, as a grid or one JSON document."""

from __future__ import annotations

import sys
from typing import Any, Callable, ContextManager, Dict, List, Optional

from cxlctl.hostio.host import Host
from cxlctl.progress import ProgressFn


def show(host: Host, json_out: bool) -> None:
    """``cxlctl capacity [--json]``: the report on stdout."""
    from .extra import gather
    from .report import to_json

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
    timeout: Optional[float] = None,
    sanitize: Optional[bool] = None,
    try_normal: bool = False,
) -> None:
    """``cxlctl capacity release``: refusals (exit 2) before the root check and the lock; the plan with
    ``--dry-run``; else the release and its report."""
    from cxlctl.regions.request import _size

    from . import release as rel
    from .bound import OFFLINE_TIMEOUT

    n = _size(size, "--size", "16G")
    p, done = rel.release(host, memdevs, n, log, dry_run=True, try_normal=try_normal)
    if not dry_run and sanitize is None:
        from cxlctl.errors import UsageError

        raise UsageError(
            "say whether the media is wiped before the memdevs are called safe to unbind: --sanitize or --no-sanitize",
            hint="--sanitize runs the device's Sanitize (security/sanitize) after the teardown and waits for it; "
            "--no-sanitize hands the device back with this host's pages on it",
        )
    if not dry_run:
        need_root("capacity release")
        with bar as progress:
            p, done = rel.release(
                host, memdevs, n, log, wait=wait, progress=progress,
                timeout=OFFLINE_TIMEOUT if timeout is None else timeout, sanitize=bool(sanitize), try_normal=try_normal,
            )  # fmt: skip
    _emit(json_out, lambda: rel.to_json(p, done), lambda: rel.lines(p, done))
    failed = rel.sanitize_failed(done)
    if failed:
        from cxlctl.errors import CxlctlError

        raise CxlctlError(
            "released, but not sanitized: " + "; ".join(f"{x.memdev}: {x.detail}" for x in failed),
            hint="the regions are gone and nothing was lost; wipe the media (`cxl sanitize-memdev`, or write 1 to "
            "the memdev's security/sanitize) before the device goes to another host",
        )


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
    zone = choice(zone, ad.ZONES, "--zone") if zone is not None else None  # None: the host's split decides
    done = ad.adopt(host, memdevs, mode, zone, log, dry_run=True)
    if not dry_run:
        need_root("capacity adopt")
        with bar as progress:
            done = ad.adopt(host, memdevs, mode, zone, log, wait=wait, progress=progress)
    bs = block_size(host)
    doc = {
        "dry_run": dry_run,
        "mode": mode,
        "zone": (zone or (done[0].zone if done else None)) if mode == "system-ram" else None,
        "memdevs": [ad.summary(a, bs) for a in done],
    }
    _emit(json_out, lambda: doc, lambda: [ad.line(a, mode, bs) for a in done])
