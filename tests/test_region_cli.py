"""``cxlctl region``/``cxlctl dax`` through the real command line, on recorded real-kernel trees.

What these cover without a kernel: output (text and --json), exit codes and
one-line errors for impossible or malformed requests, that plan/dry-run write
nothing, the root requirement (run as an unprivileged user), and the
refusals that must happen before any write (online memory, destroy order).
Programming itself needs a real kernel: tests/vm/test_vm_region.py.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Dict, List

import pytest

from tests.kit import FIXTURES, cli, copy_fixture

K612 = os.path.join(FIXTURES, "linux-6.12")
HB2X2 = os.path.join(K612, "hb2x2-noregion")
SINGLE_R = os.path.join(K612, "single-region")


def tree_digest(root: str) -> str:
    """Content and link targets of every file under sys/ and proc/: proves no kernel file was written
    (``run/cxlctl/lock``, the lock file, may appear)."""
    entries: List[str] = []
    for dp, dns, fns in os.walk(root):
        if dp == root:
            dns[:] = [d for d in dns if d in ("sys", "proc")]
        entries += [os.path.join(dp, f) for f in fns] + [
            os.path.join(dp, d) for d in dns if os.path.islink(os.path.join(dp, d))
        ]
    h = hashlib.sha256()
    for p in sorted(entries):
        h.update(p[len(root) :].encode())
        if os.path.islink(p):
            h.update(os.readlink(p).encode())
        else:
            with open(p, "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()


def js(p: Any) -> Dict[str, Any]:
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert isinstance(d, dict)
    return d


def one_line_error(p: Any, code: int) -> str:
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr
    assert p.stderr.startswith("cxlctl: error: ")
    return str(p.stderr)


def test_plan_json_and_text() -> None:
    d = js(cli("--root", HB2X2, "region", "plan", "--ways", "4", "--json"))
    assert d["schema_version"] == 1 and len(d["plans"]) == 1
    p = d["plans"][0]
    assert (p["decoder"], p["interleave_ways"], p["interleave_granularity"], p["size"]) == (
        "decoder0.0",
        4,
        8192,
        1 << 30,
    )
    assert [m["position"] for m in p["mappings"]] == [0, 1, 2, 3]
    assert p["targets"] == [m["memdev"] for m in p["mappings"]]
    assert [m["route"][0]["index"] for m in p["mappings"]] == [0, 1, 0, 1]
    assert {x["interleave_ways"] for x in p["port_decoders"]} == {2}
    t = cli("--root", HB2X2, "region", "plan", "-m", ",".join(reversed(p["targets"])))
    assert t.returncode == 0, t.stderr
    assert "4-way RAM region of 1 GiB on decoder0.0" in t.stdout and "granularity 8192 B" in t.stdout


def test_plan_all_json() -> None:
    d = js(cli("--root", HB2X2, "region", "plan", "--all", "--json"))
    assert [(p["decoder"], p["interleave_ways"]) for p in d["plans"]] == [("decoder0.0", 4)]


def test_sizes_take_binary_suffixes() -> None:
    d = js(cli("--root", HB2X2, "region", "plan", "--ways", "2", "--size", "512M", "--json"))
    assert d["plans"][0]["size"] == 512 << 20
    d = js(cli("--root", HB2X2, "region", "plan", "--ways", "1", "--size", "0.25G", "-g", "4K", "--json"))
    assert d["plans"][0]["size"] == 256 << 20 and d["plans"][0]["interleave_granularity"] == 4096


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--ways", "2", "--size", "12Q"], "--size: bad size '12Q'"),
        (["--ways", "2", "--size", "0"], "--size 0"),
        (["--ways", "2", "--size", "300M"], "not a multiple of 512 MiB"),
        (["--memdevs", "memory0"], "is not a memdev name"),
        (["--memdevs", ","], "--memdevs is empty"),
        (["--ways", "0"], "must be positive"),
        (["--ways", "3"], "no window can hold a 3-way region"),
        (["--ways", "2", "--decoder", "decoder0.0", "-g", "4096"], "use the root's granularity"),
        (["--ways", "2", "--decoder", "root0"], "is not a decoder name"),
        (["--ways", "2", "--type", "pmem"], "RAM regions only"),
        (["--all", "--ways", "2"], "--all picks memdevs"),
    ],
)
def test_impossible_or_bad_requests_exit_2(args: Any, needle: str) -> None:
    err = one_line_error(cli("--root", HB2X2, "region", "plan", *args), 2)
    assert needle in err
    assert len(err.strip().splitlines()) <= 2  # the error and its hint


def test_linux_6_1_says_it_cannot(tmp_path: Any) -> None:
    root = copy_fixture(os.path.join(FIXTURES, "linux-6.1", "hb2x2-noregion"), str(tmp_path / "t"))
    before = tree_digest(root)
    for cmd in (["plan", "--ways", "1"], ["create", "--ways", "1"], ["create", "--all"]):
        err = one_line_error(cli("--root", root, "region", *cmd), 2)
        assert "cannot create CXL RAM regions" in err and "create_ram_region" in err and "6.3" in err
    assert tree_digest(root) == before


def test_dry_run_writes_nothing(tmp_path: Any) -> None:
    root = copy_fixture(HB2X2, str(tmp_path / "t"))
    before = tree_digest(root)
    d = js(cli("--root", root, "region", "create", "--ways", "4", "--dry-run", "--zone", "movable", "--json"))
    assert d["dry_run"] is True and d["zone"] == "movable" and d["plans"][0]["interleave_ways"] == 4
    t = cli("--root", root, "region", "create", "--all", "--dry-run")
    assert t.returncode == 0 and "dry run, nothing written" in t.stdout
    assert tree_digest(root) == before


def _as_user(*args: str) -> Any:
    """Run cxlctl with euid 1000 in a user namespace (files stay accessible: the check is the euid)."""
    import shutil

    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("unshare(1) not available")
    p = cli(*args, wrap=[unshare, "--user", "--map-user=1000", "--map-group=1000"])
    if "unshare failed" in p.stderr:
        pytest.skip("user namespaces are not available here")
    return p


def test_writing_commands_need_root(tmp_path: Any) -> None:
    fresh = copy_fixture(HB2X2, str(tmp_path / "fresh"))
    made = copy_fixture(SINGLE_R, str(tmp_path / "made"))
    before = (tree_digest(fresh), tree_digest(made))
    assert _as_user("--root", fresh, "region", "plan", "--all").returncode == 0  # plan needs no root
    assert _as_user("--root", fresh, "region", "create", "--all", "--dry-run").returncode == 0
    for root, cmd in (
        (fresh, ["region", "create", "--ways", "1", "--size", "256M"]),
        (fresh, ["region", "create", "--all"]),
        (made, ["region", "destroy", "region0", "--force"]),
        (made, ["dax", "reconfigure", "dax0.0", "--mode", "devdax", "--force"]),
    ):
        err = one_line_error(_as_user("--root", root, *cmd), 1)
        assert "needs root" in err and "nothing was changed" in err
    assert (tree_digest(fresh), tree_digest(made)) == before


@pytest.mark.skipif(
    os.geteuid() != 0, reason="as a user, the root check refuses first (test_writing_commands_need_root)"
)
def test_destroy_refuses_while_memory_is_online(tmp_path: Any) -> None:
    """single-region: region0's dax0.0 is online as System RAM; without --force nothing is touched."""
    root = copy_fixture(SINGLE_R, str(tmp_path / "t"))
    before = tree_digest(root)
    err = one_line_error(cli("--root", root, "region", "destroy", "region0"), 2)
    assert "region0's memory is online" in err and "dax0.0" in err and "node 1" in err and "--force" in err
    err = one_line_error(cli("--root", root, "dax", "reconfigure", "dax0.0", "--mode", "devdax"), 2)
    assert "online as System RAM on node 1" in err and "--force" in err
    assert tree_digest(root) == before


def test_destroy_and_reconfigure_bad_names(tmp_path: Any) -> None:
    root = copy_fixture(SINGLE_R, str(tmp_path / "t"))
    assert "no region region9 (regions: region0)" in one_line_error(
        cli("--root", root, "region", "destroy", "region9"), 2
    )
    assert "is not a region name" in one_line_error(cli("--root", root, "region", "destroy", "dax0.0"), 2)
    err = one_line_error(cli("--root", root, "dax", "reconfigure", "dax7.0", "--mode", "devdax"), 2)
    assert "no DAX device dax7.0 (DAX devices: dax0.0)" in err
    err = one_line_error(cli("--root", root, "dax", "reconfigure", "dax0.0", "--mode", "ram"), 2)
    assert "--mode 'ram' is not one of system-ram, devdax" in err
    err = one_line_error(cli("--root", root, "region", "create", "--ways", "1", "--zone", "dma"), 2)
    assert "--zone 'dma'" in err


def test_help_explains_zones() -> None:
    p = cli("region", "create", "--help")
    assert p.returncode == 0
    text = " ".join(p.stdout.split())
    assert "pinned" in text and "ZONE_MOVABLE" in text and "hot-unplug" in text
