"""Tuning profiles: TOML files, ``include`` inheritance, strict validation.

Where profiles come from, first match wins:

1. a path (an argument containing ``/`` or ending in ``.toml``);
2. ``<root>/etc/cxlctl/profiles/NAME.toml`` — the administrator's;
3. the built-in ``cxlctl/profiles/NAME.toml`` shipped in the package.

A user profile may shadow a built-in one and still ``include`` it by the same
name: an include never resolves to the file doing the including.  An include given
as a relative path is relative to the including file's directory, never to the
current directory (which would make what root applies depend on where it stood).

Why strict: a typo in a tuning profile (``vm.swapiness``) that is silently
ignored leaves a host mistuned with nobody noticing, so every unknown key,
wrong type and out-of-range value is an error naming the file, the key and the
reason — before anything is written (exit code 2).

File format (docs/tuning.md has the reference)::

    summary = "one line"
    description = "longer text"          # optional
    include = "parent"                   # or ["a", "b"]; later ones win
    placement = "weighted-interleave"    # hint for the launcher (optional)

    [knobs."vm.swappiness"]
    value = 10
    reason = "why this value (shown by tune plan)"

    [knobs.weighted_interleave]
    weights = "bandwidth"                # or "3:1" (DRAM:CXL)
    nodes = ["dram", "cxl"]
    reason = "..."

A knob may also be given as a bare value: ``knobs."vm.swappiness" = 10``.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional, Tuple, Union

from cxlctl.errors import UsageError
from cxlctl.hostio import paths, toml
from cxlctl.hostio.host import Host
from cxlctl.namedrecord import NamedTuple

from .knobs import BY_NAME, ORDER, REGISTRY

USER_DIR = paths.USER_PROFILE_DIR
BUILTIN_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "profiles")
PLACEMENTS = ("default", "weighted-interleave", "tiering", "dram-only")
TOP_KEYS = ("summary", "description", "include", "placement", "knobs", "damon")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MAX_DEPTH = 16


class ProfileError(UsageError):
    """A profile that cannot be used: names the file, the key and the reason (exit 2)."""

    def __init__(self, where: Optional[str], key: Optional[str], reason: str, hint: str = "") -> None:
        if where is None:  # the profile named on the command line
            msg = reason
        else:
            msg = f"bad profile {where}: " + (f"{key}: " if key else "") + reason
        super().__init__(msg, hint=hint or "see docs/tuning.md for the profile format")
        self.where = where
        self.key = key
        self.reason = reason


class Setting(NamedTuple):
    knob: str
    value: Any  # validated (see the knob's validate())
    reason: str
    origin: str  # profile file that set it


class Profile(NamedTuple):
    name: str
    source: str  # file path
    builtin: bool
    summary: str
    description: str
    placement: Optional[str]
    chain: Tuple[str, ...]  # resolved include chain, ancestors first, this file last
    settings: Tuple[Setting, ...]  # registry order
    #: the document itself for a profile built in memory (:func:`from_data`): it has no
    #: file, so the journal keeps the document for whoever must rebuild the profile
    data: Optional[Dict[str, Any]] = None

    def setting(self, knob: str) -> Optional[Setting]:
        for s in self.settings:
            if s.knob == knob:
                return s
        return None


def is_path(ref: str) -> bool:
    return "/" in ref or ref.endswith(".toml")


def candidates(host: Host, name: str) -> List[Tuple[str, bool]]:
    """(file, builtin?) for a profile name, in precedence order (existing files only)."""
    out = []
    user = os.path.join(host.path(USER_DIR), name + ".toml")
    if os.path.isfile(user):
        out.append((user, False))
    builtin = os.path.join(BUILTIN_DIR, name + ".toml")
    if os.path.isfile(builtin):
        out.append((builtin, True))
    return out


def _resolve(
    host: Host, ref: str, exclude: Tuple[str, ...], where: Optional[str], base: Optional[str] = None
) -> Tuple[str, bool]:
    """(file, builtin?) for ``ref``; a relative path is taken from ``base`` (the including
    file's directory) when given, else from the current directory (a path on the command line)."""
    if is_path(ref):
        path = os.path.abspath(os.path.join(base, ref) if base else ref)
        if not os.path.isfile(path):
            raise ProfileError(where, None, f"profile file {ref!r} does not exist")
        return path, False
    if not _NAME.match(ref):
        raise ProfileError(where, None, f"{ref!r} is not a valid profile name (letters, digits, . _ -)")
    for path, builtin in candidates(host, ref):
        if os.path.realpath(path) not in exclude:
            return path, builtin
    from cxlctl.suggest import did_you_mean

    names = [n for n, _, _ in list_names(host)]
    known = ", ".join(names) or "none"
    near = did_you_mean(ref, names)
    hint = (near[:-1] + f"; known profiles: {known}") if near.startswith("did you mean") else f"known profiles: {known}"
    raise ProfileError(where, None, f"no profile named {ref!r}", hint=hint)


def _read(path: str) -> Dict[str, Any]:
    """The document of a profile file; an empty one (0 bytes, or only comments) is an error:
    applying it as a profile that sets nothing would hide a truncated or unwritten file."""
    try:
        data = toml.load(path)
    except toml.TomlError as e:
        raise ProfileError(path, None, e.reason) from None
    if not data:
        raise ProfileError(
            path,
            None,
            "the file is empty: a profile has at least a summary, an include or a setting",
            hint="docs/tuning.md (Profiles) shows the format; `cxlctl tune list` the profiles there are",
        )
    return data


class _Raw(NamedTuple):
    path: str
    summary: Optional[str]
    description: Optional[str]
    placement: Optional[str]
    includes: Tuple[str, ...]
    settings: Dict[str, Setting]


def _validate(path: str, data: Dict[str, Any]) -> _Raw:
    for k in data:
        if k not in TOP_KEYS:
            raise ProfileError(path, k, f"unknown key (allowed: {', '.join(TOP_KEYS)})")

    def text(key: str) -> Optional[str]:
        v = data.get(key)
        if v is not None and not isinstance(v, str):
            raise ProfileError(path, key, f"must be a string, got {type(v).__name__}")
        return v

    summary, description = text("summary"), text("description")
    placement = text("placement")
    if placement is not None and placement not in PLACEMENTS:
        raise ProfileError(path, "placement", f"must be one of {', '.join(PLACEMENTS)}; got {placement!r}")
    inc = data.get("include", [])
    if isinstance(inc, str):
        inc = [inc]
    if not isinstance(inc, list) or not all(isinstance(i, str) and i for i in inc):
        raise ProfileError(path, "include", "must be a profile name or a list of names")
    knobs = data.get("knobs", {})
    if not isinstance(knobs, dict):
        raise ProfileError(path, "knobs", "must be a table")
    settings: Dict[str, Setting] = {}
    default_reason = f"set by profile {os.path.basename(path)[:-5] if path.endswith('.toml') else path}"
    for name, spec in knobs.items():
        key = f"knobs.{name}"
        knob = BY_NAME.get(name)
        if name == "damon":
            raise ProfileError(path, key, "DAMON tiering is set in its own [damon] section, not under [knobs]")
        if knob is None:
            known = ", ".join(k.name for k in REGISTRY if k.name != "damon")
            raise ProfileError(path, key, f"unknown knob (known: {known})")
        table: Dict[str, Any] = spec if isinstance(spec, dict) else {"value": spec}
        allowed = {"value", "reason"} | set(knob.extra_keys)
        if knob.kind == "group":
            allowed.discard("value")
        for k in table:
            if k not in allowed:
                raise ProfileError(path, f"{key}.{k}", f"unknown key (allowed: {', '.join(sorted(allowed))})")
        if knob.kind != "group" and "value" not in table:
            raise ProfileError(path, f"{key}.value", "missing")
        reason = table.get("reason", default_reason)
        if not isinstance(reason, str) or not reason.strip() or "\n" in reason.strip():
            raise ProfileError(path, f"{key}.reason", "must be a one-line string")
        try:
            value = knob.validate(table.get("value"), table)
        except ValueError as e:
            sub = "value" if knob.kind != "group" else "weights"
            raise ProfileError(path, f"{key}.{sub}", str(e)) from None
        settings[name] = Setting(name, value, reason.strip(), path)
    if "damon" in data:
        settings["damon"] = _damon_section(path, data["damon"], default_reason)
    return _Raw(path, summary, description, placement, tuple(inc), settings)


def _damon_section(path: str, table: Any, default_reason: str) -> Setting:
    """``[damon]``: DAMON tiering (keys in :mod:`.damon`; durations "5s", sizes "256M")."""
    if not isinstance(table, dict):
        raise ProfileError(path, "damon", "must be a table ([damon] with enabled = true and optional settings)")
    reason = table.get("reason", default_reason)
    if not isinstance(reason, str) or not reason.strip() or "\n" in reason.strip():
        raise ProfileError(path, "damon.reason", "must be a one-line string")
    try:
        spec = BY_NAME["damon"].validate(None, table)
    except ValueError as e:
        raise ProfileError(path, "damon", str(e)) from None
    return Setting("damon", spec, reason.strip(), path)


def _refuse_conflicts(path: str, settings: Dict[str, Setting]) -> None:
    """Settings that work against each other in the merged profile (includes resolved)."""
    d = settings.get("damon")
    nb = settings.get("kernel.numa_balancing")
    if d is None or nb is None or not getattr(d.value, "enabled", False):
        return
    if isinstance(nb.value, int) and nb.value & 2:
        raise ProfileError(
            path,
            "damon",
            f"DAMON tiering and kernel.numa_balancing = {nb.value} (memory tiering) are both asked for "
            f"(numa_balancing from {os.path.basename(nb.origin)}): two promoters move the same pages against each "
            "other, and NUMA balancing's hint faults on CXL pages cost what DAMON avoids",
            hint="set kernel.numa_balancing = 0 in this profile (as inference-damon does), or drop [damon]",
        )


def load(host: Host, ref: str) -> Profile:
    """Load profile ``ref`` (a name or a path) with its includes; :class:`ProfileError` on any problem."""
    path, builtin = _resolve(host, ref, (), None)
    merged = _load(host, path, (), 0)
    _refuse_conflicts(path, merged.settings)
    name = os.path.basename(path)[:-5] if path.endswith(".toml") else os.path.basename(path)
    settings = tuple(sorted(merged.settings.values(), key=lambda s: ORDER[s.knob]))
    return Profile(
        name=name,
        source=path,
        builtin=builtin,
        summary=merged.summary or "",
        description=merged.description or "",
        placement=merged.placement,
        chain=merged.includes,
        settings=settings,
    )


def from_data(host: Host, name: str, data: Dict[str, Any], source: str) -> Profile:
    """A profile from a document already in memory (what a TOML file would hold).

    For callers that compose a profile (the launcher's weights on top of the profile in
    effect) and hand the object to the tuning transaction: no file is written to pass
    it.  ``source`` only labels it in messages and in the journal.  Validation and
    includes work exactly as for a file.
    """
    if not _NAME.match(name):
        raise ProfileError(source, None, f"{name!r} is not a valid profile name (letters, digits, . _ -)")
    merged = _merge(host, source, _validate(source, data), (), 0)
    _refuse_conflicts(source, merged.settings)
    return Profile(
        name=name,
        source=source,
        builtin=False,
        summary=merged.summary or "",
        description=merged.description or "",
        placement=merged.placement,
        chain=merged.includes,
        settings=tuple(sorted(merged.settings.values(), key=lambda s: ORDER[s.knob])),
        data=data,
    )


def _load(host: Host, path: str, stack: Tuple[str, ...], depth: int) -> _Raw:
    """Merged view of ``path``; ``includes`` of the result is the resolved chain."""
    return _merge(host, path, None, stack, depth)


def _merge(host: Host, path: str, given: Optional[_Raw], stack: Tuple[str, ...], depth: int) -> _Raw:
    """Merged view of ``path`` (read from the file unless ``given``), includes resolved."""
    real = os.path.realpath(path)
    if real in stack:
        cycle = " -> ".join(os.path.basename(p) for p in stack + (real,))
        raise ProfileError(path, "include", f"include loop: {cycle}")
    if depth > MAX_DEPTH:
        raise ProfileError(path, "include", f"includes nested deeper than {MAX_DEPTH}")
    raw = given if given is not None else _validate(path, _read(path))
    summary = description = placement = None
    settings: Dict[str, Setting] = {}
    chain: List[str] = []
    for inc in raw.includes:
        # an include never resolves to a file already being loaded (so a user file can
        # shadow a built-in profile and include it by the same name)
        base = os.path.dirname(os.path.abspath(path)) if os.path.isabs(path) else None
        ipath, _ = _resolve(host, inc, (real,), f"{path}: include", base)
        parent = _load(host, ipath, stack + (real,), depth + 1)
        summary = parent.summary or summary
        description = parent.description or description
        placement = parent.placement or placement
        settings.update(parent.settings)
        chain.extend(c for c in parent.includes if c not in chain)
    settings.update(raw.settings)
    chain.append(path)
    return _Raw(
        path,
        raw.summary if raw.summary is not None else summary,
        raw.description if raw.description is not None else description,
        raw.placement if raw.placement is not None else placement,
        tuple(chain),
        settings,
    )


def list_names(host: Host) -> List[Tuple[str, str, bool]]:
    """(name, file, builtin?) of every visible profile; user files shadow built-ins."""
    seen: Dict[str, Tuple[str, str, bool]] = {}
    udir = host.path(USER_DIR)
    for d, builtin in ((udir, False), (BUILTIN_DIR, True)):
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for f in names:
            if f.endswith(".toml") and _NAME.match(f[:-5]) and f[:-5] not in seen:
                seen[f[:-5]] = (f[:-5], os.path.join(d, f), builtin)
    return sorted(seen.values())


def document(profile: Profile) -> Dict[str, Any]:
    """The profile's own document (what its file holds), for a record that must not depend on
    the file staying as it was (the persisted profile the daemon applies at boot)."""
    if profile.data is not None:
        return profile.data
    return _read(profile.source)


def require_trusted_files(host: Host, profile: Profile) -> None:
    """As root on the live host: every file ``profile`` was built from (its own and its
    includes') must be root's alone (:func:`cxlctl.hostio.trust.require_trusted`), or the daemon
    would apply at boot what another user wrote there since.  Others, and ``--root`` trees: no check."""
    if os.geteuid() != 0 or not host.live:
        return
    from cxlctl.hostio.trust import require_trusted

    for path in profile.chain:
        if os.path.isabs(path) and os.path.exists(path):
            require_trusted(
                path,
                f"profile {profile.name}'s file",
                hint="keep profiles root's alone (/etc/cxlctl/profiles, mode 0644), then `cxlctl tune apply --persist` again",
            )


#: what ``tune plan`` and ``tune apply`` work on when no profile is named and none is in effect
DEFAULT_PROFILE = "inference-bandwidth"


def in_effect(host: Host) -> Union[str, Profile]:
    """The profile in effect this boot (rebuilt from the journal when it has no file), else the default.

    By name when the name still resolves to the file it was applied from; else the
    file it came from, so a profile shadowed or edited since is not silently swapped.
    """
    from .state import applied_journal

    j = applied_journal(host)
    if j is None:
        return DEFAULT_PROFILE
    if j.profile_data is not None:
        return from_data(host, j.profile, j.profile_data, j.profile_source)
    found = candidates(host, j.profile)
    if found and found[0][0] == j.profile_source:
        return j.profile  # still what the name resolves to
    return j.profile_source or j.profile


def for_command(host: Host, ref: Union[None, str, Profile]) -> Union[str, Profile]:
    """The profile a ``tune`` command works on: ``ref``, else (None) :func:`in_effect`."""
    return in_effect(host) if ref is None else ref
