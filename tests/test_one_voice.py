"""Issue 35, "one voice for operators": where several commands speak about one host they agree.

Each test names the row of the issue it holds; each failed before the change it guards.
"""

from __future__ import annotations

import json
import os

from tests.kit import FIXTURES, cli

K7 = os.path.join(FIXTURES, "linux-7.x")
HMAT2 = os.path.join(K7, "hmat2-region")
HB2X2 = os.path.join(K7, "hb2x2-region")


# -- row 4: a root that is no host's tree is refused ------------------------------------------


def test_a_folder_of_trees_is_refused_not_read_as_a_host_without_cxl() -> None:
    for argv in (["status"], ["status", "--json"], ["doctor"], ["tune", "status"]):
        p = cli("--root", K7, *argv, rc=2)
        assert "holds neither sys/ nor proc/" in p.stderr, argv
        assert "kernel ?" not in p.stdout and "unsupported on this kernel" not in p.stdout
    p = cli("status", "--json", env={"CXLCTL_ROOT": K7}, rc=2)
    assert json.loads(p.stdout)["error"]["message"].startswith(f"CXLCTL_ROOT {K7!r} holds neither")


# -- row 6: --all with nothing unused is idempotent ---------------------------------------------


def test_region_all_with_no_unused_capacity_is_nothing_to_do() -> None:
    for argv in (["region", "plan", "--all"], ["region", "create", "--all"], ["region", "create", "--all", "--dry-run"]):
        p = cli("--root", HB2X2, *argv, rc=0)
        assert p.stdout == "nothing to do: every memdev's RAM is already in a region\n", argv
    assert json.loads(cli("--root", HB2X2, "region", "plan", "--all", "--json", check=True).stdout)["plans"] == []
    doc = json.loads(cli("--root", HB2X2, "region", "create", "--all", "--json", check=True).stdout)
    assert doc["regions"] == [] and doc["complete"] is True
    # capacity there but unplaceable stays an error: region plan without --all on a full host
    assert cli("--root", HB2X2, "region", "plan", rc=2).stderr.startswith("cxlctl: error:")


# -- row 8: tiers in the kernel's (numeric) order -----------------------------------------------


def test_tiers_are_named_in_numeric_order() -> None:
    out = cli("--root", HMAT2, "tune", "recommend", check=True).stdout
    assert "memory_tier33, memory_tier146" in out and "memory_tier146, memory_tier33" not in out
