"""The 6.1 VM checks in one boot: what an old kernel cannot do, said right, and nothing changed.

6.1 cannot make CXL RAM regions (``create_ram_region`` came in 6.3) and has no DAMON paddr
tiering, so each of its checks is short: one ``single`` boot runs them in turn
(``harness.run_checks``), where each had a boot of its own before (status, region, doctor and
DAMON: four boots, ~1 minute each of CI's hour under TCG).  Each check keeps its guest script and
its assertions in its own file:

* status against the peers (first: its views are of a host with no region; its create fails);
* ``region plan``/``create`` refused with the kernel that has them (test_vm_region.check_linux61);
* DAMON: the plan says unsupported, the rest of the profile applies and reverts
  (test_vm_damon.check_61);
* doctor: "no RAM regions on this kernel" (last: it mounts the kernel's config at /boot;
  test_vm_doctor.check_linux61).
"""

from __future__ import annotations

from typing import Any, Dict, List

import pytest

from tests.vm import test_vm_damon, test_vm_doctor, test_vm_region, test_vm_status
from tests.vm.harness import TOPOLOGIES, GuestResult, SharedCheck, report_shared, run_checks

pytestmark = pytest.mark.vm

SERIES = "6.1"


@pytest.fixture(scope="module")
def single(tmp_path_factory: Any) -> Dict[str, GuestResult]:
    t = TOPOLOGIES["single"]
    work = tmp_path_factory.mktemp("linux61-single")
    checks: List[SharedCheck] = [
        ("status", test_vm_status.guest_script(t)),
        ("region", test_vm_region.SCRIPT.format(scenario="old-kernel")),
        ("damon", test_vm_damon.guest_script_61()),
        ("doctor", test_vm_doctor.guest_script(SERIES, work / "vm")),
    ]
    return report_shared(run_checks(t, checks, kernel=SERIES, timeout=1800, workdir=work / "vm"), work)


def test_61_status_matches_peers(single: Dict[str, GuestResult]) -> None:
    test_vm_status.check(single["status"], SERIES, TOPOLOGIES["single"])


def test_61_cannot_create_ram_regions(single: Dict[str, GuestResult]) -> None:
    test_vm_region.check_linux61(single["region"])


def test_61_damon_unavailable(single: Dict[str, GuestResult]) -> None:
    test_vm_damon.check_61(single["damon"])


def test_61_doctor_has_no_ram_regions(single: Dict[str, GuestResult]) -> None:
    test_vm_doctor.check_linux61(test_vm_doctor.results(single["doctor"], SERIES))
