"""Linux 7.x facts in ``cxlctl doctor`` (issue 20): Debian 13's new kernel packaging keeps the
build config at ``/usr/lib/modules/RELEASE/config`` (package ``linux-base-RELEASE``) and puts
nothing in /boot, so doctor on Debian's 7.3 said "cannot check: no kernel config found".

The tree is the recorded 6.12 doctor tree with its (real, Debian-built) config moved to where
the new packaging installs it; the recorded 7.x tree is checked too once it exists.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from cxlctl.doctor.gather import gather
from cxlctl.doctor.report import run
from cxlctl.hostio.host import Host
from cxlctl.hostio.reader import Reader
from cxlctl.kconfig import read_config
from tests.kit import FIXTURES, copy_fixture

R612 = os.path.join(FIXTURES, "linux-6.12", "single-region-doctor")


def _release(root: str) -> str:
    with open(os.path.join(root, "proc/sys/kernel/osrelease")) as f:
        return f.read().strip()


def _moved_to_usr_lib_modules(tmp_path: Any) -> str:
    root = copy_fixture(R612, tmp_path / "tree")
    rel = _release(root)
    dest = os.path.join(root, "usr/lib/modules", rel)
    os.makedirs(dest)
    shutil.move(os.path.join(root, "boot", f"config-{rel}"), os.path.join(dest, "config"))
    return root


def test_config_under_usr_lib_modules_is_found(tmp_path: Any) -> None:
    root = _moved_to_usr_lib_modules(tmp_path)
    rel = _release(root)
    cfg, src, why = read_config(Reader(root), rel)
    assert src == f"/usr/lib/modules/{rel}/config" and why is None
    assert cfg is not None and cfg["CONFIG_CXL_PCI"] == "m"
    checks = run(gather(Host(root)))
    c = [x for x in checks if x.id == "kernel.config"][0]
    assert c.result == "ok", c.message
    assert c.evidence[0].source == f"/usr/lib/modules/{rel}/config"


def test_boot_config_still_wins_and_absence_names_every_place(tmp_path: Any) -> None:
    root = copy_fixture(R612, tmp_path / "tree")
    rel = _release(root)
    assert read_config(Reader(root), rel)[1] == f"/boot/config-{rel}"
    os.unlink(os.path.join(root, "boot", f"config-{rel}"))
    cfg, src, why = read_config(Reader(root), rel)
    assert cfg is None and why is not None
    assert f"/boot/config-{rel}" in why and f"/usr/lib/modules/{rel}/config" in why and "/proc/config.gz" in why
    c = [x for x in run(gather(Host(root))) if x.id == "kernel.config"][0]
    assert c.result == "cannot-check"
    assert [e.source for e in c.evidence] == [
        f"/boot/config-{rel}",
        f"/usr/lib/modules/{rel}/config",
        "/proc/config.gz",
    ]
    assert "/usr/lib/modules/RELEASE/config" in c.fix
