"""The host-I/O layer: bounded, non-blocking, root-confined reads; one root mapper,
one TOML loader, one atomic writer; fresh object reads in the model's own types.

Hostile trees are tmp_path copies of recorded fixtures with one attribute replaced.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, Dict

import pytest

from cxlctl import config as daemon_config
from cxlctl.errors import UsageError
from cxlctl.hostio import objects, paths, proc, toml
from cxlctl.hostio.atomic import atomic_write
from cxlctl.hostio.host import Host
from cxlctl.hostio.reader import MAX_BYTES, Reader, natural_key
from cxlctl.hostio.root import resolve_root, under
from cxlctl.inventory import scan
from cxlctl.model import MemoryBlock
from cxlctl.regions import dax
from cxlctl.tuning.profile import ProfileError
from cxlctl.tuning.profile import load as load_profile
from tests.kit import FIXTURES, cli, copy_fixture

REGION = os.path.join(FIXTURES, "linux-6.12", "single-region")


@pytest.fixture
def tree(tmp_path: Any) -> str:
    return copy_fixture(REGION, str(tmp_path / "t"))


def _memdev_attr(root: str, attr: str) -> str:
    """Real file of an attribute of the first memdev in ``root`` (links resolved)."""
    devs = os.path.join(root, paths.CXL_DEVICES.lstrip("/"))
    mem = sorted(n for n in os.listdir(devs) if n.startswith("mem"))[0]
    return os.path.join(os.path.realpath(os.path.join(devs, mem)), attr)


def _status(root: str) -> Dict[str, Any]:
    p = cli("--root", root, "status", "--json", timeout=60)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    doc = json.loads(p.stdout)
    assert isinstance(doc, dict)
    return doc


def _notes(doc: Dict[str, Any], attr: str) -> str:
    return " ".join(n["note"] for n in doc["notes"] if n["path"].endswith("/" + attr))


def _replace(path: str) -> None:
    os.unlink(path)


# -- hostile attributes: status completes, says what it skipped --------------------------------


def test_fifo_attribute_does_not_hang(tree: str) -> None:
    path = _memdev_attr(tree, "serial")
    _replace(path)
    os.mkfifo(path)
    doc = _status(tree)
    assert "not a regular file" in _notes(doc, "serial")
    assert doc["memdevs"][0]["serial"] is None


def test_link_to_dev_zero_is_not_read(tree: str) -> None:
    path = _memdev_attr(tree, "serial")
    _replace(path)
    os.symlink("/dev/zero", path)
    doc = _status(tree)
    assert "not a regular file" in _notes(doc, "serial")


def test_link_out_of_the_root_is_absent(tree: str, tmp_path: Any) -> None:
    outside = tmp_path / "outside"
    outside.write_text("0x1000000000\n")
    path = _memdev_attr(tree, "ram/size")
    before = _status(tree)["memdevs"][0]["ram_size"]
    _replace(path)
    os.symlink(str(outside), path)
    doc = _status(tree)
    assert "out of the root" in _notes(doc, "ram/size")
    assert doc["memdevs"][0]["ram_size"] is None != before


def test_link_inside_the_root_is_followed(tree: str) -> None:
    """An attribute that is a link to a regular file inside the tree reads as that file."""
    path = _memdev_attr(tree, "serial")
    before = _status(tree)["memdevs"][0]["serial"]
    os.rename(path, path + ".real")
    os.symlink("serial.real", path)
    doc = _status(tree)
    assert doc["memdevs"][0]["serial"] == before is not None
    assert not _notes(doc, "serial")


def test_directory_link_out_of_the_root_is_not_listed(tree: str, tmp_path: Any) -> None:
    (tmp_path / "elsewhere" / "node7").mkdir(parents=True)
    tiers = os.path.join(tree, paths.TIER_DIR.lstrip("/"))
    if os.path.lexists(tiers):
        os.rename(tiers, tiers + ".orig")
    os.makedirs(os.path.dirname(tiers), exist_ok=True)
    os.symlink(str(tmp_path / "elsewhere"), tiers)
    r = Reader(tree)
    assert r.listdir(paths.TIER_DIR) == []
    assert any("out of the root" in n for _, n in r.notes)


def test_files_and_links_in_a_directory_out_of_the_root_are_refused(tree: str, tmp_path: Any) -> None:
    """The directory handle is checked, not just the file: an attribute or a link inside a
    directory that leads out of the root is neither read nor followed."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "attr").write_text("42\n")
    os.symlink("target", str(elsewhere / "link"))
    os.symlink(str(elsewhere), os.path.join(tree, "sys", "escape"))
    r = Reader(tree)
    assert r.text("/sys/escape/attr") is None
    assert r.readlink("/sys/escape/link") is None
    assert [n for _, n in r.notes].count("a link leading out of the root: treated as absent") == 2


def test_attribute_reads_past_one_chunk_and_empty_ones(tree: str) -> None:
    """The inline one-read path hands anything but a short read to the bounded loop."""
    path = _memdev_attr(tree, "firmware_version")
    with open(path, "w") as f:
        f.write("v" * 100_000 + "\n")
    mem = f"{paths.CXL_DEVICES}/" + os.path.basename(os.path.dirname(path))
    r = Reader(tree)
    assert r.text(f"{mem}/firmware_version") == "v" * 100_000
    with open(path, "w"):
        pass
    assert r.raw(f"{mem}/firmware_version") == b""  # empty regular file: "", not None
    assert not r.notes


def test_a_kept_reader_sees_a_replaced_directory(tree: str) -> None:
    """A directory handle kept from an earlier read does not hide the directory that replaced it."""
    d = os.path.join(tree, "sys", "dev0")
    os.makedirs(d)
    with open(os.path.join(d, "size"), "w") as f:
        f.write("1\n")
    r = Reader(tree)
    assert r.text("/sys/dev0/size") == "1"
    os.rename(d, d + ".old")
    os.makedirs(d)
    with open(os.path.join(d, "size"), "w") as f:
        f.write("2\n")
    os.unlink(os.path.join(d + ".old", "size"))
    assert r.text("/sys/dev0/size") == "2"


def test_scan_releases_its_directory_handles(tree: str) -> None:
    fds = set(os.listdir("/proc/self/fd"))
    r = Reader(tree)
    scan(Host(tree), reader=r)
    assert set(os.listdir("/proc/self/fd")) == fds
    assert r.text("/proc/sys/kernel/osrelease") is not None  # still usable: handles reopen


def test_huge_attribute_is_not_parsed(tree: str) -> None:
    path = _memdev_attr(tree, "serial")
    with open(path, "wb") as f:
        f.write(b"1" * (MAX_BYTES + 10))
    doc = _status(tree)
    assert "larger than" in _notes(doc, "serial")
    assert doc["memdevs"][0]["serial"] is None


def test_live_root_reads_procfs_to_the_end() -> None:
    """procfs reports size 0: the reader must not stop after the first short read."""
    text = Reader("/").text("/proc/self/status")
    assert text is not None and "VmPeak" in text and "Cpus_allowed_list" in text


def test_natural_key_takes_ascii_digits_only() -> None:
    assert sorted(["mem10", "mem2", "mem²"], key=natural_key) == ["mem2", "mem10", "mem²"]


# -- the root ----------------------------------------------------------------------------------


def test_empty_root_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError, match="empty"):
        resolve_root("")
    monkeypatch.setenv("CXLCTL_ROOT", "")
    assert resolve_root(None) == "/"  # an empty variable is an unset one


def test_under_maps_host_paths() -> None:
    assert under("/", "/proc/sys/vm/swappiness") == "/proc/sys/vm/swappiness"
    assert under("/t/", "/proc/x") == "/t/proc/x"


# -- TOML --------------------------------------------------------------------------------------


DEEP = "x = " + "[" * 5000 + "]" * 5000 + "\n"


def test_deep_toml_profile_is_a_clean_error(tmp_path: Any) -> None:
    f = tmp_path / "deep.toml"
    f.write_text(DEEP)
    with pytest.raises(ProfileError) as e:
        load_profile(Host("/"), str(f))
    assert str(f) in str(e.value) and "nested" in str(e.value)


def test_deep_toml_config_is_a_clean_error(tmp_path: Any) -> None:
    f = tmp_path / "cxlctl.toml"
    f.write_text("[reconcile]\nx = " + "{a = " * 5000 + "1" + "}" * 5000 + "\n")
    with pytest.raises(daemon_config.ConfigError) as e:
        daemon_config.load(Host("/"), str(f))
    assert str(f) in str(e.value) and "nested" in str(e.value)


def test_toml_depth_ignores_brackets_in_strings() -> None:
    assert toml.nesting_depth('a = "[[[[" # [[[[\nb = [[1], [2]]\n[t]\n') == 2
    assert toml.loads('a = "' + "[" * 100 + '"')["a"] == "[" * 100


# -- the atomic writer ---------------------------------------------------------------------------


def test_atomic_write_sets_mode_and_leaves_no_temp(tmp_path: Any) -> None:
    path = str(tmp_path / "d" / "f.prom")
    old = os.umask(0o077)
    try:
        atomic_write("/", path, "a 1\n", mode=0o644, sync_dir=False)
        atomic_write("/", path, b"a 2\n", mode=0o644)
    finally:
        os.umask(old)
    assert open(path).read() == "a 2\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert os.listdir(tmp_path / "d") == ["f.prom"]


# -- processes -----------------------------------------------------------------------------------


def test_proc_reads() -> None:
    assert proc.comm(os.getpid())
    assert proc.comm(2**22 + 12345) is None
    assert proc.has_cap(21) == proc.has_cap(21)  # CAP_SYS_ADMIN: reads, never raises


# -- fresh object reads ----------------------------------------------------------------------------


@pytest.mark.parametrize("t", ["single", "hb2", "switch2", "hb2x2"])
def test_fresh_dax_read_is_the_scans_object(t: str) -> None:
    root = os.path.join(FIXTURES, "linux-6.12", f"{t}-region")
    inv = scan(Host(root))
    assert inv.dax_devices
    for d in inv.dax_devices:
        fresh, blocks = dax.read_dax_blocks(Host(root), d.name)
        assert fresh == d  # same type, same values, block counts and zones included
        node = inv.node(d.target_node) if d.target_node is not None else None
        assert node is not None
        assert [b.id for b in blocks] == [b.id for b in node.memory_blocks if b.id in {x.id for x in blocks}]
        assert len(blocks) == d.total_memblocks


def test_block_membership_by_address() -> None:
    blocks = [MemoryBlock(i, 1, "online", "Movable") for i in range(6)]
    dx = scan(Host(REGION)).dax_devices[0]
    bs = 0x10000000
    dx = dx._replace(resource=2 * bs, size=3 * bs)
    mine = objects.blocks_of(dx, blocks, bs, alone=False)
    assert mine is not None and [b.id for b in mine] == [2, 3, 4]
    unknown = dx._replace(resource=None)
    assert objects.blocks_of(unknown, blocks, bs, alone=False) is None
    assert objects.blocks_of(unknown, blocks, bs, alone=True) == blocks
    assert list(objects.block_range(2 * bs + 1, bs, bs)) == [2, 3]


def test_knob_read_returns_the_model_knob() -> None:
    r = Reader(REGION)
    ks = objects.knobs(r)
    assert [k.name for k in ks] == list(paths.STATUS_KNOBS)
    assert ks == scan(Host(REGION)).knobs


def test_launch_reads_this_process_through_the_layer() -> None:
    """policy show and preflight read /proc/PID files through hostio (any Linux host)."""
    from cxlctl.launch import preflight, proof

    doc = proof.show(Host("/"), os.getpid())
    assert doc["name"] == proc.comm(os.getpid())
    mems, cpus = preflight.self_allowed(Host("/"))
    assert mems and cpus and os.sched_getaffinity(0) <= set(cpus)


def test_a_name_with_a_nul_byte_reads_as_absent(tmp_path: Path) -> None:
    """Paths made from kernel text (``/boot/config-<osrelease>``) may carry a NUL
    byte; os.open raises ValueError for those.  The fuzzer found doctor crashing on it."""
    from cxlctl.hostio.reader import Reader

    (tmp_path / "boot").mkdir()
    r = Reader(str(tmp_path))
    assert r.raw("/boot/config-6.1\x00x") is None
    assert not r.exists("/boot/config-6.1\x00x")


# --------------------------------------------------------------------------- the host's /proc/sys elsewhere (issue 43)


def _host_proc_sys(tmp_path: Path) -> Path:
    d = tmp_path / "host" / "proc" / "sys"
    (d / "vm").mkdir(parents=True)
    (d / "vm" / "swappiness").write_text("60\n")
    return d


@pytest.mark.skipif(os.geteuid() != 0, reason="the place must be root's own")
def test_the_hosts_proc_sys_mounted_elsewhere_is_where_knobs_are_read_and_written(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """An unprivileged pod's /proc/sys is read-only: the DaemonSet mounts the host's at /host/proc/sys and
    names it in CXLCTL_HOST_PROC_SYS. Reads and writes go there; host paths (the journal's) stay /proc/sys."""
    from cxlctl.hostio import root as root_mod
    from cxlctl.hostio.write import write_knob

    d = _host_proc_sys(tmp_path)
    monkeypatch.setenv(root_mod.PROC_SYS_ENV, str(d))
    monkeypatch.setattr(root_mod, "_proc_sys", None)
    assert under("/", paths.SWAPPINESS) == str(d / "vm" / "swappiness")
    assert under("/", paths.NODE_DIR) == paths.NODE_DIR and under("/", "/proc/self/status") == "/proc/self/status"
    assert under(str(tmp_path), paths.SWAPPINESS) == str(tmp_path) + paths.SWAPPINESS, "a --root tree is not moved"
    assert Reader().text(paths.SWAPPINESS) == "60"
    write_knob("/", paths.SWAPPINESS, "10")
    assert (d / "vm" / "swappiness").read_text() == "10"


def test_a_proc_sys_place_others_can_write_is_refused(tmp_path: Path, monkeypatch: Any) -> None:
    from cxlctl.hostio import root as root_mod

    d = _host_proc_sys(tmp_path)
    d.chmod(0o777)
    for value, needle in ((str(d), "writable"), ("host/proc/sys", "not an absolute path")):
        monkeypatch.setenv(root_mod.PROC_SYS_ENV, value)
        monkeypatch.setattr(root_mod, "_proc_sys", None)
        with pytest.raises(UsageError) as e:
            under("/", paths.SWAPPINESS)
        assert needle in str(e.value) or os.geteuid() != 0, str(e.value)
    monkeypatch.delenv(root_mod.PROC_SYS_ENV)
    monkeypatch.setattr(root_mod, "_proc_sys", None)
    assert under("/", paths.SWAPPINESS) == paths.SWAPPINESS
