"""The unit tests' kit: the recorded trees, a writable copy of one, and the real command line.

Every unit test finds its fixtures, copies a tree and runs ``cxlctl`` through these few
functions, so a newcomer reads one place to know how a test sees the tool: ``cli()`` runs
the command line (in a child process by default, as a user would; ``inprocess=True`` calls
the same entry point in this interpreter, which is faster and lets a test monkeypatch the
engine), and ``copy_fixture()`` makes the writable copy a test may change.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import io
import json
import os
import shutil
import subprocess
import sys
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "fixtures")

#: what every run sees unless the test says otherwise: a wide terminal (tables on one line,
#: so assertions do not depend on folding) and no CXLCTL_ROOT leaking in from the caller
BASE_ENV = {"COLUMNS": "160"}


def fixture_roots(pattern: str = "*/*") -> List[str]:
    """Recorded trees (each has a cxlctl-record.json manifest), by glob under fixtures/."""
    return sorted(os.path.dirname(m) for m in glob.glob(os.path.join(FIXTURES, pattern, "cxlctl-record.json")))


def fixture_id(path: str) -> str:
    """A tree's name for test ids and messages (``linux-6.12/hb2-region``)."""
    return os.path.relpath(path, FIXTURES)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system
        shutil.copy2(src, dst)


def copy_fixture(src: str, dest: Any, *, hardlinks: bool = False) -> str:
    """Writable copy of a recorded tree at ``dest`` (a path or pytest's ``tmp_path / name``),
    symlinks kept as links, so the copy resolves like the kernel's sysfs did. Returns the path.

    ``hardlinks`` links the files instead of copying them (several times faster, for tests
    that make many copies); such a test must unlink a file before writing it, or it writes
    the fixture itself.
    """
    out = str(dest)
    shutil.copytree(src, out, symlinks=True, copy_function=_link_or_copy if hardlinks else shutil.copy2)
    return out


@contextlib.contextmanager
def environ(env: Mapping[str, Optional[str]]) -> Iterator[None]:
    """``os.environ`` with ``env`` applied (None removes a name), put back afterwards."""
    saved = {k: os.environ.get(k) for k in env}
    try:
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_inprocess(
    entry: Callable[[List[str]], int], args: List[str], env: Mapping[str, Optional[str]]
) -> Tuple[int, str, str]:
    """``entry(ARGS)`` (a cxlctl entry point) in this process with ``env`` applied around it:
    (exit code, stdout, stderr).  The unit tier's ``cli(inprocess=True)`` and the VM guest
    drivers (tests/vm/guest.py) both run cxlctl this way."""
    out, err = io.StringIO(), io.StringIO()
    with environ(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = entry(args)
    return code, out.getvalue(), err.getvalue()


def cli(
    *args: str,
    env: Optional[Dict[str, str]] = None,
    check: bool = False,
    rc: Optional[int] = None,
    inprocess: bool = False,
    wrap: Sequence[str] = (),
    nobody: bool = False,
    **kw: Any,
) -> subprocess.CompletedProcess[str]:
    """Run ``cxlctl ARGS`` and return its exit code, stdout and stderr.

    By default a child ``python -m cxlctl`` (what a user runs: start-up, signals, exit codes
    and streams are real; stdin is empty unless ``input`` is given; ``kw`` goes to
    ``subprocess.run``; ``wrap`` is a command the child runs under, such as
    ``setpriv ... --``; ``nobody=True`` runs it as uid 65534 from ``/``, wherever the checkout lies:
    :func:`nobody_python`); ``inprocess=True`` calls ``cxlctl.cli.run`` here with stdout and
    stderr captured (``kw`` is then not allowed). ``check`` asserts exit 0, ``rc`` asserts
    that exit code; either failure shows both streams.
    """
    full: Dict[str, Optional[str]] = {"CXLCTL_ROOT": None, **BASE_ENV, **(env or {})}
    if inprocess:
        if kw or wrap:
            raise TypeError(f"cli(inprocess=True) takes no subprocess options: {sorted(kw)}")
        from cxlctl.cli import run

        p = subprocess.CompletedProcess(list(args), *run_inprocess(run, list(args), full))
    else:
        e = dict(os.environ)
        for k, v in full.items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        # uid 65534 may not enter the checkout (nobody_python): it starts from / unless told otherwise
        kw.setdefault("cwd", "/" if nobody else REPO)
        if "input" not in kw:
            kw.setdefault("stdin", subprocess.DEVNULL)  # never the terminal pytest was started from
        kw.setdefault("timeout", 600)  # a hang fails the test instead of the whole run
        if nobody:
            # as uid 65534, from / (the checkout may be private: nobody_python)
            argv = [*nobody_python(), "-m", "cxlctl", *args]
        else:
            argv = [*wrap, sys.executable, "-m", "cxlctl", *args]
        p = subprocess.run(argv, capture_output=True, text=True, env=e, **kw)
    want = 0 if check else rc
    if want is not None and p.returncode != want:
        raise AssertionError(f"cxlctl {' '.join(args)} -> {p.returncode}, expected {want}\n{p.stdout}\n{p.stderr}")
    return p


#: run the rest of an argv as the unprivileged user the security tests act as (uid/gid 65534)
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]


def _world_readable(top: str) -> None:
    """Every directory under ``top`` 0755, every file readable by all (links left as they are)."""
    for d, _dirs, files in os.walk(top):
        os.chmod(d, 0o755)
        for f in files:
            fp = os.path.join(d, f)
            if not os.path.islink(fp):
                os.chmod(fp, os.stat(fp).st_mode | 0o444)


@functools.cache
def nobody_python() -> Tuple[str, ...]:
    """An argv prefix that starts a Python as uid 65534 which imports this checkout's cxlctl and its
    dependencies (``[*nobody_python(), "-m", "cxlctl", ...]``; run it with ``cwd="/"``).

    The checkout's own venv where that user can read it.  CI's clone may lie in a private directory
    (``scripts/ci-fresh.sh``: ``mktemp -d``, mode 0700), where the unprivileged runs of issue 43's
    attacks used to skip or fail: then the base interpreter with ``PYTHONPATH`` on a world-readable
    copy of the cxlctl package and the venv's site-packages (the test tools left out), made once per
    session.  ``-I`` would drop that ``PYTHONPATH``: a caller that wants isolation without cxlctl
    runs ``[*NOBODY, sys._base_executable, "-I", ...]``.
    """
    probe = subprocess.run([*NOBODY, sys.executable, "-c", "import cxlctl"], capture_output=True, cwd="/")
    if probe.returncode == 0:
        return (*NOBODY, sys.executable)
    import atexit
    import sysconfig
    import tempfile

    mirror = tempfile.mkdtemp(prefix="cxlctl-nobody-")
    skip = shutil.ignore_patterns(
        "__pycache__", "__editable__*", "kubernetes_validate*", "mypy*", "*mypyc*", "pip", "pip-*", "hypothesis*",
        "ruff*", "setuptools*", "_pytest", "pytest*",
    )  # fmt: skip
    shutil.copytree(os.path.join(REPO, "cxlctl"), os.path.join(mirror, "src", "cxlctl"), ignore=skip)
    shutil.copytree(sysconfig.get_paths()["purelib"], os.path.join(mirror, "site"), ignore=skip, symlinks=True)
    _world_readable(mirror)
    atexit.register(shutil.rmtree, mirror, True)
    base = getattr(sys, "_base_executable", sys.executable)
    return (*NOBODY, "env", f"PYTHONPATH={mirror}/src:{mirror}/site", base)


def readable_copy(src: str) -> str:
    """A copy of a recorded tree that uid 65534 can walk into (pytest's ``tmp_path`` and, in CI, the
    checkout itself may be private to root), removed when the test session ends."""
    import atexit
    import tempfile

    d = tempfile.mkdtemp(prefix="cxlctl-readable-")
    os.chmod(d, 0o755)
    atexit.register(shutil.rmtree, d, True)
    out = copy_fixture(src, os.path.join(d, "root"))
    _world_readable(out)
    return out


def status_json(root: str) -> Dict[str, Any]:
    """``cxlctl --root ROOT status --json``, parsed."""
    data = json.loads(cli("--root", root, "status", "--json", check=True).stdout)
    assert isinstance(data, dict)
    return data


def bash_words(text: str) -> List[str]:
    """The words bash reads in the command line ``text`` (continuation lines included): how a test
    proves that a line cxlctl printed, folded or not, is the command it means.  Bash is looked up
    on the system's own path, as a test may have emptied ``PATH``."""
    bash = shutil.which("bash", path=os.defpath + ":/usr/bin:/bin") or "/bin/bash"
    p = subprocess.run([bash, "-c", "printf '%s\\0' " + text], capture_output=True, text=True, check=True)
    return p.stdout.split("\0")[:-1]
