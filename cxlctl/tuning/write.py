"""Moved to :mod:`cxlctl.hostio.write`: this name is that very module until every caller is migrated."""

import sys

from cxlctl.hostio import write as _moved
from cxlctl.hostio.write import KnobBusy as KnobBusy
from cxlctl.hostio.write import KnobError as KnobError
from cxlctl.hostio.write import pause_hook as pause_hook
from cxlctl.hostio.write import read_raw as read_raw
from cxlctl.hostio.write import write_knob as write_knob
from cxlctl.hostio.write import write_with_retry as write_with_retry

sys.modules[__name__] = _moved
