"""Resolve and validate the ``--root`` / ``CXLCTL_ROOT`` setting (shared by all entry points)."""

from __future__ import annotations

import os
from typing import Optional

from .errors import UsageError


def resolve_root(cli_value: Optional[str]) -> str:
    root = cli_value if cli_value else os.environ.get("CXLCTL_ROOT") or "/"
    if not os.path.isdir(root):
        src = "--root" if cli_value else "CXLCTL_ROOT"
        raise UsageError(
            f"{src} {root!r} is not a directory", hint="point it at / or at a tree made by `cxlctl record`"
        )
    return os.path.abspath(root)


def under(root: str, path: str) -> str:
    """``path`` (as seen on the target host, e.g. ``/proc/sys/vm/swappiness``) under ``root``.

    The one place that maps host paths into a ``--root`` tree for writers and
    non-sysfs readers (the inventory's Reader has its own, identical rule).
    """
    return path if root == "/" else root.rstrip("/") + path
