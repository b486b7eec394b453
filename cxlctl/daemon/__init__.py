"""``cxlctl daemon``: keep a host tuned while CXL capacity comes and goes (docs/daemon.md).

Modules: :mod:`.loop` (the poll loop, signals, watchdog), :mod:`.reconcile`
(rescan, diff, enforce the profile through the tuning engine), :mod:`.notify`
(sd_notify), :mod:`.config` (``/etc/cxlctl/cxlctl.toml``), :mod:`.metrics`
(Prometheus), :mod:`.nfd` (Kubernetes node labels), :mod:`.health`
(``cxl list -H``).  Nothing here is imported by the rest of the CLI.
"""
