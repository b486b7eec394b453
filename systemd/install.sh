#!/usr/bin/env bash
# Install the cxlctl daemon as a systemd service (docs/daemon.md, "Install").
#
#   sudo systemd/install.sh            install, enable and start cxlctl.service
#   sudo systemd/install.sh --no-start install and enable only
#   DESTDIR=/tmp/stage systemd/install.sh --no-start   stage the files (packaging, tests)
#
# What it does:
#   * copies systemd/cxlctl.service to /etc/systemd/system/, with ExecStart pointing at
#     the cxlctl this shell finds ($CXLCTL, else `command -v cxlctl`);
#   * refuses (exit 1) a cxlctl the unit could not run as shipped (ProtectHome=yes, PrivateTmp=yes:
#     one under /home, /root, /run/user, /tmp or /var/tmp), or one another user can change: every
#     component of its path, its real path and its Python's must be root-owned and not writable by
#     group or others (python -m cxlctl.hostio.trust; docs/security.md, "Installation").
#     `sudo bash scripts/install.sh` installs such a cxlctl into /opt/cxlctl;
#   * writes /etc/cxlctl/cxlctl.toml from the commented example, unless one exists;
#   * systemctl daemon-reload + enable [--now] (skipped with DESTDIR).
# Undo: docs/daemon.md, "Uninstall".
set -euo pipefail
cd "$(dirname "$0")"
START=1
for a in "$@"; do
  case "$a" in
    --no-start) START=0 ;;
    -h|--help) sed -n '2,/^# Undo/p' "$(basename "$0")"; exit 0 ;;
    *) echo "install.sh: unknown option $a" >&2; exit 2 ;;
  esac
done
DEST=${DESTDIR:-}
BIN=${CXLCTL:-$(command -v cxlctl || true)}
if [ -z "$BIN" ] || [ ! -x "$BIN" ]; then
  echo "install.sh: no cxlctl executable found; install cxlctl first (pip install .) or set CXLCTL=/path/to/cxlctl" >&2
  exit 1
fi
case "$BIN" in /*) ;; *) BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN") ;; esac
if [ -z "$DEST" ] && [ "$(id -u)" != 0 ]; then
  echo "install.sh: run as root (or set DESTDIR to stage the files)" >&2
  exit 1
fi
# The daemon runs as root: whoever can change its code (or rename a directory above it) gets root at
# its next start.  ProtectHome=yes and PrivateTmp=yes stay: code that needs them relaxed lives where
# users write, which is the very thing refused here.
INTERP=$(head -c 256 "$BIN" | sed -n '1s/^#![[:space:]]*\([^[:space:]]*\).*/\1/p')
for p in "$BIN" "$(readlink -f "$BIN")" ${INTERP:+"$INTERP"} ${INTERP:+"$(readlink -f "$INTERP")"}; do
  case "$p" in
    /home/* | /root/* | /run/user/* | /tmp/* | /var/tmp/*)
      echo "install.sh: refusing $BIN: $p lies under a home folder or a temporary directory, which the unit hides (ProtectHome=yes, PrivateTmp=yes) and where users write" >&2
      echo "  hint: install cxlctl as root into /opt/cxlctl (sudo bash scripts/install.sh), then CXLCTL=/opt/cxlctl/bin/cxlctl" >&2
      exit 1 ;;
  esac
done
if ! why=$(/usr/bin/python3 -I ../cxlctl/hostio/trust.py "$BIN" ${INTERP:+"$INTERP"} 2>&1); then
  echo "install.sh: refusing $BIN: another user can change what the daemon would run as root:" >&2
  echo "$why" | sed 's/^/  /' >&2
  echo "  hint: install cxlctl as root into /opt/cxlctl (sudo bash scripts/install.sh), then CXLCTL=/opt/cxlctl/bin/cxlctl" >&2
  exit 1
fi
install -d -m 0755 "$DEST/etc/systemd/system" "$DEST/etc/cxlctl"
sed -e "s#^ExecStart=/usr/local/bin/cxlctl #ExecStart=$BIN #" cxlctl.service > "$DEST/etc/systemd/system/cxlctl.service.tmp"
chmod 0644 "$DEST/etc/systemd/system/cxlctl.service.tmp"
mv "$DEST/etc/systemd/system/cxlctl.service.tmp" "$DEST/etc/systemd/system/cxlctl.service"
if [ ! -e "$DEST/etc/cxlctl/cxlctl.toml" ]; then
  install -m 0644 cxlctl.toml.example "$DEST/etc/cxlctl/cxlctl.toml"
fi
echo "installed $DEST/etc/systemd/system/cxlctl.service (ExecStart=$BIN daemon run)"
if [ -z "$DEST" ]; then
  "$BIN" daemon config > /dev/null  # refuse to start with a bad configuration
  systemctl daemon-reload
  if [ "$START" = 1 ]; then
    systemctl enable --now cxlctl.service
    systemctl --no-pager status cxlctl.service | head -n 5 || true
  else
    systemctl enable cxlctl.service
  fi
fi
