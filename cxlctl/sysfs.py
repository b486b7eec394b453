"""Moved to :mod:`cxlctl.hostio.reader` (re-exported until every caller is migrated)."""

from .hostio.reader import Reader, Vanished, natural_key

__all__ = ["Reader", "Vanished", "natural_key"]
