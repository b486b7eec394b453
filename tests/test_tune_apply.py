"""apply / verify / revert / status / plan on writable copies of every recorded tree."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List

import pytest

from cxlctl.cli import run
from cxlctl.errors import EXIT_DRIFT, EXIT_FAILURE, EXIT_LOCKED, EXIT_USAGE
from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from cxlctl.tuning import engine
from cxlctl.tuning import journal as jn
from cxlctl.tuning.knobs import BY_NAME
from tests.kit import REPO, cli
from tests.tune_support import (
    LIVE,
    PROFILES,
    diff,
    journal,
    representative,
    snapshot,
    sources,
    work_copy,
    write_boot_id,
)

SOURCES = sources()


def _json(argv: List[str], rc: int = 0) -> Dict[str, Any]:
    data: Dict[str, Any] = json.loads(cli(*argv, "--json", rc=rc, inprocess=True).stdout)
    assert data["schema_version"] == 1
    return data


def _read(root: str, path: str) -> str:
    with open(root + path) as f:
        return f.read()


#: cxl-common is included by the others; t-ratio's weights are also written by t-everything
@pytest.mark.parametrize("profile", [p for p in PROFILES if p not in ("cxl-common", "t-ratio")])
@pytest.mark.parametrize("source", SOURCES)
def test_apply_verify_revert_roundtrip(source: str, profile: str, tmp_path: Any, capsys: Any) -> None:
    root = work_copy(source, str(tmp_path / "root"))
    before = snapshot(root)
    plan = _json(["--root", root, "tune", "plan", profile])["plan"]
    res = _json(["--root", root, "tune", "apply", profile])
    assert res["ok"] and res["journal_state"] == "applied"
    j = journal(root)
    assert j.state == jn.APPLIED and j.profile == profile
    # every planned write landed, and reads back as the canonical desired value
    for step in plan["steps"]:
        if step["action"] in ("set", "noop"):
            raw = _read(root, step["path"])
            assert BY_NAME[step["knob"]].canonical(raw) == step["desired"], step
    assert sum(1 for r in res["results"] if r["status"] == "written") == plan["changes"]
    ver = _json(["--root", root, "tune", "verify"])
    assert ver["summary"]["drift"] == 0
    st = _json(["--root", root, "tune", "status"])
    assert st["active_profile"] == profile and st["verify"]["drift"] == []
    # applying again changes nothing
    again = _json(["--root", root, "tune", "plan", profile])["plan"]
    assert again["changes"] == 0
    rev = _json(["--root", root, "tune", "revert"])
    assert rev["ok"]
    assert diff(before, snapshot(root)) == []
    assert journal(root).state == jn.REVERTED
    assert run(["--root", root, "tune", "verify"]) == EXIT_USAGE  # nothing to compare with
    assert "no tuning profile is in effect" in capsys.readouterr().err


@pytest.mark.parametrize("source", representative())
def test_drift_is_reported_and_exit_3(source: str, tmp_path: Any, capsys: Any) -> None:
    root = work_copy(source, str(tmp_path / "root"))
    before = snapshot(root)
    assert run(["--root", root, "tune", "apply", "t-everything"]) == 0
    capsys.readouterr()
    # an admin changes a knob behind cxlctl's back
    with open(root + "/proc/sys/vm/swappiness", "w") as f:
        f.write("77\n")
    ver = _json(["--root", root, "tune", "verify"], rc=EXIT_DRIFT)
    drift = [c for c in ver["checks"] if c["status"] == "drift"]
    assert [(c["setting"], c["expected"], c["actual"]) for c in drift] == [("vm.swappiness", "100", "77")]
    assert run(["--root", root, "tune", "verify"]) == EXIT_DRIFT
    out = capsys.readouterr()
    assert "drift" in out.out and "vm.swappiness" in out.err
    st = _json(["--root", root, "tune", "status"])
    assert st["verify"]["drift"] == ["vm.swappiness"]
    assert run(["--root", root, "tune", "revert"]) == 0
    assert diff(before, snapshot(root)) == []


@pytest.mark.parametrize("source", SOURCES)
def test_verify_against_a_profile_without_applying(source: str, tmp_path: Any, capsys: Any) -> None:
    root = work_copy(source, str(tmp_path / "root"))
    plan = _json(["--root", root, "tune", "plan", "t-everything"])["plan"]
    ver = _json(["--root", root, "tune", "verify", "t-everything"], rc=EXIT_DRIFT if plan["changes"] else 0)
    assert ver["basis"] == "profile"
    assert ver["summary"]["drift"] == plan["changes"]


def test_switching_profiles_keeps_boot_values(tmp_path: Any, capsys: Any) -> None:
    """apply A, apply B, revert → the values from before A (not A's)."""
    for source in representative():
        root = work_copy(source, str(tmp_path / source.replace("/", "_")))
        before = snapshot(root)
        for a, b in (
            ("t-everything", "latency-strict"),
            ("inference-capacity", "t-ratio"),
            ("t-ratio", "inference-bandwidth"),
        ):
            assert run(["--root", root, "tune", "apply", a]) == 0
            capsys.readouterr()
            res = _json(["--root", root, "tune", "apply", b])
            assert res["plan"]["switching_from"] == a
            j = journal(root)
            assert j.profile == b and j.previous_profile == a
            # knobs A set and B does not mention are back at their boot values
            for s in res["plan"]["steps"]:
                if s["action"] == "restore":
                    assert s["reason"].startswith("not in this profile")
            assert run(["--root", root, "tune", "revert"]) == 0
            capsys.readouterr()
            assert diff(before, snapshot(root)) == [], (source, a, b)


@pytest.mark.parametrize("source", representative())
def test_persist_writes_sysctl_d_and_revert_removes(source: str, tmp_path: Any, capsys: Any) -> None:
    root = work_copy(source, str(tmp_path / "root"))
    before = snapshot(root)
    res = _json(["--root", root, "tune", "apply", "inference-capacity", "--persist"])
    demotion = os.path.exists(root + "/sys/kernel/mm/numa/demotion_enabled")
    files = ["/etc/sysctl.d/90-cxlctl.conf", *(["/etc/tmpfiles.d/90-cxlctl.conf"] if demotion else [])]
    files.append("/var/lib/cxlctl/active-profile")
    assert res["persisted"] == files
    conf = _read(root, "/etc/sysctl.d/90-cxlctl.conf")
    assert "vm.zone_reclaim_mode = 0" in conf and "vm.swappiness = 10" in conf
    if os.path.exists(root + "/proc/sys/kernel/numa_balancing"):
        assert "kernel.numa_balancing = 2" in conf
    assert "demotion" not in conf  # a sysfs knob: tmpfiles.d's, not sysctl.d's
    active = json.loads(_read(root, "/var/lib/cxlctl/active-profile"))
    assert active["profile"] == "inference-capacity"
    st = _json(["--root", root, "tune", "status"])
    assert st["persisted"]["profile"] == "inference-capacity"
    assert st["persisted"]["tmpfiles_file"] == ("/etc/tmpfiles.d/90-cxlctl.conf" if demotion else None)
    rev = _json(["--root", root, "tune", "revert"])
    assert sorted(rev["removed"]) == sorted(files)
    assert diff(before, snapshot(root)) == []


@pytest.mark.parametrize("source", ["linux-6.12/hmat2-region", "linux-7.x/hmat2-region"])
def test_persist_carries_demotion_to_boot_in_tmpfiles_d(source: str, tmp_path: Any, capsys: Any) -> None:
    """Issue 35 row 13: with --persist and no daemon, numa_balancing=2 came back at boot (sysctl.d) but
    demotion did not (a sysfs file). Now a tmpfiles.d ``w`` line writes it at boot, under --root; the
    knobs no boot file can carry (weights) are named at apply time with the daemon that restores them;
    `tune status` shows the file and `tune revert` removes it."""
    root = work_copy(source, str(tmp_path / "root"))
    before = snapshot(root)
    rc = run(["--root", root, "tune", "apply", "inference-bandwidth", "--persist"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    tmpfiles = _read(root, "/etc/tmpfiles.d/90-cxlctl.conf")
    lines = [x for x in tmpfiles.splitlines() if x and not x.startswith("#")]
    assert "w /sys/kernel/mm/numa/demotion_enabled - - - - 1" in lines, tmpfiles
    for line in lines:  # tmpfiles.d(5): Type Path Mode User Group Age Argument; w takes no mode or owner
        typ, path, mode, user, group, age, arg = line.split(" ")
        assert (typ, mode, user, group, age) == ("w", "-", "-", "-", "-") and path.startswith("/sys/") and arg
        assert os.path.exists(root + path), path
    assert f"persisted:{root}/etc/tmpfiles.d/90-cxlctl.conf" in "".join(out.out.split())  # (a long root folds)
    said = " ".join((out.out + out.err).split())
    assert "weighted_interleave: in no boot file" in said, said
    assert "`sudo systemctl enable --now cxlctl.service`" in said
    st = _json(["--root", root, "tune", "status"])
    assert st["persisted"]["tmpfiles_file"] == "/etc/tmpfiles.d/90-cxlctl.conf"
    assert run(["--root", root, "tune", "status"]) == 0
    assert "/etc/tmpfiles.d/90-cxlctl.conf" in capsys.readouterr().out
    assert run(["--root", root, "tune", "revert"]) == 0
    capsys.readouterr()
    assert not os.path.exists(root + "/etc/tmpfiles.d/90-cxlctl.conf")
    assert diff(before, snapshot(root)) == []


def test_persist_restores_an_existing_file(tmp_path: Any, capsys: Any) -> None:
    root = work_copy(LIVE, str(tmp_path / "root"))
    os.makedirs(root + "/etc/sysctl.d")
    with open(root + "/etc/sysctl.d/90-cxlctl.conf", "w") as f:
        f.write("# hand-made\nvm.swappiness = 33\n")
    before = snapshot(root)
    assert run(["--root", root, "tune", "apply", "latency-strict", "--persist"]) == 0
    assert "hand-made" not in _read(root, "/etc/sysctl.d/90-cxlctl.conf")
    assert run(["--root", root, "tune", "revert"]) == 0
    capsys.readouterr()
    assert diff(before, snapshot(root)) == []


def _put(root: str, path: str, text: str) -> None:
    os.makedirs(os.path.dirname(root + path), exist_ok=True)
    with open(root + path, "w") as f:
        f.write(text)


def test_conflicts_with_tuned_and_sysctl_d(tmp_path: Any, capsys: Any) -> None:
    root = work_copy(LIVE, str(tmp_path / "root"))
    _put(root, "/etc/tuned/active_profile", "hpc-compute\n")  # stock profile, its file not installed
    _put(root, "/etc/sysctl.d/10-early.conf", "vm.zone_reclaim_mode=1\n")
    _put(root, "/etc/sysctl.d/99-late.conf", "# admin\n-vm/swappiness = 60\nnet.core.somaxconn = 1024\n")
    plan = _json(["--root", root, "tune", "plan", "inference-bandwidth"])["plan"]
    got = {(c["key"], c["source"].split(" (")[0], c["wins_at_boot"].split(" (")[0]) for c in plan["conflicts"]}
    assert got == {
        ("vm.zone_reclaim_mode", "/etc/sysctl.d/10-early.conf", "/etc/sysctl.d/10-early.conf"),
        ("vm.swappiness", "/etc/sysctl.d/99-late.conf", "/etc/sysctl.d/99-late.conf"),
        ("vm.zone_reclaim_mode", "TuneD profile hpc-compute", "TuneD profile hpc-compute"),
        ("kernel.numa_balancing", "TuneD profile hpc-compute", "TuneD profile hpc-compute"),
    }
    plan = _json(["--root", root, "tune", "plan", "inference-bandwidth", "--persist"])["plan"]
    wins = {(c["key"], c["source"].split(" (")[0]): c["wins_at_boot"] for c in plan["conflicts"]}
    assert wins[("vm.zone_reclaim_mode", "/etc/sysctl.d/10-early.conf")] == "cxlctl"  # 90- sorts after 10-
    assert wins[("vm.swappiness", "/etc/sysctl.d/99-late.conf")] == "/etc/sysctl.d/99-late.conf"
    assert wins[("kernel.numa_balancing", "TuneD profile hpc-compute")] == "cxlctl"  # reapply_sysctl=1
    # a real TuneD profile file with an include is parsed; reapply_sysctl=0 makes TuneD win
    _put(root, "/etc/tuned/active_profile", "mine\n")
    _put(root, "/etc/tuned/tuned-main.conf", "reapply_sysctl = 0\n")
    _put(root, "/usr/lib/tuned/profiles/base/tuned.conf", "[sysctl]\nvm.swappiness=30\n")
    _put(root, "/etc/tuned/profiles/mine/tuned.conf", "[main]\ninclude=base\n[sysctl]\nkernel.numa_balancing=1\n")
    plan = _json(["--root", root, "tune", "plan", "inference-bandwidth", "--persist"])["plan"]
    tuned = {c["key"]: c for c in plan["conflicts"] if c["source"].startswith("TuneD")}
    assert set(tuned) == {"vm.swappiness", "kernel.numa_balancing"}
    assert tuned["vm.swappiness"]["theirs"] == "30" and tuned["kernel.numa_balancing"]["theirs"] == "1"
    assert all(c["wins_at_boot"].startswith("TuneD") for c in tuned.values())
    assert run(["--root", root, "tune", "plan", "inference-bandwidth"]) == 0
    assert "Other configuration setting the same keys" in capsys.readouterr().out


def test_second_apply_waits_then_refuses_naming_the_holder(tmp_path: Any, capsys: Any) -> None:
    root = work_copy(LIVE, str(tmp_path / "root"))
    before = snapshot(root)
    holder_code = (
        "import fcntl, os, sys, time\n"
        "p = sys.argv[1] + '/run/cxlctl/lock'\n"
        "os.makedirs(os.path.dirname(p), exist_ok=True)\n"
        "fd = os.open(p, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "os.ftruncate(fd, 0); os.write(fd, b'%d\\n' % os.getpid())\n"
        "print('locked', flush=True)\n"
        "time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", holder_code, root], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        t0 = time.monotonic()
        rc = run(["--root", root, "tune", "apply", "t-everything", "--wait", "0.3"])
        waited = time.monotonic() - t0
        err = capsys.readouterr().err
        assert rc == EXIT_LOCKED, err
        assert f"pid {holder.pid}" in err and "waited 0.3 s" in err
        assert 0.25 <= waited < 5
        assert run(["--root", root, "tune", "revert", "--wait", "0"]) == EXIT_LOCKED
        st = _json(["--root", root, "tune", "status"])
        assert st["lock"] == {"held": True, "holder_pid": holder.pid}
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert diff(before, snapshot(root)) == [] and journal_absent(root)
    # the kernel dropped the dead holder's lock: the next apply proceeds at once
    assert run(["--root", root, "tune", "apply", "t-everything", "--wait", "0"]) == 0


def journal_absent(root: str) -> bool:
    return not os.path.exists(root + jn.JOURNAL)


def test_journal_of_another_boot_is_discarded(tmp_path: Any, capsys: Any) -> None:
    root = work_copy(LIVE, str(tmp_path / "root"))
    write_boot_id(root, "11111111-aaaa")
    assert run(["--root", root, "tune", "apply", "t-everything"]) == 0
    assert journal(root).boot_id == "11111111-aaaa"
    after_apply = snapshot(root)
    write_boot_id(root, "22222222-bbbb")  # "reboot" (the tree keeps the applied values)
    after_apply = snapshot(root)
    st = _json(["--root", root, "tune", "status"])
    assert st["active_profile"] is None and not st["journal"]["this_boot"]
    assert any("earlier boot" in m for m in st["messages"])
    assert run(["--root", root, "tune", "verify"]) == EXIT_USAGE
    capsys.readouterr()
    rev = _json(["--root", root, "tune", "revert"])
    assert rev["ok"] and not rev["results"]
    assert any("discarded the tuning journal of an earlier boot" in m for m in rev["messages"])
    assert journal_absent(root)
    assert diff(after_apply, snapshot(root)) == []  # nothing "restored" from another boot
    # apply after a reboot discards too, and records the new boot id
    write_boot_id(root, "11111111-aaaa")
    assert run(["--root", root, "tune", "apply", "latency-strict"]) == 0
    write_boot_id(root, "33333333-cccc")
    res = _json(["--root", root, "tune", "apply", "latency-strict"])
    assert any("earlier boot" in m for m in res["messages"])
    assert journal(root).boot_id == "33333333-cccc"


def test_interrupted_apply_blocks_apply_until_revert(tmp_path: Any, capsys: Any) -> None:
    root = work_copy(LIVE, str(tmp_path / "root"))
    before = snapshot(root)
    assert run(["--root", root, "tune", "apply", "t-everything"]) == 0
    j = journal(root)
    jn.save(Host(root), j._replace(state=jn.APPLYING, finished=None, pid=999999))  # as a killed apply leaves it
    assert run(["--root", root, "tune", "apply", "latency-strict"]) == EXIT_FAILURE
    err = capsys.readouterr().err
    assert "interrupted" in err and "tune revert" in err
    st = _json(["--root", root, "tune", "status"])
    assert st["journal"]["state"] == "applying" and st["active_profile"] is None
    rev = _json(["--root", root, "tune", "revert"])
    assert any("interrupted apply" in m for m in rev["messages"])
    assert diff(before, snapshot(root)) == []


def test_nothing_to_revert(tmp_path: Any, capsys: Any) -> None:
    root = work_copy(LIVE, str(tmp_path / "root"))
    rev = _json(["--root", root, "tune", "revert"])
    assert rev["ok"] and rev["messages"] == ["nothing to revert: no tuning journal"]
    assert run(["--root", root, "tune", "apply", "latency-strict"]) == 0
    assert run(["--root", root, "tune", "revert"]) == 0
    capsys.readouterr()
    rev = _json(["--root", root, "tune", "revert"])
    assert rev["messages"] == ["nothing to revert: it was already reverted"]


def test_dry_run_writes_nothing(tmp_path: Any, capsys: Any) -> None:
    root = work_copy(LIVE, str(tmp_path / "root"))
    before = snapshot(root)
    res = _json(["--root", root, "tune", "apply", "t-everything", "--dry-run"])
    assert res["dry_run"] and res["plan"]["changes"] > 0 and res["results"] == []
    assert run(["--root", root, "tune", "apply", "t-everything", "--dry-run"]) == 0
    assert "nothing was written" in capsys.readouterr().out
    assert diff(before, snapshot(root)) == [] and journal_absent(root)


def _can_unshare() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="needs root and `unshare -m` (a private mount namespace)")
def test_unwritable_targets_refuse_before_writing(tmp_path: Any) -> None:
    """A read-only tree: apply/revert refuse up front, saying read-only (not "run it as root", which
    the root running this would already be); plan/verify/status work."""
    root = work_copy(LIVE, str(tmp_path / "root"))
    assert run(["--root", root, "tune", "apply", "t-everything"]) == 0
    applied = snapshot(root)
    script = (
        f'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 99\n'
        f"cd {REPO}\n"
        'for c in "tune apply latency-strict" "tune revert" "tune plan latency-strict" "tune verify" "tune status"; do\n'
        f'  {sys.executable} -m cxlctl --root "$1" $c >/dev/null 2>"$2.err"; echo "$c=$?"; cat "$2.err"\n'
        "done\n"
    )
    p = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", root, str(tmp_path / "o")], capture_output=True, text=True
    )
    assert p.returncode != 99, p.stderr
    out = p.stdout
    assert "tune apply latency-strict=1" in out and "tune revert=1" in out, out
    assert out.count("read-only file system; nothing was changed") == 2 and "run it as root" not in out
    assert "tune plan latency-strict=0" in out and "tune verify=0" in out and "tune status=0" in out
    assert diff(applied, snapshot(root)) == []


def test_live_system_needs_cap_sys_admin_for_numa_balancing() -> None:
    """On root '/', numa_balancing needs CAP_SYS_ADMIN even for uid 0 (checked, never written here)."""
    if shutil.which("setpriv") is None or os.geteuid() != 0:
        pytest.skip("needs root and setpriv")
    code = (
        "from cxlctl.tuning.engine import preflight\n"
        "from cxlctl.errors import CxlctlError\n"
        "from cxlctl.hostio.host import Host\n"
        "try:\n"
        "    preflight(Host('/'), [], {'kernel.numa_balancing'}, 'apply')\n"
        "except CxlctlError as e:\n"
        "    print(e.render())\n"
        "else:\n"
        "    print('allowed')\n"
    )
    p = subprocess.run(
        ["setpriv", "--bounding-set=-sys_admin", "--inh-caps=-sys_admin", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert "needs CAP_SYS_ADMIN" in p.stdout, p.stdout + p.stderr
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert p.stdout.strip() == "allowed"


def test_human_output_of_every_command(tmp_path: Any, capsys: Any) -> None:
    root = work_copy(LIVE, str(tmp_path / "root"))
    for args, want in (
        (("tune", "list"), "inference-bandwidth"),
        (("tune", "show", "inference-capacity"), "includes: cxl-common"),
        (("tune", "recommend"), "recommended:"),
        (("tune", "plan", "t-everything"), "change"),
        (("tune", "apply", "t-everything"), "undo with: cxlctl tune revert"),
        (("tune", "status"), "active profile: t-everything"),
        (("tune", "verify"), "pass"),
        (("tune", "revert"), "reverted t-everything"),
    ):
        capsys.readouterr()
        assert run(["--root", root, *args]) == 0, (args, capsys.readouterr().err)
        out = capsys.readouterr()
        assert want in out.out, (args, out.out)
        assert "Traceback" not in out.err


def test_default_profile_is_the_active_one(tmp_path: Any, capsys: Any) -> None:
    root = work_copy(LIVE, str(tmp_path / "root"))
    assert _json(["--root", root, "tune", "plan"])["plan"]["profile"] == "inference-bandwidth"
    assert run(["--root", root, "tune", "apply", "t-everything"]) == 0
    capsys.readouterr()
    assert _json(["--root", root, "tune", "plan"])["plan"]["profile"] == "t-everything"


def test_prepare_is_read_only(tmp_path: Any) -> None:
    root = work_copy(LIVE, str(tmp_path / "root"))
    before = snapshot(root)
    for p in PROFILES:
        engine.prepare(Host(root), p)
    assert diff(before, snapshot(root)) == []


def test_verify_a_profile_while_another_is_applied(tmp_path: Any, capsys: Any) -> None:
    """`verify PROFILE` compares with that profile alone (no 'restore' rows from the applied one)."""
    root = work_copy(LIVE, str(tmp_path / "root"))
    assert run(["--root", root, "tune", "apply", "t-everything"]) == 0
    ver = _json(["--root", root, "tune", "verify", "t-everything"])
    assert ver["summary"]["drift"] == 0
    ver = _json(["--root", root, "tune", "verify", "cxl-common"], rc=EXIT_DRIFT)
    assert {c["setting"] for c in ver["checks"]} == {"vm.zone_reclaim_mode", "vm.swappiness"}


def _cxl_wi_sources() -> List[str]:
    """Recorded trees with a CXL NUMA node and weighted-interleave weight files."""
    out = []
    for s in SOURCES:
        if s == LIVE:
            continue
        root = os.path.join(REPO, "fixtures", s)
        wi = root + "/sys/kernel/mm/mempolicy/weighted_interleave"
        if os.path.isdir(wi) and len(os.listdir(wi)) >= 2 and any(n.kind == "cxl" for n in scan(Host(root)).nodes):
            out.append(s)
    return out


@pytest.mark.parametrize("auto_name", ["auto", "__auto_type"])
def test_weights_and_auto_are_one_group(auto_name: str, tmp_path: Any, capsys: Any) -> None:
    """On a recorded CXL tree with the 6.16 `auto` file added: writing weights saves and
    restores the whole group, weights first and auto last."""
    srcs = _cxl_wi_sources()
    if not srcs:
        pytest.skip("no recorded tree with a CXL node and weighted interleave")
    root = work_copy(srcs[0], str(tmp_path / "root"))
    wi = "/sys/kernel/mm/mempolicy/weighted_interleave"
    _put(root, f"{wi}/{auto_name}", "true\n")  # a 6.16+ kernel in auto mode
    before = snapshot(root)
    res = _json(["--root", root, "tune", "apply", "t-ratio"])
    assert res["ok"]
    inv = scan(Host(root))
    dram = [n.id for n in inv.nodes if n.kind == "dram"]
    cxl = [n.id for n in inv.nodes if n.kind == "cxl"]
    for n in dram:
        assert _read(root, f"{wi}/node{n}") == "3\n"
    for n in cxl:
        assert _read(root, f"{wi}/node{n}") == "1\n"
    assert _read(root, f"{wi}/{auto_name}") == "false\n"
    entries = [e for e in journal(root).entries if e.knob == "weighted_interleave"]
    assert entries[-1].setting == "weighted_interleave.auto" and entries[-1].original == "true\n"
    assert {e.path for e in entries} == {f"{wi}/{n}" for n in os.listdir(root + wi)}
    assert run(["--root", root, "tune", "revert"]) == 0
    assert diff(before, snapshot(root)) == []
    # no bandwidth data in QEMU: inference-bandwidth leaves the group alone (auto stays on)
    res = _json(["--root", root, "tune", "apply", "inference-bandwidth"])
    wis = [s for s in res["plan"]["steps"] if s["knob"] == "weighted_interleave"]
    assert [s["action"] for s in wis] == ["skip"] and "no bandwidth data" in wis[0]["note"]
    assert _read(root, f"{wi}/{auto_name}") == "true\n"


def test_corrupt_journal_is_reported_not_guessed(tmp_path: Any, capsys: Any) -> None:
    root = work_copy(LIVE, str(tmp_path / "root"))
    _put(root, jn.JOURNAL, '{"schema": 1, "state": "appl')  # torn by hand (cxlctl writes atomically)
    before = snapshot(root)
    for args in (["tune", "status"], ["tune", "apply", "latency-strict"], ["tune", "revert"], ["tune", "verify"]):
        assert run(["--root", root, *args]) == EXIT_FAILURE, args
        err = capsys.readouterr().err
        assert "tuning journal" in err and "unreadable" in err and "Traceback" not in err, err
    assert diff(before, snapshot(root)) == []
