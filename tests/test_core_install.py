"""scripts/install.sh: the README's install puts ``cxlctl`` on PATH and ``--uninstall`` removes exactly it.

One real install (a fresh venv, ``pip install .`` from the configured index: about 20 s) of a copy of
the checkout, with the link directory, the man directory and HOME inside a temporary folder, so the
host's /usr/local and the user's dot-directories are never touched.  As root it is the root install:
into a root-owned ``--prefix`` (standing in for /opt/cxlctl), pinned and hash-checked, and root's alone
end to end (issue 43); as another user, the per-user venv in the checkout.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from cxlctl.hostio.host import Host
from tests.kit import FIXTURES, fixture_roots

REPO = Path(__file__).resolve().parent.parent


def _tree(top: Path) -> Dict[str, str]:
    """Every path under ``top`` -> what it is (file content digest, link target, "dir")."""
    out: Dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for d in dirnames:
            p = Path(dirpath, d)
            out[str(p)] = f"-> {os.readlink(p)}" if p.is_symlink() else "dir"
        for f in filenames:
            p = Path(dirpath, f)
            out[str(p)] = f"-> {os.readlink(p)}" if p.is_symlink() else p.read_bytes().hex()[:64]
    return out


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to copy the checkout as a clone would")
def test_install_links_cxlctl_and_uninstall_removes_exactly_what_it_wrote(tmp_path: Path) -> None:
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        if (REPO / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, src / rel)
    home, prefix = tmp_path / "home", tmp_path / "prefix"
    home.mkdir()
    as_root = os.geteuid() == 0
    opt = tmp_path / "opt"
    opt.mkdir()
    venv = opt / "cxlctl" if as_root else src / ".venv"
    args = ["--prefix", str(venv)] if as_root else []
    # a man page that is not this install's: it must survive install and uninstall untouched
    man1 = prefix / "share" / "man" / "man1"
    man1.mkdir(parents=True)
    (man1 / "cxlctl.1").write_text("someone else's page\n")
    before = {**_tree(home), **_tree(prefix), **_tree(src), **_tree(opt)}
    env = {
        "HOME": str(home),
        "PATH": f"{os.path.dirname(sys.executable)}:/usr/sbin:/usr/bin:/sbin:/bin",
        "CXLCTL_BINDIR": str(prefix / "bin"),
        "PIP_NO_CACHE_DIR": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    for k in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_CONFIG_FILE", "PIP_NO_INDEX"):
        if k in os.environ:
            env[k] = os.environ[k]
    inst = subprocess.run(["bash", "scripts/install.sh", *args], cwd=src, env=env, capture_output=True, text=True)
    assert inst.returncode == 0, inst.stderr[-3000:]
    link = prefix / "bin" / "cxlctl"
    assert link.is_symlink() and os.readlink(link) == str(venv / "bin" / "cxlctl")
    if as_root:
        _assert_roots_alone(venv, src)
    # on PATH by its bare name, from an empty environment (what sudo's secure_path gives)
    ver = subprocess.run(
        ["cxlctl", "--version"], env={"PATH": f"{prefix / 'bin'}:/usr/bin:/bin"}, capture_output=True, text=True
    )
    assert ver.returncode == 0 and ver.stdout.startswith("cxlctl "), ver.stderr
    assert (man1 / "cxlctl-tune.1").is_symlink()
    assert (man1 / "cxlctl.1").read_text() == "someone else's page\n"
    assert "left " in inst.stderr and str(man1 / "cxlctl.1") in inst.stderr
    completion = home / ".local" / "share" / "bash-completion" / "completions" / "cxlctl"
    assert completion.is_file()
    assert str(completion) in inst.stdout  # the install says where it wrote it
    assert "--uninstall" in inst.stdout

    un = subprocess.run(
        ["bash", "scripts/install.sh", *args, "--uninstall"], cwd=src, env=env, capture_output=True, text=True
    )
    assert un.returncode == 0, un.stderr
    after = {**_tree(home), **_tree(prefix), **_tree(src), **_tree(opt)}
    assert after == before


def _assert_roots_alone(venv: Path, checkout: Path) -> None:
    """The root install: every file root-owned and not group/other-writable, the paths above it
    trusted (cxlctl.hostio.trust), nothing run from the checkout, the dependencies the lock's."""
    from cxlctl.hostio.trust import untrusted

    bad = []
    for dirpath, dirnames, filenames in os.walk(venv):
        for n in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, n))
            if st.st_uid != 0 or (not os.path.islink(os.path.join(dirpath, n)) and st.st_mode & 0o022):
                bad.append(os.path.join(dirpath, n))
    assert not bad, bad[:5]
    py = str(venv / "bin" / "python")
    where = subprocess.run(
        [py, "-I", "-c", "import cxlctl, typer, rich, os; print(os.path.dirname(cxlctl.__file__))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(venv)) and not where.startswith(str(checkout))
    for p in (str(venv / "bin" / "cxlctl"), py, where):
        assert untrusted(p) == [], p
    frozen = subprocess.run([py, "-m", "pip", "freeze"], capture_output=True, text=True, check=True).stdout
    with open(REPO / "scripts" / "install.lock") as f:
        pins = {m.group(1).lower(): m.group(2) for m in re.finditer(r"^([A-Za-z0-9_.-]+)==(\S+)", f.read(), re.M)}
    for line in frozen.splitlines():
        name, _, ver = line.partition("==")
        if ver:
            assert pins.get(name.lower().replace("_", "-")) == ver, line


def test_install_refuses_an_unknown_option(tmp_path: Path) -> None:
    p = subprocess.run(["bash", str(REPO / "scripts" / "install.sh"), "--uninstal"], capture_output=True, text=True)
    assert p.returncode == 2 and "--uninstall" in p.stderr


def _status_80(root: str) -> str:
    from rich.console import Console

    from cxlctl.inventory import scan
    from cxlctl.render import render_status

    buf = io.StringIO()
    render_status(scan(Host(root)), Console(file=buf, width=80, color_system=None, force_terminal=False))
    return buf.getvalue()


def test_status_explains_the_none_zone_cell() -> None:
    """``1 none`` in ONLINE BLOCKS (recorded on 6.12: memory0 holds ZONE_DMA and the start of DMA32) is
    explained under the table, on one line at 80 columns (every recorded kernel has such a block)."""
    with_none = _status_80(os.path.join(FIXTURES, "linux-6.12", "hb2x2-region"))
    assert re.search(r"\b1 none\b", with_none)
    legend = [ln for ln in with_none.splitlines() if ln.startswith("none (ONLINE BLOCKS)")]
    assert legend == ["none (ONLINE BLOCKS): a block spanning two zones, which cannot be offlined"]


_TYPER_PATH = "import sys; from cxlctl.cli import run; sys.exit(run(sys.argv[1:]))"

#: One interpreter per path runs every recorded tree's command in a process of its own, forked after
#: the path's imports (``fast``: the console script's ``entry``, which ends the process itself as
#: ``python -m cxlctl`` does; ``typer``: ``sys.exit(run(args))``, _TYPER_PATH's body); each child's
#: stdout and stderr are files.  The same streams and exit codes as a fresh ``python -m cxlctl`` per
#: tree, without starting ~90 interpreters per test (they were ~45 s of the unit tier's CPU).
_FORKED = r"""
import json, os, sys, tempfile
mode, runs = sys.argv[1], json.loads(sys.argv[2])
if mode == "typer":
    from cxlctl.cli import run
else:
    from cxlctl import commands, emit, errors  # noqa: F401  (what the fast path imports)
    from cxlctl.__main__ import entry
    from cxlctl.hostio import host  # noqa: F401
results = []
for args in runs:
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    pid = os.fork()
    if pid == 0:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.argv = ["cxlctl", *args]
        code = 0
        try:
            if mode == "typer":
                sys.exit(run(args))
            entry()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    out.seek(0)
    err.seek(0)
    results.append([os.waitstatus_to_exitcode(status), out.read().decode(), err.read().decode()])
sys.stdout.write(json.dumps(results))
"""


def _each_tree(env: Dict[str, str], mode: str, runs: List[List[str]]) -> List[Tuple[int, str, str]]:
    """(exit code, stdout, stderr) of each argv in ``runs`` by the ``fast`` or ``typer`` path (_FORKED)."""
    p = _py(env, "-c", _FORKED, mode, json.dumps(runs))
    assert p.returncode == 0, p.stderr[-3000:]
    return [(rc, out, err) for rc, out, err in json.loads(p.stdout)]


@pytest.mark.parametrize("width", ["80", "160"])
def test_human_status_fast_path_prints_what_the_typer_command_prints(width: str) -> None:
    """``status`` is served without typer (bench/README.md: typer is most of its cost); on every recorded
    tree it must print exactly what the typer command prints, and the whole command never imports typer."""
    env = {**os.environ, "COLUMNS": width}
    env.pop("CXLCTL_ROOT", None)
    roots = fixture_roots()
    assert len(roots) > 10
    runs = [["--root", root, "status"] for root in roots]
    for root, fast, slow in zip(roots, _each_tree(env, "fast", runs), _each_tree(env, "typer", runs)):
        assert fast == slow, root
        assert "NUMA nodes" in fast[1]
    # and once as a user runs it: a fresh interpreter each
    fast_p = _py(env, "-m", "cxlctl", *runs[0])
    slow_p = _py(env, "-c", _TYPER_PATH, *runs[0])
    assert (fast_p.returncode, fast_p.stdout, fast_p.stderr) == (slow_p.returncode, slow_p.stdout, slow_p.stderr)
    assert (fast_p.returncode, fast_p.stdout, fast_p.stderr) == _each_tree(env, "fast", runs[:1])[0]
    code = (
        "import sys, io, contextlib; from cxlctl.__main__ import main\n"
        f"with contextlib.redirect_stdout(io.StringIO()): rc = main(['--root', {roots[0]!r}, 'status'])\n"
        "print(rc, [m for m in ('typer', 'typer._click', 'click', 'pydantic') if m in sys.modules])"
    )
    out = _py(env, "-c", code)
    assert out.stdout.strip() == "0 []", out.stderr


def _py(env: Dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=REPO)


@pytest.mark.parametrize("cmd", [["doctor", "--json"], ["stat", "--json"]])
def test_doctor_and_stat_json_fast_path_print_what_the_typer_commands_print(cmd: List[str]) -> None:
    """``doctor --json`` and ``stat --json`` skip typer too: same stdout, stderr and exit code on every
    recorded tree (a failing doctor check included), and typer is never imported."""
    env = {**os.environ, "COLUMNS": "80"}
    env.pop("CXLCTL_ROOT", None)
    roots = fixture_roots()
    runs = [["--root", root, *cmd] for root in roots]
    for root, fast, slow in zip(roots, _each_tree(env, "fast", runs), _each_tree(env, "typer", runs)):
        # a report's "time" is the wall clock of its sample: equal only to the second
        f_out, s_out = (re.sub(r'"time": "[^"]*"', '"time": T', p[1]) for p in (fast, slow))
        assert (fast[0], f_out, fast[2]) == (slow[0], s_out, slow[2]), root
        assert fast[1].startswith('{"schema_version": 1') or fast[1].startswith('{\n  "schema_version": 1')
    # and once as a user runs it: a fresh interpreter each
    fast_p = _py(env, "-m", "cxlctl", *runs[0])
    slow_p = _py(env, "-c", _TYPER_PATH, *runs[0])
    f_out, s_out = (re.sub(r'"time": "[^"]*"', '"time": T', p.stdout) for p in (fast_p, slow_p))
    assert (fast_p.returncode, f_out, fast_p.stderr) == (slow_p.returncode, s_out, slow_p.stderr)
    code = (
        "import sys, io, contextlib; from cxlctl.__main__ import main\n"
        f"with contextlib.redirect_stdout(io.StringIO()): rc = main(['--root', {fixture_roots()[0]!r}, *{cmd!r}])\n"
        "print([m for m in ('typer', 'typer._click', 'click', 'rich') if m in sys.modules])"
    )
    out = _py(env, "-c", code)
    assert out.stdout.strip() == "[]", out.stderr
