"""pytest fixtures shared by the unit tests; the helpers themselves live in tests/kit.py."""

from __future__ import annotations

import os
from typing import Any

import pytest

# the CXLCTL_TEST_* hooks are honoured only with this flag (and under a --root tree other than /:
# cxlctl.hostio.testhooks); the unit tests use them on their tree copies, in process and in children
os.environ["CXLCTL_TEST_HOOKS"] = "1"


@pytest.fixture
def live_record(tmp_path: Any) -> str:
    """A record of the machine the tests run on (any Linux host; no CXL needed), with its processes
    (``--include-process-data``: the telemetry tests read them)."""
    from tests.kit import cli

    dest = str(tmp_path / "live")
    cli("record", "--include-process-data", dest, check=True)
    return dest


@pytest.fixture
def fakes(tmp_path: Any, monkeypatch: Any) -> Any:
    """Fake engines (``tests.launch_support.Fakes``) on ``PATH`` for the test's life."""
    from tests.launch_support import Fakes

    f = Fakes(str(tmp_path / "fakes"))
    for k, v in f.env().items():
        monkeypatch.setenv(k, v)
    return f
