"""Why CXL memory lands in the memory tier it does (issue 34, row 5), on recorded trees edited to
show each case.

The kernel's rule (mm/memory-tiers.c, drivers/dax/kmem.c): kmem gives a node it onlines
MEMTIER_DEFAULT_DAX_ADISTANCE (tier 22, below DRAM's tier 4) unless ``mt_calc_adistance`` gets
figures; ``hmat_calculate_adistance`` gets none without HMAT, since ``mt_perf_to_adistance`` needs
DRAM's figures (``default_dram_perf``) as its base.  So a missing HMAT does not put CXL in DRAM's
tier (the recorded no-HMAT trees have it in tier 22); it collapses every CXL node into tier 22.
"""

from __future__ import annotations

import os
import shutil
from typing import Dict

from cxlctl.doctor import devices, kernel
from cxlctl.doctor.gather import gather
from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from cxlctl.tuning import engine
from cxlctl.tuning.knobs import read_current
from cxlctl.tuning.recommend import recommend
from tests.kit import FIXTURES, copy_fixture, status_json

TIERS = "/sys/devices/virtual/memory_tiering"
SINGLE = os.path.join(FIXTURES, "linux-6.12", "single-region-doctor")
HMAT2 = os.path.join(FIXTURES, "linux-7.x", "hmat2-region")


def _set_tiers(root: str, tiers: Dict[int, str]) -> None:
    """Replace the recorded memory tiers with ``tiers`` ({id: nodelist})."""
    base = root + TIERS
    for d in os.listdir(base):
        if d.startswith("memory_tier"):
            shutil.rmtree(os.path.join(base, d))
    for tid, nodes in tiers.items():
        os.makedirs(f"{base}/memory_tier{tid}")
        with open(f"{base}/memory_tier{tid}/nodelist", "w") as f:
            f.write(nodes + "\n")


def _codes(root: str) -> Dict[str, str]:
    return {w["code"]: w["message"] for w in status_json(root)["warnings"]}


def test_recorded_no_hmat_tree_has_cxl_below_dram() -> None:
    """The premise: no HMAT in the 6.12 single guest, and kmem's node 1 is in tier 22, not DRAM's."""
    assert not os.path.exists(SINGLE + "/sys/firmware/acpi/tables/HMAT")
    with open(SINGLE + TIERS + "/memory_tier22/nodelist") as f:
        assert f.read().strip() == "1"
    codes = _codes(SINGLE)
    assert "cxl-in-dram-tier" not in codes and "cxl-tiers-collapsed" not in codes
    checks = kernel.check_acpi(gather(Host(SINGLE)))
    hmat = [c for c in checks if c.id == "firmware.hmat"][0]
    assert hmat.result == "note" and "tier 22" in hmat.message and not hmat.fix


def test_cxl_in_dram_tier_names_the_real_cause(tmp_path: object) -> None:
    root = copy_fixture(SINGLE, os.path.join(str(tmp_path), "tree"))
    _set_tiers(root, {4: "0-1"})
    msg = _codes(root)["cxl-in-dram-tier"]
    # dax0.0 is bound to kmem on node 1: the figures, not a missing HMAT, are the cause
    assert "kmem onlined it" in msg and "mt_perf_to_adistance" in msg
    assert "no HMAT" not in msg and "got no HMAT/CDAT" not in msg
    f = gather(Host(root))
    c = [c for c in devices.check_tiers(f) if c.id == "devices.tiers"][0]
    assert c.result == "warn" and "kmem onlined it" in c.message and "efi=nosoftreserve" in c.fix
    hmat = [c for c in kernel.check_acpi(f) if c.id == "firmware.hmat"][0]
    assert hmat.result == "note" and "enable HMAT" not in hmat.fix
    # tune plan of a tiering profile on it: the same cause
    w = " ".join(engine.prepare(Host(root), "inference-capacity").plan.warnings)
    assert "share DRAM's memory tier (boot-time System RAM" in w and "no HMAT" not in w
    rec = recommend(scan(Host(root)), read_current(Host(root)))
    text = " ".join(rec.reasons)
    assert "share memory_tier4 with DRAM" in text and "no HMAT" not in text and "boot-time System RAM" in text


def test_cxl_in_dram_tier_without_kmem_is_boot_time_ram(tmp_path: object) -> None:
    root = copy_fixture(SINGLE, os.path.join(str(tmp_path), "tree"))
    _set_tiers(root, {4: "0-1"})
    os.unlink(root + "/sys/bus/dax/devices/dax0.0/driver")  # no kmem behind node 1
    msg = _codes(root)["cxl-in-dram-tier"]
    assert "System RAM at boot" in msg and "EFI_MEMORY_SP" in msg and "set_node_memory_tier" in msg


def test_several_cxl_nodes_collapsed_into_the_default_tier(tmp_path: object) -> None:
    """hmat2 recorded with HMAT, generic ports and CDAT: nodes 2 and 3 in tiers 33 and 146.  Without
    the HMAT both land in tier 22, which status and doctor now report instead of calling it fine."""
    assert "cxl-tiers-collapsed" not in _codes(HMAT2)
    root = copy_fixture(HMAT2, os.path.join(str(tmp_path), "tree"))
    _set_tiers(root, {4: "0", 22: "2-3"})
    os.unlink(root + "/sys/firmware/acpi/tables/HMAT")
    msg = _codes(root)["cxl-tiers-collapsed"]
    assert "CXL nodes 2, 3" in msg and "memory_tier22" in msg and "generic port" in msg and "CDAT" in msg
    f = gather(Host(root))
    t = [c for c in devices.check_tiers(f) if c.id == "devices.tiers.default"][0]
    assert t.result == "warn" and "generic port" in t.fix
    assert [c for c in devices.check_tiers(f) if c.id == "devices.tiers"][0].result == "ok"
    hmat = [c for c in kernel.check_acpi(f) if c.id == "firmware.hmat"][0]
    assert hmat.result == "warn" and "2, 3" in hmat.message and "generic port" in hmat.fix
