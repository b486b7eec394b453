"""The running kernel's release number and build configuration, read one way for everyone.

Three parts of cxlctl decide by the kernel: the region planner (RAM regions since 6.3),
doctor's Kernel layer (which ``CONFIG_CXL*``/``CONFIG_DEV_DAX*`` options are built) and the
DAMON probe (``CONFIG_DAMON_PADDR``, migrate actions since 6.11).  Each had its own release
parser and config reader; they disagreed on odd input (a non-ASCII digit, a release that
cannot name a file) and only doctor knew ``/proc/config.gz``.  Reads go through the
host-I/O :class:`~cxlctl.hostio.reader.Reader`, so ``--root`` trees and ``cxlctl record``
work the same for all of them.
"""

from __future__ import annotations

import re
import zlib
from typing import Dict, List, Optional, Tuple

from cxlctl.hostio import paths
from cxlctl.hostio.reader import Reader

#: the largest decompressed /proc/config.gz parsed (Debian's config is ~280 KiB)
CONFIG_MAX = 4 << 20

_VERSION = re.compile(r"([0-9]{1,4})\.([0-9]{1,4})")
#: a release that can name ``/boot/config-RELEASE``: no slash, no NUL, not ``.``/``..`` (no leading dot)
_FILE_RELEASE = re.compile(r"[A-Za-z0-9_+~-][A-Za-z0-9._+~-]{0,127}")


def kernel_version(release: Optional[str]) -> Optional[Tuple[int, int]]:
    """``6.12.117+deb12-amd64`` → (6, 12), ``6.1.0-57-amd64`` → (6, 1); None when unknown.

    ASCII digits only (``int()`` would take ``٦`` for 6)."""
    m = _VERSION.match(release or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def parse_config(text: str) -> Dict[str, str]:
    """``CONFIG_X=y`` and ``# CONFIG_X is not set`` (as ``n``) lines of a kernel config."""
    out: Dict[str, str] = {}
    for line in text.splitlines():
        t = line.strip()
        if t.startswith("CONFIG_"):
            k, sep, v = t.partition("=")
            if sep:
                out[k] = v.strip().strip('"')
        elif t.startswith("# CONFIG_") and t.endswith(" is not set"):
            out[t[2:-11].strip()] = "n"
    return out


def gunzip(data: bytes, limit: int = CONFIG_MAX) -> Optional[bytes]:
    """Decompress gzip ``data``, refusing output larger than ``limit`` (a bomb is not a config)."""
    try:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out = d.decompress(data, limit)
        if d.unconsumed_tail:
            return None
        return out
    except zlib.error:
        return None


def read_config(r: Reader, release: Optional[str]) -> Tuple[Optional[Dict[str, str]], Optional[str], Optional[str]]:
    """(config, the file it came from, why there is none): ``/boot/config-RELEASE`` where the
    distribution installs it (Debian up to 13's own 6.12, RHEL), else
    ``/usr/lib/modules/RELEASE/config`` (Debian 13's 6.19/7.x packaging), else
    ``/proc/config.gz`` (``CONFIG_IKCONFIG_PROC``)."""
    tried: List[str] = []
    if release and _FILE_RELEASE.fullmatch(release):
        for path in paths.config_files(release):
            text = r.text(path)
            if text:
                cfg = parse_config(text)
                if cfg:
                    return cfg, path, None
            tried.append(path)
    raw = r.raw(paths.PROC_CONFIG_GZ)
    if raw:
        data = gunzip(raw)
        if data is not None:
            cfg = parse_config(data.decode("utf-8", "replace"))
            if cfg:
                return cfg, paths.PROC_CONFIG_GZ, None
    tried.append(paths.PROC_CONFIG_GZ)
    return None, None, "no kernel config found (" + ", ".join(tried) + " absent or unreadable)"
