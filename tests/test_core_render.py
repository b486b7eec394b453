"""Human output at 80 columns (issue 19, the render slice): values whole, markup never read,
a sane width whatever ``COLUMNS`` says, and ``top`` inside an 80×24 screen.

Every test runs on recorded fixtures: the DAMON ones for the plan with many files and
for another tool's kdamond, the telemetry one for ``top``.
"""

from __future__ import annotations

import io
import json
import os
from typing import Any, List

import pytest

from cxlctl.hostio.host import Host
from tests.kit import FIXTURES, bash_words, cli
from tests.tune_support import work_copy

REGION = "linux-6.12/single-region"
IDLE = "linux-6.12/single-region-damon-idle"
RUNNING = "linux-6.12/single-region-damon-running"
TELEMETRY = "linux-6.12/single-region-telemetry"


def _lines(text: str) -> List[str]:
    return text.splitlines()


def _plan(root: str, profile: str, columns: str) -> Any:
    r = cli("--root", root, "tune", "plan", profile, env={"COLUMNS": columns})
    assert r.returncode == 0, r.stderr
    return r


def test_tune_plan_at_80_columns_keeps_knob_names_whole_and_is_compact(tmp_path: Any) -> None:
    """Defect 2: the boxed table split ``vm.zone_recla│im_mode`` and took ~55 lines."""
    root = work_copy(REGION, str(tmp_path / "root"))
    doc = json.loads(cli("--root", root, "tune", "plan", "inference-damon", "--json", check=True).stdout)
    names = [s["setting"] for s in doc["plan"]["steps"]]
    assert len(names) == 5
    out = _plan(root, "inference-damon", "80").stdout
    lines = _lines(out)
    assert max(len(x) for x in lines) <= 80
    words = {w for x in lines for w in x.split()}
    for name in names:
        assert name in words, (name, out)  # a whole word of some line: never split
    assert len(lines) <= 25, out


def test_tune_plan_on_a_wide_terminal_puts_the_reason_beside_its_row(tmp_path: Any) -> None:
    root = work_copy(REGION, str(tmp_path / "root"))
    lines = _lines(_plan(root, "inference-damon", "160").stdout)
    row = next(x for x in lines if x.startswith("vm.swappiness"))
    assert "TuneD uses 10 too" in row and len(row) <= 160
    assert len(lines) <= 15


def test_tune_plan_with_many_damon_files_fits_80_columns(tmp_path: Any) -> None:
    root = work_copy(IDLE, str(tmp_path / "root"))
    doc = json.loads(cli("--root", root, "tune", "plan", "inference-damon", "--json", check=True).stdout)
    out = _plan(root, "inference-damon", "80").stdout
    words = {w for x in _lines(out) for w in x.split()}
    for step in doc["plan"]["steps"]:
        assert step["setting"] in words
        assert step["desired"] is None or step["desired"] in words
    assert max(len(x) for x in _lines(out)) <= 80


def test_tune_list_at_80_columns_keeps_profile_names_whole(tmp_path: Any) -> None:
    root = work_copy(REGION, str(tmp_path / "root"))
    r = cli("--root", root, "tune", "list", env={"COLUMNS": "80"}, check=True)
    words = {w for x in _lines(r.stdout) for w in x.split()}
    for name in ("inference-bandwidth", "inference-capacity", "inference-damon", "latency-strict", "cxl-common"):
        assert name in words, r.stdout
    # only a line holding a path longer than the screen (a user profile in a test tree) is wider
    assert max(len(x) for x in _lines(r.stdout) if "/etc/cxlctl/profiles/" not in x) <= 80
    assert not [x for x in _lines(r.stdout) if x.strip() == "built-in"], r.stdout  # on its name's line


def test_a_note_naming_the_damon_section_keeps_its_brackets(tmp_path: Any) -> None:
    """Defect 3: beside another tool's kdamond rich ate ``[damon]``: "or leave  out of the profile"."""
    root = work_copy(RUNNING, str(tmp_path / "root"))
    for columns in ("80", "200"):
        out = " ".join(_plan(root, "inference-damon", columns).stdout.split())
        assert "leave [damon] out of the profile" in out, out


def test_the_console_reads_no_markup() -> None:
    from cxlctl.term import console

    buf = io.StringIO()
    console(file=buf).print("[bold]kept[/bold] [damon] [/]")
    assert buf.getvalue() == "[bold]kept[/bold] [damon] [/]\n"


@pytest.mark.parametrize("columns", ["0", "-5", "abc", "٨٠"])
@pytest.mark.parametrize("command", [["status"], ["doctor"], ["tune", "plan", "cxl-common"]])
def test_a_useless_columns_means_80(tmp_path: Any, command: List[str], columns: str) -> None:
    """Defect 6: ``COLUMNS=0`` printed nothing and exited 0."""
    root = work_copy(REGION, str(tmp_path / "root"))
    want = cli("--root", root, *command, env={"COLUMNS": "80"})
    got = cli("--root", root, *command, env={"COLUMNS": columns})
    assert want.stdout.strip() and got.returncode == want.returncode
    assert got.stdout == want.stdout


def test_width_reads_columns_as_ls_does(monkeypatch: Any) -> None:
    from cxlctl.term import width

    for env, want in (("0", 80), ("-1", 80), ("x", 80), ("", 80), ("123", 123), ("١٢٣", 80)):
        monkeypatch.setenv("COLUMNS", env)
        assert width(io.StringIO()) == want, env


def test_fold_never_splits_a_path() -> None:
    from cxlctl.term import fold, fold_text, styled

    path = "/sys/kernel/mm/damon/admin/kdamonds/0/contexts/0/schemes/0/quotas/goals/0/target_value"
    out = fold(f"cannot write {path}: permission denied", 40)
    assert out.split("\n")[1] == f"  {path}:" and all(len(x) <= 40 for x in out.split("\n") if path not in x)
    lines = fold_text(styled("a " * 30 + path, "red"), 20)
    assert lines[-1].plain == path and all(x.style == "red" for x in lines)


def test_a_command_folds_between_its_words_and_bash_reads_the_same_command() -> None:
    """``fold_command``: a quoted word (an assignment, a ``sh -c`` script, an escaped quote) is one
    word; the folded lines end in `` \\``, and bash reads them as the unfolded line at every width."""
    from cxlctl.term import fold_command, shell_words

    line = (
        "CXLCTL_POLICY='mode=bind nodes=0 cpunodes=0' A=\"x y\" numactl --membind=0 -- "
        "sh -c 'exec vllm serve m --name '\"'\"'it'\"'\"'s' b\\ c --tp 2"
    )
    words = shell_words(line)
    assert words[:3] == ["CXLCTL_POLICY='mode=bind nodes=0 cpunodes=0'", 'A="x y"', "numactl"]
    assert words[-6:] == ["sh", "-c", "'exec vllm serve m --name '\"'\"'it'\"'\"'s'", "b\\ c", "--tp", "2"]

    want = bash_words(line)
    assert fold_command(line, len(line) + 6, "cmd:  ") == ["cmd:  " + line]
    for width in range(20, len(line) + 6):
        lines = fold_command(line, width, "cmd:  ", " " * 8)
        assert all(x.endswith(" \\") for x in lines[:-1]) and not lines[-1].endswith("\\"), lines
        assert bash_words("\n".join(x[len("cmd:") :] for x in lines)) == want, (width, lines)
        for x in lines:  # over the width only a word that is longer on its own
            body = x[len("cmd:  ") :] if x.startswith("cmd:") else x.strip()
            assert len(x) <= width or len(shell_words(body.rstrip(" \\"))) == 1, (width, lines)


def test_fold_keeps_a_number_with_its_unit() -> None:
    """A size, a share or a rate is one value: ``+0 B``, ``95.04 MiB``, ``5 %``, ``16000 MB/s`` stay
    on one line (tune reclaim's report split ``+0`` from ``B`` at 80 columns); a word that only
    starts like a unit (``Bytes``) may still go to the next line."""
    from cxlctl.term import fold_lines

    text = "the node's free memory changed by +0 B; slab 5 % (95.04 MiB); CXL 16000 MB/s; 3 Bytes"
    for width in range(12, len(text) + 1):
        lines = fold_lines(text, width)
        assert " ".join(lines) == text
        for value in ("+0 B", "5 %", "95.04 MiB);", "16000 MB/s;"):
            assert any(value in x for x in lines), (width, value, lines)
    assert fold_lines("3 Bytes", 2) == ["3", "Bytes"]


def _frame(root: str, width: int, height: int) -> List[str]:
    from rich.console import Console

    from cxlctl.hostio.reader import Reader
    from cxlctl.telemetry.rates import rates
    from cxlctl.telemetry.sample import list_cgroups, node_kinds, read_sample, top_pids
    from cxlctl.telemetry.top import History, rich_view, view
    from cxlctl.telemetry.verdicts import judge

    r = Reader(root)
    kinds = node_kinds(Host(root))
    s = read_sample(r, kinds, cgroups=list_cgroups(r, limit=64), top=20, ranked=top_pids(r, 20))
    s2 = read_sample(r, kinds, cgroups=list_cgroups(r, limit=64), top=20, ranked=top_pids(r, 20))
    s2 = s2._replace(time=s.time + 2.0)
    rt = rates(s, s2)
    hist = History()
    hist.add(rt)
    buf = io.StringIO()
    c = Console(file=buf, width=width, height=height, color_system=None)
    c.print(rich_view(view(s2, rt, judge(s, None), hist, "cxl", 8), width, height))
    return buf.getvalue().splitlines()


def test_top_fits_80_by_24_with_its_fixes_and_key_help() -> None:
    """Defect 12: the 81–84 column header wrapped; the fix lines and ``q quit`` fell off."""
    lines = _frame(os.path.join(FIXTURES, TELEMETRY), 80, 24)
    assert len(lines) <= 24 and max(len(x) for x in lines) <= 80, "\n".join(lines)
    assert lines[0].startswith("cxlctl top") and "every 2.0s" in lines[0]
    assert any(x.lstrip().startswith("fix:") for x in lines)
    assert lines[-1].startswith("q quit")


def test_region_plan_at_80_columns_keeps_decoders_and_routes_whole() -> None:
    """Defect 2, region tables: the boxed table split "decoder3.0 (mode none" / "→ ram)" and the routes."""
    root = os.path.join(FIXTURES, "linux-6.12/hb2x2-noregion")
    doc = json.loads(cli("--root", root, "region", "plan", "--ways", "2", "--json", check=True).stdout)
    out = cli("--root", root, "region", "plan", "--ways", "2", env={"COLUMNS": "80"}, check=True).stdout
    lines = _lines(out)
    assert max(len(x) for x in lines) <= 80 and not any("│" in x or "┃" in x for x in lines), out
    (plan,) = doc["plans"]
    for t in plan["mappings"]:
        row = next(x for x in lines if f" {t['memdev']} " in x)
        assert t["decoder"] in row.split(), out
    assert len(lines) <= 10, out


def test_every_console_is_made_in_one_place() -> None:
    """Defect 3 at its root: one layer makes the consoles (no markup read, a sane width);
    only ``top``'s live screen (its width follows a resize; it prints Text only) and the
    progress bar on stderr (a fixed template) build their own."""
    import re

    from tests.kit import REPO

    made = []
    for dirpath, _, files in os.walk(os.path.join(REPO, "cxlctl")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    if re.search(r"\bConsole\(", f.read()):
                        made.append(os.path.relpath(path, REPO))
    assert sorted(made) == ["cxlctl/cli/common.py", "cxlctl/telemetry/live.py", "cxlctl/term.py"]
