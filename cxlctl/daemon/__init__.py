"""``cxlctl daemon``: keep a host tuned while CXL capacity comes and goes (docs/daemon.md).

Modules: :mod:`.loop` (the poll loop, signals, watchdog), :mod:`.reconcile`
(rescan, diff, enforce the profile through the tuning engine), :mod:`.notify`
(sd_notify), :mod:`.metrics` (Prometheus).  What the daemon shares with the commands
lives below it: :mod:`cxlctl.config` (``/etc/cxlctl/cxlctl.toml``), :mod:`cxlctl.k8s.nfd`
(Kubernetes node labels), :mod:`cxlctl.ras.health_probe` (``cxl list -H``).  Nothing
outside the daemon and the CLI imports this package (tests/test_core_structure.py).
"""
