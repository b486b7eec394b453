"""The region planner on sysfs trees recorded from real 6.12 and 6.1 kernels.

The ``*-noregion`` fixtures are the planner's natural inputs.  Devices are
named by their QEMU serial (tests/vm/harness.py TOPOLOGIES), because memdev
names do not follow QEMU's device order.  Expected positions are derived from
the topology (which host bridge / root port each serial hangs off) and, where
a fixture holds a region the real kernel committed (``*-region``), checked
against it.  A few tests edit the recorded inventory (NamedTuple ``_replace``)
to reach states the QEMU topologies cannot produce (used decoders, regions at
other addresses, deeper fan-out); the edits are to the model, never to I/O.
"""

from __future__ import annotations

import functools
import itertools
import os
from typing import Dict, List, Sequence, Tuple

import pytest

from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from cxlctl.kconfig import kernel_version
from cxlctl.model import Decoder, Dport, Inventory, Port, Region
from cxlctl.regions.planner import (
    SZ_256M,
    PlanError,
    Request,
    _plan,
    _State,
    destroy_blockers,
    plan,
    plan_all,
    ram_region_support,
)
from tests.kit import FIXTURES

K612 = os.path.join(FIXTURES, "linux-6.12")
K61 = os.path.join(FIXTURES, "linux-6.1")
MiB = 1 << 20
GiB = 1 << 30


@functools.cache
def inv_of(kernel: str, name: str) -> Inventory:
    root = os.path.join(FIXTURES, f"linux-{kernel}", name)
    assert os.path.isdir(root), f"missing fixture {root} (scripts/record-fixtures.sh)"
    return scan(Host(root))


def by_serial(inv: Inventory) -> Dict[int, str]:
    return {m.serial: m.name for m in inv.memdevs if m.serial is not None}


def serials(inv: Inventory, names: Sequence[str]) -> List[int]:
    rev = {m.name: m.serial for m in inv.memdevs}
    return [int(rev[n] or 0) for n in names]


def mems(inv: Inventory, *sn: int) -> Tuple[str, ...]:
    m = by_serial(inv)
    return tuple(m[s] for s in sn)


def err(inv: Inventory, req: Request) -> PlanError:
    with pytest.raises(PlanError) as e:
        plan(inv, req)
    return e.value


# ------------------------------------------------------------------------ positions


def test_single_one_way() -> None:
    inv = inv_of("6.12", "single-noregion")
    p = plan(inv, Request(memdevs=mems(inv, 0x1001)))
    assert (p.root_decoder, p.ways, p.size, p.granularity) == ("decoder0.0", 1, 512 * MiB, 256)
    assert p.targets[0].decoder.endswith(".0") and p.targets[0].dpa_size == 512 * MiB
    assert p.resource is not None  # recorded as root: window address known
    assert [lv.ways for lv in p.levels] == [1, 1]


def test_hb2_positions_follow_root_target_list() -> None:
    """hb2: cxl.1 (bus 12) is target_list[0]; its device (0x2001) must be position 0 whatever the order given."""
    inv = inv_of("6.12", "hb2-noregion")
    rd = inv.decoder("decoder0.0")
    assert rd is not None and rd.target_list == (12, 222)
    for order in ((0x2001, 0x2002), (0x2002, 0x2001)):
        p = plan(inv, Request(memdevs=mems(inv, *order)))
        assert serials(inv, [t.memdev for t in p.targets]) == [0x2001, 0x2002]
        assert [t.hops[0].dport for t in p.targets] == [12, 222]
        assert (p.ways, p.granularity, p.size) == (2, 8192, 512 * MiB)


def test_hb2x2_four_way_positions_at_every_level() -> None:
    """Root digit first (12, 222, 12, 222), then each bridge's root port in id order."""
    inv = inv_of("6.12", "hb2x2-noregion")
    want = [0x4001, 0x4003, 0x4002, 0x4004]
    for order in itertools.permutations(want):
        p = plan(inv, Request(memdevs=mems(inv, *order)))
        assert serials(inv, [t.memdev for t in p.targets]) == want
    assert p.root_decoder == "decoder0.0" and p.size == GiB and p.granularity == 8192
    assert [t.hops[0].dport for t in p.targets] == [12, 222, 12, 222]
    assert [t.hops[1].dport for t in p.targets] == [0, 0, 1, 1]
    root, hb_a, hb_b = p.levels
    assert (root.ways, root.targets) == (2, (12, 222))
    # each bridge interleaves its two root ports; the kernel programs granularity x parent ways
    for lv in (hb_a, hb_b):
        assert (lv.ways, lv.granularity, lv.targets) == (2, 16384, (0, 1))
        assert lv.decoder.endswith(".0")


def test_switch2_positions_below_the_switch() -> None:
    inv = inv_of("6.12", "switch2-noregion")
    assert plan(inv, Request(memdevs=mems(inv, 0x3002, 0x3001))).granularity == 256  # the 1-way window's
    p = plan(inv, Request(memdevs=mems(inv, 0x3002, 0x3001), granularity=4096))
    assert serials(inv, [t.memdev for t in p.targets]) == [0x3001, 0x3002]
    assert p.granularity == 4096 and p.ways == 2
    # root 1-way, host bridge 1 port used, switch 2-way
    assert [lv.ways for lv in p.levels] == [1, 1, 2]
    assert len(p.targets[0].hops) == 3  # root, host bridge, switch
    sw = p.levels[-1]
    # parent granularity x parent ways: 4096 x 1 at the host bridge, 4096 x 1 at the switch
    assert sw.targets == (0, 1) and sw.granularity == 4096 and p.levels[1].granularity == 4096


@pytest.mark.parametrize("topo", ["single", "hb2", "switch2", "hb2x2"])
def test_reproduces_the_region_the_kernel_committed(topo: str) -> None:
    """The *-region fixtures hold a region the real kernel accepted; plan the same memdevs on the
    *-noregion tree and get the same window, geometry and target order."""
    done = inv_of("6.12", f"{topo}-region")
    assert len(done.regions) == 1
    r = done.regions[0]
    want = serials(done, [t.memdev or "" for t in r.targets])
    inv = inv_of("6.12", f"{topo}-noregion")
    req = Request(
        memdevs=tuple(by_serial(inv)[s] for s in reversed(want)),
        decoder=r.root_decoder,
        granularity=r.interleave_granularity,
    )
    p = plan(inv, req)
    assert serials(inv, [t.memdev for t in p.targets]) == want
    assert (p.ways, p.granularity, p.size) == (r.interleave_ways, r.interleave_granularity, r.size)
    assert p.resource == r.resource
    assert [t.decoder for t in p.targets] == [t.decoder for t in r.targets]


# --------------------------------------------------------------------------- rules


def test_root_interleave_needs_a_multiple_of_its_ways() -> None:
    inv = inv_of("6.12", "hb2x2-noregion")
    e = err(inv, Request(memdevs=mems(inv, 0x4001), decoder="decoder0.0"))
    assert "interleaves 2-way" in str(e) and "2, 4, 8, 16" in str(e)
    assert "--decoder decoder0.1" in e.hint  # what would work for this memdev
    e = err(inv, Request(memdevs=mems(inv, 0x4001, 0x4002, 0x4003), decoder="decoder0.0"))
    assert "3-way region cannot use decoder0.0" in str(e)


def test_three_ways_on_hb2x2_names_the_kernel_rule() -> None:
    """--ways 3 on hb2x2 (a 2-way and two 1-way windows): 3 is a multiple of 1, so 'takes multiples of 1'
    was no reason; interleave_ways_store refuses because 3 ÷ 1 = 3 is not a power of two."""
    inv = inv_of("6.12", "hb2x2-noregion")
    e = err(inv, Request(ways=3))
    assert "multiples of 1" not in str(e)
    assert "decoder0.1 interleaves 1-way, so it takes 1, 2, 4, 8 or 16 ways (3 ÷ 1 = 3, not a power of two)" in str(e)
    assert "decoder0.0 interleaves 2-way, so it takes 2, 4, 8 or 16 ways (3 ÷ 2 leaves a remainder)" in str(e)
    assert "interleave_ways_store" in e.hint and "3, 6 or 12 ways" in e.hint


def test_memdev_behind_a_bridge_the_window_does_not_target() -> None:
    inv = inv_of("6.12", "hb2x2-noregion")
    e = err(inv, Request(memdevs=mems(inv, 0x4003), decoder="decoder0.1"))
    assert "does not target" in str(e) and "dport 222" in str(e)
    assert "decoder0.0" in e.hint and "decoder0.2" in e.hint


def test_uneven_split_across_root_targets() -> None:
    inv = inv_of("6.12", "hb2x2-noregion")
    e = err(inv, Request(memdevs=mems(inv, 0x4001, 0x4002), decoder="decoder0.0"))
    assert "needs 1 memdev(s) below each" in str(e) and "has 2 of the chosen" in str(e)


def test_without_decoder_the_first_window_that_fits_is_chosen() -> None:
    inv = inv_of("6.12", "hb2x2-noregion")
    assert plan(inv, Request(memdevs=mems(inv, 0x4001, 0x4002))).root_decoder == "decoder0.1"
    assert plan(inv, Request(memdevs=mems(inv, 0x4004))).root_decoder == "decoder0.2"
    assert plan(inv, Request(memdevs=mems(inv, 0x4002, 0x4004))).root_decoder == "decoder0.0"
    e = err(inv, Request(memdevs=mems(inv, 0x4001, 0x4002, 0x4003)))
    assert str(e).startswith("no window can hold") and "decoder0.1:" in str(e) and "decoder0.2:" in str(e)


def test_granularity_rules() -> None:
    inv = inv_of("6.12", "hb2-noregion")
    both = mems(inv, 0x2001, 0x2002)
    e = err(inv, Request(memdevs=both, granularity=4096))
    assert "requires the region to use the root's granularity" in str(e) and "--granularity 8192" in e.hint
    for bad in (100, 255, 3000, 32768, 128):
        assert "power of two from 256 to 16384" in str(err(inv, Request(memdevs=both, granularity=bad)))
    assert plan(inv, Request(memdevs=both, granularity=8192)).granularity == 8192
    # a 1-way root leaves the choice free; each port gets parent granularity x parent ways
    inv4 = inv_of("6.12", "hb2x2-noregion")
    pair = mems(inv4, 0x4001, 0x4002)
    assert plan(inv4, Request(memdevs=pair, decoder="decoder0.1", granularity=4096)).levels[1].granularity == 4096
    assert plan(inv4, Request(memdevs=pair, decoder="decoder0.1", granularity=16384)).granularity == 16384
    # a 2-way root at 16384 would program its host bridges at 32768: impossible, even 2-way
    wide = _with_decoder(inv4, "decoder0.0", interleave_granularity=16384)
    e = err(wide, Request(memdevs=mems(inv4, 0x4001, 0x4003), decoder="decoder0.0"))
    assert "would need granularity 32768" in str(e) and "2-way root" in str(e)


def test_size_rules() -> None:
    inv = inv_of("6.12", "hb2-noregion")
    both = mems(inv, 0x2001, 0x2002)
    assert plan(inv, Request(memdevs=both)).size == 512 * MiB  # 256 MiB free on each x 2
    e = err(inv, Request(memdevs=both, size=256 * MiB))
    assert "not a multiple of 512 MiB (256 MiB x 2 ways)" in str(e) and "512 MiB" in e.hint
    e = err(inv, Request(memdevs=both, size=768 * MiB))
    assert "use 512 MiB, 1 GiB" in e.hint
    e = err(inv, Request(memdevs=both, size=GiB))
    assert "512 MiB of free RAM capacity" in str(e) and "has 256 MiB" in str(e)
    assert "largest size these memdevs allow is 512 MiB" in e.hint
    single = inv_of("6.12", "single-noregion")
    assert plan(single, Request(memdevs=("mem0",), size=256 * MiB)).targets[0].dpa_size == 256 * MiB


def _with_decoder(inv: Inventory, name: str, **changes: object) -> Inventory:
    decs = tuple(d._replace(**changes) if d.name == name else d for d in inv.decoders)  # type: ignore[arg-type]
    return inv._replace(decoders=decs)


def test_window_too_small_or_full() -> None:
    inv = inv_of("6.12", "hb2x2-noregion")
    pair = mems(inv, 0x4001, 0x4002)
    small = _with_decoder(inv, "decoder0.1", size=256 * MiB)
    e = err(small, Request(memdevs=pair, decoder="decoder0.1"))
    assert "no room for a 2-way region" in str(e) and "largest free extent is 256 MiB" in str(e)
    e = err(small, Request(memdevs=pair, decoder="decoder0.1", size=512 * MiB))
    assert "does not fit in decoder0.1" in str(e) and "largest free extent is 256 MiB" in str(e)


def test_next_endpoint_decoder_in_id_order_and_free_dpa() -> None:
    """A memdev whose first decoder holds 256 MiB of DPA uses its second decoder, with what is left."""
    inv = inv_of("6.12", "single-noregion")
    d0 = next(d for d in inv.decoders if d.kind == "endpoint" and d.name.endswith(".0"))
    used = _with_decoder(inv, d0.name, dpa_size=256 * MiB, dpa_resource=0, mode="ram")
    p = plan(used, Request(memdevs=("mem0",)))
    assert p.targets[0].decoder == d0.name[:-1] + "1" and p.size == 256 * MiB
    # a hole below a used decoder does not count: the kernel wants hdm_end + 1
    d1 = d0.name[:-1] + "1"
    holey = _with_decoder(_with_decoder(inv, d1, dpa_size=256 * MiB, dpa_resource=0, mode="ram"), d0.name)
    assert plan(holey, Request(memdevs=("mem0",))).targets[0].decoder == d0.name[:-1] + "2"
    # all used
    full = inv
    for d in inv.decoders:
        if d.kind == "endpoint":
            full = _with_decoder(full, d.name, region="regionX")
    assert "has no free decoder" in str(err(full, Request(memdevs=("mem0",))))
    locked = _with_decoder(inv, d0.name, locked=True)
    assert "locked by firmware" in str(err(locked, Request(memdevs=("mem0",))))
    pmem = _with_decoder(inv, d0.name, dpa_size=256 * MiB, dpa_resource=0, mode="pmem")
    assert "persistent-memory DPA" in str(err(pmem, Request(memdevs=("mem0",))))
    nofree = _with_decoder(inv, d0.name, dpa_size=512 * MiB, dpa_resource=0, mode="ram")
    assert "no free RAM capacity" in str(err(nofree, Request(memdevs=("mem0",))))


def test_next_port_decoder_and_uncommitted_regions() -> None:
    inv = inv_of("6.12", "single-noregion")
    sw0 = next(d for d in inv.decoders if d.kind == "switch")
    busy = _with_decoder(inv, sw0.name, region="region7")
    busy = busy._replace(regions=(Region("region7", "decoder0.0", "ram", 0, None, 1, 256, None, True, None, ()),))
    # the port's decoder 0 is taken by a committed region: the next one is used ...
    port_decs = [d for d in inv.decoders if d.port == sw0.port]
    if len(port_decs) > 1:
        assert plan(busy, Request(memdevs=("mem0",))).levels[1].decoder == sw0.name[:-1] + "1"
    else:
        assert "has no free decoder" in str(err(busy, Request(memdevs=("mem0",))))
    # ... but an uncommitted region holding it blocks the port
    half = busy._replace(regions=(busy.regions[0]._replace(committed=False),))
    e = err(half, Request(memdevs=("mem0",)))
    assert "region7, which is not committed" in str(e)


def test_address_order_violation() -> None:
    """A region in window 0 below one already using the same host bridge from window 1 is refused."""
    inv = inv_of("6.12", "hb2x2-noregion")
    st = _State(inv)
    first = _plan(st, Request(memdevs=mems(inv, 0x4001), decoder="decoder0.1"))
    st.add(first)
    with pytest.raises(PlanError) as e:
        _plan(st, Request(memdevs=mems(inv, 0x4002, 0x4003), decoder="decoder0.0"))
    assert "HPA order violation" in str(e.value) and "higher address" in str(e.value)
    # the other bridge is unaffected, and so is a window above
    assert _plan(st, Request(memdevs=mems(inv, 0x4003), decoder="decoder0.2")).root_decoder == "decoder0.2"


def test_unknown_addresses_without_root_are_noted() -> None:
    inv = inv_of("6.12", "hb2-noregion")
    blind = inv._replace(decoders=tuple(d._replace(resource=None) if d.kind == "root" else d for d in inv.decoders))
    p = plan(blind, Request(memdevs=mems(blind, 0x2001, 0x2002)))
    assert p.resource is None and any("root-only" in n for n in p.notes)


def test_bad_requests() -> None:
    inv = inv_of("6.12", "hb2x2-noregion")
    assert "no memdev mem9" in str(err(inv, Request(memdevs=("mem9",))))
    assert "listed twice" in str(err(inv, Request(memdevs=("mem0", "mem0"))))
    assert "contradicts" in str(err(inv, Request(memdevs=("mem0",), ways=2)))
    assert "not a root decoder" in str(err(inv, Request(memdevs=("mem0",), decoder="decoder1.0")))
    assert "RAM regions only" in str(err(inv, Request(memdevs=("mem0",), type="pmem")))
    assert "say which memdevs" in str(err(inv, Request()))
    assert "supports 1, 2, 3, 4, 6, 8, 12 or 16" in str(err(inv, Request(ways=5)))
    unbound = inv._replace(memdevs=tuple(m._replace(driver=None) if m.name == "mem0" else m for m in inv.memdevs))
    assert "not bound to cxl_mem" in str(err(unbound, Request(memdevs=("mem0",))))
    noram = _with_decoder(inv, "decoder0.1", cap_ram=False)
    assert "cannot hold RAM regions" in str(err(noram, Request(memdevs=mems(inv, 0x4001), decoder="decoder0.1")))


# ------------------------------------------------------------------------- selection


def test_ways_picks_memdevs_spread_widest() -> None:
    inv = inv_of("6.12", "hb2x2-noregion")
    p4 = plan(inv, Request(ways=4))
    assert p4.root_decoder == "decoder0.0" and serials(inv, [t.memdev for t in p4.targets]) == [
        0x4001,
        0x4003,
        0x4002,
        0x4004,
    ]
    p2 = plan(inv, Request(ways=2))
    assert p2.root_decoder == "decoder0.0" and serials(inv, [t.memdev for t in p2.targets]) == [0x4001, 0x4003]
    p21 = plan(inv, Request(ways=2, decoder="decoder0.1"))
    assert serials(inv, [t.memdev for t in p21.targets]) == [0x4001, 0x4002]
    p1 = plan(inv, Request(ways=1))
    assert p1.root_decoder == "decoder0.1" and serials(inv, [t.memdev for t in p1.targets]) == [0x4001]
    e = err(inv, Request(ways=8))
    assert "no window can hold a 8-way region" in str(e)
    e = err(inv, Request(ways=3))
    assert "decoder0.0 interleaves 2-way, so it takes 2, 4, 8 or 16 ways (3 ÷ 2 leaves a remainder)" in str(e)


def test_plan_all_uses_everything_widest_first() -> None:
    want = {"single": (1, 512 * MiB), "hb2": (2, 512 * MiB), "switch2": (2, 512 * MiB), "hb2x2": (4, GiB)}
    for topo, (ways, size) in want.items():
        plans = plan_all(inv_of("6.12", f"{topo}-noregion"), Request())
        assert [(p.ways, p.size) for p in plans] == [(ways, size)], topo
    # restricted to window 1 of hb2x2: one bridge's two devices
    plans = plan_all(inv_of("6.12", "hb2x2-noregion"), Request(decoder="decoder0.1"))
    assert [(p.root_decoder, p.ways) for p in plans] == [("decoder0.1", 2)]
    # nothing left when the region exists: no plan, not an error (create --all is idempotent)
    assert plan_all(inv_of("6.12", "hb2x2-region"), Request()) == []


def test_plan_all_chains_windows_when_capacity_is_split() -> None:
    """With one device's capacity half used, --all builds what still fits, each step seeing the last."""
    inv = inv_of("6.12", "hb2x2-noregion")
    names = by_serial(inv)
    ep = next(m.endpoint for m in inv.memdevs if m.name == names[0x4001])
    d0 = next(d for d in inv.decoders if d.port == ep and d.name.endswith(".0"))
    # 0x4001 keeps nothing: the other three remain; widest valid use is a 2-way across the bridges
    # (0x4002 + one of 0x4003/0x4004), then a 1-way for the last one
    used = _with_decoder(inv, d0.name, dpa_size=256 * MiB, dpa_resource=0, mode="ram")
    plans = plan_all(used, Request())
    assert [p.ways for p in plans] == [2, 1]
    got = [sorted(serials(used, [t.memdev for t in p.targets])) for p in plans]
    assert got[0] == [0x4002, 0x4003] and got[1] == [0x4004]
    assert sum(p.size for p in plans) == 768 * MiB


# -------------------------------------------------------------- fan-out (edited model)


def _fan_out(inv: Inventory, n_ports: int) -> Inventory:
    """hb2x2 with every device moved below the host bridge at root dport 12 (window 1's only
    target), which gets ``n_ports`` root ports, devices spread round-robin over them."""
    root = inv.buses[0]
    hb_name = next(d.name for d in root.dports if d.id == 12)
    hb = next(p for p in inv.ports if p.depth == 1 and p.parent_dport in (hb_name,))
    dports = tuple(Dport(i, f"0000:fe:{i:02x}.0") for i in range(n_ports))
    ports = tuple(p._replace(dports=dports) if p.name == hb.name else p for p in inv.ports)
    eps = [
        e._replace(parent=hb.name, parent_dport=dports[i % n_ports].name, host_bridge=hb.name)
        for i, e in enumerate(sorted(inv.endpoints, key=lambda e: e.name))
    ]
    return inv._replace(ports=ports, endpoints=tuple(eps))


def test_ports_below_the_root_interleave_only_powers_of_two() -> None:
    inv = _fan_out(inv_of("6.12", "hb2x2-noregion"), 4)
    names = [m.name for m in inv.memdevs]
    # window 1 targets that bridge only: 3 devices would need a 3-way bridge
    e = err(inv, Request(memdevs=tuple(names[:3]), decoder="decoder0.1"))
    assert "x3 needs a window that interleaves 3-way at the root" in str(e) and "powers of two" in str(e)
    p = plan(inv, Request(memdevs=tuple(names), decoder="decoder0.1", granularity=1024))
    assert p.levels[1].ways == 4 and p.levels[1].granularity == 1024
    assert [t.hops[1].dport for t in p.targets] == [0, 1, 2, 3]
    # three root ports for four devices: one port would carry two, the others one
    e = err(_fan_out(inv_of("6.12", "hb2x2-noregion"), 3), Request(memdevs=tuple(names), decoder="decoder0.1"))
    assert "would carry the region unevenly" in str(e) and "dport 0: 2" in str(e)


def test_three_way_root() -> None:
    """x3 at the root is allowed: a 3-way window over three bridges takes 3 or 6 memdevs, not 2 or 4."""
    inv = inv_of("6.12", "hb2x2-noregion")
    rd = inv.decoder("decoder0.0")
    assert rd is not None
    # give root0 a third bridge by aliasing: 3 targets where the third repeats nothing we can reach
    x3 = _with_decoder(inv, "decoder0.0", interleave_ways=3, target_list=(12, 222, 99))
    e = err(x3, Request(memdevs=mems(inv, 0x4001, 0x4003), decoder="decoder0.0"))
    assert "regions on it have 3, 6, 12 ways" in str(e)
    e = err(x3, Request(memdevs=mems(inv, 0x4001, 0x4002, 0x4003), decoder="decoder0.0"))
    assert "needs 1 memdev(s) below each" in str(e)


# ----------------------------------------------------------------------- 6.1 and misc


@pytest.mark.parametrize("topo", ["single", "hb2", "switch2", "hb2x2"])
def test_linux_6_1_cannot_create_ram_regions(topo: str) -> None:
    inv = inv_of("6.1", f"{topo}-noregion")
    ok, why = ram_region_support(inv)
    assert not ok and "cannot create CXL RAM regions" in why and "create_ram_region" in why and "6.3" in why
    for req in (Request(ways=1), Request(memdevs=(inv.memdevs[0].name,))):
        e = err(inv, req)
        assert str(e) == why and "6.3" in e.hint
    with pytest.raises(PlanError):
        plan_all(inv, Request())


def test_create_ram_region_attribute_decides_when_the_kernel_is_unknown() -> None:
    inv = inv_of("6.1", "hb2x2-noregion")._replace(kernel=None)
    assert all(d.can_create_ram is False for d in inv.decoders if d.kind == "root")
    assert not ram_region_support(inv)[0]
    new = inv_of("6.12", "hb2x2-noregion")
    assert all(d.can_create_ram for d in new.decoders if d.kind == "root")
    assert ram_region_support(new._replace(kernel=None)) == (True, "")


def test_kernel_version() -> None:
    assert kernel_version("6.12.117+deb12-amd64") == (6, 12)
    assert kernel_version("6.1.0-57-amd64") == (6, 1)
    assert kernel_version("weird") is None and kernel_version(None) is None
    assert kernel_version("\u0666.1.0") is None  # ASCII digits only: int() would read 6


def test_destroy_blockers() -> None:
    inv = inv_of("6.12", "single-noregion")
    sw = [d for d in inv.decoders if d.kind == "switch"]
    ep = [d for d in inv.decoders if d.kind == "endpoint"]
    two = _with_decoder(_with_decoder(inv, ep[0].name, region="region0"), ep[1].name, region="region1")
    assert destroy_blockers(two, "region1") == []
    b = destroy_blockers(two, "region0")
    assert len(b) == 1 and b[0].startswith("region1 (it uses " + ep[1].name)
    assert destroy_blockers(_with_decoder(inv, sw[0].name, region="region0"), "region0") == []


def test_region_model_helpers_exist() -> None:
    """Guard the model fields the planner relies on (the lead's model)."""
    assert {"target_list", "dpa_size", "dpa_resource", "region", "locked", "mode"} <= set(Decoder._fields)
    assert {"parent_dport", "dports", "host"} <= set(Port._fields)
    assert SZ_256M == 256 * MiB
