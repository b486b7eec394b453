"""``capacity release`` when an offline does not end (issue 41 item 4): the bound, SIGINT, SIGTERM, recovery.

The kernel's ``offline_pages()`` retries pages it cannot migrate until a signal is pending,
then fails the write with EINTR and leaves the block online.  ``CXLCTL_TEST_HANG_WRITE``
(cxlctl/hostio/write.py) makes the write of ``offline`` to one copied block's ``state``
block the same way: only a signal handler that raises ends it, the file unchanged.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, List, Sequence

import pytest

from cxlctl.hostio.host import Host
from tests.kit import BASE_ENV, FIXTURES, REPO, cli, copy_fixture
from tests.test_capacity import SINGLE_BLOCKS, _movable

HANG = "memory148/state"  # the second block offlined (highest first): one block is offline when it hangs


def _copy(tmp_path: Path) -> str:
    root = copy_fixture(os.path.join(FIXTURES, "linux-7.x/single-region"), tmp_path / "t")
    _movable(root)
    return root


def _states(root: str) -> List[str]:
    out = []
    for b in SINGLE_BLOCKS:
        with open(os.path.join(root, f"sys/devices/system/memory/memory{b}/state")) as f:
            out.append(f.read().strip())
    return out


def _all_online(root: str) -> bool:
    return all(s.startswith("online") for s in _states(root))


def test_a_hung_offline_is_bounded_and_rolled_back(tmp_path: Path, monkeypatch: Any) -> None:
    from cxlctl.capacity import release as rel
    from cxlctl.errors import CxlctlError

    root = _copy(tmp_path)
    monkeypatch.setenv("CXLCTL_TEST_HANG_WRITE", HANG)
    handlers = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    t0 = time.monotonic()
    with pytest.raises(CxlctlError) as e:
        rel.release(Host(root), ["mem0"], None, lambda m: None, wait=0, timeout=0.5)
    assert time.monotonic() - t0 < 30
    assert e.value.code == 1
    msg = str(e.value)
    assert "an offline took longer than 0.5 s" in msg and "rolled back" in msg, msg
    assert "--timeout" in e.value.hint
    assert _all_online(root), _states(root)  # memory149 had gone offline: back online
    j = rel.load(Host(root))
    assert j is not None and j["state"] == rel.ROLLED_BACK
    assert os.path.isdir(os.path.join(root, "sys/bus/cxl/devices/region0"))
    # the handlers are put back as they were (SIG_IGN for SIGINT when CI runs the tier in the background)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers


RELEASE = ("capacity", "release", "mem0", "--no-sanitize")


def _child(root: str, sig: int, args: Sequence[str] = RELEASE) -> subprocess.CompletedProcess[str]:
    """``cxlctl --root ROOT ARGS`` with the offline of memory148 hanging, sent ``sig`` once it hangs."""
    env = dict(os.environ)
    env.pop("CXLCTL_ROOT", None)
    env.update({k: v for k, v in BASE_ENV.items() if v is not None})
    env["CXLCTL_TEST_HANG_WRITE"] = HANG
    p = subprocess.Popen(
        [sys.executable, "-m", "cxlctl", "--root", root, *args],
        cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert p.stderr is not None
    seen = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = p.stderr.readline()
        seen.append(line)
        if "cxlctl-test: write to" in line or not line:
            break
    assert "hangs" in seen[-1], "".join(seen)
    time.sleep(0.3)
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    return subprocess.CompletedProcess(p.args, p.returncode, out, "".join(seen) + err)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_mid_offline_rolls_back(tmp_path: Path, sig: int) -> None:
    from cxlctl.capacity import release as rel

    root = _copy(tmp_path)
    p = _child(root, sig)
    name = signal.Signals(sig).name
    assert p.returncode == 128 + sig, p.stderr
    assert f"{name} received" in p.stderr and "rolled back" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    assert _all_online(root), _states(root)
    j = rel.load(Host(root))
    assert j is not None and j["state"] == rel.ROLLED_BACK, j


def test_a_killed_release_is_rolled_back_by_the_next(tmp_path: Path) -> None:
    """As seen in a 7.3.4 guest: killed at `releasing` with one block offline and no step recorded; the
    next release says what it finds and rolls it back instead of "nothing was changed"."""
    from cxlctl.capacity import release as rel
    from cxlctl.capacity.report import gather

    root = _copy(tmp_path)
    h = Host(root)
    rep = gather(h)
    p = rel.plan(h, rep, rel.choose(rep, ["mem0"], None))
    rel.save(h, p, rel.RELEASING, [])
    with open(os.path.join(root, "sys/devices/system/memory/memory149/state"), "w") as f:
        f.write("offline\n")
    r = cli("--root", root, "capacity", "release", "mem0", "--dry-run", check=True)
    assert "recovery: a release of mem0 did not finish (state releasing" in r.stdout, r.stdout
    assert "1 of 4 block(s) offline (memory149)" in r.stdout and "would be rolled back first" in r.stdout
    assert "nothing was changed;" not in r.stdout + r.stderr
    lines = rel.recover(Host(root), rel.load(Host(root)) or {}, lambda m: None)
    assert "rolled it back" in lines[-1]
    assert _all_online(root), _states(root)
    j = rel.load(Host(root))
    assert j is not None and j["state"] == rel.ROLLED_BACK and "memory149" in (j["error"] or "")
    assert rel.unfinished(Host(root)) is None
    # a changed byte is caught by the checksum, never acted on
    path = os.path.join(root, "run/cxlctl/capacity.json")
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace('"rolled-back"', '"releasing"'))
    r = cli("--root", root, "capacity", "release", "mem0", "--dry-run", rc=2)
    assert "capacity journal" in r.stderr and "checksum mismatch" in r.stderr
    json.loads(text)


def _hugepages(root: str, node: int, size_kb: int, total: int, free: int) -> None:
    """The one edit: a hugetlb pool on the node, as ``nodeN/hugepages/hugepages-<size>kB`` shows it."""
    d = os.path.join(root, f"sys/devices/system/node/node{node}/hugepages/hugepages-{size_kb}kB")
    os.makedirs(d)
    for name, v in (("nr_hugepages", total), ("free_hugepages", free), ("surplus_hugepages", 0)):
        with open(os.path.join(d, name), "w") as f:
            f.write(f"{v}\n")


def test_in_use_hugetlb_pages_block_the_release(tmp_path: Path) -> None:
    from cxlctl.capacity.stuck import explain

    root = _copy(tmp_path)
    _hugepages(root, 1, 2048, 8, 8)  # a pool, all free: dissolved by the offline, no blocker
    doc = json.loads(cli("--root", root, "capacity", "--json", check=True, inprocess=True).stdout)
    assert doc["memdevs"][0]["state"] == "releasable"
    root2 = _copy(tmp_path / "b")
    _hugepages(root2, 1, 1048576, 2, 1)
    doc = json.loads(cli("--root", root2, "capacity", "--json", check=True, inprocess=True).stdout)
    (m,) = doc["memdevs"]
    assert m["state"] == "blocked" and m["releasable"] == 0
    (b,) = [b for b in m["blockers"] if b["code"] == "hugetlb"]
    assert "1 of 2 huge page(s) of 1 GiB in use on node 1 (gigantic" in b["message"]
    assert doc["nodes"][0]["releasable"] == 0 and [x["code"] for x in doc["nodes"][0]["blockers"]] == ["hugetlb"]
    p = cli("--root", root2, "capacity", "release", "mem0", rc=2)
    assert "cannot release mem0 (hugetlb): 1 of 2 huge page(s)" in p.stderr and "nr_hugepages" in p.stderr
    assert any("huge page(s) of 1 GiB in use on node 1" in x for x in explain(Host(root2), [1]))


# ----------------------------------------------------------------------------- sanitize (issue 41 item 7)


def _sanitize_attr(root: str, memdev: str) -> str:
    """The one edit: ``security/sanitize`` (mode 0200: the recordings do not hold write-only files)."""
    p = os.path.join(root, f"sys/bus/cxl/devices/{memdev}/security/sanitize")
    with open(p, "w"):
        pass
    return p


def test_sanitize_waits_for_the_state_to_leave_sanitize(tmp_path: Path) -> None:
    from cxlctl.capacity import release as rel
    from cxlctl.capacity.report import gather
    from cxlctl.capacity.sanitize import DONE, FAILED, sanitize

    root = copy_fixture(os.path.join(FIXTURES, "linux-7.x/single-noregion"), tmp_path / "t")
    state = os.path.join(root, "sys/bus/cxl/devices/mem0/security/state")
    gone = sanitize(Host(root), "mem0", lambda m: None)
    assert gone.result == FAILED and "no security/sanitize" in gone.detail
    attr = _sanitize_attr(root, "mem0")
    with open(state, "w") as f:
        f.write("sanitize\n")  # as security_state_show() reads while the background command runs
    polls: List[float] = []

    def sleep(s: float) -> None:
        polls.append(s)
        if len(polls) == 3:
            with open(state, "w") as f:
                f.write("disabled\n")

    done = sanitize(Host(root), "mem0", lambda m: None, sleep=sleep)
    with open(attr) as f:
        assert f.read() == "1"
    assert (done.result, done.security, len(polls)) == (DONE, "disabled", 3)
    with open(state, "w") as f:
        f.write("sanitize\n")
    late = sanitize(Host(root), "mem0", lambda m: None, timeout=0.0, sleep=lambda s: None)
    assert late.result == FAILED and "still sanitizing after 0 s" in late.detail
    # what release says for each
    m = gather(Host(root)).memdevs[0]
    assert rel.released_line(m, done).endswith("released and sanitized (done in 0.0 s, security/state disabled): "
                                               "safe to unbind at the fabric manager")  # fmt: skip
    assert "not safe to hand to another host" in rel.released_line(m, late)
    assert "not sanitized (--no-sanitize): safe to unbind" in rel.released_line(m, None)


def test_release_needs_a_sanitize_choice(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    p = cli("--root", root, "capacity", "release", "mem0", rc=2)
    assert "--sanitize or --no-sanitize" in p.stderr and "Traceback" not in p.stderr
    assert not os.path.exists(os.path.join(root, "run/cxlctl")), "refused before the lock"
    cli("--root", root, "capacity", "release", "mem0", "--dry-run", check=True)  # a dry run needs none


# ----------------------------------------------------------------------------- --try-normal (issue 41 item 5)


def test_try_normal_offlines_zone_normal_blocks_and_rolls_back_on_ebusy(tmp_path: Path, monkeypatch: Any) -> None:
    """The recorded single-region (7.x): dax0.0's four blocks online in ZONE_NORMAL, as every recorded
    system-ram region is.  Refused without --try-normal (its fix names --try-normal and the boot setting,
    not a reboot); with it the plan offlines them, and the kernel's EBUSY on the second rolls back into
    ZONE_NORMAL (online_kernel)."""
    from cxlctl.capacity import release as rel
    from cxlctl.errors import CxlctlError
    from cxlctl.regions import dax as daxmod

    root = copy_fixture(os.path.join(FIXTURES, "linux-7.x/single-region"), tmp_path / "t")
    p = cli("--root", root, "capacity", "release", "mem0", "--no-sanitize", rc=2)
    assert "ZONE_NORMAL" in p.stderr and "--try-normal" in p.stderr and "memhp_default_state=online_movable" in p.stderr
    assert "after a reboot" not in p.stderr
    d = json.loads(cli("--root", root, "capacity", "release", "mem0", "--try-normal", "--dry-run", "--json",
                       check=True).stdout)  # fmt: skip
    assert d["regions"][0]["dax"][0]["zone"] == "normal" and d["offline_bytes"] == 512 << 20
    real = daxmod._offline_one

    def offline_one(host: Any, bid: int) -> Any:
        return "EBUSY: Device or resource busy" if bid == 148 else real(host, bid)

    monkeypatch.setattr(daxmod, "_offline_one", offline_one)
    with pytest.raises(CxlctlError) as e:
        rel.release(Host(root), ["mem0"], None, lambda m: None, wait=0, try_normal=True)
    assert "memory148 could not be offlined (EBUSY" in str(e.value) and "rolled back" in str(e.value)
    assert _states(root) == ["online", "online", "online", "online_kernel"]  # memory149 back in the kernel zone


def test_the_bound_names_pinned_memory_on_the_node(tmp_path: Path, monkeypatch: Any) -> None:
    """The one edit: the recorded process with the most mappings has one mapping's pages on node 1 and
    pinned memory (VmPin); the hung offline's error hint names it."""
    from cxlctl.capacity import release as rel
    from cxlctl.errors import CxlctlError
    from tests.test_capacity import _edit_proc

    root = _copy(tmp_path)
    pid = _edit_proc(root, lambda t: t.replace(" N0=", " N1=", 1))
    status = os.path.join(root, f"proc/{pid}/status")
    with open(status) as f:
        text = f.read()
    os.unlink(status)
    with open(status, "w") as f:
        f.write("".join(ln if not ln.startswith("VmPin:") else "VmPin:\t   65536 kB\n" for ln in text.splitlines(True)))
    monkeypatch.setenv("CXLCTL_TEST_HANG_WRITE", HANG)
    with pytest.raises(CxlctlError) as e:
        rel.release(Host(root), ["mem0"], None, lambda m: None, wait=0, timeout=0.3)
    assert "pinned memory (short-term pins block migration): PID " + str(pid) in e.value.hint, e.value.hint
    assert "VmPin 64 MiB" in e.value.hint
    assert _all_online(root)


def test_the_cli_bound_is_timeout(tmp_path: Path) -> None:
    """`capacity release --timeout SECONDS`, as a user runs it: exit 1, rolled back, the journal clean."""
    from cxlctl.capacity import release as rel

    root = _copy(tmp_path)
    env = {"CXLCTL_TEST_HANG_WRITE": HANG}
    p = cli("--root", root, "capacity", "release", "mem0", "--no-sanitize", "--timeout", "0.5", env=env, rc=1)
    assert "an offline took longer than 0.5 s" in p.stderr and "rolled back" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    assert _all_online(root)
    j = rel.load(Host(root))
    assert j is not None and j["state"] == rel.ROLLED_BACK


# ------------------------------------------- the one offline loop: region destroy, dax reconfigure (issue 41)


@pytest.mark.parametrize("how", ["region destroy", "dax reconfigure"])
def test_every_offline_is_bounded(tmp_path: Path, monkeypatch: Any, how: str) -> None:
    """`region destroy --force` and `dax reconfigure --mode devdax --force` offline through the same loop as
    a release: a block whose offline does not end is interrupted by the bound, the blocks already offlined
    go back online, nothing else changes (before, both waited for ever)."""
    from cxlctl.capacity import bound
    from cxlctl.errors import CxlctlError
    from cxlctl.regions import dax as daxmod
    from cxlctl.regions.program import destroy

    root = _copy(tmp_path)
    monkeypatch.setenv("CXLCTL_TEST_HANG_WRITE", HANG)
    monkeypatch.setattr(bound, "OFFLINE_TIMEOUT", 0.3)
    t0 = time.monotonic()
    with pytest.raises(CxlctlError) as e:
        if how == "region destroy":
            destroy(Host(root), "region0", True, lambda m: None)
        else:
            daxmod.reconfigure(Host(root), "dax0.0", "devdax", "movable", True, lambda m: None)
    assert time.monotonic() - t0 < 30
    assert e.value.code == 1
    msg = str(e.value)
    assert "memory148 stopped: an offline took longer than 0.3 s (the bound)" in msg, msg
    assert "the 1 block(s) already offlined are back online, nothing changed" in msg, msg
    assert "migration failure" in (e.value.hint or "")
    assert _all_online(root), _states(root)
    assert os.path.isdir(os.path.join(root, "sys/bus/cxl/devices/region0"))
    assert bound.Guard.current is None and signal.getsignal(signal.SIGALRM) is signal.SIG_DFL


def test_a_signal_mid_region_destroy_rolls_back(tmp_path: Path) -> None:
    """SIGTERM while `region destroy --force` offlines: exit 143, the blocks online again, the region whole."""
    root = _copy(tmp_path)
    p = _child(root, signal.SIGTERM, ("region", "destroy", "region0", "--force"))
    assert p.returncode == 128 + signal.SIGTERM, p.stderr
    assert "stopped: SIGTERM received" in p.stderr and "back online, nothing changed" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    assert _all_online(root), _states(root)
    assert os.path.isdir(os.path.join(root, "sys/bus/cxl/devices/region0"))


def test_the_bound_names_the_processes_on_the_node(tmp_path: Path, monkeypatch: Any) -> None:
    """A page held by an extra reference (vmsplice, seen in the 6.12 and 7.x guests) shows in no counter of
    the process: the hint names the processes with pages on the node, the most first."""
    from cxlctl.capacity import release as rel
    from cxlctl.errors import CxlctlError
    from tests.test_capacity import _edit_proc

    root = _copy(tmp_path)
    pid = _edit_proc(root, lambda t: t.replace(" N0=", " N1=", 1))
    monkeypatch.setenv("CXLCTL_TEST_HANG_WRITE", HANG)
    with pytest.raises(CxlctlError) as e:
        rel.release(Host(root), ["mem0"], None, lambda m: None, wait=0, timeout=0.3)
    hint = e.value.hint or ""
    assert "processes with pages on node 1 (a page one of them holds by an extra reference" in hint, hint
    assert f"PID {pid} (" in hint and "pinned memory" not in hint, hint
    assert _all_online(root)


def test_a_signal_the_caller_ignored_still_rolls_back() -> None:
    """A release started with SIGINT ignored (a background job of a non-interactive shell: the guest test's
    ``cxlctl capacity release … &``, CI's tier) still takes SIGINT while it runs: the guard handles it, then
    puts the ignored disposition back."""
    from cxlctl.capacity.bound import Guard

    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with Guard(1.0):
            assert signal.getsignal(signal.SIGINT) not in (signal.SIG_IGN, signal.SIG_DFL)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, old)
