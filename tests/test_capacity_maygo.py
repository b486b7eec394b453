"""May this memory go? (``cxlctl/capacity/maygo.py``, issue 41 items 1-3 and 8, issue 44 item 3) on edited
copies of recorded trees.

Each case is one edit of a copy, named in its test: the DAX region deleted (the firmware onlined the
range as System RAM, so ``cxl_region_probe()`` made none), ``1`` written to a decoder's ``locked``, a
region torn down by hand (what the kernel's sysfs shows after ``delete_region``).  The two-region trees
are ``switch2-devdax``: region0 and region1 through the same host bridge (port1) and switch (port2),
region0 on decoder1.0/decoder2.0, region1 on decoder1.1/decoder2.1.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from cxlctl.capacity.maygo import CODES
from cxlctl.capacity.report import STATES
from tests.kit import FIXTURES, REPO, cli, copy_fixture
from tests.test_capacity import _codes, _digest, _json, _movable

SINGLE = ["linux-6.12/single-region", "linux-7.x/single-region"]
TWO = ["linux-6.12/switch2-devdax", "linux-7.x/switch2-devdax"]
HB2X2 = ["linux-6.12/hb2x2-region", "linux-7.x/hb2x2-region"]
MiB = 1 << 20


def _write(root: str, rel: str, text: str) -> None:
    path = os.path.join(root, rel)
    os.unlink(path)  # copies may share inodes with the fixture: never write through
    with open(path, "w") as f:
        f.write(text)


def _region_dir(root: str, region: str) -> str:
    (d,) = glob.glob(os.path.join(root, f"sys/devices/platform/*/root0/decoder*/{region}"))
    return d


def _unlink_to(root: str, bus: str, target: str) -> None:
    """Remove the links under ``sys/bus/BUS/devices`` that point into ``target``."""
    d = os.path.join(root, f"sys/bus/{bus}/devices")
    for name in os.listdir(d):
        p = os.path.join(d, name)
        if os.path.islink(p) and os.path.realpath(p).startswith(os.path.realpath(target)):
            os.unlink(p)


def _drop_dax_region(root: str, region: str) -> None:
    """The edit of item 1: the region has no DAX region (the kernel's cxl_region_probe() makes none when
    its range is already online as System RAM); its memory blocks stay online."""
    dr = os.path.join(_region_dir(root, region), "dax_" + region)
    _unlink_to(root, "cxl", dr)
    _unlink_to(root, "dax", dr)
    shutil.rmtree(dr)


def _tear_down(root: str, region: str, blocks: Tuple[int, ...]) -> None:
    """What sysfs shows after the kernel tore ``region`` down: its directory and DAX devices gone, its
    decoders without a region, its endpoint decoders' DPA freed, its memory blocks removed."""
    rd = _region_dir(root, region)
    _unlink_to(root, "cxl", rd)
    _unlink_to(root, "dax", rd)
    shutil.rmtree(rd)
    found = glob.glob(os.path.join(root, "sys/devices/platform/**/decoder*/region"), recursive=True)
    for path in sorted({os.path.realpath(p) for p in found}):
        with open(path) as f:
            if f.read().strip() != region:
                continue
        _write(root, path, "\n")
        dpa = os.path.join(os.path.dirname(path), "dpa_size")
        if os.path.exists(dpa):
            _write(root, dpa, "0x0000000000000000\n")
    for b in blocks:
        shutil.rmtree(os.path.join(root, f"sys/devices/system/memory/memory{b}"))
        for link in glob.glob(os.path.join(root, f"sys/devices/system/node/node*/memory{b}")):
            os.unlink(link)


def _by_region(doc: Dict[str, Any]) -> Dict[str, str]:
    return {m["regions"][0]: m["memdev"] for m in doc["memdevs"] if m["regions"]}


# ------------------------------------------------------------------ 1. System RAM without a DAX device


@pytest.mark.parametrize("tree", SINGLE)
def test_system_ram_without_its_dax_device_blocks(tree: str, tmp_path: Path) -> None:
    """Node 1 keeps 512 MiB online, and no DAX device of region0 owns it: blocked, and release refuses
    before anything changes (before the change: `releasable 512 MiB` and a plan that decommits)."""
    root = copy_fixture(os.path.join(FIXTURES, tree), tmp_path / "t")
    _movable(root)  # even in ZONE_MOVABLE: the range is the page allocator's, not a DAX device's
    _drop_dax_region(root, "region0")
    doc = _json(root)
    (m,) = doc["memdevs"]
    assert (m["state"], m["releasable"], m["dax_devices"]) == ("blocked", 0, [])
    assert (m["online"], m["movable"], m["nodes"]) == (512 * MiB, 512 * MiB, [1])  # online all the same
    (b,) = m["blockers"]
    assert (b["code"], b["subject"]) == ("system-ram-no-dax", "region0")
    assert "4 block(s) (512 MiB)" in b["message"] and "memory146" in b["message"]
    assert "cxl_region_probe()" in b["message"] and "machine check" in b["message"]
    before = _digest(root)
    p = cli("--root", root, "capacity", "release", "mem0", "--dry-run", rc=2)
    assert "cannot release mem0 (system-ram-no-dax)" in p.stderr and "Traceback" not in p.stderr
    p = cli("--root", root, "region", "destroy", "region0", "--force", rc=2)
    assert "cannot destroy region0" in p.stderr and "System RAM" in p.stderr
    assert _digest(root) == before
    d = json.loads(cli("--root", root, "doctor", "--json", rc=None).stdout)
    (c,) = [c for c in _checks(d) if c["id"] == "devices.region.region0"]
    assert "4 block(s) of its range are online as System RAM" in c["message"]


def test_system_ram_unknown_without_the_region_address(tmp_path: Path) -> None:
    """No DAX device and the region's resource unreadable (a user's scan): cannot tell, so deny."""
    root = copy_fixture(os.path.join(FIXTURES, "linux-7.x/single-region"), tmp_path / "t")
    _movable(root)
    _drop_dax_region(root, "region0")
    os.unlink(os.path.join(_region_dir(root, "region0"), "resource"))
    assert _codes(_json(root), "mem0") == ["system-ram-unknown"]


@pytest.mark.parametrize("tree", SINGLE)
def test_a_region_whose_dax_device_owns_its_memory_is_no_system_ram_blocker(tree: str, tmp_path: Path) -> None:
    root = copy_fixture(os.path.join(FIXTURES, tree), tmp_path / "t")
    _movable(root)
    assert _codes(_json(root), "mem0") == []


# ------------------------------------------------------------------------------ 2. locked decoders


@pytest.mark.parametrize("tree", SINGLE)
def test_a_firmware_locked_decoder_blocks_before_anything_changes(tree: str, tmp_path: Path) -> None:
    """`1` in the endpoint decoder's `locked`: the kernel would refuse the decommit (EPERM) after the
    offline and unbind; the report refuses first, and doctor reads the same decoders."""
    root = copy_fixture(os.path.join(FIXTURES, tree), tmp_path / "t")
    _movable(root)
    found = glob.glob(os.path.join(root, "sys/devices/platform/**/endpoint*/decoder*/region"), recursive=True)
    (ep,) = {os.path.realpath(p) for p in found if open(p).read().strip() == "region0"}
    dec = os.path.basename(os.path.dirname(ep))
    _write(root, os.path.join(os.path.dirname(ep), "locked"), "1\n")
    doc = _json(root)
    (b,) = doc["memdevs"][0]["blockers"]
    assert (b["code"], b["subject"]) == ("decoder-locked", "region0")
    assert f"/sys/bus/cxl/devices/{dec}/locked" in b["message"] and "commit_store(): EPERM" in b["message"]
    before = _digest(root)
    p = cli("--root", root, "capacity", "release", "mem0", rc=2)
    assert "cannot release mem0 (decoder-locked)" in p.stderr
    p = cli("--root", root, "region", "destroy", "region0", "--force", rc=2)
    assert "locked by the firmware" in p.stderr
    assert _digest(root) == before
    from cxlctl.capacity.maygo import locked_by_region
    from cxlctl.doctor.kernel import check_locked
    from cxlctl.hostio.host import Host
    from cxlctl.inventory import scan

    inv = scan(Host(root))
    assert locked_by_region(inv) == {"region0": [dec]}

    class F:  # the one field check_locked reads besides the inventory's totals
        pass

    f = F()
    f.inv = inv  # type: ignore[attr-defined]
    (c, *_) = check_locked(f)  # type: ignore[arg-type]
    assert c.id == "firmware.locked-region" and c.evidence[0].source == f"/sys/bus/cxl/devices/{dec}/locked"


# ------------------------------------------------------------------ 3. two regions through one port


def _two(tree: str, tmp_path: Path) -> Tuple[str, str, str]:
    """A copy of ``tree`` with both regions releasable on their own merits (region1's blocks movable);
    (root, region0's memdev, region1's memdev)."""
    root = copy_fixture(os.path.join(FIXTURES, tree), tmp_path / "t")
    _movable(root, (148, 149))
    by = _by_region(_json(root))
    return root, by["region0"], by["region1"]


@pytest.mark.parametrize("tree", TWO)
def test_the_report_says_which_region_must_go_first(tree: str, tmp_path: Path) -> None:
    root, low, high = _two(tree, tmp_path)
    doc = _json(root)
    m = {x["memdev"]: x for x in doc["memdevs"]}
    assert (m[high]["state"], m[high]["depends_on"], m[high]["blockers"]) == ("releasable", [], [])
    assert (m[low]["state"], m[low]["depends_on"]) == ("blocked", [high])
    (b,) = m[low]["blockers"]
    assert (b["code"], b["subject"]) == ("decoder-order", "region1")
    assert "decoder1.1 on port1, after decoder1.0" in b["message"] and "match_free_decoder()" in b["message"]
    assert f"`cxlctl capacity release {' '.join(sorted((low, high)))}`" in b["fix"]
    out = cli("--root", root, "capacity", env={"COLUMNS": "80"}, check=True).stdout
    assert f"after {high} (decoder order)" in out


@pytest.mark.parametrize("tree", TWO)
def test_release_the_first_region_first_is_refused(tree: str, tmp_path: Path) -> None:
    """Second-then-first in the kernel's terms: region0 (the lower decoders) alone is refused before
    anything is written, with the stable code and the memdev that must go first."""
    root, low, high = _two(tree, tmp_path)
    before = _digest(root)
    p = cli("--root", root, "capacity", "release", low, rc=2)
    assert f"cannot release {low} (decoder-order): region0 cannot go before region1" in p.stderr
    assert f"release region1 ({high}) first" in p.stderr
    p = cli("--root", root, "region", "destroy", "region0", "--force", rc=2)
    assert "region0 cannot be torn down before region1" in p.stderr
    assert _digest(root) == before
    assert not os.path.exists(os.path.join(root, "run/cxlctl"))


@pytest.mark.parametrize("tree", TWO)
def test_release_together_tears_down_the_highest_decoders_first(tree: str, tmp_path: Path) -> None:
    root, low, high = _two(tree, tmp_path)
    for names in ([low, high], [high, low]):
        d = json.loads(cli("--root", root, "capacity", "release", *names, "--dry-run", "--json", check=True).stdout)
        assert [r["region"] for r in d["regions"]] == ["region1", "region0"], names


@pytest.mark.parametrize("tree", TWO)
def test_release_second_then_first_leaves_the_port_usable(tree: str, tmp_path: Path) -> None:
    """region1 (the higher decoders) goes first: allowed alone; once it is gone region0 is releasable,
    and the freed memdev can be adopted again through the same ports (no hole)."""
    root, low, high = _two(tree, tmp_path)
    d = json.loads(cli("--root", root, "capacity", "release", high, "--dry-run", "--json", check=True).stdout)
    assert [r["region"] for r in d["regions"]] == ["region1"]
    _tear_down(root, "region1", (148, 149))
    doc = _json(root)
    m = {x["memdev"]: x for x in doc["memdevs"]}
    assert (m[high]["state"], m[low]["state"], m[low]["blockers"]) == ("free", "releasable", [])
    assert (doc["notes"], doc["port_holes"]) == ([], [])
    cli("--root", root, "capacity", "release", low, "--dry-run", check=True)
    p = cli("--root", root, "capacity", "adopt", high, "--dry-run", check=True)
    assert "would build a region" in p.stdout


@pytest.mark.parametrize("tree", TWO)
def test_a_port_left_with_a_hole_refuses_the_next_adoption(tree: str, tmp_path: Path) -> None:
    """region0 torn down out of order (what 6.12+ lets `region destroy` elsewhere do): decoder1.0 and
    decoder2.0 free below region1's.  The kernel would give no decoder on port1 (match_free_decoder(),
    check_commit_order()); the report says so and adoption refuses with the reason instead of failing
    half-way in the kernel."""
    root, low, high = _two(tree, tmp_path)
    _tear_down(root, "region0", ())
    doc = _json(root)
    assert any("port1 has decoder1.0 free below decoder1.1" in n and "match_free_decoder()" in n for n in doc["notes"])
    assert [(h["code"], h["port"], h["free"], h["regions"]) for h in doc["port_holes"]] == [
        ("port-hole", "port1", ["decoder1.0"], ["region1"]),
        ("port-hole", "port2", ["decoder2.0"], ["region1"]),
    ]
    before = _digest(root)
    p = cli("--root", root, "capacity", "adopt", low, "--dry-run", rc=2)
    assert "match_free_decoder()" in p.stderr and "region1" in p.stderr
    assert _digest(root) == before
    d = json.loads(cli("--root", root, "doctor", "--json", rc=None).stdout)
    holes = {c["id"]: c for c in _checks(d) if c["id"].startswith("devices.port-hole.")}
    assert sorted(holes) == ["devices.port-hole.port1", "devices.port-hole.port2"]
    assert holes["devices.port-hole.port1"]["result"] == "warn"


def _checks(doc: Any) -> List[Dict[str, Any]]:
    """Every check object in a doctor --json document, wherever its layer puts it."""
    out: List[Dict[str, Any]] = []
    if isinstance(doc, dict):
        if "id" in doc and "result" in doc:
            out.append(doc)
        for v in doc.values():
            out += _checks(v)
    elif isinstance(doc, list):
        for v in doc:
            out += _checks(v)
    return out


# ------------------------------------------------------------- 44.3: a member's share, a paragraph once


@pytest.mark.parametrize("tree", HB2X2)
def test_each_member_shows_its_share_and_blockers_once(tree: str) -> None:
    root = os.path.join(FIXTURES, tree)
    doc = _json(root)
    assert [m["online"] for m in doc["memdevs"]] == [256 * MiB] * 4
    assert sum(m["online"] for m in doc["memdevs"]) == 1024 * MiB  # the region's size, not 4x it
    out = cli("--root", root, "capacity", env={"COLUMNS": "80"}, check=True).stdout
    # one paragraph for the four, its fix naming the group's first memdev (a release takes the group)
    assert out.count("are blocked:") == 1 and "mem0, mem1, mem2, mem3 are blocked:" in out
    assert out.count("online in ZONE_NORMAL") == 1 and "capacity release mem0 --try-normal" in out
    rows = [x.split() for x in out.splitlines() if re.match(r"mem\d ", x)]
    assert [r[5:7] for r in rows] == [["256", "MiB"]] * 4  # memdev, capacity, region, node, online


# ----------------------------------------------------------------------- 8. bind and cpuset blockers


def test_bind_only_says_the_placement_is_lost(tmp_path: Path) -> None:
    from tests.test_capacity import _edit_proc

    root = copy_fixture(os.path.join(FIXTURES, "linux-7.x/single-region"), tmp_path / "t")
    _movable(root)
    _edit_proc(root, lambda t: t.replace(" default heap ", " bind:1 heap ", 1))
    (b,) = _json(root)["memdevs"][0]["blockers"]
    assert b["code"] == "bind-only" and "do_migrate_range()" in b["message"]
    assert "loses the placement" in b["message"] and "nowhere to go" not in b["message"]


# ------------------------------------------------------------------------------- the JSON contract


def _doc_codes() -> List[str]:
    with open(os.path.join(REPO, "docs/capacity.md")) as f:
        text = f.read()
    table = text.split("### The blockers", 1)[1].split("\n###", 1)[0]
    return re.findall(r"^\| `([a-z-]+)` \|", table, flags=re.M)


def test_every_blocker_code_is_documented_with_its_kernel_reason() -> None:
    codes = _doc_codes()
    assert sorted(set(codes)) == sorted(CODES), "docs/capacity.md's blocker table and maygo.CODES differ"
    with open(os.path.join(REPO, "docs/capacity.md")) as f:
        text = f.read()
    for s in STATES:
        assert f"`{s}`" in text


@pytest.mark.parametrize("tree", [*SINGLE, *TWO, *HB2X2, "linux-7.x/pool-hotadd"])
def test_the_json_holds_only_documented_codes_states_and_keys(tree: str) -> None:
    with open(os.path.join(REPO, "docs/capacity.md")) as f:
        text = f.read()
    doc = _json(os.path.join(FIXTURES, tree))
    for k in doc:
        assert f'"{k}"' in text, f"top-level key {k} is not in docs/capacity.md"
    for m in doc["memdevs"]:
        assert m["state"] in STATES
        assert all(b["code"] in CODES and set(b) == {"code", "subject", "message", "fix"} for b in m["blockers"])
        for k in m:
            assert f'"{k}"' in text, f"memdev key {k} is not in docs/capacity.md"
    for n in doc["nodes"]:
        for k in n:
            assert f'"{k}"' in text, f"node key {k} is not in docs/capacity.md"


@pytest.mark.parametrize("tree", TWO)
def test_a_failed_release_builds_the_regions_again_in_commit_order(tree: str, tmp_path: Path, monkeypatch: Any) -> None:
    """Torn down highest decoders first (region1, then region0); when region0's teardown fails the
    rollback builds region0 again first, then region1, so each takes back its own decoders (built the
    other way round, region0 would land above region1 on the ports: the planner's HPA order refuses it)."""
    from cxlctl.capacity import release as rel
    from cxlctl.errors import CxlctlError
    from cxlctl.hostio.host import Host
    from cxlctl.regions import program

    root, low, high = _two(tree, tmp_path)
    torn: List[str] = []
    rebuilt: List[str] = []

    def destroy(host: Any, name: str, force: bool, log: Any, progress: Any = None) -> None:
        if name == "region0":
            raise CxlctlError("region destroy region0: decommit failed: EBUSY")
        torn.append(name)

    monkeypatch.setattr(program, "destroy", destroy)

    def rebuild(host: Any, r: Any, log: Any) -> List[str]:
        rebuilt.append(r.name)
        return []

    monkeypatch.setattr(rel, "_rebuild", rebuild)
    with pytest.raises(CxlctlError) as e:
        rel.release(Host(root), [low, high], None, lambda m: None, wait=0)
    assert "rolled back" in str(e.value)
    assert (torn, rebuilt) == (["region1"], ["region0", "region1"])
