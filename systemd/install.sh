#!/usr/bin/env bash
# Install the cxlctl daemon as a systemd service (docs/daemon.md, "Install").
#
#   sudo systemd/install.sh            install, enable and start cxlctl.service
#   sudo systemd/install.sh --no-start install and enable only
#   DESTDIR=/tmp/stage systemd/install.sh --no-start   stage the files (packaging, tests)
#
# What it does:
#   * copies systemd/cxlctl.service to /etc/systemd/system/, with ExecStart pointing at
#     the cxlctl this shell finds ($CXLCTL, else `command -v cxlctl`), and ProtectHome=read-only
#     instead of yes when that cxlctl or its Python lives under /home, /root or /run/user,
#     and PrivateTmp=no instead of yes when it lives under /tmp or /var/tmp;
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
# ProtectHome=yes hides /home, /root and /run/user from the service: a cxlctl (or the Python
# it runs on) installed there (pipx's ~/.local, pyenv's ~/.pyenv, a venv in a home folder) could
# not even be executed (status 203/EXEC).  Then the unit gets ProtectHome=read-only instead.
# PrivateTmp=yes gives the service an empty /tmp and /var/tmp: a cxlctl installed there (a
# checkout under /tmp, as scripts/ci-fresh.sh makes) would fail the same way.  Then PrivateTmp=no.
PROTECT_HOME=yes
PRIVATE_TMP=yes
INTERP=$(head -c 256 "$BIN" | sed -n '1s/^#![[:space:]]*\([^[:space:]]*\).*/\1/p')
for p in "$BIN" "$(readlink -f "$BIN")" ${INTERP:+"$INTERP"} ${INTERP:+"$(readlink -f "$INTERP")"}; do
  case "$p" in
    /home/* | /root/* | /run/user/*)
      if [ "$PROTECT_HOME" = yes ]; then
        PROTECT_HOME=read-only
        echo "install.sh: $p is under a home folder: the unit gets ProtectHome=read-only (not yes) so systemd can run it" >&2
      fi ;;
    /tmp/* | /var/tmp/*)
      if [ "$PRIVATE_TMP" = yes ]; then
        PRIVATE_TMP=no
        echo "install.sh: $p is under /tmp: the unit gets PrivateTmp=no (not yes) so systemd can run it" >&2
      fi ;;
  esac
done
install -d -m 0755 "$DEST/etc/systemd/system" "$DEST/etc/cxlctl"
sed -e "s#^ExecStart=/usr/local/bin/cxlctl #ExecStart=$BIN #" -e "s#^ProtectHome=yes\$#ProtectHome=$PROTECT_HOME#" \
  -e "s#^PrivateTmp=yes\$#PrivateTmp=$PRIVATE_TMP#" \
  cxlctl.service > "$DEST/etc/systemd/system/cxlctl.service.tmp"
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
