"""The command line as a user meets it: exit codes, messages, the status --json fast path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, List

import pytest

from cxlctl.errors import EXIT_USAGE
from tests.conftest import REPO, cxlctl


def test_version() -> None:
    p = cxlctl("--version", check=True)
    assert p.stdout.startswith("cxlctl ")


def test_bad_root_is_usage_error_without_traceback(tmp_path: object) -> None:
    for args in (["--root", "/no/such/dir", "status", "--json"], ["--root", "/no/such/dir", "status"]):
        p = cxlctl(*args)
        assert p.returncode == EXIT_USAGE, p
        assert "is not a directory" in p.stderr
        assert "Traceback" not in p.stderr + p.stdout
    p = cxlctl("status", "--json", env={"CXLCTL_ROOT": "/no/such/dir"})
    assert p.returncode == EXIT_USAGE and "CXLCTL_ROOT" in p.stderr


def test_unknown_option_is_usage_error() -> None:
    p = cxlctl("status", "--bogus")
    assert p.returncode == EXIT_USAGE
    assert "Traceback" not in p.stderr


def test_status_on_this_host_works_without_cxl() -> None:
    """These CI machines have no CXL: status must say so and still list NUMA nodes."""
    p = cxlctl("status", check=True)
    data = json.loads(cxlctl("status", "--json", check=True).stdout)
    assert data["nodes"], "a Linux host always has at least one NUMA node"
    if not data["cxl_present"]:
        assert "No CXL devices" in p.stdout
        assert any(w["code"] == "no-cxl" for w in data["warnings"])
    assert "NUMA nodes" in p.stdout


def test_fast_path_equals_typer_path(live_record: str) -> None:
    """`status --json` is served without typer; it must print what the full CLI prints."""
    fast = cxlctl("--root", live_record, "status", "--json", check=True).stdout
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
    a = cxlctl("status", "--json", env={"CXLCTL_ROOT": live_record}, check=True).stdout
    b = cxlctl("--root", live_record, "status", "--json", check=True).stdout
    assert a == b
    assert os.path.isdir(live_record)


def test_weighted_interleave_auto_under_either_name() -> None:
    """6.16+ exposes `auto`; some builds name it `__auto_type` (this CI host's 6.18 does)."""
    wi = "/sys/kernel/mm/mempolicy/weighted_interleave"
    data = json.loads(cxlctl("status", "--json", check=True).stdout)["weighted_interleave"]
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
        p = cxlctl(*argv)
        assert p.returncode == slow_rc, (argv, p.stderr)
    p = cxlctl("status", "--json", "--root", r)
    assert p.returncode == EXIT_USAGE and "--root" in p.stderr and "Traceback" not in p.stderr


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
    p = cxlctl(*cmd, "--wait", value)
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
