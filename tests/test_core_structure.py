"""The package's import graph: one-way imports, no cycles (deferred imports included).

Built from the source with :mod:`ast`, every ``import`` statement counts: module level,
inside functions, under ``if TYPE_CHECKING`` alike.  A deferred import hides a cycle from
the interpreter but not from the reader: the two modules still cannot be understood (or
moved) one without the other.  The daemon sits on top of the engines, so only the daemon
itself and the CLI may import ``cxlctl.daemon``.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

import cxlctl
from cxlctl.hostio.host import Host

PKG_DIR = os.path.dirname(os.path.abspath(cxlctl.__file__))


def _modules() -> Dict[str, str]:
    """Dotted module name -> file, for every module of the package."""
    out: Dict[str, str] = {}
    base = os.path.dirname(PKG_DIR)
    for dirpath, dirs, files in os.walk(PKG_DIR):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in files:
            if not f.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), base)[: -len(".py")]
            parts = rel.split(os.sep)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = os.path.join(dirpath, f)
    return out


def _resolve(mod: str, is_pkg: bool, level: int, name: Optional[str]) -> str:
    """The absolute module a (possibly relative) ``from``/``import`` names."""
    if level == 0:
        return name or ""
    base = mod.split(".")
    if not is_pkg:
        base.pop()
    if level > 1:
        base = base[: -(level - 1)]
    return ".".join(base + ([name] if name else []))


def import_graph() -> Dict[str, Set[str]]:
    """module -> the package modules it imports (the most specific module each import names)."""
    mods = _modules()
    graph: Dict[str, Set[str]] = {}
    for mod, path in mods.items():
        is_pkg = path.endswith("__init__.py")
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        deps: Set[str] = set()
        for node in ast.walk(tree):
            targets: List[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                src = _resolve(mod, is_pkg, node.level, node.module)
                for a in node.names:
                    sub = f"{src}.{a.name}"
                    targets.append(sub if sub in mods else src)
            for t in targets:
                # `import a.b.c` names a.b.c; keep the longest prefix that is a module of ours
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    deps.add(t)
        graph[mod] = deps
    return graph


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Every strongly connected component with more than one module (Tarjan), sorted."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    out: List[List[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp: List[str] = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_graph_sees_deferred_and_relative_imports() -> None:
    """The graph builder itself: a function-level import and a relative one both count
    (were either missed, the two tests below would pass on a tangled package)."""
    g = import_graph()
    # cxlctl/record.py imports the NFD tiering probe inside record() (lazily)
    assert "cxlctl.k8s.nfd" in g["cxlctl.record"]
    # cxlctl/k8s/nfd.py imports Health only under `if TYPE_CHECKING:`
    assert "cxlctl.ras.health_probe" in g["cxlctl.k8s.nfd"]
    # cxlctl/damon/__init__.py: `from .sysfs import ...`
    assert "cxlctl.damon.sysfs" in g["cxlctl.damon"]
    # the cycle finder finds a planted one
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles (deferred imports count): " + "; ".join(" <-> ".join(c) for c in found)


def _layer_ok(mod: str) -> bool:
    return mod == "cxlctl.daemon" or mod.startswith(("cxlctl.daemon.", "cxlctl.cli.")) or mod == "cxlctl.cli"


def test_only_the_daemon_and_the_cli_import_the_daemon() -> None:
    g = import_graph()
    bad = sorted(
        f"{mod} -> {d}"
        for mod, deps in g.items()
        if not _layer_ok(mod)
        for d in deps
        if d == "cxlctl.daemon" or d.startswith("cxlctl.daemon.")
    )
    assert not bad, "engines import the daemon: " + ", ".join(bad)


# ------------------------------------------------------------------ one knob registry


def test_status_and_tune_read_one_knob_table() -> None:
    """``status`` and ``tune`` know the same knobs by the same names and paths: both take them
    from hostio.paths.KNOBS (before, status had KNOB_PATHS and tune REGISTRY, each its own list)."""
    from cxlctl.hostio import paths
    from cxlctl.inventory import scan
    from cxlctl.tuning.knobs import BY_NAME, REGISTRY

    from .kit import fixture_roots

    # tune: every registry entry is a table row, in the table's (apply) order
    assert [(k.name, k.path) for k in REGISTRY] == list(paths.KNOBS)
    # status: exactly the registry's single-file knobs, each at the registry's path
    singles = {k.name for k in REGISTRY if k.kind != "group"}
    assert set(paths.STATUS_KNOBS) == singles and len(paths.STATUS_KNOBS) == len(singles)
    for root in fixture_roots():
        shown = [(k.name, k.path) for k in scan(Host(root)).knobs]
        assert shown == [(n, BY_NAME[n].path) for n in paths.STATUS_KNOBS], root


# ------------------------------------------------------------------ the DAMON tree, spelled once

#: a path component of DAMON's sysfs tree below admin/ (a list, a sub-directory or a count file)
_DAMON_SEGMENT = re.compile(
    r"(^|/)(kdamonds|contexts|targets|regions|schemes|access_pattern|monitoring_attrs|intervals|quotas|goals"
    r"|watermarks|filters|dests|stats|nr_(kdamonds|contexts|targets|regions|schemes|goals|filters|dests))(/|$)"
)
_TREE_SPELLERS = {"cxlctl.damon.tree", "cxlctl.hostio.paths"}  # paths: the tree's root, admin/kdamonds


def _path_literals(path: str) -> List[Tuple[int, str]]:
    """(line, text) of every string constant with a '/' in a module, f-string parts included,
    docstrings left out (they may draw the tree)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    docs = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs and "/" in n.value
    ]


def test_damon_tree_is_spelled_in_one_module() -> None:
    """Reads (damon/sysfs.py) and writes (tuning/damon_tiering.py) build every kdamond, context,
    scheme … path through cxlctl.damon.tree, as damo does: no other module spells one (before,
    the two spelled the tree 56 times between them)."""
    found = [
        f"{mod}:{line}: {text!r}"
        for mod, path in sorted(_modules().items())
        if mod not in _TREE_SPELLERS
        for line, text in _path_literals(path)
        if _DAMON_SEGMENT.search(text)
    ]
    assert not found, "DAMON sysfs paths spelled outside cxlctl/damon/tree.py:\n" + "\n".join(found)


def test_damon_reader_reads_back_every_file_the_engine_writes(tmp_path: Path) -> None:
    """The consequence that matters: a kdamond written by the tuning engine's file list reads back,
    through the reader, with the values written (one spelling cannot drift from the other)."""
    from cxlctl.damon.sysfs import DamonCaps, read_damon
    from cxlctl.damon.tree import NR_KDAMONDS, state
    from cxlctl.inventory import scan
    from cxlctl.tuning import damon_tiering

    from .kit import FIXTURES

    src = os.path.join(FIXTURES, "linux-6.12", "single-region-damon-idle")
    inv = scan(Host(src))
    spec = damon_tiering.validate({"enabled": True, "memcg": "/x.slice", "anon_only": True})
    caps = DamonCaps(True, "6.17", True, True, True, True, (), True)
    kds, _ = damon_tiering.layout(inv, spec, caps)
    assert kds, "the fixture has a DRAM and a CXL node: a layout of two kdamonds"
    written: Dict[str, str] = {NR_KDAMONDS: str(len(kds)), **{state(k.id): "off" for k in kds}}
    for k in kds:
        written.update((p, v) for p, v, _ in damon_tiering.files(k, spec))
    for p, v in written.items():
        f = tmp_path / p.lstrip("/")
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(v + "\n")
    st = read_damon(Host(str(tmp_path)).reader)
    assert {p: v.strip() for p, v in st.files.items()} == written
    assert [k.id for k in st.kdamonds] == [k.id for k in kds]
    for k, got in zip(kds, st.kdamonds):
        (s,) = got.schemes
        assert s.action == k.scheme.action and s.target_nid == k.scheme.target_nid
        assert [(r.start, r.end) for t in got.contexts[0].targets for r in t.regions] == list(k.regions)
        assert [(f.type, f.matching, f.memcg_path) for f in s.filters] == [
            (t, m, c or None) for t, m, c in k.scheme.filters
        ]
        assert [(g.target_metric, g.target_value, g.nid) for g in s.quota.goals] == list(k.scheme.goals)


# ------------------------------------------------------------------ tags are types


def test_a_misspelled_tag_is_a_type_error(tmp_path: Path) -> None:
    """Node/Port/Decoder/Knob ``kind`` and the telemetry's node kind are Literal types, so mypy
    (strict equality) rejects a compare with a word the tag never holds. Before, each was a
    plain ``str`` and ``n.kind == "cxll"`` type-checked, silently always False."""
    from mypy import api

    snippet = tmp_path / "tags.py"
    snippet.write_text(
        "from cxlctl.model import Decoder, Node, Port\n"
        "from cxlctl.telemetry.sample import NodeSample\n"
        "from cxlctl.tuning.knobs import Knob\n"
        "from cxlctl.doctor.model import Check\n"
        "from cxlctl.launch.preflight import Check as Pre\n"
        "from cxlctl.tuning.plan import Step\n"
        "def f(n: Node, p: Port, d: Decoder, s: NodeSample, k: Knob, c: Check, q: Pre, t: Step) -> list[bool]:\n"
        '    return [n.kind == "cxl", n.kind == "cxll", p.kind == "switch", d.kind == "port",\n'
        '            s.kind == "CXL", k.kind == "groups", k.kind == "group",\n'
        '            c.result == "fail", c.result == "failed", q.status == "warning", t.action == "noop"]\n'
    )
    out, err, rc = api.run(
        ["--strict", "--follow-imports=silent", "--no-incremental", "--python-version=3.10", str(snippet)]
    )
    bad = sorted({line.split("right operand type: ")[-1] for line in out.splitlines() if "comparison-overlap" in line})
    assert bad == [
        "\"Literal['CXL']\")  [comparison-overlap]",
        "\"Literal['cxll']\")  [comparison-overlap]",
        "\"Literal['failed']\")  [comparison-overlap]",
        "\"Literal['groups']\")  [comparison-overlap]",
        "\"Literal['port']\")  [comparison-overlap]",
        "\"Literal['switch']\")  [comparison-overlap]",
        "\"Literal['warning']\")  [comparison-overlap]",
    ], out + err


#: record fields named like a tag that stay ``str``, and why: words cxlctl reads and reports
#: as the kernel, a tool or a file it wrote before writes them (a new kernel may add one)
STR_TAGS = {
    "cxlctl/daemon/damon_metrics.py SchemeView.action",  # DAMON's action file
    "cxlctl/daemon/damon_metrics.py KdamondView.state",  # a kdamond's state file
    "cxlctl/daemon/reconcile.py Change.kind",  # a metric label made from the change
    "cxlctl/daemon/reconcile.py Target.state",  # the journal's state, as read back
    "cxlctl/damon/sysfs.py Scheme.action",
    "cxlctl/damon/sysfs.py Kdamond.state",
    "cxlctl/model.py MemoryBlock.state",  # the block's state file
    "cxlctl/ras/events.py Event.kind",  # an unknown cxl_* event keeps its own suffix
    "cxlctl/ras/events.py Event.severity",  # the event's own field
    "cxlctl/telemetry/damon_stats.py Scheme.state",
    "cxlctl/telemetry/damon_stats.py Scheme.action",
    "cxlctl/tuning/journal.py Entry.status",  # the journal file's words, schema 1 and 2
    "cxlctl/tuning/journal.py Journal.state",
    "cxlctl/tuning/results.py FileResult.status",  # a journal entry's status
    "cxlctl/tuning/results.py JournalSummary.state",
    "cxlctl/tuning/results.py DamonSchemeRow.state",
    "cxlctl/tuning/results.py DamonSchemeRow.action",
}


def test_tags_of_cxlctls_own_are_literal_types() -> None:
    """A record field named like a tag (kind, result, status, severity, action, state) is a
    ``Literal`` type unless it holds words read from outside (:data:`STR_TAGS`, each with
    its reason): the checks' results, the plan's actions, the pre-flight and verify statuses,
    the warnings' and verdicts' severities, the reconcile outcome..."""
    tags = {"kind", "result", "status", "severity", "action", "state"}
    found = set()
    for f in sorted(Path(PKG_DIR).rglob("*.py")):
        rel = "cxlctl/" + f.relative_to(PKG_DIR).as_posix()
        for c in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if not isinstance(c, ast.ClassDef):
                continue
            for st in c.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.target.id in tags:
                    if ast.unparse(st.annotation) in ("str", "Optional[str]"):
                        found.add(f"{rel} {c.name}.{st.target.id}")
    assert found == STR_TAGS, (sorted(found - STR_TAGS), sorted(STR_TAGS - found))


# ------------------------------------------------------------------ host text made safe in one place


def test_host_text_is_made_safe_in_one_place() -> None:
    """doctor, the telemetry reports and verdicts, and the RAS text each had a ``clean()`` of
    their own (escapes, '?', a lossy ``\\xNN``) and render.py its markup escape: now
    ``cxlctl.term.clean`` and ``cxlctl.term.markup_escape`` are the only ones."""
    from cxlctl.term import clean, markup_escape

    own = []
    for f in sorted(Path(PKG_DIR).rglob("*.py")):
        rel = f.relative_to(PKG_DIR).as_posix()
        src = f.read_text(encoding="utf-8")
        names = {n.name for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef)}
        if rel != "term.py" and (
            names & {"clean", "_clean", "escape", "_e"} or "isprintable() else" in src or "markup import escape" in src
        ):
            own.append(rel)
    assert own == []
    # what each view shows for a crafted name: the escape, whole (U+2028 was \x28 in the RAS text)
    assert clean("kv\x1b[2J\n\u2028") == "kv\\x1b[2J\\n\\u2028"
    assert clean("mem0") == "mem0" and markup_escape("[damon]") == "\\[damon]"
