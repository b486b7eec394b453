"""Issue 43 item 4: engine detection imports nothing from the current directory.

``python -c``/``-m`` put the working directory first on ``sys.path``: a ``./sglang/__init__.py``
planted where root ran ``cxlctl launch sglang --dry-run`` (or ``doctor --for sglang``) ran as
uid 0, and the fake version and flags it printed were cached.  The probes now run in ``/`` with
``PYTHONSAFEPATH=1``, and the flag cache is root's own.  Each case runs as root and as uid 65534
(where that user can read this checkout: a CI clone in a private directory is not, and skips).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Iterator, List, Tuple

import pytest

from tests.kit import cli, fixture_roots, readable_copy

#: a planted package: leaves a marker naming the uid it ran as, and claims a version and flags
PLANTED_INIT = (
    "import os\nopen(os.path.join({markers!r}, 'ran-%d' % os.getuid()), 'w').close()\n__version__ = '6.6.6'\n"
)
PLANTED_SERVER = "print('usage: --hicache-size --planted-flag')\n"


@pytest.fixture
def planted() -> Iterator[Tuple[str, str]]:
    """(a working directory holding ./sglang and ./vllm, the directory the planted code marks)."""
    base = tempfile.mkdtemp(prefix="cxlctl-sec-engines-")
    os.chmod(base, 0o755)
    cwd, markers = os.path.join(base, "cwd"), os.path.join(base, "markers")
    os.makedirs(markers)
    os.chmod(markers, 0o777)  # uid 65534's run could leave its marker too
    for pkg in ("sglang", "vllm"):
        os.makedirs(os.path.join(cwd, pkg))
        with open(os.path.join(cwd, pkg, "__init__.py"), "w") as f:
            f.write(PLANTED_INIT.format(markers=markers))
        with open(os.path.join(cwd, pkg, "launch_server.py"), "w") as f:
            f.write(PLANTED_SERVER)
    os.chmod(cwd, 0o755)
    try:
        yield cwd, markers
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _who(uid: int) -> bool:
    """Whether the case runs as uid 65534 (kit.nobody_python: also where this checkout is private)."""
    if uid == os.geteuid():
        return False
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("running as another user needs root and setpriv")
    return True


def _cache(uid: int) -> str:
    d = tempfile.mkdtemp(prefix="cxlctl-sec-cache-")
    os.chown(d, uid, -1) if os.geteuid() == 0 else None
    return d


@pytest.mark.parametrize("uid", [0, 65534], ids=["root", "uid65534"])
@pytest.mark.parametrize(
    "argv",
    [
        ["launch", "sglang", "--dry-run", "--json", "--", "--model-path", "m"],
        ["doctor", "--for", "sglang", "--json", "--", "--model-path", "m"],
    ],
    ids=["launch", "doctor"],
)
def test_detection_imports_nothing_from_the_current_directory(
    planted: Tuple[str, str], uid: int, argv: List[str]
) -> None:
    if uid == 0 and os.geteuid() != 0:
        pytest.skip("needs root")
    nobody = _who(uid)
    cwd, markers = planted
    cache = _cache(uid)
    try:
        tree = readable_copy(fixture_roots("linux-6.12/single-region")[0])
        # the system's python3 (no SGLang): what the planted ./sglang poses as
        env = {"PATH": "/usr/bin:/bin", "HOME": cache, "CXLCTL_CACHE_DIR": cache}
        p = cli("--root", tree, *argv, env=env, nobody=nobody, cwd=cwd)
        assert "not a directory" not in p.stderr and "holds neither" not in p.stderr, p.stderr
        assert "Traceback" not in p.stderr, p.stderr
        assert os.listdir(markers) == [], "the planted package ran"
        assert "6.6.6" not in p.stdout and "--planted-flag" not in p.stdout, p.stdout
        for name in os.listdir(cache):  # nothing the planted code said was cached
            with open(os.path.join(cache, name)) as f:
                assert "planted" not in f.read() and "6.6.6" not in name
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def test_root_ignores_a_flag_cache_a_user_could_seed(tmp_path: object) -> None:
    """Root takes $CXLCTL_CACHE_DIR only when no other user can change it: a user's directory (here
    uid 65534's, holding seeded flag files) is not read, and nothing is written there."""
    if os.geteuid() != 0:
        pytest.skip("root's rule")
    from cxlctl.hostio import cache

    user = tempfile.mkdtemp(prefix="cxlctl-sec-usercache-")
    try:
        os.chown(user, 65534, 65534)
        assert cache.cache_dir({"CXLCTL_CACHE_DIR": user, "XDG_CACHE_HOME": user}) != user
        mine = str(tmp_path)
        assert cache.cache_dir({"CXLCTL_CACHE_DIR": mine}) == mine  # root's own, closed to others: used
    finally:
        shutil.rmtree(user, ignore_errors=True)


def test_the_flag_cache_is_keyed_by_the_program_and_read_only_from_its_user(tmp_path: object) -> None:
    """A cache file names the engine command's real path, inode, size and times and its arguments:
    the same path holding another program (a replaced binary) or run another way misses; and a cached
    file another uid owns, or others can write, is not read."""
    from cxlctl.hostio import cache
    from cxlctl.launch import engines

    d = str(tmp_path)
    exe = os.path.join(d, "python3")
    with open(exe, "w") as f:
        f.write("#!/bin/sh\n")
    env = {"CXLCTL_CACHE_DIR": os.path.join(d, "cache")}
    first = engines._cache_file("sglang", [exe, "-m", "sglang.launch_server"], "0.5.23", env)
    assert first is not None and first.startswith(os.path.join(d, "cache") + "/")
    assert engines._cache_file("sglang", [exe, "-m", "other"], "0.5.23", env) != first
    os.unlink(exe)
    with open(exe, "w") as f:
        f.write("#!/bin/sh\n# another program at the same path\n")
    assert engines._cache_file("sglang", [exe, "-m", "sglang.launch_server"], "0.5.23", env) != first
    seeded = os.path.join(d, "seeded.json")
    with open(seeded, "w") as f:
        f.write("{}")
    os.chmod(seeded, 0o666)
    assert cache.file_problem(seeded) == "is writable by others (mode 0666)"
    if os.geteuid() == 0:
        os.chmod(seeded, 0o600)
        os.chown(seeded, 65534, 65534)
        assert cache.file_problem(seeded) == "is owned by uid 65534, not root"
