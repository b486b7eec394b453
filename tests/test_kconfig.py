"""One reader of the kernel's release and build configuration (cxlctl.kconfig), used by the
region planner, doctor and the DAMON probe.

The configs are Debian 6.12's, recorded by doctor's VM run (``single-region-doctor``); the
DAMON tree is the recorded idle DAMON tree, given that config once as ``/boot/config-RELEASE``
and once only as ``/proc/config.gz`` (a kernel built with ``CONFIG_IKCONFIG_PROC``).
"""

from __future__ import annotations

import gzip
import os
import shutil
from typing import Any

from cxlctl.damon.sysfs import probe_host
from cxlctl.hostio.host import Host
from cxlctl.hostio.reader import Reader
from cxlctl.kconfig import kernel_version, read_config
from tests.kit import copy_fixture

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(os.path.dirname(HERE), "fixtures", "linux-6.12")
RELEASE = "6.12.117+deb12-amd64"
CONFIG = os.path.join(FIX, "single-region-doctor", "boot", f"config-{RELEASE}")
IDLE = os.path.join(FIX, "single-region-damon-idle")


def _idle(tmp_path: Any) -> str:
    root = copy_fixture(IDLE, tmp_path / "t")
    return root


def test_damon_probe_reads_config_paddr_from_boot(tmp_path: Any) -> None:
    root = _idle(tmp_path)
    assert probe_host(Host(root))[1].paddr is None  # recorded without a config: unknown
    os.makedirs(os.path.join(root, "boot"))
    shutil.copy(CONFIG, os.path.join(root, "boot", f"config-{RELEASE}"))
    caps = probe_host(Host(root))[1]
    assert caps.paddr is True and f"/boot/config-{RELEASE}: CONFIG_DAMON_PADDR=y" in caps.evidence


def test_damon_probe_falls_back_to_proc_config_gz(tmp_path: Any) -> None:
    """The DAMON probe used to read /boot only; doctor knew /proc/config.gz.  Now both do."""
    root = _idle(tmp_path)
    with open(CONFIG, "rb") as f, gzip.open(os.path.join(root, "proc", "config.gz"), "wb") as g:
        g.write(f.read())
    caps = probe_host(Host(root))[1]
    assert caps.paddr is True and "/proc/config.gz: CONFIG_DAMON_PADDR=y" in caps.evidence
    cfg, src, why = read_config(Reader(root), RELEASE)
    assert src == "/proc/config.gz" and why is None and cfg and cfg["CONFIG_DAMON_SYSFS"] == "y"


def test_a_release_that_cannot_name_a_file_is_not_looked_up(tmp_path: Any) -> None:
    root = _idle(tmp_path)
    for bad in ("../../etc/passwd", "a/b", "..", "x\x00y", ""):
        cfg, src, why = read_config(Reader(root), bad)
        assert cfg is None and src is None and why and "/boot" not in why


def test_kernel_version_ascii_digits_only() -> None:
    assert kernel_version(RELEASE) == (6, 12) and kernel_version("6.1.0-57-amd64") == (6, 1)
    assert kernel_version("\u0666.\u0661") is None and kernel_version(None) is None


def test_damon_probe_reads_no_config_when_sysfs_answers(tmp_path: Any) -> None:
    """With a kdamond running, ``avail_operations`` says whether paddr is built: the ~280 KiB
    config is not read (the tuning engine probes on every plan, the daemon on every reconcile)."""
    from cxlctl.damon.sysfs import probe, read_damon

    root = copy_fixture(os.path.join(FIX, "single-region-damon-running"), tmp_path / "running")
    os.makedirs(os.path.join(root, "boot"), exist_ok=True)
    shutil.copy(CONFIG, os.path.join(root, "boot", f"config-{RELEASE}"))
    asked = []

    class Counting(Reader):
        def text(self, path: str, *a: Any, **k: Any) -> Any:
            asked.append(path)
            return super().text(path, *a, **k)

        def raw(self, path: str, *a: Any, **k: Any) -> Any:
            asked.append(path)
            return super().raw(path, *a, **k)

    r = Counting(root)
    caps = probe(read_damon(r), RELEASE, r)
    assert caps.paddr is True and any(e.startswith("avail_operations") for e in caps.evidence)
    assert not [p for p in asked if p.startswith("/boot") or p == "/proc/config.gz"], asked
    # and on the idle tree (no kdamond to look at) the same probe does read it
    idle = _idle(tmp_path)
    os.makedirs(os.path.join(idle, "boot"))
    shutil.copy(CONFIG, os.path.join(idle, "boot", f"config-{RELEASE}"))
    asked.clear()
    r = Counting(idle)
    assert probe(read_damon(r), RELEASE, r).paddr is True and f"/boot/config-{RELEASE}" in asked
