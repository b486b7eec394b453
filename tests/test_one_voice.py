"""Issue 35, "one voice for operators": where several commands speak about one host they agree.

Each test names the row of the issue it holds; each failed before the change it guards.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import pytest

from tests.kit import FIXTURES, REPO, cli, copy_fixture, fixture_id, fixture_roots

K7 = os.path.join(FIXTURES, "linux-7.x")
HMAT2 = os.path.join(K7, "hmat2-region")
HB2X2 = os.path.join(K7, "hb2x2-region")
DAMON_TIERING = os.path.join(K7, "single-region-damon-tiering")


# -- row 4: a root that is no host's tree is refused ------------------------------------------


def test_a_folder_of_trees_is_refused_not_read_as_a_host_without_cxl() -> None:
    for argv in (["status"], ["status", "--json"], ["doctor"], ["tune", "status"]):
        p = cli("--root", K7, *argv, rc=2)
        assert "holds neither sys/ nor proc/" in p.stderr, argv
        assert "kernel ?" not in p.stdout and "unsupported on this kernel" not in p.stdout
    p = cli("status", "--json", env={"CXLCTL_ROOT": K7}, rc=2)
    assert json.loads(p.stdout)["error"]["message"].startswith(f"CXLCTL_ROOT {K7!r} holds neither")


# -- row 6: --all with nothing unused is idempotent ---------------------------------------------


def test_region_all_with_no_unused_capacity_is_nothing_to_do() -> None:
    for argv in (
        ["region", "plan", "--all"],
        ["region", "create", "--all"],
        ["region", "create", "--all", "--dry-run"],
    ):
        p = cli("--root", HB2X2, *argv, rc=0)
        assert p.stdout == "nothing to do: every memdev's RAM is already in a region\n", argv
    assert json.loads(cli("--root", HB2X2, "region", "plan", "--all", "--json", check=True).stdout)["plans"] == []
    doc = json.loads(cli("--root", HB2X2, "region", "create", "--all", "--json", check=True).stdout)
    assert doc["regions"] == [] and doc["complete"] is True
    # capacity there but unplaceable stays an error: region plan without --all on a full host
    assert cli("--root", HB2X2, "region", "plan", rc=2).stderr.startswith("cxlctl: error:")


# -- row 8: tiers in the kernel's (numeric) order -----------------------------------------------


def test_tiers_are_named_in_numeric_order() -> None:
    out = cli("--root", HMAT2, "tune", "recommend", check=True).stdout
    assert "memory_tier33, memory_tier146" in out and "memory_tier146, memory_tier33" not in out


# -- row 1: one verdict for one host state, in the same words ----------------------------------


def _verdicts(root: str) -> Dict[str, Optional[Tuple[str, ...]]]:
    """The tiering-off verdict as stat, status and doctor give it: (message, fix) or None.
    stat and doctor print ``cxlctl --root ROOT …`` in the fix (runnable against the tree);
    status's JSON names no root (it must not depend on where a recorded tree lies): taken out."""
    rep = json.loads(cli("--root", root, "stat", "--json", check=True, inprocess=True).stdout)
    st = json.loads(cli("--root", root, "status", "--json", inprocess=True).stdout)
    doc = json.loads(cli("--root", root, "doctor", "--json", inprocess=True).stdout)

    def unrooted(text: str) -> str:
        assert f"cxlctl --root {root} tune recommend" in text
        return text.replace(f"cxlctl --root {root} ", "cxlctl ")

    stat = next(
        ((v["message"].rstrip("."), unrooted(v["fix"])) for v in rep["verdicts"] if v["id"] == "tiering-off"), None
    )
    warn = next((w["message"] for w in st["warnings"] if w["code"] == "tiering-off"), None)
    status = None if warn is None else tuple(warn.split("; fix: ", 1))
    check = next(((c["message"], unrooted(c["fix"])) for c in doc["checks"] if c["id"] == "tuning.tiering-off"), None)
    return {"stat": stat, "status": status, "doctor": check}


def _damon_state(root: str, state: str) -> None:
    for k in glob.glob(os.path.join(root, "sys/kernel/mm/damon/admin/kdamonds/[0-9]*")):
        with open(os.path.join(k, "state"), "w") as f:
            f.write(state + "\n")


def _demotion(root: str, value: str) -> None:
    with open(os.path.join(root, "sys/kernel/mm/numa/demotion_enabled"), "w") as f:
        f.write(value + "\n")


def test_tiering_off_is_one_verdict_in_stat_status_and_doctor(tmp_path: Any) -> None:
    said = _verdicts(HMAT2)
    assert said["stat"] is not None and said["stat"][0].startswith("CXL node(s) 2, 3 are online but demotion is")
    assert said["status"] == said["stat"] and said["doctor"] == said["stat"], said
    assert said["stat"][1].startswith("apply a tiering profile (cxlctl tune recommend names the one")
    doc = json.loads(cli("--root", HMAT2, "doctor", "--json").stdout)
    assert [c["result"] for c in doc["checks"] if c["id"] == "tuning.tiering-off"] == ["warn"]
    # DAMON migrating and demotion off: nobody says tiering is off; the kdamonds stopped: all three do
    t = copy_fixture(os.path.join(K7, "single-region-damon-tiering"), tmp_path / "t")
    _demotion(t, "false")
    assert _verdicts(t) == {"stat": None, "status": None, "doctor": None}
    _damon_state(t, "off")
    said = _verdicts(t)
    assert said["stat"] is not None and said["status"] == said["stat"] == said["doctor"], said
    # demotion on: tiering works, none of the three warns
    assert set(_verdicts(DAMON_TIERING).values()) == {None}


# -- row 2: advice that reads the host ----------------------------------------------------------


def test_cxl_idle_beside_damon_tiering_names_what_holds_it_back_not_a_second_promoter() -> None:
    rep = json.loads(cli("--root", DAMON_TIERING, "stat", "--json", check=True).stdout)
    (idle,) = [v for v in rep["verdicts"] if v["id"] == "cxl-idle"]
    assert "tune apply" not in idle["fix"] and "enable tiering" not in idle["fix"]
    assert idle["fix"].startswith("DAMON already tiers this host, so add no second mover")
    # the recorded migrate_cold goal: node_mem_free_bp 50 on node 0
    assert "holds demotion back until node 0 is under 0.5 % free" in idle["fix"]
    # where nothing tiers, the advice is to tier, by the profile the host suits (tune recommend)
    rep = json.loads(cli("--root", HMAT2, "stat", "--json", check=True).stdout)
    (idle,) = [v for v in rep["verdicts"] if v["id"] == "cxl-idle"]
    assert idle["fix"].startswith(f"enable tiering (cxlctl --root {HMAT2} tune recommend names the profile")


# -- row 3: one unit per quantity ---------------------------------------------------------------

SIZE = re.compile(r"^(?:-|\d+(?:\.\d)? (?:B|KiB|MiB|GiB|TiB))$")


def test_bandwidths_in_mb_s_and_sizes_in_iec_units_across_commands() -> None:
    status = cli("--root", HMAT2, "status", check=True).stdout
    stat = cli("--root", HMAT2, "stat", check=True).stdout
    assert "38912/38912" in status and "node 0 read 38912 MB/s write 38912 MB/s" in stat
    assert "GB/s" not in stat and "GiB/s" not in stat
    rows = [line for line in stat.splitlines() if re.match(r"^ +\d+ (dram|cxl) ", line)]
    assert rows
    for line in rows:  # used, free, shmem: "137 MiB", "1.7 GiB", never "137M"
        cells = re.split(r"(?<=B) +| +(?=\d)", line.split(None, 2)[2])[:3]
        assert all(SIZE.match(c.strip()) for c in cells), (line, cells)
    doc = cli("--root", HMAT2, "doctor", "--for", "vllm", inprocess=True).stdout
    assert re.search(r"memlock limit: soft (\d+(\.\d+)? (B|KiB|MiB|GiB)|unlimited), hard", doc), doc
    plan = cli("--root", os.path.join(K7, "hb2x2-noregion"), "region", "plan", "--all", check=True).stdout
    # granularity in bytes with its unit, as status prints it ("4-way × 8192 B")
    assert "granularity 8192 B" in plan and "at 16384 B across dports" in plan
    assert "4-way × 8192 B" in cli("--root", os.path.join(K7, "hb2x2-region"), "status", check=True).stdout


# -- row 5: every hint runnable as printed, against the host shown ------------------------------


def test_tune_hints_under_root_run_as_printed_against_the_tree(tmp_path: Any) -> None:
    t = copy_fixture(HMAT2, tmp_path / "t")
    out = cli("--root", t, "tune", "apply", "inference-capacity", "--persist", check=True).stdout
    (undo,) = [line.split("undo with: ", 1)[1] for line in out.splitlines() if line.startswith("undo with: ")]
    assert undo == f"cxlctl --root {t} tune revert"
    st = cli("--root", t, "tune", "status", check=True).stdout
    persisted = os.path.join(t, "etc/sysctl.d/90-cxlctl.conf")
    assert f"persisted: inference-capacity ({persisted}," in " ".join(st.split()) and os.path.exists(persisted)
    argv = shlex.split(undo)
    assert argv[0] == "cxlctl"
    cli(*argv[1:], check=True)  # the printed command, as printed: it reverts the tree, not this machine
    assert not os.path.exists(persisted)
    rec = cli("--root", t, "tune", "recommend", check=True).stdout
    (nxt,) = [line[len("next: ") :] for line in rec.splitlines() if line.startswith("next: ")]
    assert nxt == f"cxlctl --root {t} tune plan inference-bandwidth"
    cli(*shlex.split(nxt)[1:], check=True)
    # an error's hint too (one place: the app's group), and events' way to read a tree
    p = cli("--root", HMAT2, "tune", "verify", rc=2, inprocess=True)
    assert f"hint: name a profile to compare with: cxlctl --root {HMAT2} tune verify " in p.stderr
    p = cli("--root", HMAT2, "events", rc=1, inprocess=True)
    assert f"hint: read saved trace lines with cxlctl --root {HMAT2} events --input FILE" in p.stderr
    fixes = [c["fix"] for c in json.loads(cli("--root", t, "doctor", "--json").stdout)["checks"] if c["fix"]]
    assert any("tune recommend" in f for f in fixes)
    assert all(f"cxlctl --root {t} " in f for f in fixes if re.search(r"\bcxlctl (tune|region|dax|status)\b", f))


# -- row 7: 80 columns --------------------------------------------------------------------------


def test_doctor_names_the_root_once_and_evidence_as_the_host_sees_it() -> None:
    out = cli("--root", HMAT2, "doctor", env={"COLUMNS": "80"}, inprocess=True).stdout
    assert out.startswith(f"root: {HMAT2}\n\nKernel\n")
    evidence = [line.strip() for line in out.splitlines() if re.match(r" {9}/\S*: ", line)]
    assert "/usr/lib/modules/7.3.4+deb13-amd64/config: CXL_BUS=y CXL_PCI=m" in "\n".join(evidence)
    assert len(evidence) > 20 and not any(line.startswith(HMAT2) for line in evidence)
    # the JSON keeps each source openable as it is: under the root
    doc = json.loads(cli("--root", HMAT2, "doctor", "--json", inprocess=True).stdout)
    assert any(e["source"] == f"{HMAT2}/proc/modules" for c in doc["checks"] for e in c["evidence"])


def test_tune_apply_result_table_is_aligned_at_80_columns(tmp_path: Any) -> None:
    t = copy_fixture(HMAT2, tmp_path / "t")
    out = cli(
        "--root", t, "tune", "apply", "inference-capacity", env={"COLUMNS": "80"}, check=True, inprocess=True
    ).stdout
    assert not misaligned(out) and max(map(len, out.splitlines())) <= 80
    result = out[out.index("Result\n") :].splitlines()
    assert result[5:7] == [
        "demotion_enabled",
        " " * 17 + "/sys/kernel/mm/numa/demotion_enabled  false   true    written",
    ], result
    rec = cli("--root", HMAT2, "tune", "recommend", env={"COLUMNS": "80"}, check=True).stdout
    assert all(line == line.rstrip() for line in rec.splitlines())
    bullets = rec.split("\n  alternative")[0].splitlines()[1:]
    assert all(line.startswith(("  • ", "    ")) for line in bullets), bullets


# -- every command on every recorded tree at 80 and 160 columns ---------------------------------

#: the commands that report on a host, run on every recorded tree (machine formats -- the
#: daemon's metrics and NFD labels, the NRI plugin's YAML -- are files, not views: not here)
VIEWS = (
    ("status",),
    ("doctor",),
    ("stat",),
    ("top", "--count", "1"),
    ("health",),
    ("tune", "status"),
    ("tune", "recommend"),
    ("tune", "list"),
    ("tune", "show", "inference-capacity"),
    ("tune", "plan", "inference-capacity"),
    ("tune", "plan", "inference-damon"),
    ("tune", "plan", "inference-bandwidth"),
    ("region", "plan", "--all"),
    ("region", "create", "--all", "--dry-run"),
    ("capacity",),
)
#: what changes a tree, run on a copy of a few (each copy costs more than all the views of a tree)
WRITES = (
    ("tune", "apply", "inference-capacity", "--persist"),
    ("tune", "status"),
    ("tune", "verify"),
    ("tune", "revert"),
    ("tune", "apply", "inference-damon"),
)
WRITE_TREES = ("linux-7.x/hmat2-region", "linux-7.x/single-region-damon-tiering", "linux-6.1/single-noregion-telemetry")

_CELLS = re.compile(r"\S+(?: \S+)*")
_HEADER = re.compile(r"[A-Z][A-Z0-9 ./%#()-]*")
_PUNCT = ",:;.)(\"'`"


def _cells(line: str) -> List[Tuple[int, int]]:
    """A table line's cells: runs of text separated by two spaces or more."""
    return [(m.start(), m.end()) for m in _CELLS.finditer(line)]


def misaligned(text: str) -> List[str]:
    """Rows of the tables in ``text`` with a cell that is in no column of the header above them.

    A header is a line of three or more cells, all but one in capitals; its rows follow it up to a
    blank line.  A cell is in a column when it starts where the column's header starts (left
    aligned), ends where it ends (right aligned; one cell more for a marker such as ``*``), lies
    inside the header's span, or belongs to the last column (a note, a ditto mark).  A line of
    fewer cells than half the header's is a note under a row or a wrapped name: not a row."""
    bad = []
    header: Optional[List[Tuple[int, int]]] = None
    for line in text.splitlines():
        if not line.strip():
            header = None
            continue
        cs = _cells(line)
        words = [line[a:b] for a, b in cs]
        if len(cs) >= 3 and sum(1 for w in words if _HEADER.fullmatch(w)) >= len(cs) - 1:
            header = cs
            continue
        if header is None or len(cs) < max(2, len(header) // 2):
            continue
        starts, ends = {a for a, _ in header}, {b for _, b in header}
        for a, b in cs:
            if not (
                a in starts
                or b in ends
                or b - 1 in ends
                or any(ha <= a and b <= hb for ha, hb in header)
                or a >= header[-1][0]
            ):
                bad.append(line)
                break
    return bad


def _words_with_slash(text: str) -> Set[str]:
    return {w.strip(_PUNCT) for w in text.split() if "/" in w} - {"/"}  # "/" alone: --flag / --no-flag


def _layout_faults(out: str, width: int, whole: Set[str]) -> List[str]:
    """What breaks the 80/160-column promise in ``out`` (``whole``: the path-like words of the same
    view on a screen too wide to fold anything)."""
    faults = [  # over the width only for a word no line could hold beside a label (a deep path)
        f"over {width}: {line}"
        for line in out.splitlines()
        if len(line) > width and len(line.split()) > 1 and max(map(len, line.split())) <= width - 12
    ]
    faults += [f"trailing spaces: {line!r}" for line in out.splitlines() if line != line.rstrip()]
    faults += [f"split word: {w}" for w in sorted(_words_with_slash(out) - whole)]
    faults += [f"misaligned: {line}" for line in misaligned(out)]
    return faults


def _check_views(root: str, views: Sequence[Sequence[str]], widths: Sequence[int] = (80, 160)) -> List[str]:
    """Each view at 80 and 160 columns (or ``widths``).  A word every width prints is whole; one
    only some print is checked against the view at 1,000 columns, where nothing folds (run only then)."""
    faults = []
    for argv in views:
        outs = {}
        for width in widths:
            p = cli("--root", root, *argv, env={"COLUMNS": str(width)}, inprocess=True)
            assert "Traceback" not in p.stderr and p.returncode in (0, 1, 2, 3), (argv, p.stderr)
            outs[width] = p.stdout
        words = {w: _words_with_slash(o) for w, o in outs.items()}
        whole = set.intersection(*words.values())
        if set.union(*words.values()) != whole:
            whole = _words_with_slash(cli("--root", root, *argv, env={"COLUMNS": "1000"}, inprocess=True).stdout)
        for width, out in outs.items():
            faults += [f"{' '.join(argv)} @{width}: {f}" for f in _layout_faults(out, width, whole)]
    return faults


@pytest.mark.parametrize("root", fixture_roots("linux-*/*"), ids=fixture_id)
def test_every_view_of_every_tree_fits_80_and_160_columns(root: str) -> None:
    """Tables aligned, no word (a path, a flag) split, no line over the width, no trailing spaces.
    Only stdout: errors and notes on stderr stay one line in a pipe (docs/cli.md)."""
    faults = _check_views(root, VIEWS)
    assert not faults, "\n".join(faults[:20])


@pytest.mark.parametrize("tree", WRITE_TREES)
def test_what_tune_writes_reports_fit_80_and_160_columns(tree: str, tmp_path: Any) -> None:
    t = copy_fixture(os.path.join(FIXTURES, tree), tmp_path / "t")
    faults = []
    for argv in WRITES:  # once each (they change the tree), then checked at both widths
        p = cli("--root", t, *argv, env={"COLUMNS": "80"}, inprocess=True)
        assert "Traceback" not in p.stderr, p.stderr
        faults += [f"{' '.join(argv)} @80: {f}" for f in _layout_faults(p.stdout, 80, _words_with_slash(p.stdout))]
    faults += _check_views(t, [("tune", "status"), ("tune", "verify")])
    assert not faults, "\n".join(faults[:20])


def test_events_from_saved_trace_lines_fit_80_and_160_columns() -> None:
    """``events`` on a tree reads saved trace lines (the recorded events of each kind)."""
    ras = os.path.join(K7, "hb2x2-region-ras")
    saved = sorted(glob.glob(os.path.join(K7, "events", "*-*.txt")))
    assert len(saved) >= 8
    faults = _check_views(ras, [("events", "--input", f) for f in saved])
    assert not faults, "\n".join(faults[:20])


def test_the_layout_check_finds_what_it_is_for() -> None:
    """The checker itself, on what ``tune apply`` and ``doctor`` printed before issue 35: a row
    shifted by one column, a path folded inside a word, prose past the width."""
    shifted = "demotion_enabled  /sys/kernel/mm/numa/demotion_enabled  false   true    written"
    table = (
        "KNOB             FILE                                  BEFORE  TARGET  RESULT\n"
        "vm.swappiness    /proc/sys/vm/swappiness               60      10      written\n" + shifted + "\n"
    )
    assert misaligned(table) == [shifted]
    assert misaligned(table.replace(shifted, "demotion_enabled\n" + " " * 17 + shifted[18:])) == []
    split = "  ok  /usr/lib/modules/7.3.4+deb13-am\n       d64/config: CXL_BUS=y\n"
    assert _layout_faults(split, 80, {"/usr/lib/modules/7.3.4+deb13-amd64/config"})
    assert _layout_faults("word " * 20, 80, set()) and not _layout_faults("word " * 15 + "word\n", 80, set())
    deep = "/" + "x" * 90
    assert not _layout_faults(f"persisted: {deep}\n", 80, {deep})  # no line could hold it beside its label


def test_region_create_all_stops_when_the_last_region_took_the_rest() -> None:
    """``create --all`` re-plans on a fresh scan after each region; once the regions made so far
    hold every memdev's RAM the next plan is empty and the batch ends (it indexed ``[0]`` of the
    empty list: an internal error after the first region, met in the 6.12 hb2x2 guest)."""
    from cxlctl.hostio.host import Host
    from cxlctl.regions.batch import _next
    from cxlctl.regions.planner import Request

    assert _next(Host(HB2X2), Request()) is None


# -- issue 44 item 11: every command's help, tune show/list at 60 columns, the narrow views -----

TUNE_VIEWS = (
    ("tune", "list"),
    ("tune", "show", "inference-damon"),
    ("tune", "show", "inference-bandwidth"),
    ("tune", "show", "inference-capacity"),
    ("tune", "show", "latency-strict"),
)


def test_tune_show_and_list_fit_60_80_and_160_columns(tmp_path: Any) -> None:
    """``tune show inference-damon`` printed a 139-column line at 80 (its DAMON value), ``inference-
    bandwidth`` a 103-column one and a summary with a trailing space; ``tune list`` under a deep
    ``--root`` a 128-column path (a user profile, named now as the host sees it)."""
    t = os.path.join(str(tmp_path), "a-rather-long-directory-name-for-a-recorded-tree", "copy")
    copy_fixture(HMAT2, t)
    os.makedirs(os.path.join(t, "etc/cxlctl/profiles"))
    with open(os.path.join(t, "etc/cxlctl/profiles/site-inference.toml"), "w") as f:
        f.write(
            'summary = "a site profile whose summary is long enough to fold at 80"\ninclude = "inference-capacity"\n'
        )
    faults = _check_views(t, TUNE_VIEWS, (60, 80, 160))
    assert not faults, "\n".join(faults[:20])
    out = cli("--root", t, "tune", "list", env={"COLUMNS": "80"}, inprocess=True).stdout
    assert re.search(r"^site-inference +/etc/cxlctl/profiles/site-inference.toml$", out, re.M) and t not in out
    assert t in cli("--root", t, "tune", "list", "--json", inprocess=True).stdout  # the JSON keeps the file read


def _commands() -> List[Tuple[str, ...]]:
    import typer

    from cxlctl.cli.app import app

    out: List[Tuple[str, ...]] = []

    def walk(cmd: Any, path: Tuple[str, ...]) -> None:
        out.append(path)
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            if not getattr(sub, "hidden", False):
                walk(sub, path + (name,))

    walk(typer.main.get_command(app), ())
    return out


def _words(text: str) -> Set[str]:
    return {w.strip(_PUNCT + "│╭╮╰╯─") for w in text.split()} - {"", "/"}  # "/": --flag / --no-flag


def test_every_commands_help_fits_60_80_and_160_columns() -> None:
    """No line over the width, no path or flag split (rich's help panels pad each line to the
    width: trailing spaces are not checked here).  At 60 columns (issue 44 item 11) rich's option
    table cut names and values with an ellipsis (``--set-weigh…``, ``weighted-in…``): there no
    ellipsis, and every word is one the help prints at 1,000 columns, so none was split."""
    cmds = _commands()
    assert ("capacity", "adopt") in cmds and len(cmds) > 40
    faults = []
    for path in cmds:
        outs = {w: cli(*path, "--help", env={"COLUMNS": str(w)}, inprocess=True).stdout for w in (60, 80, 160)}
        wide = cli(*path, "--help", env={"COLUMNS": "1000"}, inprocess=True).stdout
        whole = _words_with_slash(wide)
        for w, out in outs.items():
            assert "Usage: cxlctl" in out, (path, out[:200])
            faults += [
                f"{' '.join(path)} --help @{w}: {f}"
                for f in _layout_faults(out, w, whole)
                if not f.startswith(("trailing spaces", "misaligned"))
            ]
        faults += [f"{' '.join(path)} --help @60: ellipsis: {x}" for x in outs[60].splitlines() if "…" in x]
        faults += [f"{' '.join(path)} --help @60: split word {x!r}" for x in sorted(_words(outs[60]) - _words(wide))]
    assert not faults, "\n".join(faults[:20])


def test_no_help_text_loses_a_bracket_to_rich_markup() -> None:
    """typer reads rich markup in help: ``[capacity]`` in ``capacity adopt``'s help vanished from
    ``--help``.  Every help text, as rich reads it, says what it says (``\\[`` for a bracket),
    and the man page prints the bracket."""
    import typer
    from rich.text import Text

    from cxlctl.cli.app import app
    from cxlctl.term import unmarked

    texts: List[Tuple[str, str]] = []

    def walk(cmd: Any, path: str) -> None:
        texts.append((path, cmd.help or ""))
        texts.extend((f"{path} {p.name}", getattr(p, "help", None) or "") for p in cmd.params)
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "cxlctl")
    eaten = [(where, t) for where, t in texts if Text.from_markup(t).plain != unmarked(t)]
    assert not eaten, eaten
    out = cli("capacity", "adopt", "--help", env={"COLUMNS": "160"}, inprocess=True).stdout
    assert "the daemon's [capacity] adopt does" in out
    with open(os.path.join(REPO, "cxlctl/man/cxlctl-capacity.1")) as f:
        assert "the daemon's [capacity] adopt does" in f.read()


def test_status_at_60_columns_cuts_no_value() -> None:
    """rich shrank the NUMA table's columns to fit 60 columns: ``KIN dra 1.86 Gi``.  A table too
    wide for the screen is one record per row instead, every value whole."""
    out = cli("--root", HMAT2, "status", env={"COLUMNS": "60"}, inprocess=True).stdout
    nodes = out[out.index("NUMA nodes") :]
    assert "NODE 0  KIND dram  CPUS 0-1  SIZE 1.86 GiB  FREE 1.72 GiB" in nodes
    assert "KIN " not in nodes and "1.86 Gi\n" not in nodes and "1.86 Gi " not in nodes
    wide = cli("--root", HMAT2, "status", env={"COLUMNS": "160"}, inprocess=True).stdout
    assert "NODE  KIND  CPUS" in wide  # a screen that holds the table keeps it
    # in a pipe the lines rich wrapped (the topology's labels) keep no trailing spaces
    piped = cli("--root", HMAT2, "status", env={"COLUMNS": "60"}).stdout
    assert piped.count("NODE 0  KIND dram") == 1 and not [x for x in piped.splitlines() if x != x.rstrip()]
    # a region's line folds under its own start, not wrapped to column 0 ("targets" / "mem1")
    assert "\n    committed, targets mem1\n" in piped and "\nmem1" not in piped


def test_a_stale_probe_line_folds_at_80_columns(tmp_path: Any) -> None:
    from tests.test_probe import FIG, _tree

    root = _tree(tmp_path, "linux-6.12/single-region", FIG)
    path = f"{root}/var/lib/cxlctl/probe.json"
    with open(path) as f:
        doc = json.load(f)
    doc["boot_id"] = "another-boot"
    for n in doc["nodes"].values():
        for m in n["memdevs"]:
            m["serial"] = 1
    with open(path, "w") as f:
        json.dump(doc, f)
    out = cli("--root", root, "status", env={"COLUMNS": "80"}, inprocess=True).stdout
    assert "stale, not used:" in out
    assert not _layout_faults(out, 80, _words_with_slash(out)), _layout_faults(out, 80, _words_with_slash(out))


def test_policy_show_is_drawn_like_every_other_view() -> None:
    from tests.test_engines_recorded import SERVE, _serve_processes

    roles = _serve_processes()
    out = cli("--root", SERVE, "policy", "show", str(roles["worker"]), env={"COLUMNS": "80"}, inprocess=True).stdout
    assert not set("┏┃━┡│└┘┌┐─") & set(out), out
    assert "NODE  " in out and "ANON SHARE" in out
    assert not _layout_faults(out, 80, _words_with_slash(out)), _layout_faults(out, 80, _words_with_slash(out))


def test_stat_names_its_short_headers() -> None:
    out = cli("--root", HMAT2, "stat", env={"COLUMNS": "80"}, inprocess=True).stdout
    words = " ".join(out.split())
    assert "candid.: pgpromote_candidate" in words
    assert "dem-ksw, dem-dir, dem-oth: pgdemote_kswapd, pgdemote_direct, the other pgdemote_*" in words
