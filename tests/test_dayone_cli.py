"""Issue 44 item 8, day one for an operator: a compact list for scripts, "did you mean", ``--root``
after the command, ``region destroy --dry-run``, ``region plan`` naming ``--all``, and ``capacity
adopt --mode devdax --zone`` refused as ``region create`` refuses it.  Each failed before."""

from __future__ import annotations

import json
import os

from tests.kit import FIXTURES, cli

HMAT2 = os.path.join(FIXTURES, "linux-7.x", "hmat2-region")
HB2X2 = os.path.join(FIXTURES, "linux-7.x", "hb2x2-region")
HMAT2_NOREGION = os.path.join(FIXTURES, "linux-7.x", "hmat2-noregion")


def test_list_gives_one_row_per_object_for_scripts() -> None:
    out = cli("--root", HMAT2, "list", "regions", check=True).stdout.splitlines()
    assert out[0].split() == ["NAME", "MODE", "SIZE", "WAYS", "DAX", "NODE"]
    assert [line.split() for line in out[1:]] == [
        ["region0", "ram", "256MiB", "1", "dax0.0", "2"],
        ["region1", "ram", "256MiB", "1", "dax1.0", "3"],
    ]
    wide = cli("--root", HMAT2, "list", "regions", "-o", "wide", "--no-headers", check=True).stdout.splitlines()
    assert wide[0].split() == ["region0", "ram", "256MiB", "1", "dax0.0", "2", "256", "decoder0.0", "mem1", "yes"]
    assert cli("--root", HMAT2, "list", "dax", "-o", "name", check=True).stdout == "dax0.0\ndax1.0\n"
    assert cli("--root", HMAT2, "list", "memdevs", "-o", "name", check=True).stdout == "mem0\nmem1\n"
    nodes = cli("--root", HMAT2, "list", "nodes", "--no-headers", check=True).stdout.splitlines()
    assert [line.split()[:2] for line in nodes] == [["0", "dram"], ["2", "cxl"], ["3", "cxl"]]
    assert all(len(line.split()) == 6 for line in nodes)  # every cell one word: awk takes a column
    doc = json.loads(cli("--root", HMAT2, "list", "nodes", "-o", "json", check=True).stdout)
    assert doc["kind"] == "nodes" and [n["node"] for n in doc["items"]] == [0, 2, 3]
    assert doc["items"][1]["size_bytes"] == 256 << 20 and doc["items"][1]["tier"] == 33
    # a wide screen or a narrow one: the same rows, never folded
    assert cli("--root", HMAT2, "list", "nodes", env={"COLUMNS": "40"}, check=True).stdout.splitlines()[1:] == [
        line for line in cli("--root", HMAT2, "list", "nodes", check=True).stdout.splitlines()[1:]
    ]


def test_mistyped_words_get_a_did_you_mean() -> None:
    p = cli("--root", HMAT2, "list", "memdev", rc=2)
    assert "hint: did you mean: cxlctl list memdevs?" in p.stderr
    assert "did you mean: -o wide?" in cli("--root", HMAT2, "list", "nodes", "-o", "wdie", rc=2).stderr
    p = cli("--root", HMAT2, "tune", "show", "inference-capcity", rc=2)
    assert "did you mean: inference-capacity;" in p.stderr and "known profiles:" in p.stderr
    assert "Did you mean 'status'" in cli("stauts", rc=2).stderr  # commands: click's own


def test_root_is_accepted_after_the_command() -> None:
    before = cli("--root", HMAT2, "status", "--json", check=True).stdout
    assert cli("status", "--json", "--root", HMAT2, check=True).stdout == before
    assert cli("list", "dax", f"--root={HMAT2}", "-o", "name", check=True).stdout == "dax0.0\ndax1.0\n"
    # after `--` it is the launched program's own argument
    doc = json.loads(cli("--root", HMAT2, "launch", "exec", "--dry-run", "--json", "--", "true", "--root", "x").stdout)
    assert doc["argv"][-2:] == ["--root", "x"]


def test_region_destroy_dry_run_says_what_it_would_do() -> None:
    p = cli(
        "--root", HB2X2, "region", "destroy", "region0", "--dry-run", rc=2
    )  # memory online: refused as the destroy is
    assert "region0's memory is online" in p.stderr
    out = cli("--root", HB2X2, "region", "destroy", "region0", "--dry-run", "--force", check=True).stdout
    assert out.splitlines()[0] == "would offline 8 memory block(s) of dax0.0"
    assert out.splitlines()[-1] == "would delete region0 (decoder0.0/delete_region)"
    doc = json.loads(cli("--root", HB2X2, "region", "destroy", "region0", "--dry-run", "--force", "--json").stdout)
    assert doc["dry_run"] is True and len(doc["steps"]) == 5


def test_region_plan_without_options_names_all() -> None:
    p = cli("--root", HMAT2_NOREGION, "region", "plan", rc=2)
    assert "hint: or --all: every memdev's unused RAM" in p.stderr


def test_capacity_adopt_devdax_with_a_zone_is_refused_like_region_create() -> None:
    p = cli(
        "--root", HMAT2_NOREGION, "capacity", "adopt", "mem0", "--mode", "devdax", "--zone", "normal", "--dry-run", rc=2
    )
    assert "--zone normal has no effect with --mode devdax" in p.stderr
    q = cli("--root", HMAT2_NOREGION, "region", "create", "--online", "devdax", "--zone", "normal", "--dry-run", rc=2)
    assert "--zone normal has no effect with --online devdax" in q.stderr
    out = cli("--root", HMAT2_NOREGION, "capacity", "adopt", "mem0", "--dry-run", check=True).stdout
    assert "ZONE_MOVABLE" in out  # the default zone is still movable
