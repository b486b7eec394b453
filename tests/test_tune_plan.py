"""The pure parts: weights, plan(), recommend().

plan() is pure by design, so besides running it on every recorded tree, the
weighted-interleave decisions (kernel auto mode, bandwidth, ratio, switching)
are checked on an inventory taken from a recorded tree and *extended* in memory
with a CXL node — data for a pure function, not a hand-made tree.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import pytest

from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from cxlctl.model import Coordinates, Inventory, Memdev, Node, Region
from cxlctl.tuning import profile as prof
from cxlctl.tuning.knobs import BY_NAME, WI_DIR, Current, parse_ratio, read_current
from cxlctl.tuning.plan import plan
from cxlctl.tuning.recommend import recommend
from cxlctl.tuning.weights import cxl_write_bandwidth, ratio_weights, reduce_weights
from tests.tune_support import PROFILES, pristine, sources, work_copy

SOURCES = sources()


# ---------------------------------------------------------------------------- weights


def test_reduce_weights_hmsdk_style() -> None:
    assert reduce_weights({0: 100000, 2: 30000}) == {0: 7, 2: 2}  # 0.286 vs 0.3: within 5 %
    assert reduce_weights({0: 90000, 1: 60000}) == {0: 3, 1: 2}  # HMSDK's halving gives 5:4
    assert reduce_weights({0: 51200, 1: 51200, 2: 25600}) == {0: 2, 1: 2, 2: 1}
    assert reduce_weights({0: 7, 1: 7}) == {0: 1, 1: 1}
    assert reduce_weights({0: 100}) == {0: 1}
    assert reduce_weights({}) == {}
    # no small ratio fits: the cap bounds the largest weight, the smallest stays 1
    assert reduce_weights({0: 1_000_000, 1: 1_000}, cap=10) == {0: 10, 1: 1}
    assert reduce_weights({0: 1_000_000, 1: 1_000}, cap=255) == {0: 255, 1: 1}
    assert reduce_weights({0: 100000, 2: 33000}, cap=1) == {0: 1, 2: 1}
    for bw in ({0: 123456, 1: 654321, 2: 1}, {0: 2**40, 1: 3}):
        assert all(1 <= v <= 10 for v in reduce_weights(bw, cap=10).values())
        assert all(1 <= v <= 32 for v in reduce_weights(bw).values())


def test_ratio_weights_and_parse() -> None:
    assert ratio_weights([0, 1], [2], (6, 2)) == {0: 3, 1: 3, 2: 1}
    assert parse_ratio(" 3:1 ") == (3, 1)
    for bad in ("3", "3:", "a:b", "0:1", "1:256", "3:1:1"):
        with pytest.raises(ValueError):
            parse_ratio(bad)


def test_canonical_text_round_trip() -> None:
    for knob, values in (
        ("vm.swappiness", ("0", "10", "200")),
        ("demotion_enabled", ("true", "false")),
        ("auto_online_blocks", ("offline", "online_movable")),
        ("weighted_interleave", ("1", "255", "true", "false")),
    ):
        k = BY_NAME[knob]
        for v in values:
            assert k.canonical(k.text(v)) == v
    assert BY_NAME["demotion_enabled"].canonical("Y\n") == "true"
    assert BY_NAME["vm.swappiness"].canonical("ten") is None


# ---------------------------------------------------------------------------- plan on every tree


@pytest.mark.parametrize("source", SOURCES)
def test_plan_invariants_on_recorded_trees(source: str, tmp_path: Any) -> None:
    root = work_copy(source, str(tmp_path / "root"))
    inv = scan(Host(root))
    cur = read_current(Host(root))
    for name in PROFILES:
        p = prof.load(Host(root), name)
        pl = plan(inv, p, cur)
        assert pl == plan(inv, p, cur)  # deterministic
        saved = {path for _, path in pl.saved}
        for s in pl.steps:
            assert s.action in ("set", "noop", "unsupported", "skip"), s
            assert (s.write is not None) == (s.action == "set"), s
            if s.action == "noop":
                assert s.current == s.desired
            if s.action == "set":
                assert s.current != s.desired
                assert BY_NAME[s.knob].canonical(s.write or "") == s.desired
            if s.action in ("set", "noop"):
                assert s.path in saved
            if s.action == "unsupported":
                assert s.note
        if any(s.knob == "weighted_interleave" and s.action in ("set", "noop") for s in pl.steps):
            # the group is saved as a whole: every weight file and auto
            wi = {p for p in saved if p.startswith(WI_DIR)}
            assert wi == {f"{WI_DIR}/{n}" for n in cur.wi_files or ()}
        if cur.wi_files is None:
            assert all(s.action == "unsupported" for s in pl.steps if s.knob == "weighted_interleave")


# ---------------------------------------------------------------------------- weighted interleave decisions


def _host_inventory() -> Inventory:
    return scan(Host(pristine(SOURCES[-1])))


def _with_cxl(
    inv: Inventory,
    dram_bw: Optional[Tuple[int, int]] = (100000, 100000),
    cxl_bw: Optional[Tuple[int, int]] = (30000, 25000),
    shared_tier: bool = False,
) -> Inventory:
    """The recorded inventory plus one CXL node (id 9) backed by one region."""
    dram = [n for n in inv.nodes if n.kind == "dram"][0]
    dc = Coordinates(*dram_bw) if dram_bw else None
    dram = dram._replace(access0=dc, access1=dc, tier=4)  # both classes: the nearest initiator is a CPU
    cxl = Node(
        id=9,
        cpus=(),
        has_cpu=False,
        has_memory=True,
        mem_total=1 << 30,
        mem_free=1 << 30,
        distance=(20, 10),
        access0=None,
        access1=None,
        memory_blocks=(),
        tier=4 if shared_tier else 22,
        kind="cxl",
        regions=("region0",),
    )
    region = Region(
        name="region0",
        root_decoder="decoder0.0",
        mode="ram",
        size=1 << 30,
        resource=None,
        interleave_ways=1,
        interleave_granularity=256,
        uuid=None,
        committed=True,
        driver="cxl_region",
        targets=(),
        access0=Coordinates(*cxl_bw) if cxl_bw else None,
        access1=Coordinates(*cxl_bw) if cxl_bw else None,
    )
    return inv._replace(nodes=(dram, cxl), regions=(region,))


def _current(weights: Dict[int, int], auto: Optional[str]) -> Current:
    values: Dict[str, Optional[str]] = {}
    names = []
    for n, w in weights.items():
        values[f"{WI_DIR}/node{n}"] = f"{w}\n"
        names.append(f"node{n}")
    if auto is not None:
        values[f"{WI_DIR}/auto"] = auto
        names.append("auto")
    for k in BY_NAME.values():
        if k.kind != "group":
            values[k.path] = "0\n" if k.name != "auto_online_blocks" else "offline\n"
    values["/sys/kernel/mm/numa/demotion_enabled"] = "false\n"
    return Current(values, tuple(sorted(names)))


def _wi_steps(inv: Inventory, profile: str, cur: Current, tmp: str, text: Optional[str] = None) -> Dict[str, Any]:
    root = work_copy(SOURCES[-1], tmp)
    if text is not None:
        with open(f"{root}/etc/cxlctl/profiles/{profile}.toml", "w") as f:
            f.write(text)
    pl = plan(inv, prof.load(Host(root), profile), cur)
    return {s.setting: (s.action, s.desired, s.note) for s in pl.steps if s.knob == "weighted_interleave"}


def test_wi_prefers_kernel_auto_mode_when_bandwidth_is_known(tmp_path: Any) -> None:
    inv = _with_cxl(_host_inventory())
    dram = [n.id for n in inv.nodes if n.kind == "dram"][0]
    steps = _wi_steps(inv, "inference-bandwidth", _current({dram: 1, 9: 1}, "false\n"), str(tmp_path / "a"))
    assert list(steps) == ["weighted_interleave.auto"]
    assert steps["weighted_interleave.auto"][:2] == ("set", "true")
    assert "kernel auto mode" in steps["weighted_interleave.auto"][2]
    # already in auto mode: nothing to do
    steps = _wi_steps(inv, "inference-bandwidth", _current({dram: 7, 9: 2}, "true\n"), str(tmp_path / "b"))
    assert steps["weighted_interleave.auto"][0] == "noop"


def test_wi_weights_from_bandwidth_without_auto(tmp_path: Any) -> None:
    inv = _with_cxl(_host_inventory())
    dram = [n.id for n in inv.nodes if n.kind == "dram"][0]
    steps = _wi_steps(inv, "inference-bandwidth", _current({dram: 1, 9: 1}, None), str(tmp_path / "a"))
    # DRAM 100000 MB/s, CXL min(30000, 25000) = 25000 → 4:1
    assert steps[f"weighted_interleave.node{dram}"][:2] == ("set", "4")
    assert steps["weighted_interleave.node9"][:2] == ("noop", "1")
    assert "weighted_interleave.auto" not in steps
    # prefer_auto = false: manual weights even where auto exists, and auto written off (last)
    text = 'include = "inference-bandwidth"\n[knobs.weighted_interleave]\nprefer_auto = false\n'
    steps = _wi_steps(inv, "manual", _current({dram: 1, 9: 1}, "true\n"), str(tmp_path / "b"), text)
    assert list(steps)[-1] == "weighted_interleave.auto"
    assert steps["weighted_interleave.auto"][:2] == ("set", "false")


def test_wi_without_bandwidth_is_skipped_with_advice_and_ratio_works(tmp_path: Any) -> None:
    inv = _with_cxl(_host_inventory(), cxl_bw=None)
    dram = [n.id for n in inv.nodes if n.kind == "dram"][0]
    cur = _current({dram: 1, 9: 1}, "false\n")
    steps = _wi_steps(inv, "inference-bandwidth", cur, str(tmp_path / "a"))
    action, _, note = steps["weighted_interleave"]
    assert action == "skip" and "no bandwidth data" in note and "node(s) 9" in note and "3:1" in note
    steps = _wi_steps(inv, "t-ratio", cur, str(tmp_path / "b"))
    assert steps[f"weighted_interleave.node{dram}"][:2] == ("set", "3")
    assert steps["weighted_interleave.node9"][:2] == ("noop", "1")
    assert steps["weighted_interleave.auto"][:2] == ("noop", "false")


def test_rate_limit_is_a_tenth_of_cxl_write_bandwidth(tmp_path: Any) -> None:
    inv = _with_cxl(_host_inventory())
    assert cxl_write_bandwidth(inv) == 25000
    root = work_copy(SOURCES[-1], str(tmp_path / "r"))
    dram = [n.id for n in inv.nodes if n.kind == "dram"][0]
    pl = plan(inv, prof.load(Host(root), "inference-capacity"), _current({dram: 1, 9: 1}, None))
    rl = [s for s in pl.steps if s.knob == "kernel.numa_balancing_promote_rate_limit_MBps"][0]
    assert rl.desired == "2500" and "25000 MB/s" in rl.note
    assert pl.warnings == ()


def test_tiering_on_a_shared_tier_is_warned_about(tmp_path: Any) -> None:
    inv = _with_cxl(_host_inventory(), shared_tier=True)
    root = work_copy(SOURCES[-1], str(tmp_path / "r"))
    dram = [n.id for n in inv.nodes if n.kind == "dram"][0]
    pl = plan(inv, prof.load(Host(root), "inference-capacity"), _current({dram: 1, 9: 1}, None))
    assert any("share DRAM's memory tier" in w for w in pl.warnings)


def test_switching_restores_weights_the_new_profile_leaves_alone(tmp_path: Any) -> None:
    inv = _with_cxl(_host_inventory())
    dram = [n.id for n in inv.nodes if n.kind == "dram"][0]
    root = work_copy(SOURCES[-1], str(tmp_path / "r"))
    cur = _current({dram: 3, 9: 1}, "false\n")  # t-ratio was applied; the boot had auto mode on
    restore = {
        f"{WI_DIR}/node{dram}": ("weighted_interleave", "5\n"),
        f"{WI_DIR}/node9": ("weighted_interleave", "2\n"),
        f"{WI_DIR}/auto": ("weighted_interleave", "true\n"),
    }
    pl = plan(inv, prof.load(Host(root), "latency-strict"), cur, restore)
    wi = [(s.setting, s.action, s.write) for s in pl.steps if s.knob == "weighted_interleave"]
    # weights first, auto last (a weight write switches auto off)
    assert wi == [
        (f"weighted_interleave.node{dram}", "restore", "5\n"),
        ("weighted_interleave.node9", "restore", "2\n"),
        ("weighted_interleave.auto", "restore", "true\n"),
    ]


# ---------------------------------------------------------------------------- recommend


def test_recommend_cases() -> None:
    host = _host_inventory()
    no_wi = Current({}, None)
    with_wi = Current({}, ("node0",))
    if not host.has_cxl:
        r = recommend(host, with_wi)
        assert r.profile is None and "no CXL devices" in r.reasons[0]
    r = recommend(_with_cxl(host, shared_tier=True), with_wi)
    assert r.profile == "inference-bandwidth" and "tiering (inference-capacity) cannot work" in r.reasons[0]
    r = recommend(_with_cxl(host), with_wi)
    assert r.profile == "inference-bandwidth" and [a for a, _ in r.alternatives] == [
        "inference-capacity",
        "latency-strict",
    ]
    r = recommend(_with_cxl(host), no_wi)
    assert r.profile == "inference-capacity"
    r = recommend(_with_cxl(host, dram_bw=None), with_wi)
    assert any("no bandwidth data" in x for x in r.reasons)
    mem = Memdev("mem0", 1 << 30, None, None, None, 1, None, "0000:0d:00.0", 0, None, None, None, None, "cxl_mem", True)
    devices_only = host._replace(memdevs=(mem,), nodes=tuple(n for n in host.nodes if n.kind != "cxl"))
    r = recommend(devices_only, with_wi)
    assert r.profile is None and "none of their capacity is online" in r.reasons[0]
