"""KV caches on a CXL devdax device: LMCache's devdax L1 and Mooncake's CXL transport.

Why devdax and not a NUMA node: a region onlined as ``devdax`` (``cxlctl
region create --online devdax``) is a character device ``/dev/daxX.Y`` that a
KV backend maps whole, so no other allocation of the host can land there and
the kernel never migrates it.  Two backends take such a device directly:

* **LMCache** multi-process server (``lmcache server``): ``--l1-devdax-path``
  makes the device the L1 arena; LMCache then requires ``--no-l1-use-lazy``
  and ``--shm-name ""`` and sizes the arena with ``--l1-size-gb`` (GiB:
  ``int(size_gb * 2**30)`` bytes).  Builds with the shared CXL pool add
  ``--cxl-pool-id`` and ``--cxl-pool-offset`` (bytes).  All flags are feature
  detected from ``lmcache server --help``.
* **Mooncake** transfer engine: ``MC_CXL_DEV_PATH`` installs its CXL
  transport, which maps ``MC_CXL_DEV_SIZE`` bytes (raw bytes; else the
  device's sysfs ``size``).  Builds with the CXL pool backend also read
  ``MC_CXL_POOL_ID``, ``MC_CXL_BACKEND_KIND`` and ``MC_CXL_MAP_OFFSET``.
  Mooncake has no help text to probe, so its installed version decides
  (``importlib.metadata`` of ``mooncake-transfer-engine``).

Sources and versions for every flag are in docs/launch.md ("devdax KV backends").
"""

from __future__ import annotations

import os
import re
import stat
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from cxlctl.errors import UsageError
from cxlctl.hostio.host import Host
from cxlctl.model import DaxDevice, Inventory
from cxlctl.namedrecord import NamedTuple
from cxlctl.parse import format_size, is_decimal

if TYPE_CHECKING:
    from .preflight import Status

from .engine_args import has_opt, opt_value, version_tuple

#: first Mooncake release whose transfer engine reads MC_CXL_DEV_PATH (PR #670, v0.3.6)
MOONCAKE_CXL_SINCE = (0, 3, 6)
MOONCAKE_DIST = "mooncake-transfer-engine"
#: what a dry run assumes without Mooncake installed: the release these rules were checked against
MOONCAKE_ASSUMED = "0.3.12"
LMCACHE_POOL_FLAGS = ("--cxl-pool-id", "--cxl-pool-offset")
_DAX_NAME = re.compile(r"^dax\d+\.\d+$")


class Devdax(NamedTuple):
    name: str  # daxX.Y
    path: str  # /dev/daxX.Y as the engine opens it
    device_size: int  # the whole device (sysfs size)
    size: int  # what the backend maps (<= device_size - offset, a multiple of align)
    align: int  # the device's mapping alignment
    offset: int  # --devdax-offset (shared pool)
    pool_id: Optional[str]
    region: Optional[str]
    how: str  # how the device was chosen


def _candidates(inv: Inventory) -> List[DaxDevice]:
    return [d for d in inv.dax_devices if d.mode == "devdax" and (d.size or 0) > 0]


def _pick(inv: Inventory, spec: str) -> Tuple[DaxDevice, str]:
    spec = spec.strip()
    if spec == "auto":
        c = _candidates(inv)
        if len(c) == 1:
            return c[0], f"{c[0].name}: the only devdax device"
        if not c:
            modes = ", ".join(f"{d.name} ({d.mode or 'unbound'})" for d in inv.dax_devices) or "none"
            raise UsageError(
                f"--devdax auto: no DAX device in devdax mode (DAX devices: {modes})",
                hint="create one: cxlctl region create --online devdax (or cxlctl dax reconfigure daxX.Y --mode devdax)",
            )
        raise UsageError(
            f"--devdax auto: {len(c)} devdax devices ({', '.join(d.name for d in c)}); cxlctl will not guess",
            hint="name one: --devdax " + c[0].name,
        )
    name = spec[len("/dev/") :] if spec.startswith("/dev/") else spec
    if not _DAX_NAME.match(name):
        raise UsageError(
            f"--devdax {spec!r} is not a DAX device name",
            hint="give daxX.Y, /dev/daxX.Y or auto (cxlctl status lists them)",
        )
    dev = next((d for d in inv.dax_devices if d.name == name), None)
    if dev is None:
        known = ", ".join(d.name for d in inv.dax_devices) or "none"
        raise UsageError(
            f"--devdax {spec}: no such DAX device (known: {known})",
            hint="create one: cxlctl region create --online devdax",
        )
    if dev.mode != "devdax":
        was = dev.mode or "unbound"
        node = f" (NUMA node {dev.target_node})" if dev.mode == "system-ram" and dev.target_node is not None else ""
        raise UsageError(
            f"--devdax {name}: the device is in {was} mode{node}, not devdax; a KV backend cannot map it",
            hint=f"cxlctl dax reconfigure {name} --mode devdax --force (takes its memory away from the page allocator)",
        )
    if not dev.size:
        raise UsageError(f"--devdax {name}: the device has no size (sysfs size is 0)", hint="check cxlctl status")
    return dev, f"{name}: named with --devdax"


def resolve(
    inv: Inventory, spec: str, kv_bytes: Optional[int], pool_id: Optional[str], offset: Optional[str]
) -> Devdax:
    """The device, the bytes the backend maps, and its pool placement (UsageError on bad input)."""
    dev, how = _pick(inv, spec)
    assert dev.size is not None
    align = dev.align or 4096
    off = 0
    if offset is not None:
        if not is_decimal(offset.strip()):
            raise UsageError(f"--devdax-offset {offset!r} is not a number of bytes", hint="e.g. --devdax-offset 0")
        off = int(offset.strip())
        if off % align:
            raise UsageError(
                f"--devdax-offset {off} is not a multiple of {dev.name}'s alignment ({align} bytes)",
                hint=f"round it to a multiple of {align}",
            )
        if pool_id is None:
            raise UsageError("--devdax-offset needs --devdax-pool-id", hint="name the shared pool, or drop the offset")
    if pool_id is not None and not re.match(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$", pool_id):
        raise UsageError(
            f"--devdax-pool-id {pool_id!r}: use letters, digits and . _ : - (up to 128)", hint="e.g. rack0-pool0"
        )
    room = dev.size - off
    if room <= 0:
        raise UsageError(
            f"--devdax-offset {off} is past the end of {dev.name} ({format_size(dev.size)})",
            hint="give a smaller offset",
        )
    want = room if kv_bytes is None else kv_bytes
    if want > room:
        raise UsageError(
            f"--kv-size {format_size(want)} is larger than {dev.name} holds"
            + (f" after offset {off}" if off else "")
            + f" ({format_size(room)})",
            hint="give a smaller --kv-size, or leave it out to use the whole device",
        )
    size = want - want % align
    if size <= 0:
        raise UsageError(
            f"--kv-size {format_size(want)} is less than {dev.name}'s alignment ({format_size(align)})",
            hint="give a larger --kv-size",
        )
    return Devdax(dev.name, "/dev/" + dev.name, dev.size, size, align, off, pool_id, dev.region, how)


def node_check(host: Host, dd: Devdax) -> Tuple[Status, str, str]:
    """(status, message, fix) for the device node the backend opens (pre-flight).

    The messages name the node checked, under ``--root`` when one is given: that
    is the file whose state they report (the engine itself opens ``dd.path``).
    """
    p = host.path(dd.path)
    try:
        st = os.stat(p)
    except OSError as e:
        return (
            "fail",
            f"{p} cannot be opened ({e.strerror}): the backend could not map the device",
            "in a container, mount the device (volumeDevices or a hostPath of type CharDevice); on the host, "
            "check udev created it (ls -l /dev/dax*)",
        )
    if stat.S_ISCHR(st.st_mode):
        if host.live and not os.access(p, os.R_OK | os.W_OK):
            return (
                "fail",
                f"{p} is not readable and writable by this user",
                f"chmod/chown {p}, or run as its owner",
            )
        return (
            "ok",
            f"{p} is a character device ({format_size(dd.device_size)}, align {format_size(dd.align)})",
            "",
        )
    if stat.S_ISREG(st.st_mode):
        return ("note", f"{p} is a regular file, not a device: fine for testing, not CXL memory", "")
    return ("fail", f"{p} is neither a character device nor a file", "recreate the device node")


def size_gb(n: int) -> str:
    """Bytes as LMCache's --l1-size-gb (GiB), exact: LMCache takes int(value * 2**30)."""
    v = n / (1 << 30)
    text = repr(v)
    return text[:-2] if text.endswith(".0") else text


# --------------------------------------------------------------------------- LMCache


def lmcache_args(
    args: List[str], flags: Sequence[str], known: bool, dd: Devdax, notes: List[str], version: Optional[str]
) -> List[str]:
    """The flags that put LMCache's L1 on the device; ``args`` is extended in place, returns what was added."""
    fl = set(flags)
    if known and "--l1-devdax-path" not in fl:
        raise UsageError(
            f"this LMCache ({version or 'unknown version'}) has no --l1-devdax-path (devdax L1)",
            hint="upgrade LMCache (the devdax L1 arrived with PR #3584, June 2026), or use --kv-size without --devdax",
        )
    for legacy_only in ("--l1-manager", "--gds-l1-path"):
        if has_opt(args, [legacy_only]):
            raise UsageError(
                f"--devdax with LMCache's {legacy_only}: cxlctl gives the device through LMCache's legacy L1 flags "
                "(--l1-devdax-path, --l1-size-gb), and LMCache "
                + (version or "0.5.6")
                + "'s server refuses the combination at start-up ("
                + (
                    "'Use either --l1-manager or legacy L1 flags'"
                    if legacy_only == "--l1-manager"
                    else "'gds-l1-path cannot be used with l1-devdax-path'"
                )
                + ", parse_args_to_config)",
                hint=(
                    "drop --l1-manager (cxlctl's --devdax makes the device the L1), or drop --devdax and name the "
                    'device in your own --l1-manager \'{"type": "DEVDAX", "tag": "cxl", "path": "/dev/daxX.Y", '
                    '"size_gb": N}\''
                    if legacy_only == "--l1-manager"
                    else "drop --gds-l1-path: the devdax device is the L1"
                ),
            )
    for own in ("--l1-devdax-path", "--shm-name", "--l1-use-lazy", "--cxl-pool-id", "--cxl-pool-offset"):
        if has_opt(args, [own]):
            raise UsageError(
                f"{own} is set by cxlctl with --devdax; leave it out of LMCache's arguments",
                hint="--devdax, --devdax-pool-id and --devdax-offset choose them",
            )
    added = ["--l1-devdax-path", dd.path]
    user = opt_value(args, ["--l1-size-gb"])
    if user is not None:
        try:
            ub = int(float(user) * (1 << 30))
        except ValueError:
            raise UsageError(
                f"--l1-size-gb {user!r} is not a number", hint="or leave it out: cxlctl sizes it"
            ) from None
        if ub > dd.size:
            raise UsageError(
                f"--l1-size-gb {user} ({format_size(ub)}) is larger than {dd.name} maps ({format_size(dd.size)})",
                hint="leave --l1-size-gb out: cxlctl sets it from the device (or --kv-size)",
            )
    else:
        added += ["--l1-size-gb", size_gb(dd.size)]
    added += ["--no-l1-use-lazy", "--shm-name", ""]
    if not has_opt(args, ["--eviction-policy"]) and (not known or "--eviction-policy" in fl):
        # --l1-size-gb selects LMCache's legacy L1 configuration, which has no default eviction
        # policy: without one the server dies at start-up ("Legacy L1 configuration requires
        # --l1-size-gb and --eviction-policy", parse_args_to_config, LMCache 0.5.6)
        added += ["--eviction-policy", "LRU"]
        notes.append("LMCache eviction policy: LRU (LMCache has none by default; pass --eviction-policy to choose)")
    if "--l1-align-bytes" in fl and not has_opt(args, ["--l1-align-bytes"]) and dd.align > 4096:
        added += ["--l1-align-bytes", str(dd.align)]
    if dd.pool_id is not None:
        missing = [f for f in LMCACHE_POOL_FLAGS if known and f not in fl]
        if missing:
            raise UsageError(
                f"this LMCache ({version or 'unknown version'}) has no {' or '.join(missing)} (shared CXL pool)",
                hint="use an LMCache build with the shared CXL slab, or drop --devdax-pool-id",
            )
        added += ["--cxl-pool-id", dd.pool_id, "--cxl-pool-offset", str(dd.offset)]
    args += added
    notes.append(
        f"LMCache L1 on {dd.path}: {format_size(dd.size)} of {format_size(dd.device_size)}"
        + (f" from offset {dd.offset} (pool {dd.pool_id})" if dd.pool_id else "")
        + "; the arena is the device, not a NUMA node: the process policy does not apply to it"
    )
    return added


# --------------------------------------------------------------------------- Mooncake


def mooncake_version(python: str, env: Dict[str, str]) -> Tuple[Optional[str], Optional[str]]:
    """(version, error) of mooncake-transfer-engine as ``python`` sees it."""
    code = f"import importlib.metadata as m; print(m.version({MOONCAKE_DIST!r}))"
    from cxlctl.hostio import tools

    try:
        p = tools.run([python, "-c", code], env=env, timeout=60, check=False)
    except tools.ToolError as e:
        return None, str(e)
    if p.returncode != 0:
        return None, f"{MOONCAKE_DIST} is not installed for {python} ({tools.gist(p.stderr) or 'no output'})"
    out = p.stdout.strip().splitlines()
    return (out[-1].strip() if out else None), None


def mooncake_env(
    dd: Devdax, version: Optional[str], environ: Dict[str, str], notes: List[str], warnings: List[str]
) -> Dict[str, str]:
    """The MC_CXL_* variables for Mooncake's CXL transport (UsageError for a release without it)."""
    ver = version_tuple(version)
    if ver is not None and ver < MOONCAKE_CXL_SINCE:
        raise UsageError(
            f"Mooncake {version} has no CXL transport (MC_CXL_DEV_PATH arrived in 0.3.6)",
            hint=f"pip install -U {MOONCAKE_DIST}",
        )
    env = {"MC_CXL_DEV_PATH": dd.path, "MC_CXL_DEV_SIZE": str(dd.size)}
    if dd.pool_id is not None:
        env.update(
            {
                "MC_CXL_POOL_ID": dd.pool_id,
                "MC_CXL_BACKEND_KIND": "devdax",
                "MC_CXL_MAP_OFFSET": str(dd.offset),
            }
        )
        warnings.append(
            "MC_CXL_POOL_ID, MC_CXL_BACKEND_KIND and MC_CXL_MAP_OFFSET are read only by Mooncake builds with the "
            f"CXL pool backend; upstream {MOONCAKE_DIST} {MOONCAKE_ASSUMED} ignores them and maps the device from offset 0"
        )
    for k, v in env.items():
        if environ.get(k) not in (None, v):
            warnings.append(f"{k}={environ[k]} in the environment is replaced by {v}")
    notes.append(
        f"Mooncake CXL transport on {dd.path}: {format_size(dd.size)} (MC_CXL_DEV_SIZE, raw bytes); "
        'the store uses it with protocol cxl (MOONCAKE_PROTOCOL=cxl or the connector\'s "protocol")'
    )
    return env
