"""The host context replaces root strings: packages moved onto :class:`~cxlctl.hostio.host.Host`
stay there (issue 19, "Objects, not strings").

A command resolves its host once and hands the :class:`Host` down; a package that took
``root: str`` again would rebuild a fenced :class:`~cxlctl.hostio.reader.Reader` per call
(``regions/dax.py`` built one per attribute) and read the boot id once per question.  Built
from the source with :mod:`ast`: any parameter named ``root`` that is a string (annotated
``str``, ``Optional[str]``, ``Union[str, None]``, ``str | None`` or not annotated at all), and
any ``Reader(...)`` constructed in them (they read through ``host.reader``, ``host.reread()``
after their own writes, or ``host.new_reader()`` for a thread of their own).

``HOST_PACKAGES`` is the one list of converted packages (and modules): add yours to it.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any, Iterator, List, Optional, Tuple

import pytest

import cxlctl
from cxlctl.damon.sysfs import read_damon
from cxlctl.hostio import paths
from cxlctl.hostio.host import Host
from cxlctl.hostio.reader import Reader
from cxlctl.regions import dax
from cxlctl.tuning import journal as jn
from cxlctl.tuning import state
from tests.kit import FIXTURES, copy_fixture
from tests.tune_support import write_boot_id

PKG_DIR = os.path.dirname(os.path.abspath(cxlctl.__file__))

#: packages (directories under cxlctl/) and modules (``name.py``) that take a Host, not a root string
HOST_PACKAGES: Tuple[str, ...] = ("tuning", "regions", "damon", "daemon")


def _files(pkg_dir: str, entries: Tuple[str, ...]) -> Iterator[str]:
    for entry in entries:
        path = os.path.join(pkg_dir, entry)
        if entry.endswith(".py"):
            yield path
            continue
        for dirpath, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            yield from (os.path.join(dirpath, f) for f in sorted(files) if f.endswith(".py"))


def _stringy(ann: Optional[ast.expr]) -> bool:
    """Is this annotation a string, or absent (an unannotated ``root`` is a string in practice)?"""
    if ann is None:
        return True
    text = ast.unparse(ann).replace(" ", "").strip("'\"")
    return text in ("str", "Optional[str]", "Union[str,None]", "Union[None,str]", "str|None", "None|str")


def root_strings(pkg_dir: str = PKG_DIR, entries: Tuple[str, ...] = HOST_PACKAGES) -> List[str]:
    """``file:line: function(root)`` for each string ``root`` parameter in ``entries``."""
    out = []
    for path in _files(pkg_dir, entries):
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            a = node.args
            for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs):
                if arg.arg == "root" and _stringy(arg.annotation):
                    name = getattr(node, "name", "<lambda>")
                    out.append(f"{os.path.relpath(path, pkg_dir)}:{node.lineno}: {name}(root)")
    return out


def readers_built(pkg_dir: str = PKG_DIR, entries: Tuple[str, ...] = HOST_PACKAGES) -> List[str]:
    """``file:line`` of each ``Reader(...)`` constructed in ``entries``."""
    out = []
    for path in _files(pkg_dir, entries):
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                fn = node.func
                name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
                if name == "Reader":
                    out.append(f"{os.path.relpath(path, pkg_dir)}:{node.lineno}")
    return out


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "m.py").write_text(
        "from typing import Optional\n"
        "def a(root: str) -> None: ...\n"
        "def b(x, root: Optional[str] = None) -> None: ...\n"
        "def c(root) -> None: ...\n"
        "def d(*, root: 'str | None') -> None: ...\n"
        "def ok(host: object, root_port: str, root: int = 0) -> None: ...\n"
        "r = Reader('/')\n"
        "s = reader.Reader(root)\n"
    )
    assert [s.split(": ")[1] for s in root_strings(str(tmp_path), ("pkg",))] == [
        "a(root)",
        "b(root)",
        "c(root)",
        "d(root)",
    ]
    assert readers_built(str(tmp_path), ("pkg",)) == ["pkg/m.py:7", "pkg/m.py:8"]


def test_no_root_string_parameters_in_the_host_packages() -> None:
    found = root_strings()
    assert not found, "take a Host (cxlctl.hostio.host), not a root string:\n" + "\n".join(found)


def test_no_reader_built_per_call_in_the_host_packages() -> None:
    found = readers_built()
    assert not found, "read through host.reader / host.reread() / host.new_reader():\n" + "\n".join(found)


def test_one_reader_and_one_boot_id_read_per_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Engine calls on one Host share its reader, and the boot id is read once.

    Before, ``regions/dax.py`` built a Reader per attribute and ``tuning/journal.boot_id``
    read the file at every question: counted here as readers built and boot id reads."""
    root = copy_fixture(os.path.join(FIXTURES, "linux-6.12", "single-region"), tmp_path / "t")
    write_boot_id(root, "b-1")
    j = jn.Journal(jn.SCHEMA, jn.APPLIED, "cxl-common", "builtin", "b-1", 4242, "cxlctl", jn.now(), None, (), (), {})
    jn.save(Host(root), j)
    made: List[str] = []
    asked: List[str] = []
    init, text = Reader.__init__, Reader.text

    def counting_init(self: Reader, *a: Any, **k: Any) -> None:
        made.append(a[0] if a else "/")
        init(self, *a, **k)

    def counting_text(self: Reader, path: str) -> Optional[str]:
        asked.append(path)
        return text(self, path)

    monkeypatch.setattr(Reader, "__init__", counting_init)
    monkeypatch.setattr(Reader, "text", counting_text)
    host = Host(root)
    for _ in range(3):
        assert state.this_boot(host) == j
        dax.block_size(host)
        dax.needs_hold(host, "system-ram", "movable")
        read_damon(host.reader)
    assert len(made) == 1, f"one reader for the command, {len(made)} built"
    assert asked.count(paths.BOOT_ID) == 1, "the boot id is read once"
    assert host.fresh().boot_id == "b-1"
    assert len(made) == 2 and asked.count(paths.BOOT_ID) == 2, "a fresh Host reads again (the daemon's next pass)"
