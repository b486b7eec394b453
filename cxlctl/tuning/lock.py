"""Moved to :mod:`cxlctl.hostio.lock` (re-exported until every caller is migrated)."""

from cxlctl.hostio.lock import Locked, TuneLock, holder, is_held
from cxlctl.hostio.paths import LOCK

__all__ = ["LOCK", "Locked", "TuneLock", "holder", "is_held"]
