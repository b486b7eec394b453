"""The daemon's tiering sampler is :class:`cxlctl.telemetry.sampler.Sampler`, the one ``stat`` and ``top`` use.

The loop calls :meth:`Sampler.tick` from its timer and publishes the result
with the other metrics; nothing here runs in a request.
"""

from __future__ import annotations

from cxlctl.telemetry.sampler import Sampler, Telemetry

__all__ = ["Sampler", "Telemetry"]
