"""Reading an engine's own argument list (``--name V`` / ``--name=V``) and its version string.

A module of its own because both the engine specifics (:mod:`.engines`) and the devdax
arena (:mod:`.devdax`) need them, and :mod:`.engines` builds on :mod:`.devdax`: here
neither has to import the other back.
"""

from __future__ import annotations

import re
from typing import Optional, Sequence, Tuple


def version_tuple(v: Optional[str]) -> Optional[Tuple[int, ...]]:
    if not v:
        return None
    m = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", v.strip())
    if not m:
        return None
    return tuple(int(x) for x in m.groups() if x is not None)


def opt_value(args: Sequence[str], names: Sequence[str]) -> Optional[str]:
    """Value of the last ``--name V`` / ``--name=V`` among ``args``."""
    val = None
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                val = args[i + 1]
            elif a.startswith(n + "="):
                val = a[len(n) + 1 :]
    return val


def has_opt(args: Sequence[str], names: Sequence[str]) -> bool:
    return any(a in names or any(a.startswith(n + "=") for n in names) for a in args)
