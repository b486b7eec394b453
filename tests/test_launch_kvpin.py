"""A long-term pinned KV offload (issue 42): where the pin leaves it, per the zones of the CXL memory.

On copies of the recorded 7.x tree with one region (DRAM node 0, CXL node 1, 512 MiB, its four memory
blocks onlined Normal as recorded): vLLM on a GPU registers its /dev/shm offload with cudaHostRegister
(a FOLL_LONGTERM pin), ``exec --pinned`` says a program does.  With the CXL blocks in ZONE_NORMAL the
plan is as before; with them set to Movable in the copy, mm/gup.c's migrate_longterm_unpinnable_folios()
would move every page to node 0's kernel zone: the dry run's ``expected_bytes_per_node`` is node 0's,
``on_cxl`` false, and the launch is refused (exit 2, naming the split and the fix) unless
``--allow-unpinnable``.  ``capacity --json`` and doctor read the same host model (capacity/pinnable.py).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from cxlctl.capacity import pinnable
from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from tests.kit import cli, copy_fixture, fixture_roots
from tests.launch_support import dry, write_status

MIB = 1 << 20


def _zone(tree: str, node: int, zone: str, count: int = 99) -> None:
    """Set the first ``count`` online memory blocks of ``node`` in a copied tree to ``zone``."""
    nd = os.path.join(tree, f"sys/devices/system/node/node{node}")
    blocks = sorted((b for b in os.listdir(nd) if b[6:].isdigit()), key=lambda b: int(b[6:]))
    for b in blocks[:count]:
        with open(os.path.join(tree, "sys/devices/system/memory", b, "valid_zones"), "w") as f:
            f.write(zone + "\n")


@pytest.fixture
def tree(tmp_path: Any) -> str:
    return copy_fixture(fixture_roots("linux-7.x/single-region")[0], tmp_path / "t")


def test_host_model_splits_pinnable_and_lendable(tree: str) -> None:
    z = pinnable.cxl_zones(scan(Host(tree)))
    assert z[1].pinnable == 512 * MIB and z[1].lendable == 0 and z[1].known
    _zone(tree, 1, "Movable", 1)
    z = pinnable.cxl_zones(scan(Host(tree)))
    assert z[1].pinnable == 384 * MIB and z[1].lendable == 128 * MIB
    _zone(tree, 1, "Movable")
    assert pinnable.all_movable(scan(Host(tree)), [1]) == [1]


def test_pinned_offload_on_normal_cxl_stays(tree: str, fakes: Any, capsys: Any) -> None:
    doc = dry(tree, "vllm", ["--kv-size", "256M"], ["serve", "m"])
    ko = doc["kv_offload"]
    assert ko["pinned"] is True and ko["on_cxl"] is True
    assert ko["expected_bytes_per_node"] == {"1": 256 * MIB} and ko["pin_moved_bytes_per_node"] == {}


def test_pinned_offload_on_movable_cxl_is_refused(tree: str, fakes: Any) -> None:
    _zone(tree, 1, "Movable")
    p = cli("--root", tree, "launch", "vllm", "--kv-size", "256M", "--dry-run", "--", "serve", "m", rc=2)
    assert "would not stay on CXL" in p.stderr and "ZONE_MOVABLE" in p.stderr
    assert "migrate_longterm_unpinnable_folios" in p.stderr and "--zone normal" in p.stderr
    assert "--allow-unpinnable" in p.stderr and "Traceback" not in p.stderr


def test_allow_unpinnable_plans_where_the_pin_puts_it(tree: str, fakes: Any, capsys: Any) -> None:
    _zone(tree, 1, "Movable")
    doc = dry(tree, "vllm", ["--kv-size", "256M", "--allow-unpinnable"], ["serve", "m"])
    ko = doc["kv_offload"]
    assert ko["on_cxl"] is False and ko["pinned"] is True
    # what numa_maps shows after the pin: node 0 (node 1's zonelist: the nearest node with a kernel zone)
    assert ko["expected_bytes_per_node"] == {"0": 256 * MIB}
    assert ko["before_pin_bytes_per_node"] == {"1": 256 * MIB} and ko["pin_moved_bytes_per_node"] == {"1": 256 * MIB}
    assert "--zone normal" in ko["fix"]
    assert any(w.startswith("the KV offload is not on CXL") for w in doc["warnings"])


def test_a_split_node_keeps_what_its_kernel_zone_holds(tree: str, capsys: Any) -> None:
    _zone(tree, 1, "Movable", 2)  # 256 MiB Normal, 256 MiB Movable
    doc = dry(tree, "exec", ["--kv-size", "384M", "--pinned", "--allow-unpinnable"], ["true"])
    ko = doc["kv_offload"]
    assert ko["expected_bytes_per_node"] == {"0": 128 * MIB, "1": 256 * MIB} and ko["on_cxl"] is False
    # the same size within the kernel zone: planned as before
    doc = dry(tree, "exec", ["--kv-size", "192M", "--pinned"], ["true"])
    assert doc["kv_offload"]["expected_bytes_per_node"] == {"1": 192 * MIB} and doc["kv_offload"]["on_cxl"]


def test_exec_pins_only_when_told(tree: str, capsys: Any) -> None:
    _zone(tree, 1, "Movable")
    doc = dry(tree, "exec", ["--kv-size", "64M"], ["true"])
    assert doc["kv_offload"]["pinned"] is False and doc["kv_offload"]["expected_bytes_per_node"] == {"1": 64 * MIB}
    p = cli("--root", tree, "launch", "exec", "--kv-size", "64M", "--pinned", "--dry-run", "--", "true", rc=2)
    assert "would not stay on CXL" in p.stderr


def test_capacity_json_has_both_figures(tree: str) -> None:
    _zone(tree, 1, "Movable", 1)
    doc = json.loads(cli("--root", tree, "capacity", "--json", inprocess=True).stdout)
    (n,) = doc["nodes"]
    assert (n["node"], n["pinnable"], n["lendable"]) == (1, 384 * MIB, 128 * MIB)


def test_doctor_for_vllm_warns_on_all_movable_cxl(tmp_path: Any) -> None:
    from cxlctl.doctor.gather import gather
    from cxlctl.doctor.report import run

    root = copy_fixture(fixture_roots("linux-7.x/single-region-doctor")[0], tmp_path / "d")
    checks = run(gather(Host(root), engine="vllm"))
    ok = [c for c in checks if c.id == "inference.pinned-kv"]
    assert ok and ok[0].result == "ok" and "512 MiB pinnable" in ok[0].message
    _zone(root, 1, "Movable")
    checks = run(gather(Host(root), engine="vllm"))
    (c,) = [c for c in checks if c.id == "inference.pinned-kv"]
    assert c.result == "warn" and "0 B pinnable" in c.message and "512 MiB lendable" in c.message
    assert c.fix is not None and "--zone normal" in c.fix


def test_sglang_hierarchical_cache_always_gets_its_size(tree: str, fakes: Any, capsys: Any) -> None:
    """SGLang 0.5.23 auto-sizes an unsized host pool (--hicache-host-memory-fraction of all host memory):
    cxlctl always passes --hicache-size, or refuses; its auto NUMA bind (numactl --membind) is switched off."""
    fakes.set_sglang()
    p = cli(
        "--root", tree, "launch", "sglang", "--dry-run", "--", "--model-path", "m", "--enable-hierarchical-cache", rc=2
    )  # fmt: skip
    assert "--hicache-host-memory-fraction" in p.stderr and "--kv-size" in p.stderr and "Traceback" not in p.stderr
    doc = dry(tree, "sglang", [], ["--model-path", "m", "--enable-hierarchical-cache", "--hicache-size", "1"])
    assert doc["env"]["SGLANG_AUTO_NUMA_BIND"] == "0"
    assert any("numactl --membind=<GPU node>" in n for n in doc["notes"])


def test_tmpfs_nodes_outside_the_cpuset_are_refused(tree: str, capsys: Any) -> None:
    """mpol_shared_policy_init() contextualizes the mount's bind to the creating task's cpuset: a CXL node
    outside Mems_allowed leaves the file with no policy, silently; the plan fails its check."""
    write_status(tree, "0", cgroup="/engine.slice")
    doc = dry(tree, "exec", ["--kv-size", "64M", "--mem-nodes", "0"], ["true"], rc=1)  # pre-flight failed
    (c,) = [c for c in doc["checks"] if c["name"] == "kv-tmpfs-cpuset"]
    assert c["status"] == "fail" and "mpol_set_nodemask" in c["message"] and "cpuset.mems" in c["fix"]


def test_tmpfs_memcg_and_full_notes(tree: str, capsys: Any) -> None:
    cg = os.path.join(tree, "sys/fs/cgroup/engine.slice")
    os.makedirs(cg)
    with open(os.path.join(cg, "memory.max"), "w") as f:
        f.write(f"{32 * MIB}\n")
    write_status(tree, "0-1", cgroup="/engine.slice")
    doc = dry(tree, "exec", ["--kv-size", "64M"], ["true"])
    by = {c["name"]: c for c in doc["checks"]}
    assert by["kv-tmpfs-memcg"]["status"] == "warn" and "memory.max is 32 MiB" in by["kv-tmpfs-memcg"]["message"]
    assert "SIGBUS" in by["kv-tmpfs-full"]["message"] and "OOM" in by["kv-tmpfs-full"]["message"]
    assert "kv-tmpfs-cpuset" not in by


def test_the_plan_text_says_where_the_pin_puts_it(tree: str) -> None:
    _zone(tree, 1, "Movable")
    p = cli(
        "--root", tree, "launch", "exec", "--kv-size", "64M", "--pinned", "--allow-unpinnable", "--dry-run", "--", "true",
        inprocess=True,
    )  # fmt: skip
    text = " ".join(p.stdout.split())
    assert "expected node 0 64 MiB after the long-term pin (before it: node 1 64 MiB)" in text
