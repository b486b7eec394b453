"""The daemon's tiering sampler: one :mod:`cxlctl.telemetry` sample per ``metrics.telemetry_interval``.

Why a class: rates and the interval verdicts (promotion throttled, ping-pong)
need the sample before, so the sampler keeps it between timer ticks.  The
loop calls :meth:`Sampler.tick` from its timer and publishes the result with
the other metrics; nothing here runs in a request.
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Sequence

from cxlctl.telemetry.rates import Rates, rates
from cxlctl.telemetry.sample import NodeInfo, Sample
from cxlctl.telemetry.verdicts import Verdict, judge


class Telemetry(NamedTuple):
    sample: Sample
    rates: Optional[Rates]
    verdicts: List[Verdict]


class Sampler:
    def __init__(self, root: str, cgroups: Sequence[str] = ()) -> None:
        self.root = root
        self.cgroups = tuple(cgroups)
        self.prev: Optional[Sample] = None

    def tick(self, kinds: Dict[int, NodeInfo]) -> Telemetry:
        """Read a sample; rates and verdicts against the one before (none for the first)."""
        from cxlctl.hostio.reader import Reader
        from cxlctl.telemetry.sample import read_sample

        r = Reader(self.root)
        try:
            s = read_sample(r, kinds, cgroups=self.cgroups)
        finally:
            r.close()
        rt = None if self.prev is None else rates(self.prev, s)
        self.prev = s
        return Telemetry(s, rt, judge(s, rt))
