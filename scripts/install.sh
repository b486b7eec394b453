#!/usr/bin/env bash
# Install cxlctl into ./.venv and show this host's CXL/NUMA status.
# Works on a fresh Debian/Ubuntu machine; uses sudo for apt only when needed.
# Also installs the man pages (.venv/share/man: `man cxlctl` once .venv/bin is on
# PATH) and shell completion for the invoking user (bash, fish; zsh file under
# .venv/share/zsh).  CXLCTL_NO_COMPLETION=1 leaves the user's dot-directories alone.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-pip >/dev/null
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip >/dev/null 2>&1 || true
# a build/ left by an earlier install would be reused with stale modules
rm -rf build ./*.egg-info
.venv/bin/pip install -q .
# man pages: man(1) maps <dir>/bin on PATH to <dir>/share/man
man_src=$(.venv/bin/python -c 'from cxlctl.manpage import shipped_dir; print(shipped_dir())')
mkdir -p .venv/share/man/man1 .venv/share/zsh/site-functions
cp "$man_src"/*.1 .venv/share/man/man1/
.venv/bin/cxlctl completion zsh > .venv/share/zsh/site-functions/_cxlctl
if [ "${CXLCTL_NO_COMPLETION:-0}" != 1 ] && [ -n "${HOME:-}" ]; then
  data=${XDG_DATA_HOME:-$HOME/.local/share}
  mkdir -p "$data/bash-completion/completions"
  .venv/bin/cxlctl completion bash > "$data/bash-completion/completions/cxlctl"
  if command -v fish >/dev/null 2>&1; then
    mkdir -p "${XDG_CONFIG_HOME:-$HOME/.config}/fish/completions"
    .venv/bin/cxlctl completion fish > "${XDG_CONFIG_HOME:-$HOME/.config}/fish/completions/cxlctl.fish"
  fi
fi
echo "installed: $(.venv/bin/cxlctl --version)  (run it as .venv/bin/cxlctl, or put $PWD/.venv/bin on PATH for \`man cxlctl\` and completion)"
.venv/bin/cxlctl status
