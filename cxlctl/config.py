"""The daemon's configuration: ``<root>/etc/cxlctl/cxlctl.toml``, validated strictly.

Why strict (the same reasoning as profiles): a typo such as ``[drift] acton =
"reapply"`` that is silently ignored leaves a fleet doing something else than
its operators believe.  Every unknown section or key, wrong type and
out-of-range value is an error naming the file, the key and the reason; the
daemon refuses to start with it (exit 2), and a SIGHUP with a bad file keeps
the configuration already running and logs why.

A missing file is fine: every key has a default (docs/daemon.md lists them).
Paths in the file are host paths; like every other path in cxlctl they are
resolved under ``--root``.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from cxlctl.errors import UsageError
from cxlctl.hostio import paths, toml
from cxlctl.hostio.host import Host
from cxlctl.namedrecord import NamedTuple
from cxlctl.parse import is_decimal

CONFIG_PATH = paths.CONFIG_PATH
NFD_DIR = paths.NFD_DIR
DEFAULT_LISTEN = "127.0.0.1:9860"
_PROFILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_LABEL_NS = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class ConfigError(UsageError):
    """A configuration that cannot be used: names the file and, for each problem, its line, key and reason (exit 2).

    Every problem of the file is in the one message (``line 3: drift.acton: …; line 9: …``), so an
    operator fixes the file in one pass instead of one daemon restart per typo.  ``key`` and
    ``reason`` are the first problem's; ``problems`` holds them all as (line, key, reason).
    """

    def __init__(
        self,
        where: str,
        key: Optional[str],
        reason: str,
        *,
        line: Optional[int] = None,
        more: Sequence[Tuple[Optional[int], Optional[str], str]] = (),
    ) -> None:
        self.problems: List[Tuple[Optional[int], Optional[str], str]] = [(line, key, reason), *more]
        parts = []
        for ln, k, r in self.problems:
            at = f"line {ln}: " if ln is not None else ""
            parts.append(f"{at}{k}: {r}" if k else f"{at}{r}")
        super().__init__(
            f"bad configuration {where}: " + "; ".join(parts), hint="see docs/daemon.md for every key and its default"
        )
        self.where = where
        self.key = key
        self.reason = reason
        self.line = line


class Config(NamedTuple):
    """Validated configuration; times in seconds, sizes in bytes."""

    source: Optional[str]  # file read, None = defaults only
    profile: Optional[str]  # fallback profile when none is persisted or applied this boot
    debounce: float
    max_delay: float
    rescan_interval: float  # 0 = no periodic safety rescan
    receive_buffer: int
    online_new_memory: bool
    lock_wait: float
    drift_interval: float  # 0 = no drift checks
    drift_action: str  # report | reapply
    rollback_on_exit: bool
    metrics_listen: Optional[Tuple[str, int]]  # None = no HTTP endpoint
    metrics_allow_remote: bool
    textfile_dir: Optional[str]
    nfd_enabled: bool
    nfd_dir: str
    nfd_namespace: str
    health_enabled: bool
    health_interval: float
    health_command: str
    health_timeout: float
    log_level: str
    #: seconds between tiering samples for the metrics (0 = none); cgroups exported per node
    telemetry_interval: float = 15.0
    telemetry_cgroups: Tuple[str, ...] = ()
    #: RAS (docs/ras.md): watch the cxl trace events; the action on poison in online memory
    ras_enabled: bool = True
    ras_poison_action: str = "none"  # none | soft-offline
    #: capacity that comes and goes (docs/capacity.md): what a hot-added memdev is built into
    #: (system-ram | devdax | none) and the zone its memory is onlined in (movable | normal)
    adopt: str = "system-ram"
    adopt_zone: str = "movable"
    #: a Prometheus web configuration file (TLS, basic auth) for the metrics endpoint (cxlctl/webconfig.py)
    metrics_web_config: Optional[str] = None
    #: a file that exists while the daemon is ready (start-up done, the metrics endpoint serving):
    #: a Kubernetes readiness probe's ``test -f``
    ready_file: Optional[str] = None
    #: whether this host takes capacity from a pool at all; the daemon adopts nothing unless it does
    adopt_pool_member: bool = False
    #: the serials it may adopt (``[capacity] adopt_serials``); ``adopt_any``: the operator's explicit "any"
    adopt_serials: Tuple[int, ...] = ()
    adopt_any: bool = False
    #: ``[capacity] pinnable``: bytes of CXL memory the host keeps in a kernel zone for long-term pinned KV
    #: offloads (capacity/pinnable.py decides each new region's zone from it); None: not set
    pinnable_target: Optional[int] = None


# ------------------------------------------------------------------------ value checks


def _num(lo: float, hi: float, *, integer: bool = False, zero_ok: bool = False) -> Callable[[Any], Any]:
    def check(v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
            raise ValueError(f"must be {'an integer' if integer else 'a number'}, got {v!r}")
        if zero_ok and v == 0:
            return v
        if not lo <= v <= hi:
            extra = " (or 0 to turn it off)" if zero_ok else ""
            raise ValueError(f"{v} is out of range (allowed {lo:g}-{hi:g}{extra})")
        return v

    return check


def _bool(v: Any) -> Any:
    if not isinstance(v, bool):
        raise ValueError(f"must be true or false, got {v!r}")
    return v


def _choice(*choices: str) -> Callable[[Any], Any]:
    def check(v: Any) -> Any:
        if v not in choices:
            raise ValueError(f"must be one of {', '.join(repr(c) for c in choices)}; got {v!r}")
        return v

    return check


def _abs_path(v: Any) -> Any:
    if not isinstance(v, str):
        raise ValueError(f"must be a string, got {v!r}")
    if v == "":
        return v
    if not v.startswith("/") or "\0" in v or "\n" in v or "/../" in v + "/":
        raise ValueError(f"must be an absolute path without '..', got {v!r}")
    return os.path.normpath(v)


def _profile(v: Any) -> Any:
    if not isinstance(v, str):
        raise ValueError(f"must be a profile name, got {v!r}")
    if v and not _PROFILE.match(v) and not v.startswith("/"):
        raise ValueError(f"{v!r} is not a profile name (letters, digits, . _ -) or an absolute path")
    return v


def _command(v: Any) -> Any:
    if not isinstance(v, str) or not v or any(c.isspace() for c in v):
        raise ValueError(f"must be a program name or absolute path without spaces, got {v!r}")
    return v


def _serials(v: Any) -> Any:
    """``"any"``, or a list of device serials (integers, or strings such as ``"0x5002"``) the daemon may adopt."""
    if v == "any":
        return "any"
    if not isinstance(v, list) or len(v) > 4096:
        raise ValueError(f'must be "any" or a list of memdev serials (0x5002 or 20482), got {v!r}')
    out = []
    for x in v:
        if isinstance(x, bool):
            raise ValueError(f"a serial must be an integer or a string such as '0x5002', got {x!r}")
        if isinstance(x, int) and x >= 0:
            out.append(x)
            continue
        if isinstance(x, str):
            try:
                out.append(int(x, 0))
                continue
            except ValueError:
                pass
        raise ValueError(f"a serial must be an integer or a string such as '0x5002', got {x!r}")
    return tuple(out)


def _size(v: Any) -> Any:
    """A size (``"16G"``, ``"512M"``, or bytes as an integer); ``""``: not set."""
    from cxlctl.parse import parse_size

    if v == "":
        return v
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return v
    if isinstance(v, str):
        try:
            return parse_size(v)
        except ValueError:
            pass
    raise ValueError(f'must be a size such as "16G" or "512M" (or bytes), got {v!r}')


def _cgroups(v: Any) -> Any:
    """A list of cgroup v2 names (``/system.slice/vllm.service``) for per-cgroup metrics."""
    from cxlctl.errors import UsageError
    from cxlctl.telemetry.sample import cgroup_name

    if not isinstance(v, list) or not all(isinstance(x, str) for x in v) or len(v) > 256:
        raise ValueError(f"must be a list of at most 256 cgroup paths, got {v!r}")
    try:
        return tuple(cgroup_name(x) for x in v)
    except UsageError as e:
        raise ValueError(str(e)) from None


def _namespace(v: Any) -> Any:
    if not isinstance(v, str) or len(v) > 253 or not _LABEL_NS.match(v):
        raise ValueError(f"must be a DNS subdomain such as feature.node.kubernetes.io, got {v!r}")
    return v


def parse_listen(v: Any) -> Optional[Tuple[str, int]]:
    """``"127.0.0.1:9860"`` / ``"[::1]:9860"`` → (host, port); ``""`` → None."""
    if not isinstance(v, str):
        raise ValueError(f"must be a string such as {DEFAULT_LISTEN!r}, got {v!r}")
    if v == "":
        return None
    host, sep, port = v.rpartition(":")
    if not sep or not is_decimal(port) or not 0 <= int(port) <= 65535:
        raise ValueError(f"must be HOST:PORT with a port 1-65535 (0: any free port), got {v!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        import ipaddress  # ~1 ms: only for a listen address

        ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"host must be an IP address (no names: no resolver at boot), got {host!r}") from None
    return host, int(port)


def _listen(v: Any) -> Any:
    parse_listen(v)
    return v


#: section → key → (check, default).  "" is the top level.
SCHEMA: Dict[str, Dict[str, Tuple[Callable[[Any], Any], Any]]] = {
    "": {"profile": (_profile, "")},
    "reconcile": {
        "debounce_ms": (_num(10, 60_000, integer=True), 500),
        "max_delay_ms": (_num(10, 600_000, integer=True), 5_000),
        "rescan_interval": (_num(5, 86_400, zero_ok=True), 300),
        "receive_buffer_mib": (_num(1, 1024, integer=True), 128),
        "online_new_memory": (_bool, True),
        "lock_wait": (_num(0, 60), 5),
    },
    "drift": {
        "interval": (_num(1, 86_400, zero_ok=True), 60),
        "action": (_choice("report", "reapply"), "report"),
    },
    "shutdown": {"rollback": (_bool, False)},
    "metrics": {
        "listen": (_listen, DEFAULT_LISTEN),
        "allow_remote": (_bool, False),
        "web_config": (_abs_path, ""),
        "ready_file": (_abs_path, ""),
        "textfile_dir": (_abs_path, ""),
        "telemetry_interval": (_num(1, 3600, zero_ok=True), 15),
        "cgroups": (_cgroups, ()),
    },
    "nfd": {
        "enabled": (_bool, True),
        "dir": (_abs_path, NFD_DIR),
        "namespace": (_namespace, "feature.node.kubernetes.io"),
    },
    "health": {
        "enabled": (_bool, True),
        "interval": (_num(10, 86_400), 300),
        "command": (_command, "cxl"),
        "timeout": (_num(1, 120), 10),
    },
    "log": {"level": (_choice("debug", "info", "warning", "error"), "info")},
    "ras": {
        "enabled": (_bool, True),
        "poison_action": (_choice("none", "soft-offline"), "none"),
    },
    "capacity": {
        "adopt": (_choice("system-ram", "devdax", "none"), "system-ram"),
        "zone": (_choice("movable", "normal"), "movable"),
        "pool_member": (_bool, False),
        "adopt_serials": (_serials, ()),
        "pinnable": (_size, ""),
    },
}


Problem = Tuple[Optional[str], str]  # (key, reason)


def _check(data: Dict[str, Any]) -> Tuple[Dict[str, Dict[str, Any]], List[Problem]]:
    """Every key checked: the values (defaults where a key is absent or bad) and every problem, in file order."""
    values: Dict[str, Dict[str, Any]] = {s: {k: d for k, (_, d) in keys.items()} for s, keys in SCHEMA.items()}
    bad: List[Problem] = []
    sections = [s for s in SCHEMA if s]
    for key, val in data.items():
        if key in SCHEMA[""]:
            table, sect = {key: val}, ""
        elif key in SCHEMA:
            if not isinstance(val, dict):
                bad.append((key, "must be a table ([" + key + "])"))
                continue
            table, sect = val, key
        else:
            bad.append((key, f"unknown key (allowed: profile and the tables {', '.join(sections)})"))
            continue
        for k, v in table.items():
            full = f"{sect}.{k}" if sect else k
            if k not in SCHEMA[sect]:
                bad.append((full, f"unknown key (allowed: {', '.join(SCHEMA[sect])})"))
                continue
            try:
                values[sect][k] = SCHEMA[sect][k][0](v)
            except ValueError as e:
                bad.append((full, str(e)))
    keys = {k for k, _ in bad}
    r, m = values["reconcile"], values["metrics"]
    if not keys & {"reconcile.debounce_ms", "reconcile.max_delay_ms"} and r["max_delay_ms"] < r["debounce_ms"]:
        bad.append(("reconcile.max_delay_ms", f"must be at least debounce_ms ({r['debounce_ms']})"))
    if not keys & {"metrics.listen", "metrics.allow_remote"}:
        listen = parse_listen(m["listen"])
        if listen is not None and not m["allow_remote"] and not _loopback(listen[0]) and not m["web_config"]:
            bad.append(
                (
                    "metrics.listen",
                    f"{listen[0]} is not a loopback address and no metrics.web_config gives the endpoint TLS "
                    "or authentication (set one, or metrics.allow_remote = true to expose it anyway)",
                )
            )
    cap_table = data.get("capacity")
    given: Dict[str, Any] = cap_table if isinstance(cap_table, dict) else {}
    if values["capacity"]["pinnable"] != "" and "zone" in given and "capacity.pinnable" not in keys:
        bad.append(
            (
                "capacity.zone",
                "pinnable is set: the host's pinnable share decides each new region's zone (capacity/pinnable.py); "
                "drop zone",
            )
        )
    n = values["nfd"]
    if "nfd.dir" not in keys and n["enabled"] and not n["dir"]:
        bad.append(("nfd.dir", "must be set when nfd.enabled is true"))
    return values, bad


def _raise(where: str, bad: List[Problem], text: Optional[str]) -> None:
    """:class:`ConfigError` with every problem, each with the line its key is on in ``text``."""
    lines = toml.key_lines(text) if text is not None else {}

    def line(key: Optional[str]) -> Optional[int]:
        while key:
            if key in lines:
                return lines[key]
            key = key.rpartition(".")[0]  # a key given as an inline table: the table's line
        return None

    located = sorted(((line(k), k, r) for k, r in bad), key=lambda p: (p[0] is None, p[0] or 0))
    (ln, k, r), *more = located
    raise ConfigError(where, k, r, line=ln, more=more)


def validate(
    where: str, data: Dict[str, Any], *, text: Optional[str] = None, host: Optional[Host] = None, web: bool = False
) -> Config:
    """Parsed TOML → :class:`Config`, or :class:`ConfigError` naming every problem (with its line when
    ``text``, the file's text, is given).  With ``host``, ``profile =`` must name a profile that loads;
    with ``web`` too, ``metrics.web_config`` must name a web configuration the daemon can use (its
    certificate and key readable: the daemon's start and reload, as root; not a user's ``daemon
    metrics``, which serves nothing and may not read root's key)."""
    values, bad = _check(data)
    if host is not None and values[""]["profile"] and not any(k == "profile" for k, _ in bad):
        reason = profile_problem(host, values[""]["profile"])
        if reason is not None:
            bad.append(("profile", reason))
    web_file = values["metrics"]["web_config"]
    if host is not None and web and web_file and not any(k == "metrics.web_config" for k, _ in bad):
        from cxlctl.webconfig import WebConfigError
        from cxlctl.webconfig import load as load_web

        try:  # a web configuration that cannot be used must stop the start (or the reload), not open the endpoint
            load_web(host.path(web_file))
        except WebConfigError as e:
            bad.append(("metrics.web_config", str(e)))
    if bad:
        _raise(where, bad, text)
    r, d, m = values["reconcile"], values["drift"], values["metrics"]
    listen = parse_listen(m["listen"])
    n, h = values["nfd"], values["health"]
    return Config(
        source=where if where != "<defaults>" else None,
        profile=values[""]["profile"] or None,
        debounce=r["debounce_ms"] / 1000.0,
        max_delay=r["max_delay_ms"] / 1000.0,
        rescan_interval=float(r["rescan_interval"]),
        receive_buffer=int(r["receive_buffer_mib"]) << 20,
        online_new_memory=r["online_new_memory"],
        lock_wait=float(r["lock_wait"]),
        drift_interval=float(d["interval"]),
        drift_action=d["action"],
        rollback_on_exit=values["shutdown"]["rollback"],
        metrics_listen=listen,
        metrics_allow_remote=m["allow_remote"],
        metrics_web_config=m["web_config"] or None,
        ready_file=m["ready_file"] or None,
        textfile_dir=m["textfile_dir"] or None,
        nfd_enabled=n["enabled"],
        nfd_dir=n["dir"],
        nfd_namespace=n["namespace"],
        health_enabled=h["enabled"],
        health_interval=float(h["interval"]),
        health_command=h["command"],
        health_timeout=float(h["timeout"]),
        log_level=values["log"]["level"],
        telemetry_interval=float(m["telemetry_interval"]),
        telemetry_cgroups=tuple(m["cgroups"]),
        ras_enabled=values["ras"]["enabled"],
        ras_poison_action=values["ras"]["poison_action"],
        adopt=values["capacity"]["adopt"],
        adopt_zone=values["capacity"]["zone"],
        adopt_pool_member=values["capacity"]["pool_member"],
        adopt_serials=()
        if values["capacity"]["adopt_serials"] == "any"
        else tuple(values["capacity"]["adopt_serials"]),
        adopt_any=values["capacity"]["adopt_serials"] == "any",
        pinnable_target=None if values["capacity"]["pinnable"] == "" else int(values["capacity"]["pinnable"]),
    )


def defaults() -> Config:
    return validate("<defaults>", {})


def load(host: Host, path: Optional[str] = None, *, web: bool = False, profile: bool = True) -> Config:
    """Read and validate the configuration; ``path`` (a real path) overrides ``<root>/etc/cxlctl/cxlctl.toml``.

    A missing default file means defaults; a missing explicit ``path`` is an error.  ``profile`` False: a
    ``profile =`` that does not load is not this reader's problem (a command that reads only ``[capacity]``).
    """
    explicit = path is not None
    file = path if path is not None else host.path(CONFIG_PATH)
    try:
        text = toml.load_text(file)
        data = toml.loads(text)
    except toml.TomlError as e:
        if e.missing and not explicit:
            return defaults()
        raise ConfigError(file, None, e.reason, line=e.line) from None
    return validate(file, data, text=text, host=host if profile else None, web=web)


def profile_problem(host: Host, ref: str) -> Optional[str]:
    """Why ``profile = ref`` cannot be used (it must name a profile that loads under ``host.root``), or None.

    A typo there would otherwise surface only as a reconcile that fails every pass
    while the daemon reports itself ready.
    """
    from cxlctl.tuning.profile import ProfileError
    from cxlctl.tuning.profile import load as load_profile

    try:
        load_profile(host, ref)
    except ProfileError as e:
        known = f" ({e.hint})" if e.hint.startswith("known profiles") else ""
        return f"cannot use profile {ref!r}: {e}{known}"
    return None


def file_values(cfg: Config) -> Dict[str, Dict[str, Any]]:
    """The effective configuration as the file spells it: section → key → value (``""`` = top level).

    The inverse of :func:`validate`'s conversions (ms, MiB, "" for unset), so
    :func:`to_toml` of it reads back as the same :class:`Config`.
    """
    listen = "" if cfg.metrics_listen is None else _listen_text(cfg.metrics_listen)
    capacity: Dict[str, Any] = {
        "adopt": cfg.adopt,
        "zone": cfg.adopt_zone,
        "pool_member": cfg.adopt_pool_member,
        "adopt_serials": "any" if cfg.adopt_any else [f"{x:#x}" for x in cfg.adopt_serials],
        "pinnable": "" if cfg.pinnable_target is None else cfg.pinnable_target,
    }
    if cfg.pinnable_target is not None:  # the share decides the zone; both in one file is refused
        del capacity["zone"]
    return {
        "": {"profile": cfg.profile or ""},
        "reconcile": {
            "debounce_ms": round(cfg.debounce * 1000),
            "max_delay_ms": round(cfg.max_delay * 1000),
            "rescan_interval": cfg.rescan_interval,
            "receive_buffer_mib": cfg.receive_buffer >> 20,
            "online_new_memory": cfg.online_new_memory,
            "lock_wait": cfg.lock_wait,
        },
        "drift": {"interval": cfg.drift_interval, "action": cfg.drift_action},
        "shutdown": {"rollback": cfg.rollback_on_exit},
        "metrics": {
            "listen": listen,
            "allow_remote": cfg.metrics_allow_remote,
            "web_config": cfg.metrics_web_config or "",
            "ready_file": cfg.ready_file or "",
            "textfile_dir": cfg.textfile_dir or "",
            "telemetry_interval": cfg.telemetry_interval,
            "cgroups": list(cfg.telemetry_cgroups),
        },
        "nfd": {"enabled": cfg.nfd_enabled, "dir": cfg.nfd_dir, "namespace": cfg.nfd_namespace},
        "health": {
            "enabled": cfg.health_enabled,
            "interval": cfg.health_interval,
            "command": cfg.health_command,
            "timeout": cfg.health_timeout,
        },
        "log": {"level": cfg.log_level},
        "ras": {"enabled": cfg.ras_enabled, "poison_action": cfg.ras_poison_action},
        "capacity": capacity,
    }


def _listen_text(listen: Tuple[str, int]) -> str:
    host, port = listen
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _toml_value(v: Any) -> str:
    """One TOML value: booleans, integers, floats (integral ones as integers), strings, lists."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    import json

    return json.dumps(str(v), ensure_ascii=False)  # a JSON string is a TOML basic string


def to_toml(cfg: Config) -> str:
    """The effective configuration as a TOML file (``cxlctl daemon config``): every key, in the
    file's own sections and units, so it can be saved as ``cxlctl.toml`` and read back."""
    src = cfg.source or "defaults only (no configuration file)"
    lines = [f"# effective cxlctl daemon configuration; from {src}".replace("\n", " ")]
    for sect, keys in file_values(cfg).items():
        if sect:
            lines += ["", f"[{sect}]"]
        lines += [f"{k} = {_toml_value(v)}" for k, v in keys.items()]
    return "\n".join(lines) + "\n"


def render(cfg: Config) -> Dict[str, Any]:
    """The effective configuration as plain data (``cxlctl daemon config --json``)."""
    out = cfg._asdict()
    out["metrics_listen"] = None if cfg.metrics_listen is None else f"{cfg.metrics_listen[0]}:{cfg.metrics_listen[1]}"
    return out


def _loopback(host: str) -> bool:
    """Whether ``host`` (an IP address) is a loopback address (ipaddress is imported only here)."""
    import ipaddress

    return ipaddress.ip_address(host).is_loopback
