"""Messages name the file under ``--root`` that they are about, not the host path (issue 19, defect #5).

With ``--root TREE`` every check reads ``TREE/dev/dax0.0``, ``TREE/dev/shm``,
``TREE/proc/...``: a message that says ``/dev/dax0.0`` sends the user to the
running machine's file, which is not the one that was looked at.  The checks
keep the host's view (``/dev/dax0.0`` is still what the engine opens); what is
shown names the tree's file.  Through the command line, as a user meets it.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any, Dict, List

import pytest

from tests.kit import cli, copy_fixture, fixture_roots
from tests.launch_support import Fakes, make_devdax, write_status

R612 = fixture_roots("linux-6.12/single-region")[0]
DOCTOR = fixture_roots("linux-6.12/single-region-doctor")[0]  # recorded with the tools' answers


@pytest.fixture
def tree(tmp_path: Any) -> str:
    t = copy_fixture(R612, str(tmp_path / "tree"))
    make_devdax(t)
    write_status(t, "0-1")
    return t


def _launch(root: str, rc: int, *opts: str) -> Dict[str, Any]:
    p = cli("--root", root, "launch", "lmcache", "--dry-run", "--json", *opts, "--", "server", rc=rc, inprocess=True)
    doc: Dict[str, Any] = json.loads(p.stdout)
    return doc


def _check(doc: Dict[str, Any], name: str) -> Dict[str, Any]:
    found: List[Dict[str, Any]] = [c for c in doc["checks"] if c["name"] == name]
    assert len(found) == 1, found
    return found[0]


def test_launch_devdax_check_names_the_device_node_under_root(tree: str, fakes: Fakes) -> None:
    node = os.path.join(tree, "dev/dax0.0")
    c = _check(_launch(tree, 0, "--devdax", "dax0.0"), "devdax")
    assert c["status"] == "note" and c["message"].startswith(f"{node} is a regular file"), c
    os.unlink(node)
    doc = _launch(tree, 1, "--devdax", "dax0.0")
    c = _check(doc, "devdax")
    assert c["status"] == "fail" and c["message"].startswith(f"{node} cannot be opened"), c
    # the engine is still handed the device as the running kernel names it
    assert doc["devdax"]["path"] == "/dev/dax0.0"


def test_launch_cpuset_fix_names_the_cgroup_file_under_root(tree: str, fakes: Fakes) -> None:
    write_status(tree, "0", cgroup="/engines.slice")
    doc = _launch(tree, 1, "--devdax", "dax0.0", "--mem-nodes", "0-1", "--policy", "bind")
    c = _check(doc, "cpuset-mems")
    assert c["status"] == "fail"
    assert f"> {tree}/sys/fs/cgroup/engines.slice/cpuset.mems" in c["fix"], c


def _evidence(root: str) -> List[str]:
    p = cli("--root", root, "doctor", "--json")
    assert p.returncode in (0, 1), p.stderr
    return [e["source"] for c in json.loads(p.stdout)["checks"] for e in c["evidence"]]


def test_doctor_evidence_names_files_under_root(tmp_path: Any) -> None:
    root = copy_fixture(DOCTOR, str(tmp_path / "rec"))
    sources = _evidence(root)
    files = [s for s in sources if s.startswith("/")]
    assert files and all(s.startswith(root + "/") for s in files), files
    assert f"{root}/proc/sys/kernel/osrelease" in files
    assert "cxl version" in sources  # a command stays a command
    # the human view names the tree once and each file as the host sees it (issue 35: the root
    # repeated on every evidence line took 110 lines at 80 columns)
    human = cli("--root", root, "doctor", env={"COLUMNS": "400"}).stdout
    assert human.startswith(f"root: {root}\n") and "\n         /sys/bus/cxl/devices: " in human, human
    assert human.count(root) == 1 + sum(
        1
        for c in json.loads(cli("--root", root, "doctor", "--json").stdout)["checks"]
        if root in (c["fix"] or "") + c["message"]
    )


def test_events_without_cxl_trace_events_names_the_tree_tracefs(tmp_path: Any) -> None:
    root = copy_fixture(R612, str(tmp_path / "t"))
    os.makedirs(os.path.join(root, "sys/kernel/tracing/instances"))
    p = cli("--root", root, "events")
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert f"({root}/sys/kernel/tracing/events/cxl is missing)" in " ".join(p.stderr.split()), p.stderr


def test_doctor_messages_name_the_files_under_root(tmp_path: Any) -> None:
    """Not only the evidence: a check's message about a file it could not read names the file of
    the tree (it said "/proc/modules is unreadable", the running machine's file)."""
    root = copy_fixture(DOCTOR, str(tmp_path / "rec"))
    for gone in ("proc/modules", "proc/cmdline", "proc/iomem", "boot", "usr/lib/modules", "sys/firmware/acpi"):
        where = os.path.join(root, gone)
        if os.path.isdir(where):
            shutil.rmtree(where)
        elif os.path.exists(where):
            os.unlink(where)
    p = cli("--root", root, "doctor", "--json")
    assert p.returncode in (0, 1), p.stderr
    msgs = {c["id"]: c["message"] for c in json.loads(p.stdout)["checks"]}
    assert msgs["kernel.modules"] == f"{root}/proc/modules is unreadable and no kernel config was found", msgs
    assert msgs["kernel.cmdline"] == f"{root}/proc/cmdline is unreadable"
    assert msgs["firmware.iomem"] == f"{root}/proc/iomem is unreadable"
    assert msgs["firmware.acpi"].startswith(f"{root}/sys/firmware/acpi/tables does not exist")
