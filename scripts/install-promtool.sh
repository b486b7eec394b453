#!/usr/bin/env bash
# Install promtool (Debian's `prometheus` package, bookworm: 2.42) for the tests that check the daemon's
# metrics (`promtool check metrics`) and the alert rules (`promtool test rules`): tests/test_telemetry_metrics.py.
# Only the promtool binary is extracted into $CXLCTL_PROMTOOL_DIR (default /var/cache/cxlctl-vm/promtool):
# installing the package would also install and start a Prometheus server. Idempotent; needs root (apt).
set -euo pipefail
DIR=${CXLCTL_PROMTOOL_DIR:-/var/cache/cxlctl-vm/promtool}
if [ -x "$DIR/promtool" ] && "$DIR/promtool" --version >/dev/null 2>&1; then exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
if ! apt-get download prometheus >/dev/null 2>&1; then
  apt-get update -qq
  apt-get download prometheus >/dev/null
fi
dpkg-deb -x prometheus_*.deb x
mkdir -p "$DIR"
install -m 0755 x/usr/bin/promtool "$DIR/promtool"
"$DIR/promtool" --version | head -n1
