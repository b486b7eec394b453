"""The one tool runner (cxlctl/hostio/tools.py) and the one ``cxl list`` reader.

Structure: exactly one module of the package imports ``subprocess`` (found with
:mod:`ast`, imports inside functions included), so every tool cxlctl runs gets the
same timeout, locale, closed stdin, output bound and error mapping.

Behaviour, with real tiny programs (``sh -c``, ``python -c``, small scripts standing
in for ndctl's ``cxl``), never mocks: the timeout is enforced (the tool and what it
started are killed) and reported, ``LC_ALL=C`` reaches the child, stdin is empty, a
missing tool and the other failures map to :class:`ToolError` with messages naming
the tool and the fix, output is bounded.  Then the callers that had their own
runners: ``cxlctl health``'s ndctl notes on odd bytes, a DAX driver load without
``modprobe``.
"""

from __future__ import annotations

import ast
import os
import sys
import time
from typing import Any, List, Set

import pytest

import cxlctl
from cxlctl.hostio import tools
from cxlctl.hostio.host import Host
from cxlctl.hostio.tools import ToolError

PKG_DIR = os.path.dirname(os.path.abspath(cxlctl.__file__))
RUNNER = os.path.join("hostio", "tools.py")
PY = sys.executable


def _sources() -> List[str]:
    out = []
    for dirpath, dirs, files in os.walk(PKG_DIR):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        out += [os.path.join(dirpath, f) for f in sorted(files) if f.endswith(".py")]
    return out


def _imports_subprocess(tree: ast.AST) -> bool:
    """Any ``import subprocess``/``from subprocess import …``/``import_module("subprocess")``, anywhere."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "subprocess" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "subprocess":
            return True
        if isinstance(node, ast.Call) and any(
            isinstance(a, ast.Constant) and a.value == "subprocess" for a in node.args
        ):
            return True  # importlib.import_module("subprocess"), __import__("subprocess")
    return False


#: other ways to start a program; os.exec* is not among them (launch *becomes* the engine)
SPAWNERS = {
    ("os", "system"),
    ("os", "popen"),
    ("os", "fork"),
    ("os", "forkpty"),
    ("os", "posix_spawn"),
    ("os", "posix_spawnp"),
    ("pty", "spawn"),
    ("asyncio", "create_subprocess_exec"),
    ("asyncio", "create_subprocess_shell"),
} | {("os", f"spawn{s}") for s in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")}


def test_exactly_one_module_imports_subprocess() -> None:
    users: Set[str] = set()
    spawners: Set[str] = set()
    for path in _sources():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        rel = os.path.relpath(path, PKG_DIR)
        if _imports_subprocess(tree):
            users.add(rel)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if (node.value.id, node.attr) in SPAWNERS:
                    spawners.add(f"{rel}: {node.value.id}.{node.attr}")
    assert users == {RUNNER}, f"modules importing subprocess: {sorted(users)}"
    assert not spawners, f"programs started outside the runner: {sorted(spawners)}"


def test_the_runner_imports_subprocess_lazily() -> None:
    """Start-up time: importing the runner (and its callers) must not import subprocess."""
    with open(os.path.join(PKG_DIR, RUNNER), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    top = ast.Module(body=[n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))], type_ignores=[])
    assert not _imports_subprocess(top)
    code = (
        "import sys, cxlctl.hostio.tools, cxlctl.doctor.probes, cxlctl.launch.engines, cxlctl.launch.policy;"
        "print('subprocess' in sys.modules)"
    )
    assert tools.run([PY, "-c", code]).stdout.strip() == "False"


# --------------------------------------------------------------------------- the runner


def test_timeout_is_enforced_reported_and_kills_what_the_tool_started(tmp_path: Any) -> None:
    pidfile = tmp_path / "child.pid"
    t0 = time.monotonic()
    with pytest.raises(ToolError) as ei:
        # the background sleep keeps the output pipe open after sh is killed: reading must not wait for it
        tools.run(["sh", "-c", f"sleep 30 & echo $! > {pidfile}; wait"], timeout=0.5)
    took = time.monotonic() - t0
    e = ei.value
    assert e.kind == "timeout" and took < 10, took
    assert str(e).startswith("sh -c sleep 30") and "did not finish within 0.5 s" in str(e)
    assert "by hand" in e.hint
    pid = int(pidfile.read_text())
    for _ in range(100):  # killed with its group; gone, or a zombie waiting for its reaper
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rpartition(")")[2].split()[0]
        except FileNotFoundError:
            break
        if state in ("Z", "X"):
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"the tool's child {pid} survived the timeout")


def test_default_timeout_is_always_set() -> None:
    import inspect

    assert inspect.signature(tools.run).parameters["timeout"].default == tools.DEFAULT_TIMEOUT > 0
    assert inspect.signature(tools.cxl_list).parameters["timeout"].default == tools.DEFAULT_TIMEOUT


def test_lc_all_c_reaches_the_child_and_cxlctl_keeps_its_own(monkeypatch: Any) -> None:
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")
    assert tools.run(["sh", "-c", 'printf %s "$LC_ALL"']).stdout == "C"
    env = {"PATH": os.environ["PATH"], "LC_ALL": "fr_FR.UTF-8", "LANG": "fr_FR.UTF-8", "MARK": "kept"}
    assert (
        tools.run(["sh", "-c", 'printf "%s %s %s" "$LC_ALL" "$LANG" "$MARK"'], env=env).stdout == "C fr_FR.UTF-8 kept"
    )
    assert os.environ["LC_ALL"] == "de_DE.UTF-8" and env["LC_ALL"] == "fr_FR.UTF-8"


def test_stdin_is_closed() -> None:
    res = tools.run([PY, "-c", "import sys; print(repr(sys.stdin.read()))"], timeout=20)
    assert res.stdout.strip() == "''"


def test_a_missing_tool_names_itself_and_the_fix(tmp_path: Any) -> None:
    with pytest.raises(ToolError) as ei:
        tools.run(["cxlctl-no-such-tool-xyz", "list"], package="ndctl")
    e = ei.value
    assert e.kind == "missing" and str(e) == "cxlctl-no-such-tool-xyz is not installed (not on PATH)"
    assert e.hint == "install ndctl" and e.note.endswith("; fix: install ndctl")
    with pytest.raises(ToolError) as ei:
        tools.run([str(tmp_path / "nothing-here")])
    assert ei.value.kind == "missing" and "nothing-here is not installed" in str(ei.value)
    assert "add its directory to PATH" in ei.value.hint


def test_a_file_that_cannot_be_run_is_an_os_error(tmp_path: Any) -> None:
    f = tmp_path / "not-executable"
    f.write_text("#!/bin/sh\necho hi\n")
    f.chmod(0o644)
    with pytest.raises(ToolError) as ei:
        tools.run([str(f)])
    assert ei.value.kind == "os" and str(ei.value) == f"cannot run {f}: Permission denied"


def test_non_zero_exit_names_the_command_and_the_error_line() -> None:
    script = (
        "echo 'usage: cxl list' >&2; echo \"  Error: unknown option \\`media-errors'\" >&2; echo ' -M' >&2; exit 129"
    )
    with pytest.raises(ToolError) as ei:
        tools.run(["sh", "-c", script])
    e = ei.value
    assert e.kind == "exit" and str(e).endswith("exited 129: Error: unknown option `media-errors'")
    assert e.result is not None and e.result.returncode == 129 and "usage: cxl list" in e.result.stderr
    res = tools.run(["sh", "-c", "echo out; echo err >&2; exit 3"], check=False)
    assert (res.returncode, res.output) == (3, "out\nerr\n")


def test_killed_by_a_signal() -> None:
    with pytest.raises(ToolError) as ei:
        tools.run(["sh", "-c", "kill -KILL $$"])
    assert ei.value.kind == "signal" and str(ei.value).endswith("was killed by signal SIGKILL")
    assert tools.run(["sh", "-c", "kill -TERM $$"], check=False).returncode == -15


def test_output_is_bounded_and_the_tool_is_not_blocked() -> None:
    spew = "import sys; sys.stdout.write('o' * (8 << 20)); sys.stdout.flush(); sys.stderr.write('e' * (8 << 20))"
    res = tools.run([PY, "-c", spew], max_output=1000, timeout=30)
    assert res.returncode == 0 and res.truncated
    assert res.stdout == "o" * 1000 and res.stderr == "e" * 1000
    res = tools.run([PY, "-c", f"print('x' * {tools.MAX_OUTPUT + 10})"], timeout=30)
    assert res.truncated and len(res.stdout) == tools.MAX_OUTPUT
    res = tools.run(["sh", "-c", "echo small"])
    assert not res.truncated and res.stdout == "small\n"


def test_odd_bytes_are_replaced_not_raised() -> None:
    assert tools.run(["sh", "-c", r"printf 'a\377b'"]).stdout == "a\ufffdb"


# --------------------------------------------------------------------------- cxl list


def _fake_cxl(tmp_path: Any, body: str) -> str:
    """A stand-in for ndctl's ``cxl``: a shell script printing what ``body`` prints."""
    p = tmp_path / "cxl"
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(0o755)
    return str(p)


MEM0 = '{"memdev":"mem0","health":{"temperature":30}}'


@pytest.mark.parametrize(
    "printed",
    [
        f"[{MEM0}]",  # -M
        f"{MEM0}",  # one match with -u: a bare object
        f'[{{"bus":"root0","ports:root0":[{{"endpoints:port1":[{{"memdev":{MEM0}}}]}}]}}]',  # -vvv, nested
        f'{{"anon memdevs":[{MEM0}],"buses":[]}}',  # several kinds at once
    ],
    ids=["flat", "bare-object", "nested", "kinds"],
)
def test_cxl_list_finds_the_memdevs_wherever_ndctl_puts_them(tmp_path: Any, printed: str) -> None:
    cxl = _fake_cxl(tmp_path, f"printf '%s\\n' '{printed}'")
    got = tools.cxl_list("-M", "-H", command=cxl)
    assert got.argv == (cxl, "list", "-M", "-H")
    assert [m["memdev"] for m in got.memdevs] == ["mem0"] and got.memdevs[0]["health"] == {"temperature": 30}


def test_cxl_list_with_no_match_is_empty(tmp_path: Any) -> None:
    got = tools.cxl_list("-M", command=_fake_cxl(tmp_path, "echo '  Warning: no matching devices found' >&2"))
    assert got.doc == [] and got.memdevs == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("echo 'not json'", "printed something that is not JSON"),
        ("echo 42", "printed JSON that is not a list or object"),
        (f"{PY} -c \"print('[' * 100000)\"", "printed something that is not JSON"),
        (f"{PY} -c \"print(' ' * {tools.MAX_OUTPUT + 1} + '[]')\"", f"printed more than {tools.MAX_OUTPUT} bytes"),
    ],
    ids=["text", "number", "deep", "huge"],
)
def test_cxl_list_output_it_cannot_use_is_an_error(tmp_path: Any, body: str, message: str) -> None:
    cxl = _fake_cxl(tmp_path, body)
    with pytest.raises(ToolError) as ei:
        tools.cxl_list("-M", command=cxl, timeout=30)
    assert ei.value.kind == "output" and str(ei.value) == f"{cxl} list -M {message}"


# --------------------------------------------------------------------------- the callers


def test_health_notes_odd_bytes_from_ndctl_instead_of_crashing(tmp_path: Any, monkeypatch: Any) -> None:
    """``cxlctl health``'s own runner decoded strictly: a stray byte was a traceback."""
    from cxlctl.ras import health as hmod

    _fake_cxl(tmp_path, r"printf '[\377]\n'")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    health, media, notes, _ = hmod._ndctl_health(Host("/"), ["mem0"])
    assert health == {} and media == {}
    assert notes[0] == "cxl list -M -H printed something that is not JSON; fix: run `cxl list -M -H` by hand"


def test_health_notes_a_missing_ndctl_with_the_fix(tmp_path: Any, monkeypatch: Any) -> None:
    from cxlctl.ras import health as hmod

    monkeypatch.setenv("PATH", str(tmp_path))
    _, _, notes, why = hmod._ndctl_health(Host("/"), ["mem0"])
    assert notes[0] == "cxl is not installed (not on PATH); fix: install ndctl"
    # a memdev's health line says what was looked for and this reason (issue 35 row 14)
    assert why.startswith("looked for the device's health log, read through its mailbox by `cxl list -M -H`")
    assert why.endswith("it could not run: cxl is not installed (not on PATH); fix: install ndctl")


def test_loading_a_dax_driver_without_modprobe_is_a_clear_error(tmp_path: Any, monkeypatch: Any) -> None:
    """regions/dax ran ``modprobe`` with no timeout, and a missing modprobe was a traceback."""
    from cxlctl.regions import dax

    monkeypatch.setenv("PATH", str(tmp_path))
    t0 = time.monotonic()
    with pytest.raises(dax.DaxError) as ei:
        dax._ensure_driver(Host("/"), "cxlctl_no_such_driver")
    assert "modprobe is not installed" in str(ei.value) and ei.value.hint == "modprobe cxlctl_no_such_driver"
    assert time.monotonic() - t0 < 4  # no 5 s wait for a driver that cannot appear
