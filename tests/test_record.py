"""`cxlctl record`: the copy holds what the scan read, so a replay is byte-identical."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
from typing import Any, List

import pytest

from tests.kit import FIXTURES, cli, fixture_id, fixture_roots, readable_copy, status_json


def test_record_replays_identically_on_this_host(live_record: str) -> None:
    with open(os.path.join(live_record, "cxlctl-status.json")) as f:
        at_record = json.load(f)
    assert status_json(live_record) == at_record


def test_record_manifest(live_record: str) -> None:
    with open(os.path.join(live_record, "cxlctl-record.json")) as f:
        m = json.load(f)
    assert m["kernel"] == open("/proc/sys/kernel/osrelease").read().strip()
    assert m["as_root"] == (os.geteuid() == 0)
    assert m["files"] > 0


def test_record_copies_only_what_is_read(live_record: str) -> None:
    """No stray attributes: every copied file under sys/ is one the inventory reads."""
    names = set()
    for _d, _dirs, files in os.walk(os.path.join(live_record, "sys")):
        names.update(files)
    assert "uevent" not in names and "power" not in names
    assert {"meminfo", "distance", "cpulist", "state", "valid_zones"} <= names


def test_record_refuses_non_empty_dest(tmp_path: object, live_record: str) -> None:
    p = cli("record", live_record)
    assert p.returncode == 2 and "not empty" in p.stderr


def test_record_of_a_record_is_identical(tmp_path: object, live_record: str) -> None:
    """Recording from a recorded root reproduces the same tree (idempotent), with the same options
    (the live record holds process data: conftest.live_record)."""
    again = os.path.join(str(tmp_path), "again")
    cli("--root", live_record, "record", "--include-process-data", again, check=True)
    assert status_json(again) == status_json(live_record)

    def files(root: str) -> set:  # type: ignore[type-arg]
        out = set()
        for d, _dirs, fs in os.walk(root):
            for f in fs:
                if not f.startswith("cxlctl-"):
                    out.add(os.path.relpath(os.path.join(d, f), root))
        return out

    assert files(again) == files(live_record)


@pytest.mark.parametrize("root", fixture_roots(), ids=[fixture_id(r) for r in fixture_roots()])
def test_rerecording_a_fixture_keeps_every_fact(tmp_path: object, root: str) -> None:
    """A record of a recorded CXL tree shows the same inventory: nothing the scan depends
    on (links, existence checks, root-only files) is lost by the copy."""
    again = os.path.join(str(tmp_path), "again")
    cli("--root", root, "record", again, check=True)
    assert status_json(again) == status_json(root)


# ---------------------------------------------------------------- issue 43: a record is private

#: a tree with processes, modules, iomem and a full kernel command line
_BUSY = os.path.join(FIXTURES, "linux-6.12", "hmat2-region")
#: a tree with a cgroup below the root
_CGROUPS = os.path.join(FIXTURES, "linux-6.12", "single-region-telemetry")


def _all_files(root: str) -> List[str]:
    out = []
    for d, dirs, fs in os.walk(root):
        out += [os.path.relpath(os.path.join(d, n), root) for n in fs + dirs]
    return out


@pytest.mark.parametrize("src", [_BUSY, _CGROUPS], ids=fixture_id)
def test_record_default_holds_no_process_data(tmp_path: Any, src: str) -> None:
    """No /proc/PID, no cgroup below the root, no kernel addresses, only the command-line
    options doctor judges; the inventory still replays the same."""
    dest = os.path.join(str(tmp_path), "rec")
    cli("--root", src, "record", dest, check=True)
    names = _all_files(dest)
    assert not [n for n in names if re.match(r"proc/([0-9]+|self|thread-self)(/|$)", n)]
    assert not [n for n in names if n.startswith("sys/fs/cgroup/") and "/" in n[len("sys/fs/cgroup/") :]]
    assert not [n for n in names if "numa_maps" in n or "kallsyms" in n]
    for name in ("iomem", "modules", "cmdline"):
        p = os.path.join(dest, "proc", name)
        if not os.path.exists(p):
            continue
        text = open(p).read()
        assert not re.search(r"0x0*[1-9a-f]", text), name
        if name == "iomem":
            assert text.strip() and all(re.match(r"\s*0+-0+ : ", ln) for ln in text.splitlines())
        if name == "cmdline":
            assert "virtme" not in text and "init=" not in text and "console=" not in text
    with open(os.path.join(dest, "cxlctl-record.json")) as f:
        assert json.load(f)["process_data"] is False
    assert stat.S_IMODE(os.stat(dest).st_mode) == 0o700
    assert status_json(dest) == status_json(src)


def test_record_include_process_data_keeps_it(tmp_path: Any) -> None:
    dest = os.path.join(str(tmp_path), "rec")
    cli("--root", _CGROUPS, "record", "--include-process-data", dest, check=True)
    names = _all_files(dest)
    assert [n for n in names if re.match(r"proc/[0-9]+/numa_maps$", n)]
    assert "sys/fs/cgroup/cxltel/memory.numa_stat" in names
    dest2 = os.path.join(str(tmp_path), "rec2")
    cli("--root", _BUSY, "record", "--include-process-data", dest2, check=True)
    assert open(os.path.join(dest2, "proc", "iomem")).read() == open(os.path.join(_BUSY, "proc", "iomem")).read()
    assert "virtme" in open(os.path.join(dest2, "proc", "cmdline")).read()


def test_record_through_a_planted_link_writes_nothing_outside(tmp_path: Any) -> None:
    """``DEST/proc`` -> elsewhere in a DEST of the user's own (``--force``): refused, exit 2,
    and nothing appears at the far end."""
    dest = os.path.join(str(tmp_path), "rec")
    elsewhere = os.path.join(str(tmp_path), "elsewhere")
    os.mkdir(dest)
    os.mkdir(elsewhere)
    os.symlink(elsewhere, os.path.join(dest, "proc"))
    p = cli("--root", _BUSY, "record", "--force", dest, rc=2)
    assert "Traceback" not in p.stderr and "link" in p.stderr, p.stderr
    assert os.listdir(elsewhere) == []


def test_record_refuses_a_dest_through_a_link_or_of_another_user(tmp_path: Any) -> None:
    real = os.path.join(str(tmp_path), "real")
    os.mkdir(real)
    os.symlink(real, os.path.join(str(tmp_path), "via"))
    p = cli("--root", _BUSY, "record", os.path.join(str(tmp_path), "via", "rec"), rc=2)
    assert "symbolic link" in p.stderr
    assert os.listdir(real) == []
    os.symlink(real, os.path.join(str(tmp_path), "linkdest"))
    p = cli("--root", _BUSY, "record", os.path.join(str(tmp_path), "linkdest"), rc=2)
    assert "symbolic link" in p.stderr
    if os.geteuid() == 0:
        theirs = os.path.join(str(tmp_path), "theirs")
        os.mkdir(theirs)
        os.chown(theirs, 65534, 65534)
        p = cli("--root", _BUSY, "record", theirs, rc=2)
        assert "belongs to uid 65534" in p.stderr
        assert os.listdir(theirs) == []


def test_record_as_an_unprivileged_user_into_a_planted_tree(tmp_path: Any) -> None:
    """The same planted link for a real user without root (skipped where that user cannot read
    this checkout, as tests/test_probe.py explains): refused, nothing written at the far end."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a directory for uid 65534")
    tree = readable_copy(_BUSY)  # uid 65534 must be able to read the tree it records
    base = tempfile.mkdtemp(prefix="cxlctl-rec-")
    try:
        os.chmod(base, 0o755)
        dest = os.path.join(base, "rec")
        elsewhere = os.path.join(base, "elsewhere")
        os.mkdir(dest)
        os.mkdir(elsewhere)
        os.chmod(elsewhere, 0o777)
        os.symlink(elsewhere, os.path.join(dest, "proc"))
        os.lchown(os.path.join(dest, "proc"), 65534, 65534)
        os.chown(dest, 65534, 65534)
        p = cli("--root", tree, "record", "--force", dest, nobody=True, rc=2)
        assert "Traceback" not in p.stderr and "not a directory" not in p.stderr, p.stderr
        assert os.listdir(elsewhere) == []
    finally:
        shutil.rmtree(base)
