"""Where ``cxlctl launch --kv-size`` puts the KV offload (cxlctl/launch/kvplace.py; issue 34 rows 1, 2, 6).

On the recorded 6.12 tree with one region (DRAM node 0, CXL node 1, 512 MiB free there): by default
(root) vLLM's /dev/shm offload and ``exec`` get a CXL-bound private /dev/shm and the dry run's
``kv_offload.expected_bytes_per_node`` puts every byte on the CXL node, while the process keeps its
DRAM+CXL policy; where no mechanism applies (not root, SGLang's anonymous host cache) the plan says
so, with the policy's split and the fix; a size the chosen nodes cannot hold is exit 2 naming their
free memory, and ``--force`` shows the spill per node.
"""

from __future__ import annotations

from typing import Any

import pytest

from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from cxlctl.launch import kvplace
from cxlctl.launch.nodesets import resolve
from cxlctl.launch.policy import Policy
from tests.kit import cli, fixture_roots
from tests.launch_support import dry

MIB = 1 << 20


@pytest.fixture
def region() -> str:
    return fixture_roots("linux-6.12/single-region")[0]


def _free(root: str, node: int) -> int:
    with open(f"{root}/sys/devices/system/node/node{node}/meminfo") as f:
        for line in f:
            w = line.split()
            if w[2] == "MemFree:":
                return int(w[3]) * 1024
    raise AssertionError("no MemFree")


def test_vllm_default_is_a_cxl_bound_dev_shm(region: str, fakes: Any, capsys: Any) -> None:
    doc = dry(region, "vllm", ["--kv-size", "256M"], ["serve", "m"])
    ko = doc["kv_offload"]
    assert ko["mechanism"] == "tmpfs" and ko["on_cxl"] is True and ko["why_not_on_cxl"] is None
    assert ko["expected_bytes_per_node"] == {"1": 256 * MIB} and ko["spill_bytes_per_node"] == {}
    # the offload vLLM reads: --kv-offloading-size 0.25 GiB, x (1 << 30)
    assert ko["bytes"] == 256 * MIB and doc["engine"]["added"][:2] == ["--kv-offloading-size", "0.25"]
    assert doc["tmpfs"]["nodes"] == [1] and doc["tmpfs"]["mpol"] == "bind"
    # the engine's own memory keeps the DRAM-first default policy over both nodes
    assert doc["policy"]["mode"] == "weighted-interleave" and doc["policy"]["nodes"] == [0, 1]
    assert not any("not on CXL" in w for w in doc["warnings"])


def test_vllm_offload_bytes_are_what_vllm_reads(region: str, fakes: Any, capsys: Any) -> None:
    """0.01 GiB steps: vLLM reads 0.39 GiB of a 400 MiB --kv-size, and that is what the plan expects."""
    doc = dry(region, "vllm", ["--kv-size", "400M"], ["serve", "m"])
    assert doc["kv_offload"]["bytes"] == int(0.39 * (1 << 30))
    assert doc["kv_offload"]["expected_bytes_per_node"] == {"1": int(0.39 * (1 << 30))}


def test_exec_default_is_the_cxl_bound_dev_shm(region: str, capsys: Any) -> None:
    doc = dry(region, "exec", ["--kv-size", "64M"], ["true"])
    assert doc["kv_offload"]["mechanism"] == "tmpfs" and doc["kv_offload"]["expected_bytes_per_node"] == {"1": 64 * MIB}
    assert any("CXL-bound /dev/shm" in n for n in doc["notes"])
    doc = dry(region, "exec", ["--kv-size", "64M", "--no-kv-tmpfs", "--ratio", "3:1"], ["true"])
    ko = doc["kv_offload"]
    assert ko["mechanism"] == "policy" and doc["tmpfs"] is None
    # weighted interleave 3:1 over DRAM 0 + CXL 1: three quarters on DRAM, and the plan says why and the fix
    assert ko["expected_bytes_per_node"] == {"0": 48 * MIB, "1": 16 * MIB}
    assert "--no-kv-tmpfs" in ko["why_not_on_cxl"] and "leave out --no-kv-tmpfs" in ko["fix"]
    assert any(w.startswith("the KV offload is not on CXL") and "node 0 48 MiB" in w for w in doc["warnings"])


def test_sglang_host_cache_follows_the_policy_and_says_so(region: str, fakes: Any, capsys: Any) -> None:
    fakes.set_sglang()
    doc = dry(region, "sglang", ["--kv-size", "1G", "--ratio", "3:1"], ["--model-path", "m"])
    ko = doc["kv_offload"]
    assert ko["mechanism"] == "policy" and ko["on_cxl"] is False and doc["tmpfs"] is None
    assert "hierarchical cache" in ko["why_not_on_cxl"] and "--devdax" in ko["fix"]
    total = sum(ko["expected_bytes_per_node"].values())
    assert total == ko["bytes"] == 10**9 and ko["expected_bytes_per_node"]["0"] == 3 * 10**9 // 4
    assert cli("--root", region, "launch", "sglang", "--kv-size", "1G", "--kv-tmpfs", "--dry-run", "--", "x", rc=2)


def test_not_root_says_where_the_offload_goes_and_the_fix(region: str) -> None:
    inv = scan(Host(region))
    ns = resolve(inv, Host(region), cpu_spec=None, mem_spec=None, gpu_spec=None)
    pol = Policy("weighted-interleave", (0, 1), (0,), (0,), ((0, 3), (1, 1)))
    c = kvplace.Choice(True, None, False, False, "", "")
    kp = kvplace.decide(inv, ns, pol, 64 * MIB, c)
    assert kp.mechanism == "policy" and kp.expected == {0: 48 * MIB, 1: 16 * MIB} and not kp.on_cxl
    assert (
        kp.why_not is not None
        and "not root" in kp.why_not
        and kp.fix == "run the launch as root (sudo cxlctl launch ...)"
    )
    # root: the same request is placed on CXL
    kp = kvplace.decide(inv, ns, pol, 64 * MIB, c._replace(can_mount=True))
    assert kp.mechanism == "tmpfs" and kp.expected == {1: 64 * MIB} and kp.on_cxl


def test_a_size_the_nodes_cannot_hold_is_refused(region: str, fakes: Any, capsys: Any) -> None:
    free = _free(region, 1)
    p = cli("--root", region, "launch", "vllm", "--kv-size", "10T", "--dry-run", "--", "serve", "m", rc=2)
    assert "512 MiB free" in p.stderr and "would not fit" in p.stderr and "--force" in p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""
    # --kv-tmpfs beyond the CXL node's free memory: refused too (it was a warning)
    p = cli("--root", region, "launch", "exec", "--kv-size", "1G", "--kv-tmpfs", "--dry-run", "--", "true", rc=2)
    assert "node(s) 1" in p.stderr and "512 MiB free" in p.stderr
    # the process policy: bind over both nodes cannot spill, so more than both hold is refused
    p = cli(
        "--root", region, "launch", "exec", "--kv-size", "10T", "--no-kv-tmpfs", "--policy", "bind",
        "--dry-run", "--", "true", rc=2,
    )  # fmt: skip
    assert "bind policy keeps it on node(s) 0-1" in p.stderr
    # --force: the dry run shows the spill per node; the tmpfs prefers the CXL node and may fall back
    doc = dry(region, "vllm", ["--kv-size", "1G", "--force"], ["serve", "m"])
    ko = doc["kv_offload"]
    assert doc["tmpfs"]["mpol"] == "prefer" and ko["expected_bytes_per_node"]["1"] == free
    assert ko["spill_bytes_per_node"] == {"0": (1 << 30) - free} and ko["on_cxl"] is False
    assert any(w.startswith("--force: the KV offload does not fit") for w in doc["warnings"])


def test_weighted_interleave_split_and_fallback(region: str) -> None:
    """The issue's example: 3:1 puts three quarters on DRAM; a node's share beyond its free memory
    falls back to the nearest node with room (spill)."""
    inv = scan(Host(region))
    pol = Policy("weighted-interleave", (0, 1), (0,), (0,), ((0, 3), (1, 1)))
    got, spill, unplaced = kvplace.expected(inv, pol, 400 * MIB, (1,))
    assert got == {0: 300 * MIB, 1: 100 * MIB} and spill == {} and unplaced == 0
    pol = Policy("weighted-interleave", (0, 1), (0,), (0,), ((0, 1), (1, 3)))
    free1 = _free(region, 1)
    got, spill, unplaced = kvplace.expected(inv, pol, 1 << 30, (1,))
    assert got[1] == free1 and spill == {0: (3 << 30) // 4 - free1} and unplaced == 0


def test_numa_balancing_note_says_reclaim_still_demotes(region: str, capsys: Any, tmp_path: Any) -> None:
    """Row 6: with tiering on, only promotion skips an explicit policy (no MPOL_F_MOF,
    vma_policy_mof); reclaim demotes whatever the policy (demote_folio_list)."""
    import os

    from tests.kit import copy_fixture

    root = copy_fixture(region, str(tmp_path / "t"))
    os.makedirs(os.path.join(root, "proc/sys/kernel"), exist_ok=True)
    with open(os.path.join(root, "proc/sys/kernel/numa_balancing"), "w") as f:
        f.write("2\n")
    doc = dry(root, "exec", ["--policy", "bind"], ["true"])
    (c,) = [c for c in doc["checks"] if c["name"] == "numa-balancing"]
    assert "does not promote" in c["message"] and "reclaim still demotes" in c["message"]
    assert "demote_folio_list" in c["message"] and "promote or demote" not in c["message"]
