"""Every recorded tree's cxlctl-status.json is what ``cxlctl --root TREE status --json`` prints now."""

from __future__ import annotations

import difflib
import os
from typing import Any

import pytest

from tests import fixture_status
from tests.kit import REPO, copy_fixture, fixture_id, fixture_roots

TREES = fixture_roots()


def test_there_are_trees() -> None:
    assert len(TREES) >= 20, TREES


@pytest.mark.parametrize("tree", TREES, ids=[fixture_id(t) for t in TREES])
def test_status_file_is_what_cxlctl_prints(tree: str) -> None:
    with open(os.path.join(tree, fixture_status.STATUS)) as f:
        kept = f.read()
    now = fixture_status.replay(tree)
    if kept != now:
        diff = list(difflib.unified_diff(kept.splitlines(), now.splitlines(), "recorded", "cxlctl now", lineterm=""))
        pytest.fail(
            f"{fixture_id(tree)}/{fixture_status.STATUS} is not what `cxlctl --root TREE status --json` prints now.\n"
            f"If the status output changed on purpose, refresh every tree with\n    {fixture_status.COMMAND}\n"
            "and review `git diff fixtures/` (only cxlctl-status.json files may change).\n" + "\n".join(diff[:60]),
            pytrace=False,
        )


def test_the_command_rewrites_a_stale_file(tmp_path: Any, capsys: Any) -> None:
    tree = copy_fixture(TREES[0], tmp_path / "t")
    path = os.path.join(tree, fixture_status.STATUS)
    with open(path, "w") as f:
        f.write('{"stale": true}\n')
    assert fixture_status.main([tree]) == 0
    with open(path) as f:
        assert f.read() == fixture_status.replay(tree)
    assert "1 of 1 status files rewritten" in capsys.readouterr().out
    assert fixture_status.main([tree]) == 0  # a fresh file is left alone
    assert "0 of 1" in capsys.readouterr().out


def test_the_command_refuses_a_folder_that_is_not_a_record(tmp_path: Any, capsys: Any) -> None:
    assert fixture_status.main([str(tmp_path)]) == 2
    assert "not a cxlctl record" in capsys.readouterr().err


def test_install_replaces_a_tree_and_refreshes_its_status(tmp_path: Any) -> None:
    """What every recorder does with a guest's record: copy it into place, status file replayed."""
    src = copy_fixture(TREES[0], tmp_path / "from-guest")
    with open(os.path.join(src, fixture_status.STATUS), "w") as f:
        f.write("{}\n")
    dst = str(tmp_path / "fixtures" / "tree")
    os.makedirs(os.path.join(dst, "old"))
    assert fixture_status.install(src, dst) == dst
    assert not os.path.exists(os.path.join(dst, "old"))
    assert os.path.islink(os.path.join(dst, "sys/bus/cxl/devices/mem0"))
    with open(os.path.join(dst, fixture_status.STATUS)) as f:
        assert f.read() == fixture_status.replay(TREES[0])


def test_the_one_recording_route_runs_existing_recorders() -> None:
    """scripts/record-fixtures.sh's sets each name a recorder module or VM test that exists."""
    import subprocess

    script = os.path.join(REPO, "scripts", "record-fixtures.sh")
    listed = subprocess.run(["bash", script, "--list"], capture_output=True, text=True, check=True).stdout
    sets = dict(line.split(None, 1) for line in listed.splitlines())
    assert set(sets) == {"base", "telemetry", "ras", "fleet", "damon", "doctor", "hmat", "capacity", "probe"}, listed
    for name, command in sets.items():
        words = command.split()
        target = words[words.index("-m") + 1] if "tests.vm." in command else words[-1]
        path = target.replace(".", "/") + ".py" if target.startswith("tests.vm.") else target
        # every test file the set runs (a node id names its file before "::")
        for p in {path.split("::")[0]} | {w.split("::")[0] for w in words if w.startswith("tests/")}:
            assert os.path.isfile(os.path.join(REPO, p)), (name, command, p)
    dry = subprocess.run(["bash", script, "--dry-run", "telemetry", "--kernel", "6.1"], capture_output=True, text=True)
    assert dry.returncode == 0 and dry.stdout.split()[-3:] == ["tests.vm.record_telemetry_fixtures", "--kernel", "6.1"]
    bad = subprocess.run(["bash", script, "--dry-run", "nonesuch"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown set" in bad.stderr
