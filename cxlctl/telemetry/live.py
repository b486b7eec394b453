"""What ``cxlctl top`` does once its options are parsed: sample, then show each refresh.

On a terminal: a full-screen rich view (:func:`cxlctl.telemetry.top.rich_view`)
refreshed every ``every`` seconds; ``q`` quits, ``s`` cycles the sort of the
cgroup and process lists.  Elsewhere (a pipe, a log) the same facts as plain
text, one block per refresh; with ``--json`` each refresh as a ``stat --json``
object.  The sampling re-ranks processes and re-walks the cgroup tree at most
every :data:`PROCESS_MAX_AGE_S` seconds: they cost as much as the rest of a refresh.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from cxlctl.emit import emit_json
from cxlctl.term import isatty

if TYPE_CHECKING:
    from cxlctl.hostio.host import Host
    from cxlctl.hostio.reader import Reader

    from .sample import NodeInfo, ProcessSample, Sample
    from .sampler import Sampler
    from .top import History

#: cgroups and processes looked at per refresh (numa_maps costs a page-table walk each)
TOP_CGROUPS = 64
TOP_PROCESSES = 20
PROCESS_BUDGET_S = 0.3
#: the largest processes are listed, and a process' numa_maps re-read, at most this often
#: (ranks and placement change slowly; listing and page-table walks are what a refresh costs)
PROCESS_MAX_AGE_S = 5.0


def run(host: Host, every: float, count: Optional[int], rows: int, json_out: bool) -> None:
    """``cxlctl top``: until ``count`` refreshes, ``q`` or Ctrl-C (a reader that left ends it quietly)."""
    from .sample import node_kinds
    from .top import History

    kinds = node_kinds(host)
    sampler = _sampler(host, json_out)
    hist = History()
    if json_out or not isatty(sys.stdout):
        _lines(sampler, kinds, hist, every, count, rows, json_out)
    else:
        _screen(sampler, kinds, hist, every, count, rows)


def _sampler(host: Host, cgroup_counters: bool) -> Sampler:
    """A sampler that re-ranks processes and re-lists cgroups at most every :data:`PROCESS_MAX_AGE_S`,
    and re-reads a process' ``numa_maps`` no more often (its cache)."""
    from .sample import list_cgroups, read_sample, top_pids
    from .sampler import Sampler

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
            cgroup_counters=cgroup_counters,  # the screen shows cgroups' bytes only
        )

    return Sampler(host, read=read)


def _lines(
    sampler: Sampler,
    kinds: Dict[int, NodeInfo],
    hist: History,
    every: float,
    count: Optional[int],
    rows: int,
    json_out: bool,
) -> None:
    """Not a terminal: one plain-text block (or ``stat --json`` line) per refresh."""
    from .report import to_dict
    from .sampler import readings
    from .top import plain, view

    try:
        for n, t in enumerate(readings(sampler, kinds, every, count)):
            s, rt, vs = t
            hist.add(rt)
            if json_out:
                emit_json(to_dict(s, rt, vs, n), indent=None)
            else:
                from cxlctl.term import width

                cols = width()
                sys.stdout.write(("\n" if n else "") + plain(view(s, rt, vs, hist, rows=rows), cols) + "\n")
            sys.stdout.flush()
    except (KeyboardInterrupt, BrokenPipeError):
        pass


def _screen(
    sampler: Sampler, kinds: Dict[int, NodeInfo], hist: History, every: float, count: Optional[int], rows: int
) -> None:
    """A terminal: the full-screen view, redrawn on each refresh and key (``q`` quits, ``s`` sorts)."""
    from rich.console import Console
    from rich.live import Live

    from .top import SORTS, rich_view, view

    sort_i = 0
    console = Console(markup=False, emoji=False)  # not term.console(): its width follows a resized terminal
    if console.width <= 0:  # COLUMNS=0, which rich takes at its word
        from cxlctl.term import console as fixed_console

        console = fixed_console()
    with _keys() as key, Live(console=console, screen=True, auto_refresh=False) as live:
        n = 0
        try:
            while count is None or n < count:
                t = sampler.tick(kinds)
                s, rt, vs = t
                hist.add(rt)
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
