"""Regions end to end on real kernels: ``cxlctl region``/``dax`` against cxl, daxctl and numactl.

Five boots (one per scenario of tests/vm/region_guest_driver.py, which runs
every cxlctl command in one process and snapshots the kernel's sysfs and the
peer tools after each):

* ``hb2x2`` on 6.12 — 4-way across two bridges x two root ports, 2-way across
  the bridges (movable), 2-way inside one bridge plus a 1-way devdax region at
  the same time, ``--all``; devdax <-> system-ram in both zones; destroy
  refusals; the address-order rule checked against the kernel itself; destroy
  order; requests the kernel rejects half-way (targets in the wrong position,
  a size the window cannot hold) and every programming write failing in turn:
  nothing may remain.
* ``hb2x2`` on 7.x — the same scenario with the regions that are destroyed again
  onlined ZONE_MOVABLE: 7.3.4 puts unmovable pages (44 KiB) on a CXL node's
  ZONE_NORMAL memory as soon as it is online, so such a region cannot be offlined
  again.  Last, a ZONE_NORMAL region and ``destroy --force``: removed, or (what
  7.3.4 does) refused with every block back online and the region intact.
* ``switch2`` on 6.12 — 2-way below a switch, 1-way, ``--all``, oversize.
* ``hb2`` on 6.12 — 2-way across bridges, wrong position, ``--all``.
* ``hb2x2`` on 6.1 — the kernel cannot create RAM regions: cxlctl says so.

After each create the region must be committed in sysfs and in ``cxl list -R
-T`` with the size, ways, granularity and target order cxlctl reported; each
host-bridge/switch decoder programmed as the plan said; ``daxctl list`` and
``numactl -H`` must show the memory; after each destroy the kernel state must
be the one before.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, Dict, List

import pytest

from cxlctl.parse import parse_nodelist
from tests.vm.harness import GuestResult, kernels_for, run_guest

pytestmark = pytest.mark.vm

SCRIPT = '"$PY" "$REPO/tests/vm/region_guest_driver.py" {scenario}\n'
MiB = 1 << 20


def boot(topology: str, scenario: str, kernel: str = "6.12") -> List[Dict[str, Any]]:
    return steps_of(run_guest(topology, SCRIPT.format(scenario=scenario), kernel=kernel, timeout=1800))


def steps_of(res: GuestResult) -> List[Dict[str, Any]]:
    """The driver's steps from a guest run (the scenario's script: ``SCRIPT.format(scenario=...)``)."""
    topology, kernel = res.topology.name, res.kernel.release
    path = res.outdir / "steps.json"
    assert path.exists(), res.stderr[-3000:] + res.stdout[-2000:]
    steps = json.loads(path.read_text())
    assert isinstance(steps, list)
    sys.stderr.write(
        f"[{topology}/{kernel}] boot {res.boot_seconds:.0f} s, wall {res.wall_seconds:.0f} s, {len(steps)} steps\n"
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert steps[-1]["label"] == "done"
    return steps


#: the scenario of each kernel the hb2x2 checks run on, and where its destroyed regions are onlined
HB2X2 = {"6.12": ("hb2x2", "normal"), "7.x": ("hb2x2-movable", "movable")}


@pytest.fixture(scope="module", params=sorted(HB2X2))
def hb2x2(request: Any) -> Dict[str, Dict[str, Any]]:
    """The hb2x2 scenario's steps on one kernel, and ``"_zone"``: where its regions were onlined."""
    scenario, zone = HB2X2[request.param]
    out = index(boot("hb2x2", scenario, kernel=request.param))
    out["_zone"] = {"zone": zone}
    return out


def _zone(s: Dict[str, Dict[str, Any]]) -> str:
    return str(s["_zone"]["zone"])


@pytest.fixture(scope="module")
def switch2() -> Dict[str, Dict[str, Any]]:
    return index(boot("switch2", "switch2"))


# with CXLCTL_VM_KERNELS=all only (kernels_for): hb2 is hb2x2's root-level interleave across two host
# bridges with one device each, and the hb2x2 boots check the same kernel rules there (the 2-way plan,
# the position order the kernel refuses with ENXIO, destroy) on both kernels
@pytest.fixture(scope="module", params=kernels_for("6.12", ci=[]))
def hb2(request: Any) -> Dict[str, Dict[str, Any]]:
    return index(boot("hb2", "hb2", request.param))


def index(steps: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    out: Dict[str, Dict[str, Any]] = {}
    for s in steps:
        assert s["label"] not in out, s["label"]
        out[s["label"]] = s
    return out


# ------------------------------------------------------------------------------ checks


def comparable(state: Dict[str, Any]) -> Dict[str, Any]:
    """The kernel state a destroy must bring back.

    Left out on purpose: stale hardware fields the kernel does not clear on
    reset (a switch decoder's last range and granularity, an endpoint
    decoder's mode, which it accepts only as ram/pmem once set) and free
    memory figures.  What counts: regions, which decoders are committed, DPA,
    region links, DAX devices, NUMA nodes with memory, ``cxl list -R``.
    """
    return {
        "regions": state["regions"],
        "committed": state["decoders_committed"],
        "decoders": {n: (d.get("region"), d.get("dpa_size")) for n, d in state["decoders"].items()},
        "dax": state["dax_devices"],
        "has_memory": state["has_memory"],
        "cxl_list_R": state["cxl_list_R"],
        "auto_online_blocks": state["auto_online_blocks"],
        "nodes": state["numactl"].splitlines()[0],
    }


def created(step: Dict[str, Any]) -> Dict[str, Any]:
    assert step["rc"] == 0, step["stderr"]
    doc = json.loads(step["stdout"])
    assert doc["complete"] is True and len(doc["regions"]) == 1
    r = doc["regions"][0]
    assert isinstance(r, dict)
    return r


def cxl_list_region(state: Dict[str, Any], name: str) -> Dict[str, Any]:
    items = state["cxl_list_R"]
    if isinstance(items, dict):
        items = [items]
    found = [r for r in items if r.get("region") == name]
    assert len(found) == 1, items
    r = found[0]
    assert isinstance(r, dict)
    return r


def check_region(step: Dict[str, Any], zone: str = "normal", online: str = "system-ram") -> Dict[str, Any]:
    """The kernel and the peer tools agree with what cxlctl reported for a new region."""
    r = created(step)
    st = step["state"]
    name = r["region"]
    order = sorted(r["mappings"], key=lambda m: m["position"])
    assert [m["position"] for m in order] == list(range(r["interleave_ways"]))
    # sysfs
    k = st["regions"][name]
    assert k["commit"] == "1" and k["driver"] == "cxl_region"
    assert int(k["size"], 16) == r["size"] and k["interleave_ways"] == r["interleave_ways"]
    assert int(k["interleave_granularity"]) == r["interleave_granularity"]
    assert k["targets"] == [m["decoder"] for m in order]
    assert k["root_decoder"] == r["decoder"] and int(k["resource"], 16) == r["resource"]
    # cxl list -R -T
    c = cxl_list_region(st, name)
    assert c["decode_state"] == "commit"
    assert (c["size"], c["interleave_ways"], c["interleave_granularity"]) == (
        r["size"],
        r["interleave_ways"],
        r["interleave_granularity"],
    )
    got = sorted((m["position"], m["memdev"], m["decoder"]) for m in c["mappings"])
    assert got == [(m["position"], m["memdev"], m["decoder"]) for m in order]
    # the decoders the kernel programmed above the endpoints, as planned
    for pd in r["port_decoders"]:
        d = st["decoders"][pd["decoder"]]
        assert d["region"] == name, (pd, d)
        assert int(d["interleave_ways"]) == pd["interleave_ways"], (pd, d)
        assert int(d["interleave_granularity"]) == pd["interleave_granularity"], (pd, d)
        assert d["target_list"] == ",".join(map(str, pd["targets"])), (pd, d)
    # daxctl / numactl
    assert len(r["dax"]) == 1
    dev = r["dax"][0]
    peer = [d for d in st["daxctl"] if d["chardev"] == dev["chardev"]]
    assert len(peer) == 1, st["daxctl"]
    p = peer[0]
    assert p["mode"] == online == dev["mode"] and p["size"] == r["size"]
    if online == "system-ram":
        assert p["online_memblocks"] == p["total_memblocks"] == dev["online_memblocks"] > 0
        assert p["movable"] is (zone == "movable")
        assert dev["zones"] == ["Movable" if zone == "movable" else "Normal"]
        node = p["target_node"]
        m = re.search(rf"^node {node} size: (\d+) MB$", st["numactl"], re.M)
        assert m and int(m.group(1)) == r["size"] // MiB, st["numactl"]
        assert re.search(rf"^node {node} cpus:\s*$", st["numactl"], re.M)
    else:  # a character device, not memory of its node
        assert p["target_node"] not in parse_nodelist(st["has_memory"] or "")
    return r


def undone(step: Dict[str, Any], before: Dict[str, Any]) -> None:
    assert step["rc"] == 1, (step["label"], step["stdout"], step["stderr"])
    assert "every step was undone" in step["stderr"] and "nothing remains" in step["stderr"], step["stderr"]
    assert "Traceback" not in step["stderr"]
    assert comparable(step["state"]) == comparable(before["state"]), step["label"]


# ------------------------------------------------------------------------------- hb2x2


def test_hb2x2_regions_match_the_kernel(hb2x2: Dict[str, Dict[str, Any]]) -> None:
    s = hb2x2
    zone = _zone(s)
    assert s["before"]["state"]["regions"] == {} and s["before"]["state"]["auto_online_blocks"] == "online"
    r4 = check_region(s["create4"], zone=zone)
    assert (r4["interleave_ways"], r4["interleave_granularity"], r4["size"]) == (4, 8192, 1 << 30)
    # the memdevs were given in reverse; cxlctl put them in the order the root's target list wants
    plan = json.loads(s["plan4"]["stdout"])["plans"][0]
    assert r4["targets"] == plan["targets"]
    assert [m["route"][0]["index"] for m in r4["mappings"]] == [0, 1, 0, 1]
    assert {(d["interleave_ways"], d["interleave_granularity"]) for d in r4["port_decoders"]} == {(2, 16384)}
    r2 = check_region(s["create2"], zone="movable")
    assert (r2["decoder"], r2["interleave_ways"]) == ("decoder0.0", 2)
    assert [m["route"][0]["index"] for m in r2["mappings"]] == [0, 1]
    ra = check_region(s["create21"], zone=zone)
    assert (ra["decoder"], ra["interleave_ways"]) == ("decoder0.1", 2)
    rb = check_region(s["create1"], online="devdax")
    assert (rb["decoder"], rb["interleave_ways"]) == ("decoder0.2", 1)
    assert set(s["create1"]["state"]["regions"]) == {ra["region"], rb["region"]}  # both at once
    al = check_region(s["all"], zone=zone)
    assert (al["decoder"], al["interleave_ways"], al["size"]) == ("decoder0.0", 4, 1 << 30)
    # cxlctl status agrees: one CXL node holding the region
    st = json.loads(s["status4"]["stdout"])
    assert [r["region"] for r in st["regions"]] == [r4["region"]]
    assert [n["id"] for n in st["nodes"] if n["kind"] == "cxl"] == [r4["dax"][0]["target_node"]]


def test_hb2x2_dax_modes_and_zones(hb2x2: Dict[str, Dict[str, Any]]) -> None:
    s = hb2x2
    r4 = created(s["create4"])
    dev = r4["dax"][0]["chardev"]
    # refused without --force: nothing changed
    assert s["devdax-refused"]["rc"] == 2 and "online as System RAM" in s["devdax-refused"]["stderr"]
    assert comparable(s["devdax-refused"]["state"]) == comparable(s["create4"]["state"])

    def peer(label: str) -> Dict[str, Any]:
        st = s[label]["state"]
        d = [x for x in st["daxctl"] if x["chardev"] == dev]
        assert len(d) == 1 and s[label]["rc"] == 0, s[label]["stderr"]
        assert st["auto_online_blocks"] == "online"  # held only while kmem bound, then restored
        out = d[0]
        assert isinstance(out, dict)
        return out

    node = r4["dax"][0]["target_node"]
    assert peer("devdax")["mode"] == "devdax"
    assert node not in parse_nodelist(s["devdax"]["state"]["has_memory"])  # the NUMA node is gone
    assert node in parse_nodelist(s["ram-movable"]["state"]["has_memory"])
    mov = peer("ram-movable")
    assert (
        mov["mode"] == "system-ram"
        and mov["movable"] is True
        and mov["online_memblocks"] == mov["total_memblocks"] == 8
    )
    assert "held auto_online_blocks at offline" in s["ram-movable"]["stdout"]
    if _zone(s) == "movable":  # 7.x: ZONE_NORMAL is tried last (test_7x_hb2x2_normal_region_...)
        assert "ram-normal" not in s
        return
    nor = peer("ram-normal")
    assert nor["mode"] == "system-ram" and nor["movable"] is False and nor["online_memblocks"] == 8
    assert json.loads(s["ram-normal"]["stdout"])["device"]["zones"] == ["Normal"]


def test_7x_hb2x2_normal_region_destroy_is_undone_when_the_kernel_keeps_it(
    hb2x2: Dict[str, Dict[str, Any]],
) -> None:
    """7.x only: a ZONE_NORMAL region, then ``destroy --force``.  Either it went (the state
    before it), or the kernel could not offline a block -- then cxlctl says so, names the
    zone, and puts every block it had offlined back online: the region and its node intact."""
    s = hb2x2
    if _zone(s) != "movable":
        pytest.skip("the 6.12 scenario destroys its ZONE_NORMAL regions in test_hb2x2_destroy_...")
    r = check_region(s["normal-create"], zone="normal")
    d = s["normal-destroy"]
    if d["rc"] == 0:
        assert comparable(d["state"]) == comparable(s["after"]["state"])
        return
    assert d["rc"] == 1 and "Traceback" not in d["stderr"], d["stderr"]
    err = " ".join(d["stderr"].split())
    assert "could not be offlined" in err and "zone Normal" in err and "back online" in err, err
    assert comparable(d["state"]) == comparable(s["normal-create"]["state"])
    (dev,) = [x for x in d["state"]["daxctl"] if x["chardev"] == r["dax"][0]["chardev"]]
    assert dev["mode"] == "system-ram" and dev["online_memblocks"] == dev["total_memblocks"] > 0
    print(f"\n7.x hb2x2: destroy --force of a ZONE_NORMAL region: {err[:300]}")


def test_hb2x2_destroy_brings_back_the_previous_state(hb2x2: Dict[str, Dict[str, Any]]) -> None:
    s = hb2x2
    before = comparable(s["before"]["state"])
    r4 = created(s["create4"])
    ref = s["destroy4-refused"]
    assert ref["rc"] == 2 and "memory is online" in ref["stderr"] and "--force" in ref["stderr"]
    assert r4["region"] in ref["state"]["regions"]
    for label in ("destroy4", "destroy2", "destroy21", "all-destroy", "after"):
        assert s[label]["rc"] == 0, s[label]["stderr"]
        assert comparable(s[label]["state"]) == before, label
    assert json.loads(s["destroy4"]["stdout"])["offlined"][0]["memory_blocks"]  # --force offlined them
    assert comparable(s["destroy1"]["state"]) == comparable(s["create21"]["state"])


def test_hb2x2_address_order_rule_is_the_kernels(hb2x2: Dict[str, Dict[str, Any]]) -> None:
    """cxlctl refuses a region below one already on the same bridge; forced through the plain shell
    helper, the kernel refuses it too (EBUSY at the first target) and nothing is left."""
    s = hb2x2
    pairs = [k[len("hpa-kernel-") :] for k in s if k.startswith("hpa-kernel-")]
    assert pairs, "no pair hit the address-order rule"
    for pr in pairs:
        plan = s["hpa-plan-" + pr]
        assert plan["rc"] == 2 and "HPA order violation" in plan["stderr"]
        kern = s["hpa-kernel-" + pr]["kernel"]
        assert kern["rc"] != 0 and "Device or resource busy" in kern["stderr"], kern
    assert comparable(s["hpa-destroy"]["state"]) == comparable(s["before"]["state"])


def test_hb2x2_destroy_order(hb2x2: Dict[str, Dict[str, Any]]) -> None:
    s = hb2x2
    a, b = created(s["order-a"]), created(s["order-b"])
    ref = s["order-a-refused"]
    assert ref["rc"] == 2 and f"{a['region']} cannot be torn down before {b['region']}" in ref["stderr"]
    assert set(ref["state"]["regions"]) == {a["region"], b["region"]}
    assert s["order-b-destroy"]["rc"] == 0 and s["order-a-destroy"]["rc"] == 0
    assert comparable(s["order-a-destroy"]["state"]) == comparable(s["before"]["state"])


def test_hb2x2_rejected_half_way_leaves_nothing(hb2x2: Dict[str, Dict[str, Any]]) -> None:
    s = hb2x2
    before = s["before"]
    swap = s["tamper-swap"]
    undone(swap, before)
    assert "/target" in swap["stderr"] and "ENXIO" in swap["stderr"]  # the kernel's position check
    over = s["tamper-oversize"]
    undone(over, before)
    assert "/size" in over["stderr"]
    faults = sorted((k for k in s if re.fullmatch(r"fault-\d+", k)), key=lambda k: int(k[6:]))
    assert len(faults) >= 10, faults  # claim, geometry, size, per target DPA + target, commit, bind
    for k in faults[:-1]:
        undone(s[k], before)
        assert "EIO" in s[k]["stderr"]
    last = s[faults[-1]]
    assert last["rc"] == 0 and created(last)["interleave_ways"] == 2
    assert comparable(s["fault-done-destroy"]["state"]) == comparable(before["state"])


# ------------------------------------------------------------------------- switch2, hb2


def test_switch2(switch2: Dict[str, Dict[str, Any]]) -> None:
    s = switch2
    before = comparable(s["before"]["state"])
    r2 = check_region(s["create2"], zone="movable")
    assert r2["interleave_ways"] == 2 and len(r2["mappings"][0]["route"]) == 3  # root, bridge, switch
    # the switch interleaves; the bridge above it does not
    assert [d["interleave_ways"] for d in r2["port_decoders"]] == [1, 2]
    dev = r2["dax"][0]["chardev"]
    assert [d["mode"] for d in s["devdax"]["state"]["daxctl"] if d["chardev"] == dev] == ["devdax"]
    assert [d["movable"] for d in s["ram-normal"]["state"]["daxctl"] if d["chardev"] == dev] == [False]
    r1 = check_region(s["create1"])
    assert (r1["interleave_ways"], r1["size"]) == (1, 256 * MiB)
    undone(s["tamper-oversize"], s["before"])
    al = check_region(s["all"], online="devdax")
    assert al["interleave_ways"] == 2
    for label in ("destroy2", "destroy1", "all-destroy", "after"):
        assert s[label]["rc"] == 0 and comparable(s[label]["state"]) == before, label


def test_hb2(hb2: Dict[str, Dict[str, Any]]) -> None:
    s = hb2
    before = comparable(s["before"]["state"])
    p1 = s["plan1"]
    assert p1["rc"] == 2 and "interleaves 2-way" in p1["stderr"]
    r2 = check_region(s["create2"])
    assert [m["route"][0]["index"] for m in r2["mappings"]] == [0, 1]
    undone(s["tamper-swap"], s["before"])
    assert "ENXIO" in s["tamper-swap"]["stderr"]
    check_region(s["all"], zone="movable")
    for label in ("destroy2", "all-destroy", "after"):
        assert s[label]["rc"] == 0 and comparable(s[label]["state"]) == before, label


# ------------------------------------------------------------------------------- 6.1


def check_linux61(res: GuestResult) -> None:
    """6.1 (test_vm_linux61's shared boot): plan and create refuse RAM regions, nothing changes."""
    s = index(steps_of(res))
    k = s["kernel"]
    assert k["uname"].startswith("6.1.")
    assert "create_ram_region" not in k["root_decoder_attrs"] and "create_pmem_region" in k["root_decoder_attrs"]
    for label in ("plan", "create", "create-all"):
        st = s[label]
        assert st["rc"] == 2, st
        assert "cannot create CXL RAM regions" in st["stderr"] and "6.3" in st["stderr"]
        assert comparable(st["state"]) == comparable(s["before"]["state"])
