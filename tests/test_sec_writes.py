"""Issue 43, item 9: root's writes, profiles, tools and test hooks cannot be turned by a local user.

``atomic_write`` writes live-host files as root (sysctl.d, the journal, metrics): a link at
the destination or a file planted at a predictable temporary name must not redirect it.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from cxlctl.errors import UsageError
from cxlctl.hostio import atomic


def test_atomic_write_refuses_a_symlinked_destination(tmp_path: Any) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    d = tmp_path / "etc"
    d.mkdir()
    os.symlink(str(victim), str(d / "cxlctl.conf"))
    with pytest.raises(UsageError, match="symbolic link"):
        atomic.atomic_write("/", str(d / "cxlctl.conf"), "owned\n")
    assert victim.read_text() == "precious\n"
    assert os.path.islink(str(d / "cxlctl.conf"))
    assert os.listdir(str(d)) == ["cxlctl.conf"]  # no temporary file left behind


def test_atomic_write_temp_name_is_not_predictable(tmp_path: Any, monkeypatch: Any) -> None:
    """A file planted at the old predictable name (``.NAME.PID.tmp``), or a link there, is
    neither written through nor renamed into place; the write still succeeds."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    d = tmp_path / "run"
    d.mkdir()
    planted = d / f".state.{os.getpid()}.tmp"
    os.symlink(str(victim), str(planted))
    seen = []
    real_open = os.open

    def spy(path: Any, flags: int, *a: Any, **kw: Any) -> int:
        if "dir_fd" in kw and str(path).startswith(".state."):
            seen.append((str(path), flags))
        return real_open(path, flags, *a, **kw)

    monkeypatch.setattr(os, "open", spy)
    atomic.atomic_write("/", str(d / "state"), "new\n")
    assert (d / "state").read_text() == "new\n"
    assert victim.read_text() == "precious\n"
    assert sorted(os.listdir(str(d))) == sorted(["state", planted.name])
    ((name, flags),) = seen
    assert name != planted.name and flags & os.O_EXCL and flags & os.O_NOFOLLOW
    # two writes never reuse a name
    seen.clear()
    atomic.atomic_write("/", str(d / "state"), "again\n")
    assert seen[0][0] != name
