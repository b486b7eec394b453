"""Property: for any recorded tree and any profile — built-in or generated — apply
(optionally on top of another applied profile) then revert leaves the tree byte-identical."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Dict, List, Optional

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cxlctl.hostio.host import Host
from cxlctl.tuning import engine
from cxlctl.tuning import journal as jn
from tests.tune_support import PROFILES, diff, snapshot, sources, work_copy

SOURCES = sources()
_WORK = tempfile.mkdtemp(prefix="cxlctl-prop-")
_TREES: Dict[str, str] = {}
_SNAPS: Dict[str, Dict[str, object]] = {}


def _tree(source: str) -> str:
    """One work copy per source, reset from the recording if an example left it dirty."""
    if source not in _TREES:
        _TREES[source] = work_copy(source, os.path.join(_WORK, source.replace("/", "_")))
        _SNAPS[source] = snapshot(_TREES[source])  # type: ignore[assignment]
    root = _TREES[source]
    if snapshot(root) != _SNAPS[source]:
        work_copy(source, root)
    shutil.rmtree(os.path.join(root, "run"), ignore_errors=True)
    return root


def _value(knob: str) -> st.SearchStrategy[str]:
    return {
        "vm.zone_reclaim_mode": st.integers(0, 7).map(str),
        "vm.swappiness": st.integers(0, 200).map(str),
        "demotion_enabled": st.booleans().map(lambda b: "true" if b else "false"),
        "auto_online_blocks": st.sampled_from(['"offline"', '"online"', '"online_kernel"', '"online_movable"']),
        "kernel.numa_balancing_promote_rate_limit_MBps": st.one_of(
            st.integers(0, 2**31 - 1).map(str), st.just('"bandwidth"')
        ),
        "kernel.numa_balancing": st.integers(0, 3).map(str),
    }[knob]


@st.composite
def generated_profile(draw: st.DrawFn) -> str:
    """A random valid profile text: any subset of knobs (none too), any valid values, any weights.
    It always has a summary: an empty file is not a profile (tests/test_core_writes.py)."""
    lines: List[str] = ['summary = "generated"']
    parent = draw(st.one_of(st.none(), st.sampled_from(PROFILES)))
    if parent:
        lines.append(f'include = "{parent}"')
    for knob in (
        "vm.zone_reclaim_mode",
        "vm.swappiness",
        "demotion_enabled",
        "auto_online_blocks",
        "kernel.numa_balancing_promote_rate_limit_MBps",
        "kernel.numa_balancing",
    ):
        if draw(st.booleans()):
            lines.append(f'knobs."{knob}" = {draw(_value(knob))}')
    if draw(st.booleans()):
        weights = draw(
            st.one_of(
                st.just("bandwidth"),
                st.tuples(st.integers(1, 255), st.integers(1, 255)).map(lambda t: f"{t[0]}:{t[1]}"),
            )
        )
        nodes = draw(st.sampled_from(['["dram", "cxl"]', '["all"]', '["dram"]', "[0, 1]", '["cxl", 0]']))
        auto = draw(st.booleans())
        mw = draw(st.integers(1, 255))
        lines.append("[knobs.weighted_interleave]")
        lines.append(f'weights = "{weights}"\nnodes = {nodes}\nprefer_auto = {str(auto).lower()}\nmax_weight = {mw}')
    return "\n".join(lines) + "\n"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    source=st.sampled_from(SOURCES),
    first=st.one_of(st.none(), st.sampled_from(PROFILES)),
    second=st.one_of(st.sampled_from(PROFILES), generated_profile()),
    persist=st.booleans(),
)
def test_apply_then_revert_is_identity(source: str, first: Optional[str], second: str, persist: bool) -> None:
    root = _tree(source)
    before = snapshot(root)
    if "\n" in second:  # a generated profile
        path = os.path.join(root, "etc/cxlctl/profiles/generated.toml")
        with open(path, "w") as f:
            f.write(second)
        before = snapshot(root)
        second = "generated"
    if first is not None:
        res = engine.apply(Host(root), first, persist=persist)
        assert res.ok, res.error
    res = engine.apply(Host(root), second, persist=persist)
    assert res.ok, res.error
    assert all(c.status != "drift" for c in engine.verify(Host(root)).checks)
    rev = engine.revert(Host(root))
    assert rev.ok, rev.errors
    assert diff(before, snapshot(root)) == []
    j = jn.load(Host(root))
    assert j is not None and j.state == jn.REVERTED
    if second == "generated":
        os.unlink(os.path.join(root, "etc/cxlctl/profiles/generated.toml"))
