"""Issue 43, item 9: root's writes, profiles, tools and test hooks cannot be turned by a local user.

``atomic_write`` writes live-host files as root (sysctl.d, the journal, metrics): a link at
the destination or a file planted at a predictable temporary name must not redirect it.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from cxlctl.errors import UsageError
from cxlctl.hostio import atomic


def test_atomic_write_refuses_a_symlinked_destination(tmp_path: Any) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    d = tmp_path / "etc"
    d.mkdir()
    os.symlink(str(victim), str(d / "cxlctl.conf"))
    with pytest.raises(UsageError, match="symbolic link"):
        atomic.atomic_write("/", str(d / "cxlctl.conf"), "owned\n")
    assert victim.read_text() == "precious\n"
    assert os.path.islink(str(d / "cxlctl.conf"))
    assert os.listdir(str(d)) == ["cxlctl.conf"]  # no temporary file left behind


def test_atomic_write_temp_name_is_not_predictable(tmp_path: Any, monkeypatch: Any) -> None:
    """A file planted at the old predictable name (``.NAME.PID.tmp``), or a link there, is
    neither written through nor renamed into place; the write still succeeds."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    d = tmp_path / "run"
    d.mkdir()
    planted = d / f".state.{os.getpid()}.tmp"
    os.symlink(str(victim), str(planted))
    seen = []
    real_open = os.open

    def spy(path: Any, flags: int, *a: Any, **kw: Any) -> int:
        if "dir_fd" in kw and str(path).startswith(".state."):
            seen.append((str(path), flags))
        return real_open(path, flags, *a, **kw)

    monkeypatch.setattr(os, "open", spy)
    atomic.atomic_write("/", str(d / "state"), "new\n")
    assert (d / "state").read_text() == "new\n"
    assert victim.read_text() == "precious\n"
    assert sorted(os.listdir(str(d))) == sorted(["state", planted.name])
    ((name, flags),) = seen
    assert name != planted.name and flags & os.O_EXCL and flags & os.O_NOFOLLOW
    # two writes never reuse a name
    seen.clear()
    atomic.atomic_write("/", str(d / "state"), "again\n")
    assert seen[0][0] != name


# ------------------------------------------------------------------ profiles


def test_a_relative_include_is_relative_to_the_including_file(tmp_path: Any, monkeypatch: Any) -> None:
    """``include = "base/parent.toml"`` names the file beside the including one, whatever the
    current directory holds (a planted ``base/parent.toml`` there is not read)."""
    from cxlctl.hostio.host import Host
    from cxlctl.tuning.profile import load

    pdir = tmp_path / "profiles"
    (pdir / "base").mkdir(parents=True)
    (pdir / "base" / "parent.toml").write_text('summary = "parent"\nknobs."vm.swappiness" = 10\n')
    (pdir / "child.toml").write_text('summary = "child"\ninclude = "base/parent.toml"\n')
    cwd = tmp_path / "elsewhere"
    (cwd / "base").mkdir(parents=True)
    (cwd / "base" / "parent.toml").write_text('summary = "planted"\nknobs."vm.swappiness" = 100\n')
    monkeypatch.chdir(cwd)
    p = load(Host("/"), str(pdir / "child.toml"))
    assert [s.value for s in p.settings if s.knob == "vm.swappiness"] == [10]
    assert str(pdir / "base" / "parent.toml") in p.chain


def test_the_persisted_profile_is_its_document_not_its_file(tmp_path: Any, capsys: Any) -> None:
    """``tune apply --persist FILE`` keeps the profile itself in ``active-profile``; after a reboot
    the daemon applies that, not whatever the file says by then."""
    import json

    from cxlctl.hostio.host import Host
    from tests.daemon_support import read, reboot_and_start, work_tree
    from tests.kit import cli
    from tests.tune_support import LIVE, pristine

    swappiness = "/proc/sys/vm/swappiness"
    root = work_tree(pristine(LIVE), str(tmp_path / "root"))
    before = read(root, swappiness)
    prof = tmp_path / "mine.toml"
    prof.write_text('summary = "mine"\nknobs."vm.swappiness" = 10\n')
    cli("--root", root, "tune", "apply", "--persist", str(prof), check=True, inprocess=True)
    with open(root + "/var/lib/cxlctl/active-profile") as f:
        doc = json.load(f)
    assert doc["document"] == {"summary": "mine", "knobs": {"vm.swappiness": 10}}
    prof.write_text('summary = "mine"\nknobs."vm.swappiness" = 100\n')  # changed after the apply
    capsys.readouterr()
    cap = reboot_and_start(root, swappiness, before)
    assert read(root, swappiness) == "10"
    assert cap.grep("enforcing profile mine (persisted by `tune apply --persist`)")
    assert Host(root).live is False


def test_as_root_a_profile_file_others_can_write_is_refused(tmp_path: Any) -> None:
    """On the live host as root, a profile (or an include) in a directory others can write is
    refused before it is applied (the daemon's load_target, and a persisted record without a
    document)."""
    if os.geteuid() != 0:
        pytest.skip("the check is root's")
    import tempfile

    from cxlctl.daemon.reconcile import Target, load_target
    from cxlctl.errors import CxlctlError
    from cxlctl.hostio.host import Host

    top = tempfile.mkdtemp(prefix="cxlctl-prof-", dir="/var/lib")
    try:
        os.chmod(top, 0o777)
        path = os.path.join(top, "mine.toml")
        with open(path, "w") as f:
            f.write('summary = "mine"\nknobs."vm.swappiness" = 10\n')
        with pytest.raises(CxlctlError, match="writable by others"):
            load_target(Host("/"), Target(path, "mine", "persisted", "test"))
        doc = {"summary": "mine", "include": os.path.join(top, "mine.toml")}
        with pytest.raises(CxlctlError, match="writable by others"):
            load_target(Host("/"), Target("/etc/cxlctl/profiles/mine.toml", "mine", "persisted", "test", doc))
        os.chmod(top, 0o755)
        assert load_target(Host("/"), Target(path, "mine", "persisted", "test")).name == "mine"
    finally:
        import shutil

        shutil.rmtree(top)


# ------------------------------------------------------------------ test hooks and tools


def test_test_hooks_are_ignored_on_the_live_host(tmp_path: Any, monkeypatch: Any) -> None:
    """``CXLCTL_TEST_FAULT_ATOMIC`` (any CXLCTL_TEST_* hook) makes a write fail on a ``--root`` tree
    with ``CXLCTL_TEST_HOOKS=1``; on the live host (no root-owned mark) or without the flag it is
    ignored."""
    from cxlctl.hostio import paths, testhooks

    if os.path.exists(paths.TEST_HOOKS_MARK):
        pytest.skip(f"{paths.TEST_HOOKS_MARK} exists: this machine says it is a test machine")
    monkeypatch.setenv("CXLCTL_TEST_HOOKS", "1")
    monkeypatch.setenv("CXLCTL_TEST_FAULT_ATOMIC", "state:1:EIO")
    atomic._FAULT_COUNT.clear()
    live = tmp_path / "live"
    atomic.atomic_write("/", str(live / "state"), "ok\n")  # "/" is the live host: not failed
    assert (live / "state").read_text() == "ok\n"
    tree = tmp_path / "tree"
    tree.mkdir()
    atomic._FAULT_COUNT.clear()
    with pytest.raises(OSError, match="Input/output"):
        atomic.atomic_write(str(tree), "/run/cxlctl/state", "x\n")
    assert testhooks.enabled(str(tree)) and not testhooks.enabled("/")
    monkeypatch.delenv("CXLCTL_TEST_HOOKS")
    atomic._FAULT_COUNT.clear()
    atomic.atomic_write(str(tree), "/run/cxlctl/state", "x\n")  # no flag: ignored under a tree too
    assert not testhooks.enabled(str(tree))


def test_as_root_tools_come_only_from_directories_root_alone_can_change(tmp_path: Any) -> None:
    """``sudo -E`` keeps a PATH with a directory others can write: a tool there is never run as
    root (the search goes on to the next directory), nor one found through a relative PATH entry."""
    if os.geteuid() != 0:
        pytest.skip("the rule is root's")
    import shutil
    import tempfile

    from cxlctl.hostio import tools

    top = tempfile.mkdtemp(prefix="cxlctl-tools-", dir="/var/lib")
    try:
        bin_dir = os.path.join(top, "bin")
        os.mkdir(bin_dir)
        marker = os.path.join(top, "ran")
        exe = os.path.join(bin_dir, "cxlctl-test-tool")
        with open(exe, "w") as f:
            f.write(f"#!/bin/sh\n/usr/bin/touch {marker}\necho fake\n")
        os.chmod(exe, 0o755)
        os.chmod(top, 0o777)
        with pytest.raises(tools.ToolError) as e:
            tools.run(["cxlctl-test-tool"], env={"PATH": bin_dir})
        assert e.value.kind == "missing" and not os.path.exists(marker)
        assert tools.which("cxlctl-test-tool", {"PATH": "."}) is None
        os.chmod(top, 0o755)
        assert tools.run(["cxlctl-test-tool"], env={"PATH": bin_dir}).stdout == "fake\n"
        assert os.path.exists(marker)
        assert tools.which("sh", {"PATH": f"relative/dir:{bin_dir}:/usr/bin"}) == "/usr/bin/sh"
    finally:
        shutil.rmtree(top)
