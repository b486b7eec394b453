"""The CLI's argument handling and error paths (issue 19, slice "cliargs").

Each test runs the real command line (``python -m cxlctl``, or :func:`cxlctl.cli.run`
in-process where file descriptors do not matter) on recorded fixtures, the way the
new-user run that found these defects did: non-ASCII digits (#7), click's usage
errors (#16), ``record`` onto a file (#17), ``--json`` failures (#18), a closed or
full stdout (#11), options that were silently ignored (#15) and ``--model-config``
pointing at a device, a FIFO or a 100k-deep JSON (#1).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import resource
import subprocess
import sys
from typing import Any, Dict, List, Optional

import pytest

from tests.kit import REPO, cli, copy_fixture, fixture_roots

ROOT = fixture_roots("linux-6.12/hb2-noregion")[0]
REGION = fixture_roots("linux-6.12/hb2-region")[0]


def _one_error_line(err: str) -> None:
    """cxlctl's own shape: ``cxlctl: error: …``, at most a ``hint:`` line after it, no traceback."""
    lines = err.rstrip("\n").split("\n")
    assert lines[0].startswith("cxlctl: error: "), err
    assert len(lines) <= 2 and all(ln.startswith("  hint: ") for ln in lines[1:]), err
    assert "Traceback" not in err and "Usage:" not in err and "Try '" not in err, err


def _tree_digest(root: str) -> str:
    """Every file name and content under ``root``: to show a refused command wrote nothing."""
    h = hashlib.sha256()
    for d, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for n in sorted(files + [x for x in dirs if os.path.islink(os.path.join(d, x))]):
            p = os.path.join(d, n)
            h.update(p.encode())
            if os.path.islink(p):
                h.update(os.readlink(p).encode())
            elif os.path.isfile(p):
                with open(p, "rb") as f:
                    h.update(f.read())
    return h.hexdigest()


# ------------------------------------------------------------------ private typer/click imports


def _private_imports(path: str) -> List[str]:
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] in ("typer", "click") and any(p.startswith("_") for p in parts):
                    bad.append(f"{path}:{node.lineno}: import {a.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            parts = node.module.split(".")
            if parts[0] not in ("typer", "click"):
                continue
            names = [a.name for a in node.names]
            if any(p.startswith("_") for p in parts) or any(n.startswith("_") for n in names):
                bad.append(f"{path}:{node.lineno}: from {node.module} import {', '.join(names)}")
    return bad


def test_no_module_imports_private_typer_or_click_names() -> None:
    """typer vendors click as ``typer._click`` and asks users not to import it: the CLI uses typer's public API."""
    bad: List[str] = []
    for d, _, files in os.walk(os.path.join(REPO, "cxlctl")):
        for n in files:
            if n.endswith(".py"):
                bad += _private_imports(os.path.join(d, n))
    assert not bad, "\n".join(bad)


def test_the_scan_sees_private_imports(tmp_path: Any) -> None:
    """The scan above is not vacuous: it catches each form the CLI used."""
    p = tmp_path / "m.py"
    p.write_text(
        "import typer._click as click\n"
        "from typer._click.globals import get_current_context\n"
        "from typer import _completion_shared\n"
        "from typer.core import TyperCommand\n"
    )
    assert len(_private_imports(str(p))) == 3


# ------------------------------------------------------------------ #7 ASCII digits only


@pytest.mark.parametrize(
    "argv",
    [
        ["region", "plan", "--ways", "٢"],
        ["stat", "--count", "٢", "--json"],
        ["stat", "--top", "١", "--json"],
        ["stat", "--pid", "١", "--json"],
        ["top", "--count", "٢", "--json"],
        ["top", "--rows", "٣", "--count", "1", "--json"],
        ["policy", "show", "١"],
        ["events", "--follow", "--duration", "١", "--json"],
        ["tune", "try", "cxl-common", "--timeout", "٥"],
    ],
    ids=lambda a: " ".join(a[:3]),
)
def test_non_ascii_digits_are_usage_errors(argv: List[str], tmp_path: Any) -> None:
    """int() and float() take Arabic-Indic digits; the one integer type (and the seconds type) do not."""
    root = copy_fixture(ROOT, str(tmp_path / "t"))
    before = _tree_digest(root)
    p = cli("--root", root, *argv, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 2, (argv, p.returncode, p.stdout[:300], p.stderr)
    _one_error_line(p.stderr)
    assert any(m in p.stderr for m in ("ASCII digits", "not a number of seconds", "positive number of seconds")), (
        p.stderr
    )
    assert _tree_digest(root) == before, "a refused command wrote into the tree (tune try applied a profile?)"


def test_ascii_numbers_still_work() -> None:
    assert cli("--root", REGION, "stat", "--count", "1", "--top", "2", "--json").returncode == 0
    assert cli("--root", ROOT, "region", "plan", "--ways", "2", "--json").returncode == 0


# ------------------------------------------------------------------ #16 click usage errors


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["status", "--bogus"], "No such option: --bogus"),
        (["status", "extra"], "unexpected extra argument"),
        (["status", "--root"], "No such option: --root"),  # with a value it is moved in front (issue 44)
        (["record"], "Missing argument 'DEST'"),
        (["region", "plan", "--ways"], "requires an argument"),
        (["tune", "nosuch"], "No such command 'nosuch'"),
        (["nosuch"], "No such command 'nosuch'"),
        (["dax", "reconfigure", "dax0.0"], "Missing option '--mode'"),
        (["region", "plan", "--json=1"], "does not take a value"),
    ],
)
def test_click_usage_errors_are_one_line(argv: List[str], needle: str) -> None:
    p = cli("--root", ROOT, *argv)
    assert p.returncode == 2, (argv, p.returncode, p.stderr)
    _one_error_line(p.stderr)
    assert needle in p.stderr, p.stderr
    assert "--help`" in p.stderr  # the hint names the command's help


def test_a_group_without_a_command_still_prints_its_help() -> None:
    p = cli("tune")
    assert p.returncode == 2 and "Usage: cxlctl tune" in p.stderr + p.stdout


# ------------------------------------------------------------------ #17 record DEST


def test_record_onto_a_file_or_nothing_is_a_usage_error(tmp_path: Any) -> None:
    f = tmp_path / "notes.txt"
    f.write_text("mine\n")
    p = cli("--root", ROOT, "record", str(f))
    assert p.returncode == 2, p.stderr
    _one_error_line(p.stderr)
    assert f"{f} exists and is not a directory" in p.stderr
    assert f.read_text() == "mine\n"
    p = cli("--root", ROOT, "record", str(f), "--force")
    assert p.returncode == 2 and "not a directory" in p.stderr
    p = cli("--root", ROOT, "record", "")
    assert p.returncode == 2, p.stderr
    _one_error_line(p.stderr)
    assert "DEST is empty" in p.stderr


# ------------------------------------------------------------------ #18 --json failures


def _error_doc(stdout: str, rc: int) -> Dict[str, Any]:
    doc: Dict[str, Any] = json.loads(stdout)  # exactly one document
    assert doc["schema_version"] == 1 and set(doc) == {"schema_version", "error"}, doc
    err: Dict[str, Any] = doc["error"]
    assert set(err) == {"message", "hint", "exit"} and err["exit"] == rc, doc
    return err


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--root", "/nonexistent", "status", "--json"], "is not a directory"),  # the fast path
        (["--root", "/nonexistent", "tune", "list", "--json"], "is not a directory"),
        (["--root", ROOT, "region", "plan", "--ways", "x", "--json"], "--ways"),  # a click usage error
        (["--root", ROOT, "status", "--json", "--bogus"], "No such option"),
        (["--root", ROOT, "policy", "show", "999999", "--json"], "no process with PID 999999"),
        (["--root", ROOT, "region", "plan", "--memdevs", "mem0,mem0", "--json"], "more than once"),
    ],
)
def test_a_failing_json_run_prints_a_json_error_object(argv: List[str], needle: str) -> None:
    p = cli(*argv)
    assert p.returncode != 0, p.stdout
    err = _error_doc(p.stdout, p.returncode)
    assert needle in err["message"], err
    assert p.stderr.startswith("cxlctl: error: ") and needle in p.stderr  # people still read stderr


def test_the_json_error_object_is_documented() -> None:
    for doc in ("cli.md", "json-schema.md"):
        with open(os.path.join(REPO, "docs", doc), encoding="utf-8") as f:
            text = f.read()
        assert '"error": {"message"' in text, doc


def test_a_command_that_printed_its_document_gets_no_second_one(capsys: Any) -> None:
    """doctor --json prints its report, then fails: stdout stays one parseable document."""
    import typer

    from cxlctl.cli.common import emit_json, run_app
    from cxlctl.errors import CxlctlError

    app = typer.Typer(add_completion=False)

    @app.command()
    def report(json_out: bool = typer.Option(False, "--json")) -> None:
        emit_json({"checks": []})
        raise CxlctlError("2 checks failed")

    assert run_app(app, ["--json"]) == 1
    out = capsys.readouterr()
    assert json.loads(out.out) == {"schema_version": 1, "checks": []}
    assert out.err == "cxlctl: error: 2 checks failed\n"


# ------------------------------------------------------------------ #11 closed or full stdout


def _run_with_stdout(argv: List[str], how: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="100")
    env.pop("CXLCTL_ROOT", None)
    cmd = [sys.executable, "-m", "cxlctl", *argv]
    if how == "closed":
        return subprocess.run(
            cmd, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO, pass_fds=(),
            preexec_fn=lambda: os.close(1),
        )  # fmt: skip
    with open("/dev/full", "w") as full:
        return subprocess.run(cmd, stdout=full, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("how", ["closed", "full"])
@pytest.mark.parametrize(
    "argv",
    [
        ["--root", REGION, "status", "--json"],  # the fast path
        ["--root", REGION, "status"],
        ["--root", REGION, "doctor", "--json"],
        ["--root", REGION, "tune", "list"],
        ["--root", ROOT, "region", "plan", "--ways", "2", "--json"],
        ["--version"],
    ],
    ids=lambda a: " ".join(a[2:] if a[0] == "--root" else a),
)
def test_a_stdout_that_cannot_be_written_is_exit_1_with_a_message(argv: List[str], how: str) -> None:
    p = _run_with_stdout(argv, how)
    assert p.returncode == 1, (argv, how, p.returncode, p.stderr)
    _one_error_line(p.stderr)
    assert "cannot write the output" in p.stderr, p.stderr
    assert "Exception ignored" not in p.stderr, p.stderr


# ------------------------------------------------------------------ #15 options no longer ignored


def test_a_memdev_named_twice_is_refused() -> None:
    for cmd in (["region", "plan"], ["region", "create", "--dry-run"]):
        p = cli("--root", ROOT, *cmd, "--memdevs", "mem0,mem1,mem0")
        assert p.returncode == 2, p.stdout
        _one_error_line(p.stderr)
        assert "names mem0 more than once" in p.stderr


def test_zone_with_devdax_is_refused() -> None:
    p = cli("--root", ROOT, "region", "create", "--dry-run", "--ways", "2", "--online", "devdax", "--zone", "movable")
    assert p.returncode == 2, p.stdout
    _one_error_line(p.stderr)
    assert "--zone movable has no effect with --online devdax" in p.stderr
    p = cli("--root", REGION, "dax", "reconfigure", "dax0.0", "--mode", "devdax", "--zone", "normal")
    assert p.returncode == 2 and "--zone normal has no effect with --mode devdax" in p.stderr, p.stderr
    # without --zone devdax still plans, and system-ram still takes a zone
    assert cli("--root", ROOT, "region", "create", "--dry-run", "--ways", "2", "--online", "devdax").returncode == 0
    p = cli("--root", ROOT, "region", "create", "--dry-run", "--ways", "2", "--zone", "movable", "--json")
    assert p.returncode == 0, p.stderr


# ------------------------------------------------------------------ #1 --model-config bounded


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # before the fix /dev/zero took 2.5 GB


@pytest.mark.parametrize("kind", ["device", "fifo", "deep", "huge"])
def test_model_config_is_read_bounded(kind: str, tmp_path: Any) -> None:
    path = {"device": "/dev/zero", "fifo": str(tmp_path / "fifo"), "deep": str(tmp_path / "deep.json")}.get(
        kind, str(tmp_path / "huge.json")
    )
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "deep":
        with open(path, "w") as f:
            f.write("[" * 100_000 + "]" * 100_000)
    elif kind == "huge":
        with open(path, "w") as f:
            f.write('{"pad": "' + "x" * (4 << 20) + '"}')
    argv = [
        "--root",
        REGION,
        "launch",
        "vllm",
        "--kv-size",
        "1G",
        "--dry-run",
        "--model-config",
        path,
        "--",
        "serve",
        "m",
    ]
    p = _bounded(argv)
    assert p is not None, f"--model-config {path} did not return within 30 s"
    assert p.returncode == 2, (p.returncode, p.stderr)
    _one_error_line(p.stderr)
    assert f"model config {path}" in p.stderr and "internal error" not in p.stderr, p.stderr


def _bounded(argv: List[str]) -> Optional[subprocess.CompletedProcess[str]]:
    env = dict(os.environ, COLUMNS="160")
    env.pop("CXLCTL_ROOT", None)
    try:
        return subprocess.run(
            [sys.executable, "-m", "cxlctl", *argv],
            capture_output=True, text=True, env=env, cwd=REPO, timeout=30, preexec_fn=_limited,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return None
