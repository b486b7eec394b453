"""``cxlctl top``: the live view, as a model (pure) and two renderers (rich, plain text).

Why split this way: what the screen shows -- nodes with used/free bars, the
promote/demote/migrate rates with a short history, the cgroups and processes
holding the most CXL memory, the verdicts -- is computed by :func:`view` from
samples, rates and verdicts without a terminal, so it is unit-tested; the rich
renderer (a terminal) and :func:`plain` (a pipe, a log) only lay it out.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Deque, Dict, List, NamedTuple, Optional, Sequence, Tuple

from cxlctl.term import clean

from .rates import Rates, demote_sum
from .report import count, cxl_traffic, mbps, size
from .sample import Sample
from .verdicts import Verdict

if TYPE_CHECKING:
    from cxlctl.model import NodeKind

#: rates kept for the history sparklines
HISTORY = 30
SPARK = "▁▂▃▄▅▆▇█"
#: sort keys: (key, what the column shows); ``s`` cycles through them
SORTS: Tuple[Tuple[str, str], ...] = (("cxl", "CXL bytes"), ("dram", "DRAM bytes"), ("total", "total bytes"))


class Row(NamedTuple):
    name: str
    cxl: int
    dram: int
    total: int


class View(NamedTuple):
    header: str
    nodes: List[Tuple[int, NodeKind, Optional[int], Optional[int], Optional[int]]]  # id, kind, used, total, read MB/s
    rates: List[Tuple[str, Optional[float], str]]  # name, pages/s now, sparkline
    cgroups: List[Row]
    processes: List[Row]
    verdicts: List[Verdict]
    sort: str
    #: DAMON schemes: (kdamond/context/scheme, "action -> node N", bytes applied per second or None)
    damon: List[Tuple[str, str, Optional[float]]] = []
    #: promotion/demotion MB/s and their share of the CXL nodes' bandwidth (None before the first interval)
    traffic: Optional[str] = None
    #: why there is no cgroup list (cgroup v1), None when there is one
    cgroups_note: Optional[str] = None


class History:
    """The last :data:`HISTORY` values of the system-wide tiering rates."""

    NAMES = ("promoted", "demoted", "migrated", "hint faults")

    def __init__(self) -> None:
        self.values: Dict[str, Deque[float]] = {n: deque(maxlen=HISTORY) for n in self.NAMES}

    @staticmethod
    def current(r: Optional[Rates]) -> Dict[str, Optional[float]]:
        if r is None:
            return {n: None for n in History.NAMES}
        return {
            "promoted": r.system.get("pgpromote_success"),
            "demoted": demote_sum(r.system),
            "migrated": r.system.get("pgmigrate_success"),
            "hint faults": r.system.get("numa_hint_faults"),
        }

    def add(self, r: Optional[Rates]) -> None:
        for k, v in self.current(r).items():
            if v is not None:
                self.values[k].append(v)

    def spark(self, name: str) -> str:
        vals = list(self.values[name])
        if not vals:
            return ""
        hi = max(vals)
        if hi <= 0:
            return SPARK[0] * len(vals)
        return "".join(SPARK[min(len(SPARK) - 1, int(v / hi * (len(SPARK) - 1) + 0.5))] for v in vals)


def _split(per_node: Dict[int, int], cxl: Sequence[int]) -> Tuple[int, int, int]:
    c = sum(v for n, v in per_node.items() if n in cxl)
    t = sum(per_node.values())
    return c, t - c, t


def view(
    s: Sample, r: Optional[Rates], verdicts: List[Verdict], hist: History, sort: str = "cxl", rows: int = 8
) -> View:
    """What the screen shows for one refresh (pure)."""
    cxl = [n.id for n in s.nodes if n.kind == "cxl"]
    st = s.settings
    dem = {True: "on", False: "off", None: "n/a"}[st.demotion_enabled]
    header = (
        f"cxlctl top  kernel {clean(s.kernel or '?')}  demotion {dem}  numa_balancing "
        f"{'n/a' if st.numa_balancing is None else st.numa_balancing}"
        + ("" if r is None else f"  every {r.seconds:.1f}s")
    )
    nodes = [
        (n.id, n.kind, n.memory.get("used"), n.memory.get("total"), n.hmat.read_bandwidth if n.hmat else None)
        for n in s.nodes
    ]
    tr = cxl_traffic(s, r)
    traffic = None
    if tr is not None:
        traffic = (
            f"to/from CXL: promoted {mbps(tr['promote_mbps'])}{_share(tr['promote_share_of_read_bandwidth'])}, "
            f"demoted {mbps(tr['demote_mbps'])}{_share(tr['demote_share_of_write_bandwidth'])}"
            + ("" if tr["damon_migrate_mbps"] is None else f", DAMON migrated {mbps(tr['damon_migrate_mbps'])}")
        )
    cur = History.current(r)
    rates = [(name, cur[name], hist.spark(name)) for name in History.NAMES]
    key = {"cxl": lambda x: (-x.cxl, -x.total), "dram": lambda x: (-x.dram, -x.total), "total": lambda x: (-x.total,)}[
        sort
    ]
    cgs = [Row(clean(c.name), *_split(c.bytes_per_node, cxl)) for c in s.cgroups if c.readable]
    procs = [
        Row(f"{p.pid} {clean(p.comm or '?')}", *_split(p.maps.bytes, cxl)) for p in s.processes if p.maps is not None
    ]
    damon = [
        (
            sc.key,
            f"{clean(sc.action or '?')}{'' if sc.target_nid is None else f' -> node {sc.target_nid}'} ({clean(sc.state or '?')})",
            None if r is None else (r.damon.get(sc.key) or {}).get("sz_applied"),
        )
        for sc in s.damon
    ]
    return View(
        header,
        nodes,
        rates,
        sorted(cgs, key=key)[:rows],
        sorted(procs, key=key)[:rows],
        verdicts,
        sort,
        damon[:rows],
        traffic,
        s.cgroups_unavailable,
    )


def _share(v: Optional[float]) -> str:
    return "" if v is None else f" ({v * 100:.1f}% of CXL bw)"


def bw(mbps_: Optional[int]) -> str:
    """A node's read bandwidth in MB/s as HMAT/CDAT give it, as ``status`` and ``stat`` print it:
    38912 MB/s ('-' when HMAT/CDAT does not describe it)."""
    return "-" if mbps_ is None else mbps(mbps_)


def bar(used: Optional[int], total: Optional[int], width: int) -> str:
    """``[#####.....]`` of used/total, ``width`` characters inside the brackets."""
    if not total or used is None:
        return "[" + "?" * width + "]"
    fill = min(width, max(0, round(used / total * width)))
    return "[" + "#" * fill + "." * (width - fill) + "]"


def plain(v: View, width: int = 80) -> str:
    """The view as plain text (stdout not a terminal): the same facts, one block per refresh."""
    from cxlctl.term import fold_lines

    lines = fold_lines(v.header, width, indent="  ")
    for nid, kind, used, total, read_bw in v.nodes:
        lines.append(
            f"node {nid:<3} {kind:<5} {bar(used, total, 30)} {size(used):>7} of {size(total):>7}"
            + ("" if read_bw is None else f" bw {bw(read_bw)}")
        )
    lines.append("pages/s: " + "  ".join(f"{name} {count(now)}" for name, now, _ in v.rates))
    if v.traffic:
        lines += fold_lines(v.traffic, width, indent="  ")
    if v.cgroups_note:
        lines += fold_lines(v.cgroups_note, width, indent="  ")
    for title, rows in (("cgroup", v.cgroups), ("process", v.processes)):
        for row in rows:
            lines.append(f"{title} {row.name[:36]:<36} CXL {size(row.cxl):>7} DRAM {size(row.dram):>7}"[:width])
    for key, what, applied in v.damon:
        lines.append(f"damon {key} {what}: applied {size(applied)}/s"[:width])
    for vd in v.verdicts:
        lines += fold_lines(f"! {vd.id}: {vd.message} Fix: {vd.fix}", width, indent="  ")
    return "\n".join(lines)


def _cells(text: str, width: int) -> str:
    """``text`` in exactly ``width`` terminal cells: padded, or cut with an ellipsis."""
    from rich.cells import cell_len, set_cell_size

    if cell_len(text) <= width:
        return set_cell_size(text, width)
    return set_cell_size(text, max(0, width - 1)) + "…"


def _header(text: str, width: int) -> str:
    """The header in one line of ``width``: without its ``kernel`` label when too long, else cut."""
    if len(text) > width:
        text = text.replace("  kernel ", "  ", 1)
    return text if len(text) <= width else _cells(text, width)


def rich_view(v: View, width: int = 80, height: Optional[int] = None) -> Any:
    """The view as a rich renderable (a terminal) ``width`` columns wide, ``height`` lines high.

    Laid out here, line by line, as styled :class:`rich.text.Text`: rich's
    ``Table`` measured every cell of six tables per refresh, which was half the
    CPU ``top`` used at ``--interval 1``.  Every line fits ``width`` (at least 40):
    the verdicts are folded (:func:`cxlctl.term.fold_lines`), never wrapped by the
    terminal.  With ``height`` the cgroup, process and DAMON rows give way first, so
    the verdicts, their fixes and the key help stay on the screen.
    """
    from rich.console import Group
    from rich.text import Text

    from cxlctl.term import fold_lines

    w = max(40, width)
    num = 7  # a size() or count(): "999 MiB", "1234.5M" at most
    top: List[Any] = [Text(_header(v.header, w), style="bold")]
    bw_w = 12 if w >= 60 else 0  # " 409600 MB/s": the read bandwidth HMAT/CDAT describe
    bar_w = max(8, min(40, w - 32 - bw_w))
    bw_head = f" {'read bw':>{bw_w - 1}}" if bw_w else ""
    top.append(
        Text(f"{'node':>4} {'kind':<5} {'used':<{bar_w + 2}} {'used':>{num}} {'total':>{num}}{bw_head}", style="bold")
    )
    for nid, kind, used, total, read_bw in v.nodes:
        line = Text(f"{nid:>4} ")
        line.append(f"{kind:<5}", style="cyan" if kind == "cxl" else "")
        cell = f" {bw(read_bw):>{bw_w - 1}}" if bw_w else ""
        line.append(f" {bar(used, total, bar_w)} {size(used):>{num}} {size(total):>{num}}{cell}")
        top.append(line)
    spark_w = max(0, min(HISTORY, w - 24))
    top.append(Text(f"{'pages/s':<14} {'now':>{num}}  last {HISTORY}", style="bold"))
    for name, now, spark in v.rates:
        top.append(Text(f"{name:<14} {count(now):>{num}}  {spark[-spark_w:] if spark_w else ''}"))
    if v.traffic:
        top += [Text(x) for x in fold_lines(v.traffic, w, indent="  ")]
    name_w = w - 3 * (num + 1)
    # (head, rows): the sections whose rows give way when the screen is short
    sections: List[Tuple[Text, List[Text]]] = []
    for title, rows in (("cgroup", v.cgroups), ("process", v.processes)):
        if title == "cgroup" and v.cgroups_note:
            top.append(Text(_cells(v.cgroups_note, w), style="dim"))  # cgroup v1: no list to show
            continue
        head = _cells(f"{title} (by {dict(SORTS)[v.sort]})", name_w)
        sections.append(
            (
                Text(f"{head} {'CXL':>{num}} {'DRAM':>{num}} {'total':>{num}}", style="bold"),
                [
                    Text(
                        f"{_cells(row.name, name_w)} {size(row.cxl):>{num}} {size(row.dram):>{num}} {size(row.total):>{num}}"
                    )
                    for row in rows
                ],
            )
        )
    if v.damon:
        dw = w - (num + 3)
        sections.append(
            (
                Text(f"{_cells('DAMON scheme', dw)} {'applied/s':>{num + 2}}", style="bold"),
                [Text(f"{_cells(f'{key} {what}', dw)} {size(applied):>{num + 2}}") for key, what, applied in v.damon],
            )
        )
    bottom: List[Any] = []
    for vd in v.verdicts:
        style = "yellow" if vd.severity == "warning" else ""
        bottom += [Text(x, style=style) for x in fold_lines(f"! {vd.id}: {vd.message}", w, indent="  ")]
        bottom += [Text(x, style="dim") for x in fold_lines(f"  fix: {vd.fix}", w, indent="       ")]
    bottom.append(Text("q quit  s sort (CXL/DRAM/total)", style="dim"))
    if height is not None:
        spare = height - len(top) - len(bottom) - sum(1 + len(lines) for _, lines in sections)
        for _, lines in reversed(sections):  # DAMON rows give way first, then processes, then cgroups
            while spare < 0 and lines:
                lines.pop()
                spare += 1
        if spare < 0:  # still too tall: the verdicts beyond the screen go, the key help stays
            bottom = bottom[: max(0, len(bottom) + spare - 1)] + bottom[-1:]
    middle = [x for head, lines in sections for x in [head, *lines]]
    return Group(*top, *middle, *bottom)
