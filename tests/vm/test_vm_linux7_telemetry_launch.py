"""Telemetry and launch placement on Linux 7.x, in one ``single`` boot (issue 20).

The same guest scripts and host-side assertions as the 6.12 rows (``test_vm_telemetry``,
``test_vm_launch``; on 6.12 they share ``test_vm_linux612.py``'s boot), run in turn by
``harness.run_checks``: telemetry (``stat``/``top`` against the kernel's counters), then
launch placement (last: it enables the cpuset controller at the root).  Not in
``test_vm_linux7.py``'s ``single`` boot: that one has two vCPUs for the DAMON checks and so
takes both guest slots, while this boot has one and runs beside another guest
(docs/testing.md, "The kernel matrix").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

import pytest

from tests.vm import test_vm_launch, test_vm_telemetry
from tests.vm.harness import TOPOLOGIES, GuestResult, SharedCheck, report_shared, run_checks

pytestmark = pytest.mark.vm

SERIES = "7.x"


@pytest.fixture(scope="module")
def single(tmp_path_factory: Any) -> Dict[str, GuestResult]:
    t = TOPOLOGIES["single"]
    work = tmp_path_factory.mktemp("linux7-single-tl")
    checks: List[SharedCheck] = [
        ("telemetry", test_vm_telemetry.guest_script(work / "telemetry-tools", t)),
        ("launch", test_vm_launch.guest_script(work / "launch-tools", t)),
    ]
    return report_shared(run_checks(t, checks, kernel=SERIES, timeout=2700, workdir=work / "vm"), work)


def test_7x_single_telemetry(single: Dict[str, GuestResult], tmp_path: Path) -> None:
    test_vm_telemetry.check(single["telemetry"], tmp_path)


def test_7x_single_launch(single: Dict[str, GuestResult], tmp_path: Path) -> None:
    test_vm_launch.check(single["launch"], tmp_path)
