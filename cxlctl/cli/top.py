"""``cxlctl top``: a live view of tiering for an operator on a terminal.

On a terminal: a full-screen rich view refreshed every ``--interval`` seconds;
``q`` quits, ``s`` cycles the sort of the cgroup and process lists (CXL, DRAM,
total bytes).  When stdout is not a terminal (a pipe, a log, a script), the same
facts are printed as plain text, one block per refresh; ``--json`` prints each
refresh as a ``stat --json`` object (JSON lines).  The view itself is
:mod:`cxlctl.telemetry.top`.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import typer

from .common import emit_json, host_root, interval_option, isatty
from .params import integer

#: cgroups and processes looked at per refresh (numa_maps costs a page-table walk each)
TOP_CGROUPS = 64
TOP_PROCESSES = 20
PROCESS_BUDGET_S = 0.3
#: the largest processes are listed, and a process' numa_maps re-read, at most this often
#: (ranks and placement change slowly; listing and page-table walks are what a refresh costs)
PROCESS_MAX_AGE_S = 5.0


def top(
    interval: str = typer.Option("2", "--interval", "-i", metavar="S", help="Seconds between refreshes."),
    count: Optional[int] = typer.Option(
        None, "--count", "-c", metavar="N", parser=integer(1), help="Stop after N refreshes."
    ),
    rows: int = typer.Option(8, "--rows", metavar="N", parser=integer(1), help="Cgroups and processes shown."),
    json_out: bool = typer.Option(
        False, "--json", help="One JSON object per refresh (stat's schema, with the cgroups and processes looked at)."
    ),
) -> None:
    """Live view: node usage by tier, promote/demote rates, top CXL users, verdicts (q quits)."""
    from cxlctl.hostio.host import Host
    from cxlctl.hostio.reader import Reader
    from cxlctl.telemetry.sample import NodeInfo, ProcessSample, Sample, list_cgroups, node_kinds, read_sample, top_pids
    from cxlctl.telemetry.sampler import Sampler, Telemetry, readings
    from cxlctl.telemetry.top import SORTS, History, plain, rich_view, view

    every = interval_option(interval, 0.2, "2")
    host = Host(host_root())
    kinds = node_kinds(host)
    hist = History()
    cache: Dict[int, Tuple[float, ProcessSample]] = {}
    ranked: List[int] = []
    cgroups: List[str] = []
    ranked_at = -1e9

    def read(r_: Reader, k: Dict[int, NodeInfo]) -> Sample:
        nonlocal ranked, cgroups, ranked_at
        if time.monotonic() - ranked_at >= PROCESS_MAX_AGE_S:
            # listing every process costs as much as the rest of a refresh, and walking the
            # cgroup tree a tenth of it: both are redone every PROCESS_MAX_AGE_S, not per refresh
            # (a cgroup removed in between reads as unreadable and is left off the screen)
            ranked, ranked_at = top_pids(r_, TOP_PROCESSES), time.monotonic()
            cgroups = list_cgroups(r_, limit=TOP_CGROUPS)
        return read_sample(
            r_,
            k,
            cgroups=cgroups,
            top=TOP_PROCESSES,
            budget_s=PROCESS_BUDGET_S,
            cache=cache,
            max_age=PROCESS_MAX_AGE_S,
            ranked=ranked,
            cgroup_counters=json_out,  # the screen shows cgroups' bytes only
        )

    sampler = Sampler(host, read=read)

    def refresh(t: Telemetry) -> Telemetry:
        hist.add(t.rates)
        return t

    if json_out or not isatty(sys.stdout):
        from cxlctl.telemetry.report import to_dict

        try:
            for n, t in enumerate(readings(sampler, kinds, every, count)):
                s, rt, vs = refresh(t)
                if json_out:
                    emit_json(to_dict(s, rt, vs, n), indent=None)
                else:
                    from cxlctl.term import width

                    cols = width()
                    sys.stdout.write(("\n" if n else "") + plain(view(s, rt, vs, hist, rows=rows), cols) + "\n")
                sys.stdout.flush()
        except (KeyboardInterrupt, BrokenPipeError):
            pass
        return

    from rich.console import Console
    from rich.live import Live

    sort_i = 0
    console = Console(markup=False)  # not term.console(): its width follows a resized terminal
    if console.width <= 0:  # COLUMNS=0, which rich takes at its word
        from cxlctl.term import console as fixed_console

        console = fixed_console()
    with _keys() as key, Live(console=console, screen=True, auto_refresh=False) as live:
        n = 0
        try:
            while count is None or n < count:
                s, rt, vs = refresh(sampler.tick(kinds))
                n += 1
                deadline = s.time + every
                while True:
                    frame = rich_view(view(s, rt, vs, hist, SORTS[sort_i][0], rows), console.width, console.height)
                    live.update(frame, refresh=True)
                    if count is not None and n >= count:
                        break
                    k = key(max(0.0, deadline - time.monotonic()))
                    if k in ("q", "Q"):
                        return
                    if k in ("s", "S"):
                        sort_i = (sort_i + 1) % len(SORTS)
                        continue
                    if time.monotonic() >= deadline:
                        break
        except KeyboardInterrupt:
            return


class _keys:
    """Single key presses from stdin (cbreak mode, restored on exit); ``key(timeout)`` → a char or None."""

    def __enter__(self) -> Callable[[float], Optional[str]]:
        self.saved: Any = None
        self.fd = sys.stdin.fileno() if isatty(sys.stdin) else -1
        if self.fd >= 0:
            import termios
            import tty

            self.saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
        return self.key

    def key(self, timeout: float) -> Optional[str]:
        import select

        if self.fd < 0:
            time.sleep(timeout)
            return None
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return None
        b = os.read(self.fd, 1)
        return b.decode("ascii", "replace") if b else None

    def __exit__(self, *exc: Any) -> None:
        if self.saved is not None:
            import termios

            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)
