"""The command line as a user meets it: exit codes, messages, the status --json fast path."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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
