"""Other configuration that sets the same keys: an active TuneD profile, sysctl.d files.

Why: a runtime change by cxlctl silently loses at the next boot (or at the next
``tuned-adm profile``) to whichever of these sets the key last.  Stock TuneD
profiles such as ``hpc-compute`` set ``vm.zone_reclaim_mode=1`` and
``kernel.numa_balancing=0``, which work against CXL tiering.  ``plan`` lists
every such key with who wins at boot.

Boot order (documented in docs/tuning.md):

1. systemd-sysctl applies ``sysctl.d`` files: ``/etc``, ``/run``,
   ``/usr/local/lib``, ``/usr/lib``, ``/lib`` (a file name in an earlier
   directory masks the same name in later ones), all sorted by file name; the
   last assignment wins; ``/etc/sysctl.conf`` last (procps ``--system`` order).
2. ``tuned.service`` (After=systemd-sysctl) applies its profile's ``[sysctl]``,
   then — with ``reapply_sysctl=1``, the default — re-applies the sysctl.d
   files, so sysctl.d wins over TuneD for keys set in both.
"""

from __future__ import annotations

import os
from typing import Dict, Iterable, List, Optional, Tuple

from cxlctl.hostio import paths
from cxlctl.hostio.host import Host
from cxlctl.hostio.reader import Reader
from cxlctl.namedrecord import NamedTuple

from .knobs import REGISTRY

#: sysctls of stock TuneD profiles that matter here, for hosts where the active
#: profile's file cannot be found (TuneD 2.28 profiles/*/tuned.conf)
TUNED_STOCK: Dict[str, Dict[str, str]] = {
    "hpc-compute": {"vm.zone_reclaim_mode": "1", "kernel.numa_balancing": "0"},
    "network-latency": {"kernel.numa_balancing": "0"},
    "oracle": {"kernel.numa_balancing": "0"},
    "mssql": {"kernel.numa_balancing": "0"},
    "sap-hana": {"kernel.numa_balancing": "0"},
    "throughput-performance": {"vm.swappiness": "10"},
    "accelerator-performance": {"vm.swappiness": "10"},
}


class Conflict(NamedTuple):
    key: str  # sysctl key or sysfs path
    ours: Optional[str]
    theirs: str
    source: str  # file (or "TuneD profile X")
    wins_at_boot: str  # "cxlctl" | the other source
    note: str


def _norm(key: str) -> str:
    k = key.strip().lstrip("-").strip()
    return k.replace("/", ".") if "/" in k and "." not in k.split("/")[0] else k


def parse_sysctl_conf(text: str) -> Dict[str, str]:
    """``key = value`` lines of a sysctl.d file (comments ``#``/``;``, ``-`` prefix, ``/`` separators)."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        t = line.strip()
        if not t or t[0] in "#;":
            continue
        key, sep, value = t.partition("=")
        if not sep:
            continue
        out[_norm(key)] = value.strip()
    return out


def sysctl_files(host: Host) -> List[str]:
    """sysctl.d files in application order (root-relative paths), plus /etc/sysctl.conf last."""
    by_name: Dict[str, str] = {}
    r = host.reader
    for d in paths.SYSCTL_DIRS:
        for n in r.listdir(d):
            if n.endswith(".conf") and n not in by_name:
                by_name[n] = f"{d}/{n}"
    ordered = [by_name[n] for n in sorted(by_name)]
    if os.path.isfile(host.path(paths.SYSCTL_CONF)):
        real = os.path.realpath(host.path(paths.SYSCTL_CONF))
        if all(os.path.realpath(host.path(p)) != real for p in ordered):
            ordered.append(paths.SYSCTL_CONF)
    return ordered


def tuned_profile(host: Host) -> Optional[Tuple[str, Dict[str, str], Dict[str, str], str]]:
    """(active profile names, its [sysctl] keys, its [sysfs] keys, where found) or None."""
    r = host.reader
    active = (r.body(paths.TUNED_ACTIVE) or "").strip()
    if not active:
        return None
    sysctl: Dict[str, str] = {}
    sysfs: Dict[str, str] = {}
    where: List[str] = []
    for name in active.split():
        found = _tuned_load(r, name, sysctl, sysfs, 0)
        if found:
            where.append(found)
        elif name in TUNED_STOCK:
            sysctl.update(TUNED_STOCK[name])
            where.append(f"stock {name} (profile file not found)")
    return active, sysctl, sysfs, "; ".join(where) or "profile file not found"


def _tuned_load(r: Reader, name: str, sysctl: Dict[str, str], sysfs: Dict[str, str], depth: int) -> Optional[str]:
    if depth > 10 or "/" in name or "\0" in name:  # a name, never a path (NUL: corrupt file)
        return None
    for d in paths.TUNED_DIRS:
        path = f"{d}/{name}/tuned.conf"
        text = r.body(path)
        if text is None:
            continue
        import configparser  # only when a TuneD profile is there to read

        cp = configparser.ConfigParser(interpolation=None, strict=False, delimiters=("=",))
        cp.optionxform = str  # type: ignore[assignment,method-assign]
        try:
            cp.read_string(text)
        except configparser.Error:
            return path + " (unparsable)"
        if cp.has_option("main", "include"):
            for parent in cp.get("main", "include").split(","):
                parent = parent.strip()
                if parent and not parent.startswith("$"):
                    if _tuned_load(r, parent, sysctl, sysfs, depth + 1) is None and parent in TUNED_STOCK:
                        sysctl.update(TUNED_STOCK[parent])
        for section in cp.sections():
            kind = cp.get(section, "type", fallback=section)
            if kind == "sysctl":
                for k, v in cp.items(section):
                    if k not in ("type", "replace", "enabled", "devices", "priority"):
                        sysctl[_norm(k)] = v.strip()
            elif kind == "sysfs":
                for k, v in cp.items(section):
                    if k.startswith(paths.SYS):
                        sysfs[k] = v.strip()
        return path
    return None


def _reapply_sysctl(r: Reader) -> bool:
    text = r.body(paths.TUNED_MAIN)
    if text is None:
        return True
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep and k.strip() == "reapply_sysctl":
            return v.strip().lower() not in ("0", "false", "no", "off", "n")
    return True


def find(host: Host, ours: Dict[str, Optional[str]], persisting: bool) -> List[Conflict]:
    """Conflicts for the sysctls/sysfs paths in ``ours`` (key or path → value cxlctl sets).

    ``persisting``: cxlctl's values are (or will be) in 90-cxlctl.conf.
    """
    out: List[Conflict] = []
    # sysctl.d
    files = sysctl_files(host)

    def rank(path: str) -> Tuple[int, str]:
        return (1, "") if path == paths.SYSCTL_CONF else (0, os.path.basename(path))

    our_rank = rank(paths.PERSIST_SYSCTL)
    r = host.reader
    for path in files:
        if path == paths.PERSIST_SYSCTL:
            continue
        text = r.body(path) or ""
        for key, value in parse_sysctl_conf(text).items():
            if key not in ours:
                continue
            later = rank(path) > our_rank
            if not persisting:
                wins, note = (
                    path,
                    "cxlctl's value is not persisted (use --persist): this file's value returns at every boot",
                )
            elif later:
                wins, note = path, "applied after 90-cxlctl.conf at boot, so it overrides cxlctl"
            else:
                wins, note = "cxlctl", "90-cxlctl.conf is applied after this file at boot"
            if value == ours[key]:
                note = "same value; " + note
            out.append(Conflict(key, ours[key], value, path, wins, note))
    # TuneD
    tp = tuned_profile(host)
    if tp is not None:
        active, sysctl, sysfs, where = tp
        reapply = _reapply_sysctl(r)
        src = f"TuneD profile {active} ({where})"
        for key, value in sysctl.items():
            if key not in ours:
                continue
            if persisting and reapply:
                wins, note = (
                    "cxlctl",
                    "TuneD re-applies sysctl.d after its profile (reapply_sysctl=1), so 90-cxlctl.conf wins",
                )
            elif persisting:
                wins, note = src, "reapply_sysctl=0: TuneD's value, applied after systemd-sysctl, wins at boot"
            else:
                wins, note = (
                    src,
                    "cxlctl's value is not persisted: TuneD sets its value at every boot and profile switch",
                )
            if value == ours[key]:
                note = "same value; " + note
            out.append(Conflict(key, ours[key], value, src, wins, note))
        for path, value in sysfs.items():
            if path in ours:
                out.append(
                    Conflict(path, ours[path], value, src, src, "TuneD writes this sysfs file when its profile starts")
                )
    return out


def our_keys(values: Iterable[Tuple[str, str, Optional[str]]]) -> Dict[str, Optional[str]]:
    """(knob name, path, desired) → {sysctl key or sysfs path: value} for :func:`find`."""
    kinds = {k.path: k for k in REGISTRY}
    out: Dict[str, Optional[str]] = {}
    for _name, path, desired in values:
        k = kinds.get(path)
        if k is not None and k.sysctl_key:
            out[k.sysctl_key] = desired
        else:
            out[path] = desired
    return out
