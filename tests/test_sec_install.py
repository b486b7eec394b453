"""Issue 43, item 1: the code root runs is root's alone.

``scripts/install.sh`` refuses a root install another user could change, and a user's install
linked where root looks; ``cxlctl daemon run`` as root refuses code in a directory others can
write.  The full root install into a temporary prefix is tests/test_core_install.py's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any

import pytest

from tests.kit import FIXTURES, NOBODY, REPO, copy_fixture


def _needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")


def test_root_install_refuses_a_prefix_others_can_write(tmp_path: Any) -> None:
    """Before anything is installed: a prefix under a directory others can write is refused, each
    reason named, and nothing is made there."""
    _needs_root()
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    p = subprocess.run(
        ["bash", os.path.join(REPO, "scripts", "install.sh"), "--prefix", str(open_dir / "cxlctl")],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CXLCTL_BINDIR": "none"},
        capture_output=True,
        text=True,
    )
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"{open_dir} is writable by others" in p.stderr and "refusing to install for root" in p.stderr
    assert os.listdir(open_dir) == []


def test_user_install_refuses_a_link_where_root_looks(tmp_path: Any) -> None:
    """As a user (uid 65534): linking the user's own venv into /usr/local/bin (or any directory root
    owns) would have `sudo cxlctl` run code that user can change: refused before anything is built."""
    _needs_root()
    base = tempfile.mkdtemp(prefix="cxlctl-inst-")
    try:
        os.chmod(base, 0o755)
        src = os.path.join(base, "src")
        for rel in ("scripts/install.sh", "cxlctl/hostio/trust.py"):
            os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
            shutil.copy(os.path.join(REPO, rel), os.path.join(src, rel))
        home = os.path.join(base, "home")
        os.mkdir(home)
        for d, _dirs, files in os.walk(base):
            for n in [d] + [os.path.join(d, f) for f in files]:
                os.chown(n, 65534, 65534)
        p = subprocess.run(
            [*NOBODY, "bash", os.path.join(src, "scripts", "install.sh")],
            env={"PATH": "/usr/bin:/bin", "HOME": home, "CXLCTL_BINDIR": "/usr/local/bin"},
            capture_output=True,
            text=True,
        )
        assert p.returncode == 2, p.stdout + p.stderr
        assert "refusing to link cxlctl in /usr/local/bin" in p.stderr and "sudo bash scripts/install.sh" in p.stderr
        assert not os.path.exists(os.path.join(src, ".venv"))
        assert not os.path.lexists("/usr/local/bin/cxlctl") or os.readlink("/usr/local/bin/cxlctl") != os.path.join(
            src, ".venv", "bin", "cxlctl"
        )
    finally:
        shutil.rmtree(base)


def test_daemon_refuses_to_start_as_root_from_code_others_can_write(tmp_path: Any) -> None:
    """The cxlctl package in a directory others can write: ``daemon run`` as root stops before it
    reads its configuration (exit 1, naming the directory); the same code in a root-only directory
    gets as far as the configuration (whose missing profile is exit 2)."""
    _needs_root()
    root = copy_fixture(os.path.join(FIXTURES, "linux-6.12", "single-region"), tmp_path / "root")
    os.makedirs(root + "/etc/cxlctl", exist_ok=True)
    with open(root + "/etc/cxlctl/cxlctl.toml", "w") as f:
        f.write('profile = "no-such-profile"\n')
    code = tempfile.mkdtemp(prefix="cxlctl-code-", dir="/var/lib")
    try:
        shutil.copytree(os.path.join(REPO, "cxlctl"), os.path.join(code, "cxlctl"))
        run = [
            sys.executable,
            "-I",
            "-c",
            f"import sys; sys.path.insert(0, {code!r}); from cxlctl.__main__ import main; "
            f"sys.exit(main(['--root', {root!r}, 'daemon', 'run', '--once', '--no-udev']))",
        ]
        os.chmod(code, 0o777)
        p = subprocess.run(run, capture_output=True, text=True, cwd="/")
        assert p.returncode == 1, p.stdout + p.stderr
        assert "refusing the daemon's code" in p.stderr and f"{code} is writable by others" in p.stderr
        assert "Traceback" not in p.stderr
        os.chmod(code, 0o755)
        p = subprocess.run(run, capture_output=True, text=True, cwd="/")
        assert p.returncode == 2 and "no-such-profile" in p.stderr, p.stdout + p.stderr
    finally:
        shutil.rmtree(code)
