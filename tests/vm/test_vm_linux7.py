"""The 6.12 VM checks on Linux 7.x that share the two-vCPU ``single`` boot (issue 20).

Each 6.12 VM test keeps its guest script and its host-side assertions in two
functions (``guest_script`` and ``check``); here one 7.x boot per topology runs
several of those scripts in turn (``harness.run_checks``: each sees its own
``$OUT``, the region is made once and handed to every check that asks for it,
and what a check left running is cleared before the next), and each check's
assertions are applied to its own results as a separate pytest test.  Why the
sharing: a 7.x boot per check would add ~4 min apiece to CI (docs/testing.md,
"The kernel matrix").

``single`` (one boot, two vCPUs for the DAMON checks): status against the peers (first: its
"before" views are of a host with no region; it makes the region the others are handed), tune
(apply/try/drift/revert), DAMON tiering, the DAMON goal statement converging.  Telemetry and launch placement on 7.x share a
one-vCPU boot of their own (``test_vm_linux7_telemetry_launch.py``), daemon hot-plug and RAS an
``hb2x2`` boot (``test_vm_linux7_daemon_ras.py``): one-vCPU guests run beside another guest.
The measured times (boot, each check) are printed (pytest -s) and written to
``measured.txt`` in the test's tmp folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

import pytest

from tests.vm import test_vm_damon, test_vm_status, test_vm_tune
from tests.vm.harness import TOPOLOGIES, GuestResult, SharedCheck, report_shared, run_checks

pytestmark = pytest.mark.vm

SERIES = "7.x"


@pytest.fixture(scope="module")
def single(tmp_path_factory: Any) -> Dict[str, GuestResult]:
    t = TOPOLOGIES["single"]
    work = tmp_path_factory.mktemp("linux7-single")
    checks: List[SharedCheck] = [
        ("status", test_vm_status.guest_script(t)),
        ("tune", test_vm_tune.guest_script(t)),
        ("damon", test_vm_damon.guest_script(work / "damon-tools", t)),
        ("damon_goals", test_vm_damon.guest_script(work / "goals-tools", t, mode="goals")),
    ]
    # two vCPUs for the DAMON checks (test_vm_damon.DAMON_CPUS says why)
    res = run_checks(t, checks, kernel=SERIES, timeout=2400, workdir=work / "vm", cpus=test_vm_damon.DAMON_CPUS)
    return report_shared(res, work)


def test_7x_single_status_matches_peers(single: Dict[str, GuestResult]) -> None:
    test_vm_status.check(single["status"], SERIES, TOPOLOGIES["single"])


def test_7x_single_tune(single: Dict[str, GuestResult]) -> None:
    test_vm_tune.check(single["tune"])


def test_7x_single_damon_tiering(single: Dict[str, GuestResult]) -> None:
    test_vm_damon.check(single["damon"], SERIES)


def test_7x_single_damon_goal_converges(single: Dict[str, GuestResult], tmp_path: Path) -> None:
    (tmp_path / "measured.txt").write_text("\n".join(test_vm_damon.check_goals(single["damon_goals"])) + "\n")
