"""The one "who can change what root runs" check (cxlctl.hostio.trust), on real directories.

Unprivileged runs pass their own uid as the owner every component must have; the mode rule,
links and sticky directories are what differ, and each case here would pass without the check.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import List

import pytest

from cxlctl.errors import CxlctlError
from cxlctl.hostio.trust import require_trusted, untrusted


def _own_tree(tmp_path: Path) -> Path:
    """A file under tmp_path, each directory from tmp_path down mode 0755."""
    d = tmp_path / "prefix" / "lib"
    d.mkdir(parents=True)
    f = d / "code.py"
    f.write_text("x = 1\n")
    for p in (tmp_path, tmp_path / "prefix", d):
        p.chmod(0o755)
    f.chmod(0o644)
    return f


def _below(path: Path, reasons: List[str]) -> List[str]:
    """Only the reasons for components at or below ``path``'s top test directory (the
    machine's own /tmp and its parents are root's; when the test runs unprivileged they
    are not the test user's)."""
    return [r for r in reasons if str(path) in r]


def test_root_owned_system_paths_are_trusted() -> None:
    assert untrusted("/usr/bin/env") == []


def test_a_directory_others_can_write_is_named(tmp_path: Path) -> None:
    f = _own_tree(tmp_path)
    uid = os.getuid()
    assert _below(tmp_path, untrusted(str(f), owner=uid)) == []
    (tmp_path / "prefix").chmod(0o777)
    reasons = _below(tmp_path, untrusted(str(f), owner=uid))
    assert reasons == [f"{tmp_path / 'prefix'} is writable by others (mode 0777)"]


def test_a_sticky_world_writable_directory_is_allowed(tmp_path: Path) -> None:
    f = _own_tree(tmp_path)
    (tmp_path / "prefix").chmod(0o1777)
    assert _below(tmp_path, untrusted(str(f), owner=os.getuid())) == []


def test_another_owner_is_named(tmp_path: Path) -> None:
    f = _own_tree(tmp_path)
    reasons = _below(tmp_path, untrusted(str(f), owner=os.getuid() + 1))
    assert reasons and all("is owned by uid" in r for r in reasons)


def test_a_link_is_checked_on_both_sides(tmp_path: Path) -> None:
    f = _own_tree(tmp_path)
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    link = open_dir / "code.py"
    link.symlink_to(f)
    reasons = _below(tmp_path, untrusted(str(link), owner=os.getuid()))
    assert reasons == [f"{open_dir} is writable by others (mode 0777)"]
    # and a trusted link to a file in an open directory
    (tmp_path / "prefix").chmod(0o777)
    (open_dir).chmod(0o755)
    assert _below(tmp_path, untrusted(str(link), owner=os.getuid())) == [
        f"{tmp_path / 'prefix'} is writable by others (mode 0777)"
    ]


def test_a_missing_path_is_a_reason_not_an_exception(tmp_path: Path) -> None:
    reasons = untrusted(str(tmp_path / "nope"), owner=os.getuid())
    assert any("cannot be examined" in r for r in reasons)


def test_require_trusted_names_what_and_why(tmp_path: Path) -> None:
    f = _own_tree(tmp_path)
    lib = tmp_path / "prefix" / "lib"
    lib.chmod(0o775)
    if os.getuid() == 0:
        os.chown(lib, -1, 65534)  # a group other than root's own
    elif os.getgid() == 0:
        pytest.skip("group 0 may write (root's own group), and only root can give the directory another")
    with pytest.raises(CxlctlError) as e:
        require_trusted(str(f), "the test's code", owner=os.getuid())
    assert "the test's code" in str(e.value) and "writable by group" in str(e.value)
