"""The one sampling loop: take a sample, wait, take another, compute rates and verdicts.

Why one module: ``cxlctl stat``, ``cxlctl top`` and the daemon's metrics all
need the sample before to compute rates over the interval, and all must wait
the same way (to the previous sample's time plus the interval, not a fixed
sleep that drifts by the cost of a read).  :class:`Sampler` keeps the sample
between ticks; :func:`readings` is the paced loop ``stat`` and a piped ``top``
run; the daemon calls :meth:`Sampler.tick` from its own timer.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence

from .rates import Rates, rates
from .sample import NodeInfo, Sample
from .verdicts import Verdict, judge

if TYPE_CHECKING:
    from cxlctl.hostio.host import Host
    from cxlctl.hostio.reader import Reader

#: how one sample is read from a fresh reader (``top`` lists processes and cgroups first)
ReadFn = Callable[["Reader", Dict[int, NodeInfo]], Sample]


class Telemetry(NamedTuple):
    sample: Sample
    rates: Optional[Rates]
    verdicts: List[Verdict]


class Sampler:
    """Reads samples of ``host`` and judges each against the one before.

    ``read`` overrides how a sample is read (default: every node and the
    ``cgroups`` given); it gets the sampler's :class:`~cxlctl.hostio.reader.Reader`
    (one of its own: the daemon samples between reconciles, on its own timer),
    its directory handles closed and its notes dropped after each sample: a
    sample copies the notes it needs, and handles kept across the interval could
    be of directories gone since (an exited process, a removed cgroup).
    """

    def __init__(self, host: Host, cgroups: Sequence[str] = (), read: Optional[ReadFn] = None) -> None:
        self.host = host
        self.reader = host.new_reader()
        self.cgroups = tuple(cgroups)
        self.read = read
        self.prev: Optional[Sample] = None

    def tick(self, kinds: Dict[int, NodeInfo]) -> Telemetry:
        """Read a sample; rates and verdicts against the one before (none for the first)."""
        from .sample import read_sample

        r = self.reader
        try:
            s = self.read(r, kinds) if self.read is not None else read_sample(r, kinds, cgroups=self.cgroups)
        finally:
            r.close()
            r.notes.clear()
        rt = None if self.prev is None else rates(self.prev, s)
        self.prev = s
        return Telemetry(s, rt, judge(s, rt))

    def wait(self, every: float) -> None:
        """Sleep until ``every`` seconds after the last sample was taken (at once if none yet)."""
        if self.prev is not None:
            time.sleep(max(0.0, self.prev.time + every - time.monotonic()))


def readings(sampler: Sampler, kinds: Dict[int, NodeInfo], every: float, count: Optional[int]) -> Iterator[Telemetry]:
    """``count`` readings (forever if None), ``every`` seconds apart, the first at once."""
    n = 0
    while count is None or n < count:
        if n:
            sampler.wait(every)
        yield sampler.tick(kinds)
        n += 1
