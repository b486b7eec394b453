"""Smoke tests of the VM harness itself: a guest boots, drivers enumerate the
topology, and guest-lib.sh can build an interleaved RAM region.  If these fail,
every other VM test's failure is about the harness, not cxlctl."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.vm.harness import TOPOLOGIES, KernelNotFound, kernel


def test_topologies_are_well_formed() -> None:
    """Cheap (no boot): device counts and distinct non-zero serials, which tests rely on."""
    want = {"single": 1, "hb2": 2, "switch2": 2, "hb2x2": 4}
    serials: list[int] = []
    for name, n in want.items():
        t = TOPOLOGIES[name]
        assert t.devices == n, name
        assert all(s != 0 for s in t.serials.values()), name
        serials += t.serials.values()
        for r in t.regions:
            assert set(r.devices) <= set(t.device_ids), (name, r)
    assert len(serials) == len(set(serials))


def test_missing_kernel_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CI must not silently skip the VM tier: a missing kernel is an error."""
    monkeypatch.setenv("CXLCTL_VM_CACHE", str(tmp_path))
    with pytest.raises(KernelNotFound, match="install-vm-deps"):
        kernel("6.12")



# Booting each topology (and a 2-way region on hb2) is covered by test_vm_status.py,
# which compares the guest with cxl/daxctl/numactl; no separate smoke boots here.
