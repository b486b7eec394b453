"""Smoke tests of the VM harness itself: a guest boots, drivers enumerate the
topology, and guest-lib.sh can build an interleaved RAM region.  If these fail,
every other VM test's failure is about the harness, not cxlctl."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.vm.harness import TOPOLOGIES, KernelNotFound, kernel, run_guest


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


@pytest.mark.vm
def test_single_boots_and_lists_mem0(tmp_path: Path) -> None:
    r = run_guest("single", 'cxl list -M > "$OUT/memdevs.json"\nuname -r\n', workdir=tmp_path)
    r.check()
    print(f"single/{r.kernel.release}: boot {r.boot_seconds} s, wall {r.wall_seconds} s")
    assert r.stdout.strip() == r.kernel.release
    memdevs = json.loads(r.file("memdevs.json"))
    assert [m["memdev"] for m in memdevs] == ["mem0"]
    assert memdevs[0]["ram_size"] == 512 << 20
    assert memdevs[0]["serial"] == TOPOLOGIES["single"].serials["cxl-vmem0"]


@pytest.mark.vm
def test_hb2_two_way_region(tmp_path: Path) -> None:
    t = TOPOLOGIES["hb2"]
    region = t.widest
    assert region is not None and region.ways == 2
    script = f"""
R=$({region.create_command(t)}) || exit 1
echo "$R" > "$OUT/region"
cxl list -R > "$OUT/regions.json"
numactl -H > "$OUT/numactl.txt"
"""
    r = run_guest(t, script, workdir=tmp_path)
    print(f"hb2/{r.kernel.release}: boot {r.boot_seconds} s, wall {r.wall_seconds} s")
    r.check()
    name = r.file("region").strip()
    regions = json.loads(r.file("regions.json"))
    assert len(regions) == 1
    reg = regions[0]
    assert reg["region"] == name
    assert reg["decode_state"] == "commit"
    assert reg["interleave_ways"] == 2
    assert reg["interleave_granularity"] == 8192
    assert reg["size"] == 512 << 20
    # the region's memory was onlined by kmem as a CPU-less NUMA node
    numa = r.file("numactl.txt")
    cpuless = [n for n, cpus in re.findall(r"^node (\d+) cpus:(.*)$", numa, re.M) if not cpus.strip()]
    assert cpuless, numa
    sizes = dict(re.findall(r"^node (\d+) size: (\d+) MB$", numa, re.M))
    assert int(sizes[cpuless[0]]) == 512, numa
