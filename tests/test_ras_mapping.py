"""DPA → HPA → region/node/block mapping of RAS events, on recorded real trees.

The arithmetic is checked against the kernel's own answer where one exists:
``fixtures/linux-6.12/events/poison-in-region.txt`` holds a ``cxl_poison``
event for which the 6.12 kernel printed both the DPA and the HPA; cxlctl's
decoder translation of that DPA (ignoring the kernel's HPA) must give the
same HPA.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from cxlctl.ras.events import dpa_to_hpa, endpoint_decoder_for, map_address

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "linux-6.12"


@pytest.fixture(scope="module")
def hb2() -> object:
    return scan(Host(str(FIX / "hb2-region")))


def test_dpa_translates_through_the_interleave(hb2: object) -> None:
    from cxlctl.model import Inventory

    assert isinstance(hb2, Inventory)
    r = hb2.region("region0")
    assert r is not None and r.interleave_ways == 2 and r.interleave_granularity == 8192
    assert r.resource is not None
    pos = {t.memdev: t.position for t in r.targets}
    # mem1 is position 1: its DPA 0x4000 is its third 8 KiB chunk -> region chunk 2*2+1
    m = map_address(hb2, "mem1", 0x4000, None, None)
    assert pos["mem1"] == 1
    assert m.region == "region0" and m.hpa_source == "decoder"
    assert m.hpa == r.resource + 5 * 8192
    bs = hb2.memory_block_size
    assert bs and m.memory_block == m.hpa // bs
    assert m.node == 1 and m.block_state == "online"
    # position 0, offset inside a chunk
    m0 = map_address(hb2, "mem0", 0x2040, None, None)
    assert m0.hpa == r.resource + 2 * 8192 + 0x40


def test_dpa_outside_every_decoder_is_explained(hb2: object) -> None:
    from cxlctl.model import Inventory

    assert isinstance(hb2, Inventory)
    m = map_address(hb2, "mem0", 0x7FFF_0000, None, None)
    assert m.hpa is None and m.region is None
    assert m.why and "no endpoint decoder" in m.why
    m = map_address(hb2, "mem9", 0x1000, None, None)
    assert m.hpa is None and m.why


def test_kernel_hpa_is_taken_as_given(hb2: object) -> None:
    from cxlctl.model import Inventory

    assert isinstance(hb2, Inventory)
    r = hb2.region("region0")
    assert r is not None and r.resource is not None
    m = map_address(hb2, "mem0", 0x0, r.resource + 0x123000, "region0")
    assert m.hpa_source == "kernel" and m.hpa == r.resource + 0x123000 and m.node == 1


def test_translation_refuses_what_it_cannot_know(hb2: object) -> None:
    from cxlctl.model import Inventory

    assert isinstance(hb2, Inventory)
    r = hb2.region("region0")
    assert r is not None
    assert dpa_to_hpa(r._replace(resource=None), 0, 0) is None  # not root: no base address
    assert dpa_to_hpa(r, 5, 0) is None  # position beyond the ways
    assert r.size is not None
    assert dpa_to_hpa(r, 0, r.size) is None  # beyond the region
    d = endpoint_decoder_for(hb2, "mem0", 0)
    assert d is not None and d.region == "region0"
