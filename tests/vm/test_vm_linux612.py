"""The 6.12 VM checks that share boots: one boot per topology runs several checks in turn.

Each of these checks keeps its guest script and its host-side assertions in its own file
(``guest_script`` and ``check`` in test_vm_status, test_vm_tune, test_vm_telemetry,
test_vm_launch, test_vm_daemon, test_vm_ras); here ``harness.run_checks`` runs the scripts one
after the other in one 6.12 boot (each sees its own ``$OUT``, a region an earlier check made
with the same arguments is handed on, and what a check left running is cleared before the
next), and each check's assertions are a pytest test of their own.  Why: under TCG a boot with
its prelude and region is a minute or more of CI's hour, and these checks need nothing a
previous one changes (docs/testing.md, "One boot, several checks").  test_vm_linux7.py does the
same on 7.x.

``single`` (one vCPU): status against the peers (first: its "before" views are of a host with
no region; it makes the widest region, which the others are handed), tune
(apply/try/drift/revert), telemetry (``stat``/``top`` against the counters), launch
placement (it enables the cpuset controller at the root), then the DAMON and HMAT views of
``stat``/``top`` with the promotion try (test_vm_telemetry_damon; last: it leaves NUMA balancing
in tiering mode and the DRAM node filled).

``hb2x2``: daemon hot-plug (regions on windows 2 and 1), then the RAS session (its region on
window 1 is the daemon's region B, handed over; QMP injects the errors), then the pinned KV offload
(tests/vm/pinkv_check.py: region B is the lendable share, a region on the free ``cxl-vmem3`` the
pinnable one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

import pytest

from tests.vm import (
    dma9p_check,
    pinkv_check,
    test_vm_daemon,
    test_vm_launch,
    test_vm_ras,
    test_vm_status,
    test_vm_telemetry,
    test_vm_telemetry_damon,
    test_vm_tune,
)
from tests.vm.harness import TOPOLOGIES, GuestResult, SharedCheck, report_shared, run_checks
from tests.vm.ras_steps import host_driver

pytestmark = pytest.mark.vm

SERIES = "6.12"


@pytest.fixture(scope="module")
def single(tmp_path_factory: Any) -> Dict[str, GuestResult]:
    t = TOPOLOGIES["single"]
    work = tmp_path_factory.mktemp("linux612-single")
    checks: List[SharedCheck] = [
        ("status", test_vm_status.guest_script(t)),
        ("tune", test_vm_tune.guest_script(t)),
        ("telemetry", test_vm_telemetry.guest_script(work / "telemetry-tools", t)),
        ("launch", test_vm_launch.guest_script(work / "launch-tools", t)),
        ("telemetry_damon", test_vm_telemetry_damon.guest_script(work / "telemetry-damon-tools", t)),
        # last: without the harness's fix it breaks the guest's 9p devices
        ("dma9p", dma9p_check.guest_script()),
    ]
    return report_shared(run_checks(t, checks, kernel=SERIES, timeout=3300, workdir=work / "vm"), work)


@pytest.fixture(scope="module")
def hb2x2(tmp_path_factory: Any) -> Dict[str, GuestResult]:
    t = TOPOLOGIES["hb2x2"]
    work = tmp_path_factory.mktemp("linux612-hb2x2")
    checks: List[SharedCheck] = [
        ("daemon", test_vm_daemon.guest_script(t)),
        ("ras", test_vm_ras.guest_script()),
        # last: it leaves its region (ZONE_NORMAL) when the kernel will not offline it
        ("pinkv", pinkv_check.guest_script(work / "pinkv-tools", t)),
    ]
    res = run_checks(t, checks, kernel=SERIES, timeout=3000, workdir=work / "vm", qmp=("ras", host_driver()))
    return report_shared(res, work)


def test_single_status_matches_peers(single: Dict[str, GuestResult]) -> None:
    test_vm_status.check(single["status"], SERIES, TOPOLOGIES["single"])


def test_single_tune(single: Dict[str, GuestResult]) -> None:
    test_vm_tune.check(single["tune"])


def test_single_telemetry(single: Dict[str, GuestResult], tmp_path: Path) -> None:
    test_vm_telemetry.check(single["telemetry"], tmp_path)


def test_single_launch(single: Dict[str, GuestResult], tmp_path: Path) -> None:
    test_vm_launch.check(single["launch"], tmp_path)


def test_single_stat_and_top_show_damon_and_hmat(single: Dict[str, GuestResult], tmp_path: Path) -> None:
    test_vm_telemetry_damon.check(single["telemetry_damon"], tmp_path)


def test_single_guest_devices_reach_cxl_memory(single: Dict[str, GuestResult]) -> None:
    dma9p_check.check(single["dma9p"])


def test_hb2x2_daemon(hb2x2: Dict[str, GuestResult], capsys: Any) -> None:
    test_vm_daemon.check(hb2x2["daemon"], capsys)


def test_hb2x2_ras(hb2x2: Dict[str, GuestResult]) -> None:
    r = hb2x2["ras"]
    assert "qmp_error" not in r.extra, r.extra.get("qmp_error", "") + r.stderr[-3000:]
    test_vm_ras.check(r)


def test_hb2x2_pinned_kv(hb2x2: Dict[str, GuestResult], tmp_path: Path) -> None:
    (tmp_path / "measured.txt").write_text("\n".join(pinkv_check.check(hb2x2["pinkv"])) + "\n")
