"""``cxlctl probe``: measure every (CPU node, memory node) pair, store the figures, report them."""

from __future__ import annotations

import sys
from typing import List, Optional, Tuple

from cxlctl.errors import UsageError
from cxlctl.hostio.host import Host
from cxlctl.progress import ProgressFn


def probe(
    host: Host,
    json_out: bool,
    *,
    quick: bool = False,
    nodes: Optional[str] = None,
    buffer_mib: Optional[int] = None,
    progress: Optional[ProgressFn] = None,
) -> int:
    """Measure, store (``/var/lib/cxlctl/probe.json``) and print; the exit code.  ``nodes``: ``--nodes``."""
    wanted = _nodes(nodes)
    if not host.live:
        raise UsageError(
            "probe measures the running machine; --root names a recorded tree, which has no memory to measure",
            hint="run cxlctl probe without --root (status, doctor and tune plan --root read a stored result)",
        )
    _can_store(host)
    from cxlctl.inventory import scan

    from . import measure, native, store

    inv = scan(host)
    known = {n.id for n in inv.nodes if n.has_memory}
    if wanted is not None:
        unknown = sorted(set(wanted) - known)
        if unknown:
            raise UsageError(
                f"--nodes: no memory node {', '.join(map(str, unknown))} on this host",
                hint=f"memory nodes here: {', '.join(map(str, sorted(known))) or 'none'} (see cxlctl status)",
            )
    mems, cpus = measure.allowed(host)
    sized = {
        n.id: measure.sizes_for(host.reader, allowed, quick=quick, buffer_mib=buffer_mib)
        for n in inv.nodes
        for allowed in (measure.allowed_cpus(n.cpus, cpus),)
        if allowed
    }
    planned = measure.plan(inv, sized, mem_nodes=wanted, mems_allowed=mems, cpus_allowed=cpus)
    pairs = [p for p in planned if isinstance(p, measure.Pair)]
    exe = native.helper_path(_note) if pairs else ""
    total = sum(measure.steps(p) for p in pairs)
    outcomes: List[measure.Outcome] = []
    done = 0
    for p in planned:
        if isinstance(p, measure.Pair):
            outcomes.append(measure.measure(exe, p, progress, done, total))
            done += measure.steps(p)
        else:
            outcomes.append(p)
    tool = f"cxlctl probe.c ({'quick' if quick else 'full'})"
    doc = store.record(host, inv, outcomes, tool, measure.thp_mode(host.reader))
    path = store.save(host, doc)
    stored = store.Stored(doc, ())
    if json_out:
        from cxlctl.emit import emit_json

        from .view import measured_json

        # the record as stored, where it is, and per memory node the figures cxlctl uses
        emit_json({"stored": path, **doc, "figures": measured_json(stored)["nodes"]})
    else:
        from cxlctl.render import render_measured
        from cxlctl.term import console

        render_measured(inv, stored, console())
        sys.stderr.write(f"cxlctl: stored {path} (remove it to forget the figures)\n")
    return 0


def _note(text: str) -> None:
    """A note on stderr (why the helper was built elsewhere): the output on stdout stays the figures."""
    sys.stderr.write(f"cxlctl: note: {text}\n")


def _nodes(text: Optional[str]) -> Optional[Tuple[int, ...]]:
    """``--nodes 0,2`` / ``1-3``: ASCII node ids, no empty element (exit 2 otherwise)."""
    if text is None:
        return None
    from cxlctl.parse import parse_nodelist

    try:
        got = parse_nodelist(text)
    except ValueError as e:
        raise UsageError(f"--nodes {text!r}: {e}", hint="give memory node ids such as 0,1 or 1-3") from None
    if not got:
        raise UsageError("--nodes is empty", hint="give memory node ids such as 0,1 or 1-3")
    return got


def _can_store(host: Host) -> None:
    """Refuse before measuring when the results could not be stored (a user without root)."""
    import os

    from cxlctl.errors import CxlctlError
    from cxlctl.hostio.paths import PROBE_RESULTS

    d = os.path.dirname(host.path(PROBE_RESULTS))
    while not os.path.isdir(d) and os.path.dirname(d) != d:
        d = os.path.dirname(d)
    if not os.access(d, os.W_OK):
        raise CxlctlError(
            f"probe stores its results in {host.path(PROBE_RESULTS)}, and {d} is not writable here; nothing was measured",
            hint="run it as root (sudo cxlctl probe)",
        )
