"""Shared test helpers: recorded fixtures, running the real CLI, writable tree copies."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from typing import Any, Dict, List, Optional

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "fixtures")


def fixture_roots(pattern: str = "*/*") -> List[str]:
    """Recorded trees (each has a cxlctl-record.json manifest), by glob under fixtures/."""
    return sorted(os.path.dirname(m) for m in glob.glob(os.path.join(FIXTURES, pattern, "cxlctl-record.json")))


def fixture_id(path: str) -> str:
    return os.path.relpath(path, FIXTURES)


def cxlctl(
    *args: str, env: Optional[Dict[str, str]] = None, check: bool = False, **kw: Any
) -> subprocess.CompletedProcess[str]:
    """Run the real command line (``python -m cxlctl``) as a user would."""
    e = dict(os.environ)
    e.pop("CXLCTL_ROOT", None)
    e["COLUMNS"] = "160"
    if env:
        e.update(env)
    p = subprocess.run([sys.executable, "-m", "cxlctl", *args], capture_output=True, text=True, env=e, cwd=REPO, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"cxlctl {' '.join(args)} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def status_json(root: str) -> Dict[str, Any]:
    p = cxlctl("--root", root, "status", "--json", check=True)
    data = json.loads(p.stdout)
    assert isinstance(data, dict)
    return data


def copy_tree(src: str, dest: str) -> str:
    """Writable copy of a recorded tree, symlinks kept."""
    shutil.copytree(src, dest, symlinks=True)
    return dest


@pytest.fixture
def live_record(tmp_path: Any) -> str:
    """A record of the machine the tests run on (any Linux host; no CXL needed)."""
    dest = str(tmp_path / "live")
    cxlctl("record", dest, check=True)
    return dest
