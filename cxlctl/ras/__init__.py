"""RAS: the kernel's CXL error events, poison and device health, mapped onto the
inventory (memdev → region → node → memory block → processes).

* :mod:`.trace` -- parser of the ``cxl`` trace event lines (robust: counted errors);
* :mod:`.events` -- normalised events and the DPA/HPA → region/node/block mapping;
* :mod:`.collect` -- sources: the collection instance, ``--follow``, saved files;
* :mod:`.health` -- per-memdev health, poison list, event counts, fault domain;
* :mod:`.health_probe` -- the ``cxl list -H`` probe and its ok/warning/critical rules
  (the daemon's metrics and NFD labels use them too);
* :mod:`.text` -- plain-text rendering.
"""
