"""``status_json.dumps`` writes JSON itself (the json package imports ``re``: start-up cost);
these hold it to ``json.dumps(..., indent=2)`` byte for byte."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any, List

import pytest

from cxlctl.hostio.host import Host
from cxlctl.hostio.reader import natural_key
from cxlctl.inventory import scan
from cxlctl.status_json import _emit, dumps, to_dict
from tests.kit import REPO, fixture_id, fixture_roots


@pytest.mark.parametrize("root", fixture_roots(), ids=fixture_id)
def test_dumps_is_json_dumps_on_every_fixture(root: str) -> None:
    inv = scan(Host(root))
    assert dumps(inv) == json.dumps(to_dict(inv), indent=2) + "\n"


@pytest.mark.parametrize(
    "value",
    [
        {},
        [],
        {"a": {}, "b": [], "c": [[], {}], "d": ()},
        {1: "int key", None: "none key", 2.5: "float key"},
        {True: "bool key", False: "other bool key"},
        {"s": 'quote " backslash \\ newline \n tab \t nul \x00 é ² 日本 \U0001f600 [/]'},
        {"n": [0, -1, 2**64 - 1, -(2**64), 1.5, 1e300, float("nan"), float("inf"), float("-inf")]},
        {"b": [True, False, None]},
        [{"deep": [{"deeper": [1, [2, [3]]]}]}],
    ],
)
def test_emit_matches_json_dumps(value: Any) -> None:
    out: List[str] = []
    _emit(value, out, "\n")
    assert "".join(out) == json.dumps(value, indent=2)


def test_emit_refuses_what_json_refuses() -> None:
    with pytest.raises(TypeError):
        _emit({"x": object()}, [], "\n")
    with pytest.raises(TypeError):
        _emit({(1, 2): "tuple key"}, [], "\n")


def test_status_json_fast_path_imports_neither_json_re_nor_typing() -> None:
    """What the start-up work bought: the fast path loads none of them (bench/startup.py has the figures)."""
    root = fixture_roots("linux-6.12/hb2x2-region")[0]
    code = (
        "import sys; from cxlctl.__main__ import main; rc = main(['--root', sys.argv[1], 'status', '--json']);"
        " sys.stderr.write(' '.join(m for m in ('json', 're', 'typing') if m in sys.modules))"
    )
    # -S: no site (an editable install's .pth hook imports re itself); the repo on the path instead
    env = dict(os.environ, PYTHONPATH=REPO)
    p = subprocess.run([sys.executable, "-S", "-c", code, root], capture_output=True, text=True, check=True, env=env)
    assert json.loads(p.stdout)["memdevs"]
    assert p.stderr == ""


@pytest.mark.parametrize(
    "names",
    [
        ["mem10", "mem2", "mem²", "mem1"],
        ["decoder10.0", "decoder2.1", "decoder2.0", "decoders_committed", "decoder2.10"],
        ["10a", "9b", "a", "", "007", "7", "x1y22z3", "x1y3z", "mem١", "²", "node٣2"],
    ],
)
def test_natural_key_orders_as_ascii_digit_runs(names: List[str]) -> None:
    """The str-method key orders exactly like the regex split it replaced."""

    def by_regex(name: str) -> Any:
        parts = re.split(r"([0-9]+)", name)
        return tuple((0, int(p)) if i % 2 else (1, p) for i, p in enumerate(parts) if i % 2 or p)

    assert [natural_key(n) for n in names] == [by_regex(n) for n in names]
