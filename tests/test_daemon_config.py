"""/etc/cxlctl/cxlctl.toml: defaults, every key, and strict errors naming file, key and reason."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from cxlctl.config import SCHEMA, ConfigError, defaults, load, validate
from cxlctl.hostio.host import Host
from tests.kit import cli

FULL = """
profile = "inference-capacity"
[reconcile]
debounce_ms = 250
max_delay_ms = 2000
rescan_interval = 120
receive_buffer_mib = 256
online_new_memory = false
lock_wait = 2.5
[drift]
interval = 30
action = "reapply"
[shutdown]
rollback = true
[metrics]
listen = "[::1]:9999"
textfile_dir = "/var/lib/node_exporter/textfile_collector/"
[nfd]
enabled = false
dir = "/srv/features.d"
namespace = "cxl.example.com"
[health]
enabled = true
interval = 600
command = "/usr/local/bin/cxl"
timeout = 5
[log]
level = "debug"
[capacity]
adopt = "devdax"
zone = "normal"
"""


def _root(tmp_path: Any, text: str = "") -> str:
    root = str(tmp_path / "root")
    os.makedirs(root + "/etc/cxlctl", exist_ok=True)
    os.makedirs(root + "/proc", exist_ok=True)  # a host's tree: --root refuses one without sys/ and proc/
    if text:
        with open(root + "/etc/cxlctl/cxlctl.toml", "w") as f:
            f.write(text)
    return root


def test_defaults_without_a_file(tmp_path: Any) -> None:
    root = _root(tmp_path)
    p = cli("--root", root, "daemon", "config", "--json", check=True)
    doc = json.loads(p.stdout)
    assert doc["source"] is None and doc["profile"] is None
    assert doc["debounce"] == 0.5 and doc["rescan_interval"] == 300 and doc["receive_buffer"] == 128 << 20
    assert doc["drift_action"] == "report" and doc["rollback_on_exit"] is False
    assert doc["metrics_listen"] == "127.0.0.1:9860" and doc["nfd_enabled"] is True
    assert defaults() == load(Host(root))


def test_every_key(tmp_path: Any) -> None:
    root = _root(tmp_path, FULL)
    c = load(Host(root))
    assert c.source == root + "/etc/cxlctl/cxlctl.toml"
    assert c.profile == "inference-capacity"
    assert (c.debounce, c.max_delay, c.rescan_interval, c.receive_buffer) == (0.25, 2.0, 120.0, 256 << 20)
    assert c.online_new_memory is False and c.lock_wait == 2.5
    assert (c.drift_interval, c.drift_action, c.rollback_on_exit) == (30.0, "reapply", True)
    assert c.metrics_listen == ("::1", 9999) and c.textfile_dir == "/var/lib/node_exporter/textfile_collector"
    assert (c.nfd_enabled, c.nfd_dir, c.nfd_namespace) == (False, "/srv/features.d", "cxl.example.com")
    assert (c.health_interval, c.health_command, c.health_timeout, c.log_level) == (
        600.0,
        "/usr/local/bin/cxl",
        5.0,
        "debug",
    )
    assert (c.adopt, c.adopt_zone) == ("devdax", "normal")
    assert (defaults().adopt, defaults().adopt_zone) == ("system-ram", "movable")
    # the schema and the documentation list the same keys
    with open(os.path.join(os.path.dirname(__file__), "..", "docs", "daemon.md")) as f:
        doc = f.read()
    for sect, keys in SCHEMA.items():
        for k in keys:
            assert f"`{k}`" in doc, f"docs/daemon.md does not describe {sect}.{k}"


BAD = [
    ("profle = 'x'\n", "profle", "unknown key"),
    ("[reconcile]\ndebounce = 5\n", "reconcile.debounce", "unknown key (allowed: debounce_ms"),
    ("[reconcil]\n", "reconcil", "unknown key"),
    ("reconcile = 3\n", "reconcile", "must be a table"),
    ("[reconcile]\ndebounce_ms = 1\n", "reconcile.debounce_ms", "out of range"),
    ("[reconcile]\ndebounce_ms = 0.5\n", "reconcile.debounce_ms", "must be an integer"),
    ("[reconcile]\ndebounce_ms = 900\nmax_delay_ms = 800\n", "reconcile.max_delay_ms", "at least debounce_ms"),
    ("[reconcile]\nonline_new_memory = 1\n", "reconcile.online_new_memory", "true or false"),
    ("[reconcile]\nrescan_interval = 2\n", "reconcile.rescan_interval", "or 0 to turn it off"),
    ("[drift]\naction = 'fix'\n", "drift.action", "'report', 'reapply'"),
    ("[drift]\ninterval = '60'\n", "drift.interval", "must be a number"),
    ("[shutdown]\nrollback = 'no'\n", "shutdown.rollback", "true or false"),
    ("[metrics]\nlisten = '0.0.0.0:9860'\n", "metrics.listen", "not a loopback address"),
    ("[metrics]\nlisten = 'localhost:9860'\n", "metrics.listen", "must be an IP address"),
    ("[metrics]\nlisten = '127.0.0.1'\n", "metrics.listen", "HOST:PORT"),
    ("[metrics]\nlisten = '127.0.0.1:70000'\n", "metrics.listen", "HOST:PORT"),
    ("[metrics]\ntextfile_dir = 'relative/dir'\n", "metrics.textfile_dir", "absolute path"),
    ("[metrics]\ntextfile_dir = '/var/../etc'\n", "metrics.textfile_dir", "without '..'"),
    ("[nfd]\nnamespace = 'Not_A_Domain'\n", "nfd.namespace", "DNS subdomain"),
    ("[nfd]\ndir = ''\n", "nfd.dir", "must be set"),
    ("[health]\ncommand = 'cxl list'\n", "health.command", "without spaces"),
    ("[health]\ntimeout = 0\n", "health.timeout", "out of range"),
    ("[log]\nlevel = 'verbose'\n", "log.level", "'debug'"),
    ("profile = 'bad name!'\n", "profile", "not a profile name"),
    ("[capacity]\nadopt = 'yes'\n", "capacity.adopt", "'system-ram', 'devdax', 'none'"),
    ("[capacity]\nadopt = true\n", "capacity.adopt", "'system-ram', 'devdax', 'none'"),
    ("[capacity]\nzone = 'kernel'\n", "capacity.zone", "'movable', 'normal'"),
    (
        "[capacity]\nonline = 'movable'\n",
        "capacity.online",
        "unknown key (allowed: adopt, zone, pool_member, adopt_serials, pinnable)",
    ),
    ("[capacity]\nadopt_serials = 'some'\n", "capacity.adopt_serials", 'must be "any" or a list of memdev serials'),
    ("[capacity]\nadopt_serials = ['x12']\n", "capacity.adopt_serials", "a serial must be an integer"),
    ("[drift\n", None, "invalid TOML"),
]


@pytest.mark.parametrize("text,key,reason", BAD, ids=[b[1] or "toml" for b in BAD])
def test_bad_configuration_exits_2_naming_file_key_reason(
    tmp_path: Any, capsys: Any, text: str, key: str, reason: str
) -> None:
    from cxlctl.cli import run

    root = _root(tmp_path, text)
    rc = run(["--root", root, "daemon", "config"])
    out = capsys.readouterr()
    assert rc == 2, out
    assert out.out == ""
    first = out.err.splitlines()[0]
    path = root + "/etc/cxlctl/cxlctl.toml"
    # the line of the key (or of the parser's error): every BAD text puts it on its last line
    want = f"cxlctl: error: bad configuration {path}: line {text.count(chr(10))}: " + (f"{key}: " if key else "")
    assert first.startswith(want), first
    assert reason in first, first
    assert "Traceback" not in out.err and "hint: see docs/daemon.md" in out.err


def test_every_problem_is_reported_each_with_its_line(tmp_path: Any, capsys: Any) -> None:
    """Issue 35 row 12: all the file's problems in one message, in file order, each with its line."""
    from cxlctl.cli import run

    text = (
        "# fleet configuration\n"
        "[drift]\n"
        "acton = 'reapply'\n"  # line 3: a typo
        "interval = 0.5\n"  # line 4: out of range
        "[health]\n"
        "timeout = 0\n"  # line 6
        "[nfd]\n"
        "namespace = 'Not_A_Domain'\n"  # line 8
        "[bogus]\n"  # line 9
        "x = 1\n"
    )
    root = _root(tmp_path, text)
    rc = run(["--root", root, "daemon", "config"])
    out = capsys.readouterr()
    assert rc == 2 and out.out == ""
    first = out.err.splitlines()[0]
    assert first.startswith(f"cxlctl: error: bad configuration {root}/etc/cxlctl/cxlctl.toml: line 3: drift.acton: ")
    for want in (
        "; line 4: drift.interval: 0.5 is out of range",
        "; line 6: health.timeout: 0 is out of range",
        "; line 8: nfd.namespace: must be a DNS subdomain",
        "; line 9: bogus: unknown key",
    ):
        assert want in first, (want, first)
    assert first.index("line 4:") < first.index("line 6:") < first.index("line 8:") < first.index("line 9:")
    with pytest.raises(ConfigError) as e:
        load(Host(root))
    assert [(ln, k) for ln, k, _ in e.value.problems] == [
        (3, "drift.acton"),
        (4, "drift.interval"),
        (6, "health.timeout"),
        (8, "nfd.namespace"),
        (9, "bogus"),
    ]


def test_a_bad_profile_is_reported_with_the_other_problems(tmp_path: Any) -> None:
    root = _root(tmp_path, "profile = 'no-such-profile'\n[log]\nlevel = 'loud'\n")
    with pytest.raises(ConfigError) as e:
        load(Host(root))
    assert [(ln, k) for ln, k, _ in e.value.problems] == [(1, "profile"), (3, "log.level")]
    assert "cannot use profile 'no-such-profile'" in str(e.value)


def test_remote_listen_needs_allow_remote() -> None:
    c = validate("x", {"metrics": {"listen": "0.0.0.0:9860", "allow_remote": True}})
    assert c.metrics_listen == ("0.0.0.0", 9860)
    assert validate("x", {"metrics": {"listen": ""}}).metrics_listen is None
    with pytest.raises(ConfigError) as e:
        validate("x", {"metrics": {"listen": "[::]:1"}})
    assert e.value.key == "metrics.listen" and e.value.code == 2


def test_explicit_file_must_exist_and_daemon_run_refuses_bad_config(tmp_path: Any) -> None:
    root = _root(tmp_path)
    p = cli("--root", root, "daemon", "config", "--config", str(tmp_path / "nope.toml"))
    assert p.returncode == 2 and "nope.toml: no such file" in p.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[drift]\naction = 'sometimes'\n")
    before = sorted(os.listdir(root))
    p = cli("--root", root, "daemon", "run", "--once", "--config", str(bad))
    assert p.returncode == 2 and "drift.action" in p.stderr
    assert sorted(os.listdir(root)) == before, "a refused configuration must write nothing"
