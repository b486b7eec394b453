"""The host context: one root, one reader, one boot id read per command."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cxlctl.errors import UsageError
from cxlctl.hostio.host import Host
from tests.kit import FIXTURES, copy_fixture


def test_resolve_rejects_empty_and_missing_roots(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        Host.resolve("")
    with pytest.raises(UsageError):
        Host.resolve(str(tmp_path / "nope"))
    with pytest.raises(UsageError, match="holds neither sys/ nor proc/"):
        Host.resolve(str(tmp_path))  # a directory, but no host's tree (a folder of trees, a typo)
    (tmp_path / "proc").mkdir()
    assert Host.resolve(str(tmp_path)).root == str(tmp_path)


def test_one_reader_and_boot_id_read_once(tmp_path: Path) -> None:
    root = copy_fixture(os.path.join(FIXTURES, "linux-6.12", "single-region"), tmp_path / "t")
    h = Host(root)
    assert h.reader is h.reader
    bid = h.path("/proc/sys/kernel/random/boot_id")
    os.makedirs(os.path.dirname(bid), exist_ok=True)
    with open(bid, "w") as f:
        f.write("abc\n")
    assert h.boot_id == "abc"
    with open(bid, "w") as f:
        f.write("def\n")
    assert h.boot_id == "abc", "the boot id is read once per command"
    assert h.fresh().boot_id == "def"
    assert h.new_reader() is not h.reader
    assert not h.live and Host("/").live
