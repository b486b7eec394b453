"""The command line as a user meets it: exit codes, messages, the status --json fast path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict, List, Set

import pytest

from cxlctl.errors import EXIT_USAGE
from tests.kit import REPO, cli


def test_version() -> None:
    p = cli("--version", check=True)
    assert p.stdout.startswith("cxlctl ")


def test_bad_root_is_usage_error_without_traceback(tmp_path: object) -> None:
    for args in (["--root", "/no/such/dir", "status", "--json"], ["--root", "/no/such/dir", "status"]):
        p = cli(*args)
        assert p.returncode == EXIT_USAGE, p
        assert "is not a directory" in p.stderr
        assert "Traceback" not in p.stderr + p.stdout
    p = cli("status", "--json", env={"CXLCTL_ROOT": "/no/such/dir"})
    assert p.returncode == EXIT_USAGE and "CXLCTL_ROOT" in p.stderr


def test_unknown_option_is_usage_error() -> None:
    p = cli("status", "--bogus")
    assert p.returncode == EXIT_USAGE
    assert "Traceback" not in p.stderr


def test_status_on_this_host_works_without_cxl() -> None:
    """These CI machines have no CXL: status must say so and still list NUMA nodes."""
    p = cli("status", check=True)
    data = json.loads(cli("status", "--json", check=True).stdout)
    assert data["nodes"], "a Linux host always has at least one NUMA node"
    if not data["cxl_present"]:
        assert "No CXL devices" in p.stdout
        assert any(w["code"] == "no-cxl" for w in data["warnings"])
    assert "NUMA nodes" in p.stdout


def test_fast_path_equals_typer_path(live_record: str) -> None:
    """`status --json` is served without typer; it must print what the full CLI prints."""
    fast = cli("--root", live_record, "status", "--json", check=True).stdout
    code = f"import sys; from cxlctl.cli import run; sys.exit(run(['--root', {live_record!r}, 'status', '--json']))"
    slow = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert fast == slow


def test_fast_path_imports_no_heavy_modules(live_record: str) -> None:
    code = (
        "import sys, io, contextlib; from cxlctl.__main__ import main\n"
        f"with contextlib.redirect_stdout(io.StringIO()): rc = main(['--root', {live_record!r}, 'status', '--json'])\n"
        "heavy = [m for m in ('typer', 'rich', 'pyudev', 'psutil', 'click', 'pydantic') if m in sys.modules]\n"
        "print(rc, heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert out.strip() == "0 []"


def test_env_root_is_honoured(live_record: str) -> None:
    a = cli("status", "--json", env={"CXLCTL_ROOT": live_record}, check=True).stdout
    b = cli("--root", live_record, "status", "--json", check=True).stdout
    assert a == b
    assert os.path.isdir(live_record)


def test_weighted_interleave_auto_under_either_name() -> None:
    """6.16+ exposes `auto`; some builds name it `__auto_type` (this CI host's 6.18 does)."""
    wi = "/sys/kernel/mm/mempolicy/weighted_interleave"
    data = json.loads(cli("status", "--json", check=True).stdout)["weighted_interleave"]
    if any(os.path.exists(f"{wi}/{n}") for n in ("auto", "__auto_type")):
        assert data["auto"] in (True, False)
    else:
        assert data["auto"] is None


def test_one_grammar_whichever_path_runs(live_record: str) -> None:
    """The fast path takes exactly what typer takes; anything else is typer's to accept or reject."""
    import contextlib
    import io

    from cxlctl.__main__ import _fast_args
    from cxlctl.cli import run

    r = live_record
    cases = [
        (["--root", r, "status", "--json"], True),
        ([f"--root={r}", "status", "--json"], True),
        (["--root", "/", "--root", r, "status", "--json"], True),
        (["status", "--json"], True),
        (["status", "--json", "--root", r], False),  # a global option after the command
        (["status", "--root", r, "--json"], False),
        (["--json", "status"], False),
        (["--root", r, "status", "--json", "--json"], False),
        (["--root", r, "status", "--json", "--help"], False),
    ]
    for argv, fast in cases:
        assert (_fast_args(argv) is not None) == fast, argv
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            slow_rc = run(argv)
        p = cli(*argv)
        assert p.returncode == slow_rc, (argv, p.stderr)
    # issue 44: --root after the command means what it means before it (cli.common.run_app moves it)
    p = cli("status", "--json", "--root", r)
    assert p.returncode == 0 and p.stdout == cli("--root", r, "status", "--json").stdout, p.stderr


def _all_commands() -> List[List[str]]:
    import typer

    from cxlctl.cli import app

    out: List[List[str]] = []

    def walk(c: Any, path: List[str]) -> None:
        out.append(path)
        for name, sub in sorted(getattr(c, "commands", {}).items()):
            walk(sub, path + [name])

    walk(typer.main.get_command(app), [])
    return out


def test_help_reads_like_a_unix_tool() -> None:
    """Every command's --help names its arguments DEST/PROFILE/PID, not {dest} or <str>."""
    import contextlib
    import io

    from cxlctl.cli import run

    cmds = _all_commands()
    assert ["tune", "show"] in cmds and ["record"] in cmds and len(cmds) > 20
    for path in cmds:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert run(path + ["--help"]) == 0, path
        text = buf.getvalue()
        assert "Usage: cxlctl" in text, path
        for bad in ("{", "<str>", "<int>", "<float>", "<path>"):
            assert bad not in text, (path, bad, text)
    usage = {
        ("record",): "cxlctl record [OPTIONS] DEST",
        ("tune", "show"): "cxlctl tune show [OPTIONS] PROFILE",
        ("tune", "plan"): "cxlctl tune plan [OPTIONS] [PROFILE]",
        ("policy", "show"): "cxlctl policy show [OPTIONS] PID",
    }
    for cmd_path, line in usage.items():
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            run(list(cmd_path) + ["--help"])
        assert line in buf.getvalue()


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "١", "5s"])
@pytest.mark.parametrize("cmd", [["region", "create", "-w", "2"], ["tune", "apply"], ["tune", "revert"]])
def test_wait_must_be_seconds(cmd: List[str], value: str) -> None:
    p = cli(*cmd, "--wait", value)
    assert p.returncode == EXIT_USAGE, p
    assert "--wait" in p.stderr and "number of seconds" in p.stderr and "Traceback" not in p.stderr


def test_fast_path_reports_a_bug_in_one_line_like_typer() -> None:
    """A bug met on the fast path prints typer's one-line "internal error", not a traceback."""
    code = (
        "import sys, cxlctl.inventory as inv\n"
        "def boom(*a, **k): raise RuntimeError('boom')\n"
        "inv.scan = boom\n"
        "from cxlctl.__main__ import main\n"
        "sys.exit(main(['status', '--json']))"
    )
    env = dict(os.environ)
    env.pop("CXLCTL_DEBUG", None)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env)
    assert p.returncode == 1
    assert p.stderr.startswith("cxlctl: internal error: RuntimeError: boom") and "Traceback" not in p.stderr


# ------------------------------------------------------------------ the CLI package


def _imports_of(path: str, module: str) -> List[str]:
    """Every cxlctl module ``path`` imports (top level and inside functions), absolute names."""
    import ast

    with open(path) as f:
        tree = ast.parse(f.read())
    pkg = module.rsplit(".", 1)[0] if not path.endswith("__init__.py") else module
    out: List[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.startswith("cxlctl")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            if base.startswith("cxlctl"):
                out.append(base)
                out += [f"{base}.{a.name}" for a in node.names]
    return out


def test_the_package_has_no_import_cycle() -> None:
    """No module of cxlctl reaches itself through imports (lazy ones included): cli.py ↔ cli_*.py is gone."""
    mods = {}
    for dp, _, fns in os.walk(os.path.join(REPO, "cxlctl")):
        for fn in fns:
            if fn.endswith(".py"):
                rel = os.path.relpath(os.path.join(dp, fn), REPO)[:-3].replace(os.sep, ".")
                mods[rel[: -len(".__init__")] if rel.endswith(".__init__") else rel] = os.path.join(dp, fn)
    graph = {m: sorted({i for i in _imports_of(p, m) if i in mods and i != m}) for m, p in mods.items()}
    state: Dict[str, int] = {}
    cycles: List[List[str]] = []

    def visit(m: str, stack: List[str]) -> None:
        state[m] = 1
        for n in graph[m]:
            if state.get(n) == 1:
                cycles.append(stack[stack.index(n) :] + [n] if n in stack else [m, n])
            elif n not in state:
                visit(n, stack + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    cli_cycles = [c for c in cycles if any(x.startswith("cxlctl.cli") for x in c)]
    assert not cli_cycles, cli_cycles
    # the command modules know only the shared module and the help helpers, never the app
    for m in graph:
        if m.startswith("cxlctl.cli.") and m not in ("cxlctl.cli.app",):
            assert "cxlctl.cli.app" not in graph[m] and "cxlctl.cli" not in graph[m], (m, graph[m])


def test_no_global_state_in_the_cli(monkeypatch: Any) -> None:
    """The root travels in the click context (``ctx.obj``), not a module global."""
    import cxlctl.cli.app as appmod
    from cxlctl import config as cfgmod
    from cxlctl.cli import run
    from cxlctl.cli.common import CliState

    assert not hasattr(appmod, "STATE")
    fx = os.path.join(REPO, "fixtures", "linux-6.12")
    seen: List[Any] = []
    load = cfgmod.load

    def spy(host: Any, path: Any = None, **kw: Any) -> Any:
        from typer._click.globals import get_current_context

        obj = get_current_context().find_object(CliState)
        seen.append((host.root, obj.root if obj is not None else None))
        return load(host, path, **kw)

    monkeypatch.setattr(cfgmod, "load", spy)
    for t in ("single-region", "hb2-region"):
        assert run(["--root", os.path.join(fx, t), "daemon", "config", "--json"]) == 0
    assert seen == [(os.path.join(fx, t),) * 2 for t in ("single-region", "hb2-region")]


def test_every_command_that_reports_takes_json() -> None:
    """docs/cli.md's promise: --json on every command but `completion` (a script) and `daemon run` (a service)."""
    import typer.main

    from cxlctl.cli import app

    without: List[str] = []

    def walk(c: Any, path: List[str]) -> None:
        subs = getattr(c, "commands", None)
        if subs:
            for n, s in subs.items():
                walk(s, path + [n])
            return
        if "--json" not in [o for p in c.params for o in getattr(p, "opts", [])]:
            without.append(" ".join(path))

    walk(typer.main.get_command(app), [])
    assert sorted(without) == ["completion", "daemon run"]
    with open(os.path.join(REPO, "docs", "cli.md")) as f:
        doc = f.read()
    assert "`completion`" in doc and "`daemon run`" in doc


def test_record_json(tmp_path: Any) -> None:
    src = os.path.join(REPO, "fixtures", "linux-6.12", "hb2-region")
    dest = str(tmp_path / "rec")
    p = cli("--root", src, "record", dest, "--json", check=True)
    doc = json.loads(p.stdout)
    assert doc["schema_version"] == 1 and doc["dest"] == dest
    assert doc["manifest"]["files"] > 10 and doc["manifest"]["source_root"] == src
    with open(os.path.join(dest, doc["files"]["manifest"])) as f:
        assert json.load(f) == doc["manifest"]
    assert os.path.exists(os.path.join(dest, doc["files"]["status"]))


def test_daemon_metrics_and_labels_json_say_what_the_text_says(tmp_path: Any) -> None:
    from tests.prom import parse_exposition

    src = os.path.join(REPO, "fixtures", "linux-6.12", "hb2x2-region")
    text = cli("--root", src, "daemon", "metrics", "--no-health", check=True).stdout
    doc = json.loads(cli("--root", src, "daemon", "metrics", "--no-health", "--json", check=True).stdout)
    assert doc["schema_version"] == 1
    ex = parse_exposition(text)
    n = 0
    for fam in doc["metrics"]:
        assert f"# TYPE {fam['name']} {fam['type']}" in text
        for s in fam["samples"]:
            if s["name"].endswith("_info") or "seconds" in s["name"]:
                continue  # times and durations differ between the two runs
            assert ex.get(s["name"], **s["labels"]) == s["value"], s
            n += 1
    assert n > 10
    text = cli("--root", src, "daemon", "labels", check=True).stdout
    doc = json.loads(cli("--root", src, "daemon", "labels", "--json", check=True).stdout)
    pairs = dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert doc["labels"] == pairs and pairs


def _imported(argv: List[str]) -> Set[str]:
    """Modules a command imports (PYTHONPROFILEIMPORTTIME), by name."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    p = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO)
    return {ln.split("|")[-1].strip() for ln in p.stderr.splitlines() if ln.startswith("import time:")}


def test_installed_command_adds_no_re_json_or_typing() -> None:
    """The installed ``cxlctl`` (scripts/cxlctl, not pip's wrapper, which imports ``re``)
    serves ``status --json`` without importing ``re``, ``json`` or ``typing`` beyond what
    the interpreter's own start-up (an editable install's .pth included) already loads."""
    exe = os.path.join(os.path.dirname(sys.executable), "cxlctl")
    if not os.path.exists(exe):
        pytest.skip("cxlctl is not installed beside this interpreter")
    with open(exe, encoding="utf-8") as f:
        assert "import re" not in f.read()
    root = os.path.join(REPO, "fixtures", "linux-6.12", "single-region")
    added = _imported([exe, "--root", root, "status", "--json"]) - _imported([sys.executable, "-c", "pass"])
    assert not added & {"re", "json", "typing", "typer", "rich"}, sorted(added)


@pytest.mark.parametrize(
    "argv",
    [["tune", "plan", "inference-bandwidth"], ["tune", "list"], ["tune", "show", "inference-capacity"]],
)
def test_cli_tables_fold_instead_of_cutting_at_80_columns(argv: List[str]) -> None:
    """Knob names such as kernel.numa_balancing_promote_rate_limit_MBps wrap, never end in '…'."""
    root = os.path.join(REPO, "fixtures", "linux-6.12", "hb2x2-region")
    p = cli("--root", root, *argv, env={"COLUMNS": "80"})
    assert p.returncode == 0, p.stderr
    assert "…" not in p.stdout and max(len(ln) for ln in p.stdout.splitlines()) <= 80, p.stdout


def test_an_exit_code_raised_inside_a_command_is_the_process_exit_code() -> None:
    """click without standalone mode *returns* a ``typer.Exit``'s code; run_app must pass it on
    (``cxlctl daemon`` ends with ``typer.Exit(rc)``: a failed shutdown rollback exited 0, and
    systemd's ``Restart=on-failure`` never saw it)."""
    import typer

    from cxlctl.cli.common import run_app

    app = typer.Typer()

    @app.command()
    def fails() -> None:
        raise typer.Exit(3)

    @app.command()
    def works() -> None:
        pass

    assert run_app(app, ["fails"]) == 3
    assert run_app(app, ["works"]) == 0


def test_errors_and_notes_fold_on_a_terminal_only(monkeypatch: Any) -> None:
    """On a terminal a long error is folded at its width (paths never broken); in a pipe or the
    journal it stays one line, so grep and journalctl keep the record whole."""
    import io

    from cxlctl.cli.common import fold_for_terminal

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("COLUMNS", "80")
    msg = "cxlctl: error: no window can hold a 2-way region: " + "; ".join(
        f"decoder0.{i} cannot reach 2 free memdevs evenly" for i in range(3)
    )
    msg += "\n  hint: see /sys/bus/cxl/devices/decoder0.0/interleave_ways_and_a_very_long_name_that_is_a_path_really"
    folded = fold_for_terminal(msg, Tty()).splitlines()
    assert len(folded) > 3 and all(len(x) <= 80 for x in folded[:-1])
    assert folded[-1].strip().startswith("/sys/bus/cxl/devices/decoder0.0/interleave")  # a path is never split
    assert " ".join(" ".join(folded).split()) == " ".join(msg.split())
    assert fold_for_terminal(msg, io.StringIO()) == msg  # a pipe: untouched
