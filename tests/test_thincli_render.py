"""``status`` without rich on a pipe: byte-identical to rich's uncoloured output (issue 19, speed)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from typing import Any

import pytest

from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from cxlctl.render import _m, plain_status, render_status
from tests.kit import REPO, fixture_id, fixture_roots

WIDTHS = [30, 50, 64, 72, 80, 100, 120, 160, 250]


def _rich(root: str, width: int, monkeypatch: Any) -> str:
    from cxlctl.term import console

    monkeypatch.setenv("COLUMNS", str(width))
    buf = io.StringIO()
    render_status(scan(Host(root)), console(highlight=True, file=buf))
    return buf.getvalue()


@pytest.mark.parametrize("root", fixture_roots(), ids=fixture_id)
def test_plain_layout_is_what_rich_prints_uncoloured(root: str, monkeypatch: Any) -> None:
    """At every width the plain layout is rich's output byte for byte, or it declines (None) and rich
    prints; at 80 and 160 columns (a pipe, a wide terminal) it never declines on a recorded tree."""
    inv = scan(Host(root))
    for w in WIDTHS:
        plain = plain_status(inv, w)
        if plain is None:
            assert w not in (80, 160), w
            continue
        assert plain == _rich(root, w, monkeypatch), w


def test_a_pipe_gets_the_status_without_importing_rich() -> None:
    """rich costs about three times the interpreter's start-up, typing half of it: on a pipe neither is used."""
    root = fixture_roots("linux-6.12/*")[0]
    code = (
        "import sys, io\n"
        "from cxlctl.__main__ import main\n"
        "class Pipe(io.StringIO):\n"
        "    encoding = 'utf-8'\n"
        "out = Pipe(); sys.stdout = out\n"
        f"rc = main(['--root', {root!r}, 'status'])\n"
        "sys.stdout = sys.__stdout__\n"
        "print(rc, 'NUMA nodes' in out.getvalue(), [m for m in sys.modules if m.split('.')[0] in ('rich', 'typer', 'typing')])"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env)
    assert p.stdout.strip() == "0 True []", p.stderr


def test_a_pci_address_is_not_read_as_an_emoji_code() -> None:
    """rich reads ``:ab:`` as the emoji code for 🆎: ``pci 0000:ab:00.0`` printed as ``0000🆎00.0``."""
    from cxlctl.term import console

    assert _m("pci 0000:ab:00.0 [dim]x[/dim]").plain == "pci 0000:ab:00.0 x"
    buf = io.StringIO()
    console(file=buf).print("0000:ab:00.0 :ok:")
    assert buf.getvalue() == "0000:ab:00.0 :ok:\n"


def test_every_rich_console_reads_no_emoji_codes() -> None:
    """Every ``Console(...)`` cxlctl builds passes ``emoji=False``: names such as ``0000:ab:00.0``
    would otherwise print as ``0000🆎00.0`` (top's screen and the progress bar built their own)."""
    import ast
    import glob

    missing = []
    for path in glob.glob(os.path.join(REPO, "cxlctl", "**", "*.py"), recursive=True):
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Console":
                kw = {k.arg: k.value for k in node.keywords}
                value = kw.get("emoji")
                if not (isinstance(value, ast.Constant) and value.value is False):
                    missing.append(f"{os.path.relpath(path, REPO)}:{node.lineno}")
    assert not missing, missing
