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
from typing import Iterator, List, Optional, Tuple

import cxlctl

PKG_DIR = os.path.dirname(os.path.abspath(cxlctl.__file__))

#: packages (directories under cxlctl/) and modules (``name.py``) that take a Host, not a root string
HOST_PACKAGES: Tuple[str, ...] = (
    "launch",
    "ras",
    "doctor",
    "telemetry",
    "k8s",
    "config.py",
    "derive.py",
    "errors.py",
    "inventory.py",
    "kconfig.py",
    "manpage.py",
    "model.py",
    "namedrecord.py",
    "numa_maps.py",
    "parse.py",
    "progress.py",
    "record.py",
    "render.py",
    "status_json.py",
    "term.py",
)


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


def test_a_command_leaves_no_directory_handle_open() -> None:
    """The host's reader keeps directory handles for the command; they end with it.  In one
    process that runs many commands (the fuzzer, the daemon's one-shot calls) they were kept
    through the click context: 64 per ``capacity`` scan, 13,847 open after the fuzzer, and
    select() then failed in later tests ("filedescriptor out of range")."""
    from tests.kit import cli, fixture_roots

    root = fixture_roots("linux-7.x/single-region-doctor")[0]

    def count() -> int:
        return len(os.listdir("/proc/self/fd"))

    for args in (["capacity", "--json"], ["tune", "plan", "inference-capacity"], ["doctor", "--json"]):
        before = count()
        for _ in range(3):
            cli("--root", root, *args, inprocess=True)
        assert count() - before <= 0, (args, count() - before)
