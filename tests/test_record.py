"""`cxlctl record`: the copy holds what the scan read, so a replay is byte-identical."""

from __future__ import annotations

import json
import os

import pytest

from tests.kit import cli, fixture_id, fixture_roots, status_json


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
    """Recording from a recorded root reproduces the same tree (idempotent)."""
    again = os.path.join(str(tmp_path), "again")
    cli("--root", live_record, "record", again, check=True)
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
