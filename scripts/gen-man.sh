#!/usr/bin/env bash
# Regenerate the man pages in cxlctl/man/ from the CLI's own help (cxlctl/manpage.py).
# Run after changing any command, option or help text; tests/test_shell_docs.py fails
# while the committed pages are stale.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-.venv/bin/python}" -m cxlctl.manpage cxlctl/man
