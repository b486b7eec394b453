"""The scan's hot path (issue 10's scan cost) keeps every rule of the general one.

``Reader.attrs`` reads a device directory's attributes in one pass; it must return
what ``Reader.raw`` returns for each, with the same notes, on hostile trees too.
Idle endpoint decoders are read for their state only; decoders are placed by the
port directory that lists them; names sort by a string key that must order exactly
like ``natural_key``.  Trees are copies of recorded fixtures (one attribute
replaced) or, for one parser edge case, a few files in ``tmp_path``.
"""

from __future__ import annotations

import os
import random
import shutil
from typing import Any, List, Optional

import pytest

from cxlctl.hostio import paths
from cxlctl.hostio.host import Host
from cxlctl.hostio.objects import Attrs
from cxlctl.hostio.reader import Reader, Vanished, natural_key, sort_names
from cxlctl.inventory import scan
from tests.kit import FIXTURES, copy_fixture, fixture_id, fixture_roots

REGION = os.path.join(FIXTURES, "linux-6.12", "single-region")
ROOTS = fixture_roots()
NAMES = ("plain", "empty", "fifo", "dir", "missing", "inlink", "outlink", "devzero", "big")


@pytest.fixture
def odd_dir(tmp_path: Any) -> str:
    """A device directory with one attribute of each kind the hot path must hand over."""
    root = tmp_path / "root"
    d = root / "sys" / "dev0"
    d.mkdir(parents=True)
    (d / "plain").write_bytes(b"42\n")
    (d / "empty").write_bytes(b"")
    os.mkfifo(d / "fifo")
    (d / "dir").mkdir()
    (d / "target").write_bytes(b"7\n")
    os.symlink("target", d / "inlink")
    (tmp_path / "outside").write_bytes(b"secret\n")
    os.symlink(str(tmp_path / "outside"), d / "outlink")
    os.symlink("/dev/zero", d / "devzero")
    (d / "big").write_bytes(b"1" * (2 << 20))
    return str(root)


@pytest.mark.parametrize("device", [None, "/sys/dev0"])
def test_attrs_returns_what_raw_returns(odd_dir: str, device: Optional[str]) -> None:
    a = Reader(odd_dir)
    a.device = device
    got = a.attrs("/sys/dev0", NAMES)
    b = Reader(odd_dir)
    want = [b.raw(f"/sys/dev0/{n}") for n in NAMES]
    assert got == want
    assert got[:2] == [b"42\n", b""] and got[NAMES.index("inlink")] == b"7\n"
    assert sorted(a.notes) == sorted(b.notes)
    assert {p.rsplit("/", 1)[1] for p, _ in a.notes} == {"fifo", "outlink", "devzero", "big"}


def test_attrs_in_recording_mode_logs_and_captures_every_read(odd_dir: str) -> None:
    r = Reader(odd_dir, log=True)
    got = r.attrs("/sys/dev0", ("plain", "empty", "missing"))
    assert got == [b"42\n", b"", None]
    assert r.log is not None and {"/sys/dev0/plain", "/sys/dev0/empty", "/sys/dev0/missing"} <= r.log
    assert r.captured("/sys/dev0/plain") == b"42\n"


def test_a_device_gone_after_its_first_reads_is_reported_vanished(odd_dir: str) -> None:
    """Missing attributes of the device being read are told apart from a removed device once,
    by confirm() after the device's reads (what the scan's guarded() calls)."""
    r = Reader(odd_dir)
    r.device = "/sys/dev0"
    assert r.attrs("/sys/dev0", ("plain",)) == [b"42\n"]
    assert r.attrs("/sys/dev0", ("missing",)) == [None]
    r.confirm()  # still there: the attribute is simply absent
    shutil.rmtree(os.path.join(odd_dir, "sys", "dev0"))
    assert r.attrs("/sys/dev0", ("plain", "empty")) == [None, None]  # the kept handle: a removed directory
    with pytest.raises(Vanished):
        r.confirm()
    assert r.absent is None  # confirm() consumed it


def test_subdirectory_link_out_of_the_root_is_not_followed(tree_copy: str, tmp_path: Any) -> None:
    """A memdev's ``ram/`` is opened through the memdev's handle without following a link."""
    mem = os.path.realpath(os.path.join(tree_copy, paths.CXL_DEVICES.lstrip("/"), "mem0"))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "size").write_bytes(b"0x1000\n")
    shutil.rmtree(os.path.join(mem, "ram"))
    os.symlink(str(outside), os.path.join(mem, "ram"))
    r = Reader(tree_copy)
    inv = scan(Host(tree_copy), r)
    assert inv.memdevs[0].ram_size is None
    assert any(p.endswith("/ram/size") and "out of the root" in why for p, why in inv.notes)


@pytest.fixture
def tree_copy(tmp_path: Any) -> str:
    return copy_fixture(REGION, str(tmp_path / "t"))


@pytest.mark.parametrize("root", ROOTS, ids=[fixture_id(r) for r in ROOTS])
def test_idle_endpoint_decoders_are_read_for_their_state_only(root: str) -> None:
    r = Reader(root, log=True)
    inv = scan(Host(root), r)
    assert r.log is not None
    eps = [d for d in inv.decoders if d.kind == "endpoint"]
    idle = [d for d in eps if d.region is None and d.dpa_size == 0]
    assert idle, "every recorded tree has unused endpoint decoders"
    for d in eps:
        dev = f"{paths.CXL_DEVICES}/{d.name}"
        for attr in ("region", "dpa_size", "mode", "size", "interleave_ways", "locked"):
            assert f"{dev}/{attr}" in r.log
        read_rest = f"{dev}/interleave_granularity" in r.log
        if d in idle:
            assert not read_rest and f"{dev}/start" not in r.log
            assert (d.resource, d.interleave_granularity, d.target_type, d.dpa_resource) == (None, None, None, None)
            assert d.size is not None and d.interleave_ways is not None and d.locked is not None
        else:
            assert read_rest and d.interleave_granularity and d.target_type and d.resource is not None


def test_in_use_endpoint_decoders_keep_every_attribute() -> None:
    inv = scan(Host(REGION))
    used = [d for d in inv.decoders if d.kind == "endpoint" and d.region]
    assert used
    for d in used:
        assert d.dpa_size and d.dpa_resource is not None and d.resource is not None
        assert d.interleave_granularity and d.target_type == "expander" and d.mode == "ram"


@pytest.mark.parametrize("root", ROOTS, ids=[fixture_id(r) for r in ROOTS])
def test_decoders_are_placed_where_their_bus_link_leads(root: str) -> None:
    """The port whose directory lists a decoder is the parent of the decoder's real path."""
    inv = scan(Host(root))
    assert inv.decoders
    bus = os.path.join(root, paths.CXL_DEVICES.lstrip("/"))
    for d in inv.decoders:
        assert os.path.basename(os.path.dirname(os.path.realpath(os.path.join(bus, d.name)))) == d.port


def test_a_decoder_in_no_port_directory_is_placed_by_its_real_path(tree_copy: str) -> None:
    """A bus entry whose device sits outside every port's directory still gets its parent as port."""
    bus = os.path.join(tree_copy, paths.CXL_DEVICES.lstrip("/"))
    inv0 = scan(Host(tree_copy))
    d0 = next(d for d in inv0.decoders if d.kind == "endpoint")
    real = os.path.realpath(os.path.join(bus, d0.name))
    moved = os.path.join(tree_copy, "sys", "devices", "elsewhere", d0.name)
    os.makedirs(os.path.dirname(moved))
    shutil.move(real, moved)
    os.unlink(os.path.join(bus, d0.name))
    os.symlink(os.path.relpath(moved, bus), os.path.join(bus, d0.name))
    d = next(x for x in scan(Host(tree_copy)).decoders if x.name == d0.name)
    assert d.port == "elsewhere" and d.kind == "switch"  # not a port: as the real-path rule always said
    assert d.size == d0.size


def _random_names(rng: random.Random, n: int) -> List[str]:
    parts = ["mem", "decoder", "dax", "endpoint", ".", "0", "1", "9", "10", "007", "²", "١", "_", "-", " ", "~", "x"]
    return ["".join(rng.choice(parts) for _ in range(rng.randint(0, 5))) for _ in range(n)]


def test_sort_names_orders_exactly_like_natural_key() -> None:
    rng = random.Random(10)
    for _ in range(3000):
        names = _random_names(rng, rng.randint(1, 9))
        keys: Any = {}
        for _ in range(2):  # with a fresh and with a filled key cache
            got = list(names)
            rng.shuffle(got)
            want = sorted(got, key=natural_key)
            sort_names(got, keys)
            assert got == want


def test_bytes_parsers_agree_with_the_text_parsers() -> None:
    """num_of/flag_of (bytes, the hot path) give the value and the warnings num()/flag() give."""
    rng = random.Random(11)
    pieces = [b"-", b"1", b"0", b"x", b"0x", b"f", b" ", b"\n", b"y", b"\xc2\xb2", b"9" * 19, b"f" * 16]
    for _ in range(20000):
        raw = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 5)))
        name = rng.choice(["size", "numa_node", "qos_class", "x_numa_node", "locked"])
        unset = rng.random() < 0.5
        fast, slow = Attrs(Reader("/")), Attrs(Reader("/"))
        text = raw.decode("utf-8", "replace").strip()
        assert fast.num_of("/d", name, raw, unset_is_none=unset) == slow._num(f"/d/{name}", text, False, unset)
        assert fast.flag_of("/d", name, raw) == slow._flag(f"/d/{name}", text)
        assert len(fast.warnings) == len(slow.warnings)


def test_a_kept_reader_lists_a_replaced_directory(odd_dir: str) -> None:
    """Listing through a kept handle is for the device being read only: a handle kept from an
    earlier read could be of a directory replaced since (a region torn down and made again)."""
    d = os.path.join(odd_dir, "sys", "dev0")
    r = Reader(odd_dir)
    assert r.attrs("/sys/dev0", ("plain",)) == [b"42\n"]  # keeps a handle on dev0
    os.rename(d, d + ".old")
    os.makedirs(d)
    with open(os.path.join(d, "fresh"), "w") as f:
        f.write("1\n")
    assert r.listdir("/sys/dev0") == ["fresh"]
    r.device = "/sys/dev1"
    os.makedirs(os.path.join(odd_dir, "sys", "dev1", "sub"))
    assert r.attrs("/sys/dev1", ("x",)) == [None]  # a handle opened for dev1 ...
    assert r.listdir("/sys/dev1") == ["sub"]  # ... lists through itself
    r.confirm()
