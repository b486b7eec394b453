"""pytest wiring for the VM tier.

Registers the ``vm`` marker (boots QEMU; slow).  ``tests`` is a package, so
pytest puts the checkout root on ``sys.path`` and every helper has one import
path (``tests.vm.harness``, ``tests.kit``).
"""

from __future__ import annotations

from typing import Any

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "vm: boots a QEMU guest with a real CXL kernel stack (slow)")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say which guests were booted again (pytest hides a passing test's stderr)."""
    from tests.vm.harness import RETRIES

    if RETRIES:
        terminalreporter.write_sep("-", f"VM boots retried ({len(RETRIES)})")
        for line in RETRIES:
            terminalreporter.write_line(line)
