"""The 6.12 VM checks on Linux 7.x, sharing boots (issue 20).

Each 6.12 VM test keeps its guest script and its host-side assertions in two
functions (``guest_script`` and ``check``); here one 7.x boot per topology runs
several of those scripts in turn (``harness.run_checks``: each sees its own
``$OUT``, the region is made once and handed to every check that asks for it,
and what a check left running is cleared before the next), and each check's
assertions are applied to its own results as a separate pytest test.  Why the
sharing: a 7.x boot per check would add ~4 min apiece to CI (docs/testing.md,
"The kernel matrix").

``hb2x2`` (one boot): daemon hot-plug (regions on windows 2 and 1), then the RAS session (its
region on window 1 is the daemon's region B, handed over; QMP injects the errors).  The region
scenario (``test_vm_region.py``) does not share it: on 7.3.4 its 4-way region, onlined in
ZONE_NORMAL, kept a block the kernel could not offline (EBUSY, unmovable pages), so it could not be
destroyed and every later check lacked its memdevs (docs/testing.md).

``single`` (one boot): tune (apply/try/drift/revert), DAMON tiering, the DAMON goal
statement converging, then (``CXLCTL_VM_7X=all``) telemetry (``stat``/``top`` against the
counters) and launch placement.  Launch comes last: it enables the cpuset controller at the root.
The measured times (boot, each check) are printed (pytest -s) and written to
``measured.txt`` in the test's tmp folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List

import pytest

from tests.vm import (
    test_vm_daemon,
    test_vm_damon,
    test_vm_launch,
    test_vm_ras,
    test_vm_telemetry,
    test_vm_tune,
)
from tests.vm.harness import TOPOLOGIES, GuestResult, SharedCheck, report_shared, run_checks
from tests.vm.ras_steps import host_driver

pytestmark = pytest.mark.vm

SERIES = "7.x"

#: CI runs the checks that found 7.x differences or that only 7.x can run, within the 7.x share of
#: CI's hour (docs/testing.md, "The kernel matrix"); ``CXLCTL_VM_7X=all`` runs every shared check
#: (telemetry and launch in the ``single`` boot, and the ``hb2x2`` boot)
ALL = os.environ.get("CXLCTL_VM_7X") == "all"
NOT_IN_CI = "runs with CXLCTL_VM_7X=all (the 7.x share of CI's hour: docs/testing.md, the matrix)"


@pytest.fixture(scope="module")
def single(tmp_path_factory: Any) -> Dict[str, GuestResult]:
    t = TOPOLOGIES["single"]
    work = tmp_path_factory.mktemp("linux7-single")
    checks: List[SharedCheck] = [
        ("tune", test_vm_tune.guest_script(t)),
        ("damon", test_vm_damon.guest_script(work / "damon-tools", t)),
        ("damon_goals", test_vm_damon.guest_script(work / "goals-tools", t, mode="goals")),
    ]
    if ALL:
        checks += [
            ("telemetry", test_vm_telemetry.guest_script(work / "telemetry-tools", t)),
            ("launch", test_vm_launch.guest_script(work / "launch-tools", t)),
        ]
    # two vCPUs for the DAMON checks (test_vm_damon.DAMON_CPUS says why)
    res = run_checks(t, checks, kernel=SERIES, timeout=2400, workdir=work / "vm", cpus=test_vm_damon.DAMON_CPUS)
    return report_shared(res, work)


@pytest.fixture(scope="module")
def hb2x2(tmp_path_factory: Any) -> Dict[str, GuestResult]:
    if not ALL:
        pytest.skip(NOT_IN_CI)
    t = TOPOLOGIES["hb2x2"]
    work = tmp_path_factory.mktemp("linux7-hb2x2")
    checks: List[SharedCheck] = [
        ("daemon", test_vm_daemon.guest_script(t)),
        ("ras", test_vm_ras.guest_script()),
    ]
    res = run_checks(t, checks, kernel=SERIES, timeout=3000, workdir=work / "vm", qmp=("ras", host_driver()))
    return report_shared(res, work)


def test_7x_single_telemetry(single: Dict[str, GuestResult], tmp_path: Path) -> None:
    if "telemetry" not in single:
        pytest.skip(NOT_IN_CI)
    test_vm_telemetry.check(single["telemetry"], tmp_path)


def test_7x_single_tune(single: Dict[str, GuestResult]) -> None:
    test_vm_tune.check(single["tune"])


def test_7x_single_damon_tiering(single: Dict[str, GuestResult]) -> None:
    test_vm_damon.check(single["damon"], SERIES)


def test_7x_single_launch(single: Dict[str, GuestResult], tmp_path: Path) -> None:
    if "launch" not in single:
        pytest.skip(NOT_IN_CI)
    test_vm_launch.check(single["launch"], tmp_path)


def test_7x_single_damon_goal_converges(single: Dict[str, GuestResult], tmp_path: Path) -> None:
    (tmp_path / "measured.txt").write_text("\n".join(test_vm_damon.check_goals(single["damon_goals"])) + "\n")


def test_7x_hb2x2_daemon(hb2x2: Dict[str, GuestResult], capsys: Any) -> None:
    test_vm_daemon.check(hb2x2["daemon"], capsys)


def test_7x_hb2x2_ras(hb2x2: Dict[str, GuestResult]) -> None:
    r = hb2x2["ras"]
    assert "qmp_error" not in r.extra, r.extra.get("qmp_error", "") + r.stderr[-3000:]
    test_vm_ras.check(r)
