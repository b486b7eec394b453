"""docs/quickstart.md (issue 44 item 10): every command of the day-one guide that changes nothing runs,
as printed, on a recorded tree — the region steps on ``hmat2-noregion`` (no region yet), the rest on
``hmat2-region`` — and every ``sudo`` step that changes the host has its dry run (or plan) just before it."""

from __future__ import annotations

import os
import re
import shlex
from typing import List

from tests.kit import FIXTURES, REPO, cli

GUIDE = os.path.join(REPO, "docs", "quickstart.md")
BEFORE = os.path.join(FIXTURES, "linux-7.x", "hmat2-noregion")
AFTER = os.path.join(FIXTURES, "linux-7.x", "hmat2-region")


def _commands() -> List[str]:
    with open(GUIDE) as f:
        return [m.group(1) for m in re.finditer(r"^\$ (.+)$", f.read(), re.M)]


def test_the_guide_has_one_command_per_step_and_a_dry_run_before_each_change() -> None:
    cmds = _commands()
    assert len(cmds) >= 10
    with open(GUIDE) as f:
        steps = re.findall(r"^## \d\. .+ — (.+)$", f.read(), re.M)
    assert len(steps) == 6, steps  # each step says what it changes
    for i, c in enumerate(cmds):
        if c.startswith("sudo "):
            before = cmds[i - 1]
            real = c[len("sudo ") :]
            planned = before.replace(" --dry-run", "") == real or before == real.replace(" apply ", " plan ")
            assert planned, (before, c)


def test_every_command_that_changes_nothing_runs_on_a_recorded_tree() -> None:
    ran = 0
    for c in _commands():
        if c.startswith("sudo "):
            continue
        argv = shlex.split(c)
        assert argv[0] == "cxlctl", c
        tree = BEFORE if argv[1] in ("region", "capacity") else AFTER
        p = cli("--root", tree, *argv[1:], inprocess=True)
        assert p.returncode == 0 and "Traceback" not in p.stderr, (c, p.stdout[-400:], p.stderr)
        if "--dry-run" in argv and argv[1] != "launch":  # a dry run says what it would do
            assert "would" in p.stdout, (c, p.stdout)
        ran += 1
    assert ran >= 10


def test_the_guide_is_linked_and_its_links_exist() -> None:
    with open(GUIDE) as f:
        text = f.read()
    for target in re.findall(r"\]\(([a-z-]+\.md)", text):
        assert os.path.isfile(os.path.join(REPO, "docs", target)), target
    with open(os.path.join(REPO, "README.md")) as f:
        assert "docs/quickstart.md" in f.read()
