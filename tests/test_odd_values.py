"""Odd sysfs content and odd input found by mutating recorded trees: each case once, by name.

The fuzzer (test_fuzz_trees.py) keeps the class closed; these pin the cases that
were found, each with the outcome a user should see (a tolerated value plus a
warning, or a clear usage error), through the real command line.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List

import pytest

from cxlctl.errors import EXIT_USAGE
from tests.kit import FIXTURES, cli, copy_fixture

HB2X2 = os.path.join(FIXTURES, "linux-6.12", "hb2x2-region")
NOREGION = os.path.join(FIXTURES, "linux-6.12", "hb2x2-noregion")
WI = "sys/kernel/mm/mempolicy/weighted_interleave"


@pytest.fixture
def tree(tmp_path: Any) -> str:
    return copy_fixture(HB2X2, str(tmp_path / "t"))


def _put(root: str, rel: str, data: bytes) -> None:
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.unlink(path)
    with open(path, "wb") as f:
        f.write(data)


def _attr(root: str, dev: str, attr: str) -> str:
    real = os.path.realpath(os.path.join(root, "sys/bus/cxl/devices", dev))
    return os.path.relpath(os.path.join(real, attr), root)


def _clean(p: Any) -> None:
    both = p.stdout + p.stderr
    assert "Traceback" not in both and "internal error" not in both, p.stderr


def _status(root: str) -> Dict[str, Any]:
    """status --json through the fast path (python -m cxlctl), and the human view too."""
    p = cli("--root", root, "status", "--json")
    _clean(p)
    assert p.returncode == 0, p.stderr
    h = cli("--root", root, "status", env={"COLUMNS": "80"})
    _clean(h)
    assert h.returncode == 0, h.stderr
    data = json.loads(p.stdout)
    assert isinstance(data, dict)
    return data


def _unparsable(data: Dict[str, Any]) -> List[str]:
    return [w["message"] for w in data["warnings"] if w["code"] == "unparsable"]


def test_superscript_digit_in_entry_names(tree: str) -> None:
    """`isdigit()` accepts '²', `int()` does not: such entries are not objects, and nothing crashes."""
    os.rename(os.path.join(tree, WI, "node3"), os.path.join(tree, WI, "node²"))
    bus = os.path.join(tree, "sys/bus/cxl/devices")
    os.symlink(os.readlink(os.path.join(bus, "mem0")), os.path.join(bus, "mem²"))
    os.symlink(os.readlink(os.path.join(bus, "mem1")), os.path.join(bus, "mem١"))  # int() takes '١'
    data = _status(tree)
    assert sorted(data["weighted_interleave"]["weights"]) == ["0", "1", "2"]
    assert sorted(m["memdev"] for m in data["memdevs"]) == ["mem0", "mem1", "mem2", "mem3"]
    for cmd in (["tune", "plan", "inference-bandwidth"], ["launch", "exec", "--dry-run", "--", "true"]):
        p = cli("--root", tree, *cmd)
        _clean(p)
        assert p.returncode in (0, 1), p.stderr


def test_negative_and_huge_numbers_are_unparsable(tree: str) -> None:
    _put(tree, _attr(tree, "region0", "interleave_ways"), b"-2\n")
    _put(tree, "sys/devices/system/memory/block_size_bytes", b"-8000000\n")
    _put(tree, _attr(tree, "mem0", "ram/size"), b"9" * 400 + b"\n")
    data = _status(tree)
    region = data["regions"][0]
    assert region["interleave_ways"] is None
    assert data["memdevs"][0]["ram_size"] is None
    bad = "\n".join(_unparsable(data))
    assert "interleave_ways" in bad and "block_size_bytes" in bad and "ram/size" in bad


def test_markup_in_values_is_shown_as_text(tree: str) -> None:
    _put(tree, _attr(tree, "decoder0.0", "interleave_granularity"), b"[/]\n")
    _put(tree, "proc/sys/vm/swappiness", b"[bold]60\n")
    h = cli("--root", tree, "status", env={"COLUMNS": "80"})
    _clean(h)
    assert "vm.swappiness = [bold]60" in h.stdout and "'[/]'" in h.stdout


def test_nul_byte_in_tuned_active_profile(tree: str) -> None:
    _put(tree, "etc/tuned/active_profile", b"balanced\x00evil\n")
    for cmd in (["tune", "plan", "inference-bandwidth"], ["launch", "exec", "--dry-run", "--", "true"]):
        p = cli("--root", tree, *cmd)
        _clean(p)
        assert p.returncode in (0, 1), p.stderr


def test_corrupt_active_profile_is_named_under_the_root(tree: str) -> None:
    _put(tree, "var/lib/cxlctl/active-profile", b"\xff[[[")
    p = cli("--root", tree, "tune", "status")
    _clean(p)
    assert f"{tree}/var/lib/cxlctl/active-profile is not valid JSON" in p.stdout + p.stderr


def test_policy_show_names_the_path_under_the_root(tree: str) -> None:
    p = cli("--root", tree, "policy", "show", "424242")
    assert p.returncode == EXIT_USAGE
    assert f"{tree}/proc/424242/status does not exist" in p.stderr


@pytest.mark.parametrize(
    "args, needle",
    [
        (["launch", "exec", "--mem-nodes", "١", "--dry-run", "--", "true"], "--mem-nodes"),
        (["launch", "exec", "--mem-nodes", "1,,2", "--dry-run", "--", "true"], "empty element"),
        (["region", "plan", "-m", "mem0,,mem1"], "empty element in memdev list"),
        (["region", "plan", "-m", "mem0,mem١"], "'mem١' is not a memdev name"),
        (["region", "plan", "-w", "2", "-d", "decoder0.x"], "is not a decoder name"),
    ],
)
def test_odd_input_is_a_clear_usage_error(args: List[str], needle: str) -> None:
    p = cli("--root", NOREGION, *args)
    _clean(p)
    assert p.returncode == EXIT_USAGE, p.stderr
    assert needle in p.stderr


def test_size_beyond_the_free_capacity_says_by_how_much() -> None:
    p = cli("--root", NOREGION, "region", "plan", "-w", "2", "-s", "1P")
    assert p.returncode == EXIT_USAGE
    assert "exceeds the free CXL RAM capacity (1 GiB on 4 free memdevs)" in p.stderr
    assert "evenly" not in p.stderr
    p = cli("--root", NOREGION, "region", "plan", "-w", "1", "-s", "512M")
    assert p.returncode == EXIT_USAGE
    assert "the most any free memdev has is 256 MiB, 256 MiB short" in p.stderr


def test_knob_values_with_non_ascii_digits_do_not_crash(tree: str) -> None:
    """`kernel.numa_balancing` = '²' passed `isdigit()` and crashed `int()` in status and tune plan."""
    _put(tree, "proc/sys/kernel/numa_balancing", "²\n".encode())
    _put(tree, "proc/sys/vm/swappiness", "٦٠\n".encode())
    _status(tree)
    for cmd in (["tune", "plan", "inference-bandwidth"], ["launch", "exec", "--dry-run", "--", "true"]):
        p = cli("--root", tree, *cmd)
        _clean(p)
        assert p.returncode in (0, 1), p.stderr
    p = cli("--root", tree, "tune", "plan", "inference-bandwidth", "--json")
    (swap,) = [c for c in json.loads(p.stdout)["plan"]["steps"] if c["knob"] == "vm.swappiness"]
    assert swap["current"] == "٦٠" and swap["action"] == "set"  # not read as 60


def test_markup_in_knob_values_for_tune_plan(tree: str) -> None:
    """Found by the fuzzer (seed 77213): `[/]` in demotion_enabled crashed `tune plan`'s table."""
    _put(tree, "sys/kernel/mm/numa/demotion_enabled", b"[/]\n")
    _put(tree, "proc/sys/kernel/numa_balancing", b"[bold]\n")
    p = cli("--root", tree, "tune", "plan", "inference-bandwidth")
    _clean(p)
    assert p.returncode == 0 and "[/]" in p.stdout
