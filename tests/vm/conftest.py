"""pytest wiring for the VM tier.

Registers the ``vm`` marker (boots QEMU; slow) and puts the checkout root on
``sys.path`` so tests can ``from tests.vm.harness import ...`` however pytest
was started (tests/ itself has no ``__init__.py`` because the unit tests do
``from conftest import ...``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_REPO = str(Path(__file__).resolve().parents[2])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "vm: boots a QEMU guest with a real CXL kernel stack (slow)")
