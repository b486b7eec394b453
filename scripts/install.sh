#!/usr/bin/env bash
# Install cxlctl into ./.venv and show this host's CXL/NUMA status.
# Works on a fresh Debian/Ubuntu machine; uses sudo for apt only when needed.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-pip >/dev/null
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/pip install -q .
echo "installed: $(.venv/bin/cxlctl --version)  (run it as .venv/bin/cxlctl, or activate .venv)"
.venv/bin/cxlctl status
