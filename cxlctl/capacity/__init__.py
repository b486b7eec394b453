"""CXL capacity that comes and goes: what could be given back to the pool, what blocks it (docs/capacity.md)."""
