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
from typing import Dict, List, Optional, Set

import cxlctl

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
