"""Moved to :mod:`cxlctl.hostio.atomic` (kept until the daemon is migrated)."""

from __future__ import annotations

import os

from cxlctl.hostio.atomic import atomic_write


def atomic_replace(directory: str, name: str, text: str, mode: int = 0o644) -> str:
    return atomic_write(os.path.join(directory, name), text, mode=mode, sync_dir=False)
