"""Region building: a pure planner, the sysfs programmer with full undo, and DAX onlining.

* :mod:`.topo` — the CXL port tree of an :class:`~cxlctl.model.Inventory` as
  the planner needs it (which dport of each port leads to each memdev).
* :mod:`.planner` — ``plan(inventory, request) -> Plan``: pure, checks the
  kernel's rules before anything is written.
* :mod:`.program` — programs a plan through sysfs (the sequence ``cxl
  create-region`` uses) and undoes every step on failure; tears regions down.
* :mod:`.dax` — ``daxctl reconfigure-device`` semantics: devdax ↔ system-ram,
  onlining in the requested zone, the auto-online policy, races.

See docs/regions.md.
"""
