"""Shell completion and man pages: both come from the CLI's own command tree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cxlctl import manpage

REPO = Path(__file__).resolve().parents[1]


def _cxlctl_bin(tmp_path: Path) -> Path:
    """A ``cxlctl`` on PATH that runs this checkout (the completion script calls it by name)."""
    b = tmp_path / "bin"
    b.mkdir(exist_ok=True)
    exe = b / "cxlctl"
    exe.write_text(f'#!/bin/sh\ncd {REPO} && exec {sys.executable} -m cxlctl "$@"\n')
    exe.chmod(0o755)
    return b


def _complete_bash(tmp_path: Path, words: str, cword: int) -> list[str]:
    b = _cxlctl_bin(tmp_path)
    script = (
        "source <(cxlctl completion bash)\n"
        f"COMP_WORDS=({words}); COMP_CWORD={cword}\n"
        "_cxlctl_completion cxlctl\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    env = {**os.environ, "PATH": f"{b}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    return [w for w in p.stdout.split("\n") if w]


def test_bash_completes_groups_commands_and_options(tmp_path: Path) -> None:
    """The generated script really completes, in a real bash, through the CLI."""
    assert _complete_bash(tmp_path, "cxlctl tu", 1) == ["tune"]
    assert set(_complete_bash(tmp_path, "cxlctl region ''", 2)) >= {"plan", "create", "destroy"}
    assert "--dry-run" in _complete_bash(tmp_path, "cxlctl tune apply --d", 3)


@pytest.mark.parametrize("shell,marker", [("zsh", "#compdef cxlctl"), ("fish", "complete --command cxlctl")])
def test_zsh_and_fish_scripts(shell: str, marker: str) -> None:
    from tests.kit import cli

    p = cli("completion", shell)
    assert p.returncode == 0 and marker in p.stdout and "_CXLCTL_COMPLETE" in p.stdout


def test_unknown_shell_is_a_usage_error() -> None:
    from tests.kit import cli

    p = cli("completion", "tcsh")
    assert p.returncode == 2
    assert "no completion for shell 'tcsh'" in p.stderr and "bash, zsh, fish" in p.stderr
    assert "Traceback" not in p.stderr


def test_shipped_man_pages_are_current() -> None:
    """The pages in cxlctl/man are what the CLI's help generates today."""
    want = manpage.pages()
    have = {p.name: p.read_text(encoding="utf-8") for p in manpage.shipped_dir().glob("*.1")}
    stale = sorted(n for n in set(want) | set(have) if want.get(n) != have.get(n))
    assert not stale, f"man pages out of date: {stale}; run scripts/gen-man.sh"


def test_man_pages_cover_every_command_and_option() -> None:
    import typer._click as click
    import typer.main

    from cxlctl.cli import app

    pages = manpage.pages()
    root: Any = typer.main.get_command(app)
    ctx = click.Context(root, info_name="cxlctl")
    seen = 0
    for name in root.list_commands(ctx):
        cmd = root.get_command(ctx, name)
        subs = cmd.list_commands(ctx) if hasattr(cmd, "list_commands") else None
        page = pages[f"cxlctl-{name}.1"] if subs is not None else pages["cxlctl.1"]
        for sub in subs if subs is not None else [None]:
            c = cmd.get_command(ctx, sub) if sub else cmd
            path = f"cxlctl {name}" + (f" {sub}" if sub else "")
            assert f'.SS "{path}"' in page, path
            for p in c.params:
                for opt in getattr(p, "opts", []):
                    if opt.startswith("-"):
                        assert manpage.roff_escape(opt) in page, (path, opt)
                        seen += 1
    assert seen > 40


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff not installed")
def test_man_pages_render_without_warnings() -> None:
    for p in sorted(manpage.shipped_dir().glob("*.1")):
        r = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", str(p)], capture_output=True, text=True)
        assert r.returncode == 0 and r.stderr == "", (p.name, r.stderr)


def test_roff_escape() -> None:
    assert manpage.roff_escape("--json") == "\\-\\-json"
    assert manpage.roff_escape(".hidden\n'quote") == "\\&.hidden\n\\&'quote"
    assert manpage.roff_escape("a\\b") == "a\\eb"
    assert manpage.roff_escape("dram-cxl") == "dram-cxl"


def test_bash_completes_values_of_the_host(tmp_path: Path) -> None:
    """Issue 44 item 8: profiles, regions, memdevs, DAX devices and list kinds, not only command names
    (--root given on the line: its tree's names)."""
    from tests.kit import FIXTURES

    r = os.path.join(FIXTURES, "linux-7.x", "hmat2-region")
    assert _complete_bash(tmp_path, f"cxlctl --root {r} tune show inference-c", 5) == ["inference-capacity"]
    assert _complete_bash(tmp_path, f"cxlctl --root {r} region destroy ''", 5) == ["region0", "region1"]
    assert _complete_bash(tmp_path, f"cxlctl --root {r} capacity adopt m", 5) == ["mem0", "mem1"]
    assert _complete_bash(tmp_path, f"cxlctl --root {r} dax reconfigure ''", 5) == ["dax0.0", "dax1.0"]
    assert _complete_bash(tmp_path, "cxlctl list r", 2) == ["regions"]
