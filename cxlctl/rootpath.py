"""Moved to :mod:`cxlctl.hostio.root` (re-exported until every caller is migrated)."""

from .hostio.root import resolve_root, under

__all__ = ["resolve_root", "under"]
