"""What ``cxlctl capacity`` does after parsing: the report, as a grid or one JSON document."""

from __future__ import annotations

import sys
from typing import Callable, ContextManager, List, Optional

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
    if json_out:
        from cxlctl.emit import emit_json

        emit_json(rel.to_json(p, done))
        return
    from cxlctl.term import fold, width

    for line in rel.lines(p, done):
        sys.stdout.write(fold(line, width()) + "\n")
