"""cxlctl's own weighted-interleave weights quantize as finely as the kernel's ``auto`` (issue 20).

With two CXL host bridges whose generic ports differ (DRAM 38912 MB/s, CXL 16000 and 6144
MB/s), Linux 7.3's ``auto`` mode set 20:8:3; cxlctl's largest weight was capped at 10 and,
when no weight up to the cap was within 5 %, took the cap: 10:4:2 → 5:2:1, which gives the
slow node 27 % more than its bandwidth share.  Now the cap is the kernel's scale (32) and,
when nothing is within the tolerance, the closest candidate wins.
"""

from __future__ import annotations

from typing import Any, Dict

from cxlctl.tuning.knobs import DEFAULT_MAX_WEIGHT
from cxlctl.tuning.weights import reduce_weights

BW = {0: 38912, 2: 16000, 3: 6144}


def _worst(w: Dict[int, int], bw: Dict[int, int]) -> float:
    tw, tb = sum(w.values()), sum(bw.values())
    return max(abs(w[n] / tw - bw[n] / tb) / (bw[n] / tb) for n in bw)


def test_three_speeds_get_weights_within_5_percent_of_their_bandwidth() -> None:
    w = reduce_weights(BW)
    assert w == {0: 19, 2: 8, 3: 3}
    assert _worst(w, BW) < 0.05
    kernel_auto = {0: 20, 2: 8, 3: 3}  # what 7.3's auto wrote for these bandwidths
    assert _worst(w, BW) <= _worst(kernel_auto, BW)
    assert _worst({0: 5, 2: 2, 3: 1}, BW) > 0.2  # the old result: the slow node got 24 % more than its share


def test_a_small_cap_takes_the_closest_candidate_not_the_cap() -> None:
    w = reduce_weights(BW, cap=10)
    assert w == {0: 7, 2: 3, 3: 1}
    assert _worst(w, BW) < _worst({0: 5, 2: 2, 3: 1}, BW)


def test_default_cap_is_the_kernels_scale_and_profiles_default_to_it() -> None:
    from cxlctl.tuning.knobs import REGISTRY

    assert DEFAULT_MAX_WEIGHT == 32
    wi = [k for k in REGISTRY if k.name == "weighted_interleave"][0]
    table = {"weights": "bandwidth", "nodes": ["dram", "cxl"]}
    assert wi.validate(None, table).max_weight == 32


def _wi_steps(root: str) -> Dict[str, Any]:
    import json

    from tests.kit import cli

    plan = json.loads(cli("--root", root, "tune", "plan", "inference-bandwidth", "--json", check=True).stdout)
    return {s["setting"]: s for s in plan["plan"]["steps"] if s["setting"].startswith("weighted_interleave")}


def test_recorded_hmat_guest_on_612_gets_19_8_3() -> None:
    """The recorded 6.12 guest with HMAT, two generic ports and a fast and a slow CDAT device
    (fixtures/linux-6.12/hmat2-region): the kernel's figures are 38912/16000/6144 MB/s."""
    import os

    from tests.kit import FIXTURES

    steps = _wi_steps(os.path.join(FIXTURES, "linux-6.12", "hmat2-region"))
    got = {k: v["desired"] for k, v in steps.items()}
    assert got == {
        "weighted_interleave.node0": "19",
        "weighted_interleave.node2": "8",
        "weighted_interleave.node3": "3",
    }
    assert "node0 38912 MB/s, node2 16000 MB/s, node3 6144 MB/s" in steps["weighted_interleave.node0"]["note"]


def test_recorded_7x_hmat_guest_plan_compares_the_kernels_auto_weights() -> None:
    """On the recorded 7.3 guest the kernel's auto mode wrote 20:8:3; the plan chooses auto and
    quotes those weights beside cxlctl's 19:8:3 and the bandwidth shares."""
    import os

    from tests.kit import FIXTURES

    root = os.path.join(FIXTURES, "linux-7.x", "hmat2-region")
    steps = _wi_steps(root)
    auto = steps["weighted_interleave.auto"]
    assert auto["desired"] == "true"
    note = auto["note"]
    assert "the kernel's auto weights now: node0=20 (65 %) node2=8 (26 %) node3=3 (10 %)" in note, note
    assert "cxlctl's from the same figures: node0=19 (63 %) node2=8 (27 %) node3=3 (10 %)" in note, note
    assert "bandwidth shares: node0 64 % node2 26 % node3 10 %" in note, note


def _launch_on_7x_hmat(tmp_path: Any, manual: bool) -> Dict[str, Any]:
    """``launch exec --dry-run --json`` weighted over nodes 0, 2, 3 of a copy of the recorded 7.3 HMAT
    guest; ``manual``: the weight files as a ``prefer_auto = false`` profile leaves them (19:8:3,
    ``auto`` false), which the guest run of ``test_vm_hmat.py`` went through."""
    import os

    from tests.kit import FIXTURES, copy_fixture
    from tests.launch_support import dry, write_status

    root = str(tmp_path / "root")
    copy_fixture(os.path.join(FIXTURES, "linux-7.x", "hmat2-region"), root)
    write_status(root, "0,2-3")
    wi = os.path.join(root, "sys/kernel/mm/mempolicy/weighted_interleave")
    if manual:
        for name, value in (("node0", "19"), ("node2", "8"), ("node3", "3"), ("auto", "false")):
            with open(os.path.join(wi, name), "w") as f:
                f.write(value + "\n")
    return dry(root, "exec", ["--policy", "weighted-interleave", "--mem-nodes", "0,2,3", "--set-weights"], ["true"])


def test_launch_switching_auto_back_on_does_not_name_the_files_old_weights(tmp_path: Any) -> None:
    """Issue 20: after a manual profile left 19:8:3, the launch plans auto mode; the kernel then
    writes 20:8:3, so the plan must not give 19:8:3 (the files now) as the launch's weights."""
    doc = _launch_on_7x_hmat(tmp_path, manual=True)
    w = doc["weights"]
    assert w["source"] == "kernel-auto", w
    assert w["launch"] is None, w
    assert {"setting": "weighted_interleave.auto", "from": "false", "to": "true"} in w["changes"], w
    assert doc["policy"]["weights"] == {}, doc["policy"]
    assert any("computes them when auto is switched on" in n for n in doc["notes"]), doc["notes"]


def test_launch_with_auto_already_on_names_the_kernels_weights(tmp_path: Any) -> None:
    doc = _launch_on_7x_hmat(tmp_path, manual=False)
    assert doc["weights"]["source"] == "kernel-auto"
    assert doc["weights"]["launch"] == {"0": 20, "2": 8, "3": 3}
    assert doc["policy"]["weights"] == {"0": 20, "2": 8, "3": 3}


def test_plan_with_a_non_ascii_digit_in_a_kernel_weight_file_does_not_crash(tmp_path: Any) -> None:
    """Found by the full fuzz (CXLCTL_FUZZ_SEED=2026, linux-7.x/hmat2-region): ``weighted_interleave/node2``
    holding "²" (``str.isdigit`` is true for it, ``int`` refuses it) made ``tune plan`` an internal
    error.  A weight that is not ASCII digits is no kernel weight: the note leaves the kernel's out."""
    import os

    from tests.kit import FIXTURES, copy_fixture

    root = str(tmp_path / "root")
    copy_fixture(os.path.join(FIXTURES, "linux-7.x", "hmat2-region"), root)
    with open(os.path.join(root, "sys/kernel/mm/mempolicy/weighted_interleave/node2"), "w") as f:
        f.write("\u00b2\n")
    note = _wi_steps(root)["weighted_interleave.auto"]["note"]
    assert "the kernel computes its weights when auto is on" in note, note
    assert "cxlctl's from the same figures: node0=19" in note, note
