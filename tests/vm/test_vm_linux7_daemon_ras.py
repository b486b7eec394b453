"""Daemon hot-plug and the RAS session on Linux 7.x, in one ``hb2x2`` boot (issue 20).

The same guest scripts and host-side assertions as the 6.12 rows (``test_vm_daemon``,
``test_vm_ras``; on 6.12 they share ``test_vm_linux612.py``'s ``hb2x2`` boot): daemon
hot-plug (regions on windows 2 and 1), then the RAS session on the daemon's region B (window
1, handed over; QMP injects the errors), then the pinned KV offload (tests/vm/pinkv_check.py).  The region scenario (``test_vm_region.py``) does
not share this boot: on 7.3.4 its 4-way region, onlined in ZONE_NORMAL, kept a block the
kernel could not offline (EBUSY, unmovable pages), so it could not be destroyed and every later
check would lack its memdevs (docs/testing.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

import pytest

from tests.vm import pinkv_check, test_vm_daemon, test_vm_ras
from tests.vm.harness import TOPOLOGIES, GuestResult, SharedCheck, report_shared, run_checks
from tests.vm.ras_steps import host_driver

pytestmark = pytest.mark.vm

SERIES = "7.x"


@pytest.fixture(scope="module")
def hb2x2(tmp_path_factory: Any) -> Dict[str, GuestResult]:
    t = TOPOLOGIES["hb2x2"]
    work = tmp_path_factory.mktemp("linux7-hb2x2")
    checks: List[SharedCheck] = [
        ("daemon", test_vm_daemon.guest_script(t)),
        ("ras", test_vm_ras.guest_script()),
        # last: it leaves its region (ZONE_NORMAL) when the kernel will not offline it
        ("pinkv", pinkv_check.guest_script(work / "pinkv-tools", t)),
    ]
    res = run_checks(t, checks, kernel=SERIES, timeout=3000, workdir=work / "vm", qmp=("ras", host_driver()))
    return report_shared(res, work)


def test_7x_hb2x2_daemon(hb2x2: Dict[str, GuestResult], capsys: Any) -> None:
    test_vm_daemon.check(hb2x2["daemon"], capsys)


def test_7x_hb2x2_ras(hb2x2: Dict[str, GuestResult]) -> None:
    r = hb2x2["ras"]
    assert "qmp_error" not in r.extra, r.extra.get("qmp_error", "") + r.stderr[-3000:]
    test_vm_ras.check(r)


def test_7x_hb2x2_pinned_kv(hb2x2: Dict[str, GuestResult], tmp_path: Path) -> None:
    (tmp_path / "measured.txt").write_text("\n".join(pinkv_check.check(hb2x2["pinkv"])) + "\n")
