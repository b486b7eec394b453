"""Profiles: the built-ins, include inheritance, and bad profiles (exit 2, nothing written)."""

from __future__ import annotations

import os
from typing import Any, Iterator, List

import pytest

from cxlctl.cli import run
from cxlctl.errors import EXIT_USAGE
from cxlctl.hostio.host import Host
from cxlctl.tuning import profile as prof
from cxlctl.tuning.knobs import BandwidthRule, WISpec
from tests.kit import cli
from tests.tune_support import LIVE, snapshot, work_copy


@pytest.fixture(scope="module")
def base(tmp_path_factory: Any) -> str:
    return work_copy(LIVE, str(tmp_path_factory.mktemp("profiles") / "root"))


@pytest.fixture
def tree(base: str) -> Iterator[str]:
    """The module's tree; user profiles a test adds are removed afterwards (copying is slow)."""
    pdir = os.path.join(base, "etc/cxlctl/profiles")
    keep = set(os.listdir(pdir))
    yield base
    for name in os.listdir(pdir):
        if name not in keep:
            os.unlink(os.path.join(pdir, name))


def _user(root: str, name: str, text: str) -> str:
    d = os.path.join(root, "etc/cxlctl/profiles")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, name + ".toml")
    with open(path, "w") as f:
        f.write(text)
    return path


def test_builtins_load_and_say_why(tree: str) -> None:
    names = [n for n, _, builtin in prof.list_names(Host(tree)) if builtin]
    assert {"inference-bandwidth", "inference-capacity", "latency-strict"} <= set(names)
    for name in names:
        p = prof.load(Host(tree), name)
        assert p.builtin and p.summary
        for s in p.settings:
            assert s.reason and not s.reason.startswith("set by profile"), (name, s.knob)
    bw = prof.load(Host(tree), "inference-bandwidth")
    assert bw.setting("kernel.numa_balancing").value == 0  # type: ignore[union-attr]
    assert bw.setting("demotion_enabled").value is True  # type: ignore[union-attr]
    assert bw.setting("vm.zone_reclaim_mode").value == 0  # type: ignore[union-attr]
    assert bw.setting("vm.swappiness").value == 10  # type: ignore[union-attr]
    wi = bw.setting("weighted_interleave").value  # type: ignore[union-attr]
    assert isinstance(wi, WISpec) and wi.weights == "bandwidth" and wi.prefer_auto
    cap = prof.load(Host(tree), "inference-capacity")
    assert cap.setting("kernel.numa_balancing").value == 2  # type: ignore[union-attr]
    rl = cap.setting("kernel.numa_balancing_promote_rate_limit_MBps").value  # type: ignore[union-attr]
    assert rl == BandwidthRule(0.1, 1024)
    strict = prof.load(Host(tree), "latency-strict")
    assert strict.setting("demotion_enabled").value is False  # type: ignore[union-attr]
    assert strict.placement == "dram-only"


def test_include_inheritance_and_override(tree: str) -> None:
    _user(
        tree,
        "mine",
        'include = "inference-capacity"\n[knobs."vm.swappiness"]\nvalue = 30\nreason = "ours"\n',
    )
    p = prof.load(Host(tree), "mine")
    assert p.setting("vm.swappiness").value == 30  # type: ignore[union-attr]
    assert p.setting("vm.swappiness").reason == "ours"  # type: ignore[union-attr]
    assert p.setting("kernel.numa_balancing").value == 2  # type: ignore[union-attr]
    assert p.summary.startswith("Inference host, capacity")  # inherited
    assert [os.path.basename(c) for c in p.chain] == ["cxl-common.toml", "inference-capacity.toml", "mine.toml"]


def test_user_profile_shadows_builtin_and_includes_it(tree: str) -> None:
    path = _user(tree, "latency-strict", 'include = "latency-strict"\nknobs."vm.swappiness" = 1\n')
    p = prof.load(Host(tree), "latency-strict")
    assert p.source == path and not p.builtin
    assert p.setting("vm.swappiness").value == 1  # type: ignore[union-attr]
    assert p.setting("demotion_enabled").value is False  # type: ignore[union-attr]


def test_profile_by_path(tree: str, tmp_path: Any) -> None:
    path = str(tmp_path / "x.toml")
    with open(path, "w") as f:
        f.write('knobs."vm.swappiness" = 5\n')
    assert prof.load(Host(tree), path).setting("vm.swappiness").value == 5  # type: ignore[union-attr]


BAD = [
    ("syntax", "[knobs\nvalue = 1\n", "invalid TOML"),
    ("unknown-top-key", 'summary = "x"\nflavour = "y"\n', "flavour: unknown key"),
    ("unknown-knob", 'knobs."vm.swapiness" = 10\n', "knobs.vm.swapiness: unknown knob"),
    ("unknown-knob-key", '[knobs."vm.swappiness"]\nvalue = 10\nvalu = 3\n', "knobs.vm.swappiness.valu: unknown key"),
    ("out-of-range", 'knobs."kernel.numa_balancing" = 7\n', "knobs.kernel.numa_balancing.value: 7 is out of range"),
    ("negative", 'knobs."vm.swappiness" = -1\n', "out of range"),
    ("wrong-type", 'knobs."vm.swappiness" = "ten"\n', "must be an integer"),
    ("bool-for-int", 'knobs."vm.swappiness" = true\n', "must be an integer"),
    ("bad-enum", 'knobs.auto_online_blocks = "online_fast"\n', "must be one of"),
    ("bad-ratio", '[knobs.weighted_interleave]\nweights = "3:0"\n', "each side must be 1-255"),
    ("ratio-garbage", '[knobs.weighted_interleave]\nweights = "fast"\n', "DRAM:CXL"),
    ("bad-node", '[knobs.weighted_interleave]\nnodes = ["gpu"]\n', "bad node selector"),
    ("value-in-group", "[knobs.weighted_interleave]\nvalue = 3\n", "unknown key"),
    ("missing-value", '[knobs."vm.swappiness"]\nreason = "x"\n', "value: missing"),
    ("multiline-reason", '[knobs."vm.swappiness"]\nvalue = 1\nreason = """a\nb"""\n', "one-line"),
    (
        "fraction-without-bandwidth",
        '[knobs."kernel.numa_balancing_promote_rate_limit_MBps"]\nvalue = 5\nfraction = 0.2\n',
        "only applies",
    ),
    (
        "bad-fraction",
        '[knobs."kernel.numa_balancing_promote_rate_limit_MBps"]\nvalue = "bandwidth"\nfraction = 2\n',
        "fraction",
    ),
    ("bad-placement", 'placement = "anywhere"\n', "placement"),
    ("missing-parent", 'include = "no-such-parent"\n', "no profile named 'no-such-parent'"),
    ("bad-include-type", "include = 3\n", "include"),
]


@pytest.mark.parametrize("case,text,expect", BAD, ids=[b[0] for b in BAD])
def test_bad_profile_is_usage_error_and_writes_nothing(
    tree: str, case: str, text: str, expect: str, capsys: Any
) -> None:
    path = _user(tree, "bad", text)
    before = snapshot(tree)
    for argv in (["tune", "apply", "bad"], ["tune", "plan", "bad"], ["tune", "show", "bad"]):
        rc = run(["--root", tree] + argv)
        err = capsys.readouterr().err
        assert rc == EXIT_USAGE, (argv, err)
        assert path in err and expect in err, err
        assert err.count("\n") <= 2 and "Traceback" not in err
    assert snapshot(tree) == before
    assert not os.path.exists(os.path.join(tree, "run/cxlctl/journal.json"))


def test_include_loop(tree: str, capsys: Any) -> None:
    _user(tree, "a", 'include = "b"\n')
    _user(tree, "b", 'include = "c"\n')
    _user(tree, "c", 'include = "a"\n')
    before = snapshot(tree)
    rc = run(["--root", tree, "tune", "apply", "a"])
    err = capsys.readouterr().err
    assert rc == EXIT_USAGE
    assert "include loop: a.toml -> b.toml -> c.toml -> a.toml" in err
    assert snapshot(tree) == before


def test_self_include_without_builtin_is_a_missing_parent(tree: str, capsys: Any) -> None:
    _user(tree, "solo", 'include = "solo"\n')
    assert run(["--root", tree, "tune", "plan", "solo"]) == EXIT_USAGE
    assert "no profile named 'solo'" in capsys.readouterr().err


def test_unknown_profile_lists_known_ones(tree: str, capsys: Any) -> None:
    assert run(["--root", tree, "tune", "apply", "nope"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "no profile named 'nope'" in err and "inference-bandwidth" in err


def test_bad_profile_through_the_real_command(tree: str) -> None:
    """Same as above through `python -m cxlctl`: one message, exit 2, no traceback."""
    _user(tree, "bad", 'knobs."kernel.numa_balancing" = 9\n')
    before = snapshot(tree)
    p = cli("--root", tree, "tune", "apply", "bad")
    assert p.returncode == EXIT_USAGE
    assert "bad profile" in p.stderr and "Traceback" not in p.stderr + p.stdout
    assert snapshot(tree) == before


def test_list_shows_invalid_user_profile_without_failing(tree: str, capsys: Any) -> None:
    _user(tree, "broken", "[[[")
    assert run(["--root", tree, "tune", "list", "--json"]) == 0
    import json

    rows: List[Any] = json.loads(capsys.readouterr().out)["profiles"]
    broken = [r for r in rows if r["name"] == "broken"][0]
    assert broken["error"] and "invalid TOML" in broken["error"]
    assert any(r["name"] == "inference-bandwidth" and r["builtin"] for r in rows)
