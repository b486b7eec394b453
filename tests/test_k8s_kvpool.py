"""``cxlctl k8s kv-pool``: the node's KV pool planned on recorded trees, and the mountinfo reading launch uses.

The pool is the tmpfs the DaemonSet's agent mounts for unprivileged pods (docs/kubernetes.md, "The KV
pool"): bound to the CXL nodes whose memory is in a kernel zone (a long-term pin keeps it there), sized
by the pinnable CXL memory free; ZONE_MOVABLE CXL nodes stay lendable and out of it.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict

import pytest

from cxlctl.hostio import mounts
from cxlctl.k8s import kvpool
from tests.kit import REPO, cli, copy_fixture, fixture_roots

MIB = 1 << 20
HMAT2 = "linux-6.12/hmat2-region"


def _zone(tree: str, node: int, zone: str) -> None:
    """Every online memory block of ``node`` in a copied tree shown in ``zone`` (as valid_zones reads)."""
    nd = os.path.join(tree, f"sys/devices/system/node/node{node}")
    for b in (b for b in os.listdir(nd) if b.startswith("memory") and b[6:].isdigit()):
        with open(os.path.join(tree, "sys/devices/system/memory", b, "valid_zones"), "w") as f:
            f.write(zone + "\n")


def _plan(root: str, *extra: str, rc: int = 0) -> Dict[str, Any]:
    p = cli("--root", root, "k8s", "kv-pool", "--dry-run", "--json", *extra, rc=rc)
    return json.loads(p.stdout) if rc == 0 else {"err": p.stderr}


def test_pool_is_the_pinnable_cxl_nodes() -> None:
    pool = _plan(fixture_roots(HMAT2)[0])
    assert pool["nodes"] == [2, 3] and pool["options"].endswith(",mpol=bind:2-3")
    assert pool["size"] == pool["pinnable_free"] == 504 * MIB  # nodes 2 and 3: 248 + 256 MiB free
    assert pool["resource"] == {
        "name": kvpool.RESOURCE,
        "quantity": 504,
        "feature": kvpool.FEATURE,
        "ref": kvpool.FEATURE_REF,
    }
    assert pool["feature_file"].splitlines()[1:] == ["# +no-label", f"{kvpool.FEATURE}=504"]
    assert pool["action"] == "mount" and pool["done"] == []
    fixed = _plan(fixture_roots(HMAT2)[0], "--size", "256M")
    assert fixed["size"] == 256 * MIB and "size=268435456," in fixed["options"]


def test_movable_cxl_stays_out_of_the_pool(tmp_path: Any) -> None:
    """Issue 42: a long-term pin moves a ZONE_MOVABLE page to a kernel zone (mm/gup.c), so the pool
    takes only kernel-zone CXL nodes; all-movable CXL is refused (exit 2) with the fix named."""
    t = copy_fixture(fixture_roots(HMAT2)[0], str(tmp_path / "t"))
    _zone(t, 3, "Movable")
    pool = _plan(t)
    assert pool["nodes"] == [2] and pool["zones"]["3"] == {"pinnable": 0, "lendable": 256 * MIB, "in_pool": False}
    assert pool["size"] == 248 * MIB and any("node(s) 3 are all ZONE_MOVABLE" in n for n in pool["notes"])
    _zone(t, 2, "Movable")
    err = _plan(t, rc=2)["err"]
    assert "no CXL memory in a kernel zone" in err and "--zone normal" in err and "Traceback" not in err


def test_bad_sizes_and_directories() -> None:
    root = fixture_roots(HMAT2)[0]
    assert "has 504 MiB free" in _plan(root, "--size", "1G", rc=2)["err"]
    assert "--dir" in _plan(root, "--dir", "/dev/shm", rc=2)["err"]
    assert "--dir" in _plan(root, "--dir", "relative", rc=2)["err"]
    assert "no CXL memory node online" in _plan(fixture_roots("linux-6.12/hmat2-noregion")[0], rc=2)["err"]
    # mounting is for the live host: a tree is only ever planned
    p = cli("--root", root, "k8s", "kv-pool", rc=2)
    assert "live host only" in p.stderr and p.stdout == ""


def _recorded(name: str) -> str:
    with open(os.path.join(REPO, "fixtures", "kubernetes", name)) as f:
        return f.read()


def test_the_guest_recorded_mountinfo_reads_as_the_pool() -> None:
    """The mountinfo a 6.12 guest showed in a mount namespace whose /dev/shm is a bind of a pool
    directory (fixtures/kubernetes/README.md): the bind keeps the super block's mpol, and it is the
    last mount at /dev/shm (over the guest's own /dev/shm), the one a process sees."""
    ms = mounts.parse(_recorded("container-mountinfo.txt"))
    shm = [m for m in ms if m.mount_point == "/dev/shm"]
    assert len(shm) == 2 and mounts.tmpfs_policy(shm[0]) is None
    assert shm[-1].fstype == "tmpfs" and shm[-1].source == "cxlctl-kv" and shm[-1].root == "/pod-uid-1"
    tp = mounts.tmpfs_policy(shm[-1])
    assert tp is not None and (tp.mode, tp.nodes) == ("bind", (2, 3)) and tp.size == 400 * MIB


def test_the_guest_offload_landed_where_the_dry_run_said() -> None:
    """In the guest, the unprivileged entrypoint's dry run (recorded) and the pages of the 192 MiB file
    it then wrote (numa_maps, recorded) agree: every page on node 2, the file's policy the pool's."""
    kv = json.loads(_recorded("entrypoint-dry-run.json"))["kv_offload"]
    assert kv["mechanism"] == "shm-mount" and kv["on_cxl"] is True
    (line,) = _recorded("offload-numa_maps.txt").splitlines()
    fields = dict(f.split("=", 1) for f in line.split() if "=" in f and not f.startswith("file="))
    assert line.split()[1] == "bind:2-3", "the file's shared policy, from the pool's super block"
    pages = {int(k[1:]): int(v) for k, v in fields.items() if k[0] == "N" and k[1:].isdigit()}
    page = int(fields["kernelpagesize_kB"]) << 10
    assert {n: p * page for n, p in pages.items()} == {int(n): b for n, b in kv["expected_bytes_per_node"].items()}


def test_an_agent_restart_keeps_the_mounted_pool(tmp_path: Any) -> None:
    """With the pool the guest mounted (its recorded mountinfo as the tree's own), the agent's plan
    for the same size does nothing, for another size remounts it in place; a bind of a plain
    directory there (the agent container's hostPath before the pool exists) is mounted over."""
    t = copy_fixture(fixture_roots(HMAT2)[0], str(tmp_path / "t"))
    with open(os.path.join(t, "proc/self/mountinfo"), "w") as f:
        f.write(_recorded("container-mountinfo.txt"))
    assert _plan(t, "--size", "400M")["action"] == "none"
    assert _plan(t)["action"] == "remount"
    # the undo, planned: the feature file first (none in this tree), then the mount
    steps = json.loads(cli("--root", t, "k8s", "kv-pool", "--remove", "--dry-run", "--json", check=True).stdout)
    assert steps["steps"] == ["would unmount /run/cxlctl/kv"]
    assert "live host only" in cli("--root", t, "k8s", "kv-pool", "--remove", rc=2).stderr
    lines = [ln for ln in _recorded("container-mountinfo.txt").splitlines() if " /run/cxlctl/kv " not in ln]
    run = next(ln for ln in lines if " /run " in ln)
    with open(os.path.join(t, "proc/self/mountinfo"), "w") as f:
        f.write("\n".join([*lines, run.replace(" / /run ", " /cxlctl/kv /run/cxlctl/kv ", 1)]) + "\n")
    assert _plan(t)["action"] == "mount"


@pytest.mark.parametrize(
    "opts,want",
    [
        ("rw,size=1024k,mpol=bind:1", ("bind", (1,), 1024 << 10)),
        ("rw,mpol=bind=static:2-3", ("bind", (2, 3), None)),
        ("rw,mpol=bind:0,2-3,5,noswap", ("bind", (0, 2, 3, 5), None)),
        ("rw,size=8k,mpol=weighted interleave:0,2", ("weighted-interleave", (0, 2), 8 << 10)),
        ("rw,size=8k", None),
        ("rw,mpol=local", None),
        ("rw,size=\u0661\u0662k,mpol=bind:1", ("bind", (1,), None)),  # size digits are ASCII or not a size
    ],
)
def test_tmpfs_policy_forms(opts: str, want: Any) -> None:
    """mm/mempolicy.c mpol_to_str's forms: MODE[=static|=relative][:NODES], a mode name with a space."""
    (m,) = mounts.parse(f"300 25 0:45 / /dev/shm rw,relatime shared:7 - tmpfs tmpfs {opts}\n")
    tp = mounts.tmpfs_policy(m)
    assert (tp and (tp.mode, tp.nodes, tp.size)) == want if want else tp is None


def test_mountinfo_escapes_and_bad_lines() -> None:
    ms = mounts.parse("1 2 0:1 / /a\\040b rw - tmpfs none rw,mpol=bind:0\nnot a line\n3 4 0:2 / /c rw - ext4\n")
    assert [m.mount_point for m in ms] == ["/a b"]
    # a backslash before digits that are not octal is kept as it is (it was int(..., 8): ValueError)
    (m,) = mounts.parse("1 2 0:1 / /a\\999b rw - tmpfs none rw\n")
    assert m.mount_point == "/a\\999b"


def test_collect_removes_only_the_directories_of_pods_gone(tmp_path: Any) -> None:
    """The agent's clean-up: a pool directory named by a pod UID the kubelet no longer has goes (its
    files would keep CXL memory charged to the ended pod); a live pod's, a name that is no pod UID, and
    everything when the kubelet's directory is empty (the wrong one: the agent's own pod is always there)
    stay."""
    live, gone = "0c7d3f0e-1111-4a2b-9c3d-000000000001", "0c7d3f0e-1111-4a2b-9c3d-000000000002"
    pods, pool = tmp_path / "pods", tmp_path / "pool"
    for d in (pods / live, pool / live, pool / gone, pool / "lost+found"):
        d.mkdir(parents=True)
    (pool / gone / "vllm_offload_0.mmap").write_bytes(b"x" * 4096)
    (tmp_path / "empty").mkdir()
    assert kvpool.collect(str(pool), str(tmp_path / "empty")) == []
    assert kvpool.collect(str(pool), str(tmp_path / "missing")) == []
    assert kvpool.collect(str(pool), str(pods)) == [f"removed {pool / gone} (pod {gone} is gone)"]
    assert sorted(os.listdir(pool)) == sorted([live, "lost+found"])


def test_the_pool_is_not_mounted_where_another_user_can_change_the_path(tmp_path: Any) -> None:
    """mount(2) follows links: a --dir under a directory uid 65534 owns (where it could plant a link to
    another mount point) is refused before anything is mounted or written."""
    from cxlctl.errors import CxlctlError
    from cxlctl.hostio.host import Host

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    pool = kvpool.Pool(str(theirs / "kv"), (2,), 1 << 20, "size=1048576,mpol=bind:2", {}, 1 << 20, None, "mount")
    nfd = tmp_path / "nfd"
    with pytest.raises(CxlctlError, match="refusing the KV pool's mount point") as e:
        kvpool.apply(Host("/"), pool, str(nfd))
    assert "owned by uid 65534" in str(e.value) or "65534" in str(e.value), str(e.value)
    assert not nfd.exists()
