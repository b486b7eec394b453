"""The human ``status``: readable at 80 columns, uses wide terminals, kernel text is not markup."""

from __future__ import annotations

import io
import os
import re
from typing import List

import pytest

from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from cxlctl.render import render_status, weighted_interleave_line
from tests.kit import FIXTURES, cli, copy_fixture, fixture_id, fixture_roots

LARGEST = [os.path.join(FIXTURES, "linux-6.12", n) for n in ("hb2x2-region", "switch2-region", "hb2x2-noregion")]


def _render(root: str, width: int) -> List[str]:
    from rich.console import Console

    buf = io.StringIO()
    render_status(scan(Host(root)), Console(file=buf, width=width, color_system=None, force_terminal=False))
    return buf.getvalue().splitlines()


@pytest.mark.parametrize("width", [80, 160])
@pytest.mark.parametrize("root", fixture_roots(), ids=[fixture_id(r) for r in fixture_roots()])
def test_no_cut_cells_and_no_overlong_lines(root: str, width: int) -> None:
    lines = _render(root, width)
    # what the tree holds is on the page (an empty or half-drawn status would pass the checks below)
    inv = scan(Host(root))
    text = "\n".join(lines)
    assert inv.kernel and inv.kernel in text, text
    assert any(ln.lstrip().startswith("NODE") for ln in lines), text
    for name in [m.name for m in inv.memdevs] + [r.name for r in inv.regions]:
        assert re.search(rf"\b{re.escape(name)}\b", text), (name, text)
    assert not [ln for ln in lines if "…" in ln], "a header or cell was truncated"
    assert not [ln for ln in lines if len(ln) > width]
    assert not [ln for ln in lines if ln.endswith(" ")], "trailing blanks (they show in a pager, diff, grep)"


@pytest.mark.parametrize("root", LARGEST, ids=[fixture_id(r) for r in LARGEST])
def test_numa_headers_whole_at_80_and_one_table_at_160(root: str) -> None:
    narrow = "\n".join(_render(root, 80))
    wide = _render(root, 160)
    for header in ("NODE", "KIND", "CPUS", "SIZE", "FREE", "TIER", "ONLINE BLOCKS", "WI", "DISTANCES", "BW MB/s R/W"):
        assert header in narrow
    # at 160 one table holds every column; at 80 the performance columns get their own table
    assert sum(1 for ln in wide if ln.lstrip().startswith("NODE")) == 1
    assert narrow.count("\nNODE") == 2
    head = next(ln for ln in wide if ln.lstrip().startswith("NODE"))
    assert "KIND" in head and "DISTANCES" in head


def test_through_the_cli_when_piped() -> None:
    """Piped output is 80 columns wide: the real command, as a user sees it through `less`."""
    root = LARGEST[0]
    out = cli("--root", root, "status", env={"COLUMNS": "80"}, check=True).stdout
    assert "…" not in out and max(len(x) for x in out.splitlines()) <= 80
    assert re.search(r"^\s+1\s+cxl\s", out, re.M), out


def test_weighted_interleave_names_only_online_nodes() -> None:
    """hb2x2-region has nodes 0-1 and weight files for node0..node3 (possible nodes)."""
    inv = scan(Host(LARGEST[0]))
    assert sorted(inv.weighted_interleave.weights) == [0, 1, 2, 3]
    line = weighted_interleave_line(inv)
    live, _, rest = line.partition(";")
    assert "node0=1 node1=1" in live and "node2" not in live and "node3" not in live
    assert "not online: node2-3=1" in rest


def test_kernel_text_is_not_rich_markup(tmp_path: object) -> None:
    """`[/]` or `[bold]` in a sysfs value prints as text and does not crash (MarkupError)."""
    root = copy_fixture(LARGEST[0], os.path.join(str(tmp_path), "t"))
    dec = os.path.realpath(os.path.join(root, "sys/bus/cxl/devices/decoder0.0"))
    for attr, value in (("interleave_granularity", "[/]"), ("locked", "[bold]x")):
        os.unlink(os.path.join(dec, attr))
        with open(os.path.join(dec, attr), "w") as f:
            f.write(value + "\n")
    with open(os.path.join(root, "proc/sys/kernel/osrelease"), "w") as f:
        f.write("6.12[/][red]\n")
    text = "\n".join(_render(root, 100))
    assert "6.12[/][red]" in text
    assert "'[/]'" in text and "'[bold]x'" in text  # the warnings quote the odd values verbatim
