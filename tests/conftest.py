"""pytest fixtures shared by the unit tests; the helpers themselves live in tests/kit.py."""

from __future__ import annotations

from typing import Any

import pytest

# Old names, kept so a branch written against them still imports; new tests import tests.kit.
from tests.kit import FIXTURES, REPO, fixture_id, fixture_roots, status_json
from tests.kit import cli as cxlctl
from tests.kit import copy_fixture as copy_tree

__all__ = ["FIXTURES", "REPO", "copy_tree", "cxlctl", "fixture_id", "fixture_roots", "status_json"]


@pytest.fixture
def live_record(tmp_path: Any) -> str:
    """A record of the machine the tests run on (any Linux host; no CXL needed)."""
    from tests.kit import cli

    dest = str(tmp_path / "live")
    cli("record", dest, check=True)
    return dest
