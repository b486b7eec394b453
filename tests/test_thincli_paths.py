"""The two entry paths (the typer app and ``__main__``'s fast path) share one command function per
command and one error mapping, and resolve the host once (issue 19: a thin CLI)."""

from __future__ import annotations

import ast
import io
import json
import os
from typing import Any, List, Tuple

import pytest

from cxlctl import commands
from cxlctl.hostio.host import Host
from tests.kit import FIXTURES, REPO

ROOT = os.path.join(FIXTURES, "linux-6.12", "single-region")


def _both(monkeypatch: Any, argv: List[str]) -> List[Tuple[int, str, str]]:
    """(exit code, stdout, stderr) of ``argv`` through the fast path, then through typer."""
    from cxlctl.__main__ import main
    from cxlctl.cli import run

    got = []
    for entry in (main, run):
        out, err = io.StringIO(), io.StringIO()
        monkeypatch.setattr("sys.stdout", out)
        monkeypatch.setattr("sys.stderr", err)
        rc = entry(list(argv))
        got.append((rc, out.getvalue(), err.getvalue()))
    monkeypatch.undo()
    return got


@pytest.mark.parametrize("argv", [["status"], ["status", "--json"], ["doctor", "--json"], ["stat", "--json"]])
def test_ctrl_c_and_a_bug_read_the_same_on_both_paths(monkeypatch: Any, argv: List[str]) -> None:
    """The fast path said ``cxlctl: aborted`` and exited 1 where typer exits 130 silently: two
    mappings.  Now one (cxlctl.emit.guarded) maps Ctrl-C, a bug and its --json error object for both."""
    name = argv[0]

    def interrupted(*a: Any, **k: Any) -> int:
        raise KeyboardInterrupt

    def buggy(*a: Any, **k: Any) -> int:
        raise ValueError("odd")

    if name != "stat":  # stat's own loop ends quietly on Ctrl-C (exit 0), on both paths
        monkeypatch.setattr(commands, name, interrupted)
        fast, slow = _both(monkeypatch, ["--root", ROOT, *argv])
        assert fast == slow == (130, "", "")
    monkeypatch.setattr(commands, name, buggy)
    fast, slow = _both(monkeypatch, ["--root", ROOT, *argv])
    assert fast == slow
    rc, out, err = fast
    assert rc == 1 and err.startswith("cxlctl: internal error: ValueError: odd\n")
    if argv[-1] == "--json":
        assert json.loads(out)["error"]["message"] == "internal error: ValueError: odd"


def test_the_error_mapping_is_written_once() -> None:
    """No entry module names the exceptions it maps or builds the JSON error: cxlctl/emit.py does."""
    mapped = {"json_error", "InternalError", "StdoutError", "KeyboardInterrupt"}
    files = [os.path.join(REPO, "cxlctl", "__main__.py")]
    files += [os.path.join(REPO, "cxlctl", "cli", n) for n in os.listdir(os.path.join(REPO, "cxlctl", "cli"))]
    found = []
    for path in files:
        if not path.endswith(".py"):
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            name = node.id if isinstance(node, ast.Name) else node.name if isinstance(node, ast.alias) else None
            if name in mapped:
                found.append((os.path.relpath(path, REPO), name))
    # stat's and top's loops end on Ctrl-C themselves: that is their behaviour, not error mapping
    assert [f for f in found if f[1] != "KeyboardInterrupt" or f[0] == "cxlctl/__main__.py"] == []


@pytest.mark.parametrize(
    "argv",
    [["status"], ["status", "--json"], ["doctor", "--json"], ["stat", "--json"], ["doctor"], ["stat", "--top", "1"]],
)
def test_the_host_is_resolved_once_and_handed_to_the_command(monkeypatch: Any, argv: List[str]) -> None:
    """Both paths build one Host from --root (the last one wins, as click's) and pass it on."""
    resolved: List[Host] = []
    real = Host.resolve.__func__  # type: ignore[attr-defined]

    def spy(cls: Any, value: Any = None) -> Host:
        h: Host = real(cls, value)
        resolved.append(h)
        return h

    monkeypatch.setattr(Host, "resolve", classmethod(spy))
    seen: List[Any] = []
    run = getattr(commands, argv[0])

    def command(host: Host, *a: Any, **k: Any) -> int:
        seen.append(host)
        return int(run(host, *a, **k))

    monkeypatch.setattr(commands, argv[0], command)
    for (rc, _, err), _path in zip(_both(monkeypatch, ["--root", "/nonexistent", "--root", ROOT, *argv]), "ft"):
        assert rc in (0, 1), err
    assert len(resolved) == 2 and len(seen) == 2  # once per path
    assert seen == resolved and all(h.root == ROOT for h in seen)
