#!/usr/bin/env bash
# Install cxlctl into ./.venv, put `cxlctl` on PATH, and show this host's CXL/NUMA status.
# Works on a fresh Debian/Ubuntu machine; uses sudo for apt (and a link it cannot write) only when needed.
#
#   bash scripts/install.sh               install (again: updates the install in place)
#   bash scripts/install.sh --uninstall   remove exactly what the install wrote, nothing else
#
# What it writes (every path outside ./.venv is listed in .venv/cxlctl-install.list, which
# --uninstall reads):
#   * ./.venv: the package and its dependencies, the man pages (.venv/share/man/man1) and the
#     zsh completion (.venv/share/zsh/site-functions/_cxlctl);
#   * BINDIR/cxlctl, a symbolic link to .venv/bin/cxlctl.  BINDIR is /usr/local/bin when run as
#     root: on root's PATH, in sudo's secure_path, and what the daemon's unit runs
#     (systemd/cxlctl.service, ExecStart=/usr/local/bin/cxlctl).  For another user it is
#     ~/.local/bin (Debian's and Ubuntu's ~/.profile put it on PATH at login once it exists);
#     `sudo cxlctl` does not look there: CXLCTL_BINDIR=/usr/local/bin makes the link there
#     (through sudo).  CXLCTL_BINDIR=DIR: any directory; CXLCTL_BINDIR=none: no link;
#   * links to the man pages in BINDIR/../share/man/man1 (where man(1) looks for a command
#     found in BINDIR);
#   * shell completion for the invoking user: bash in
#     ${XDG_DATA_HOME:-~/.local/share}/bash-completion/completions/cxlctl, fish (if installed)
#     in ${XDG_CONFIG_HOME:-~/.config}/fish/completions/cxlctl.fish.  CXLCTL_NO_COMPLETION=1
#     leaves the user's dot-directories alone.
# A file it did not make is never replaced: a cxlctl that is not a link already in BINDIR
# (a `pip install` there, say) is left as it is, and the install says so.
set -euo pipefail
cd "$(dirname "$0")/.."
here=$PWD
LIST=.venv/cxlctl-install.list
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"

# run "$@" through sudo when the directory $1 cannot be written by this user
as_owner() { local d=$1; shift; if [ -w "$d" ] || [ -z "$SUDO" ]; then "$@"; else $SUDO "$@"; fi; }

uninstall() {
  if [ ! -e .venv ]; then echo "install.sh: nothing to uninstall (no .venv in $here)"; return 0; fi
  if [ -f "$LIST" ]; then
    # links and files first, then the directories the install created (deepest first, if empty)
    while IFS=$'\t' read -r kind path target; do
      case "$kind" in
        link)
          if [ -L "$path" ] && [ "$(readlink "$path")" = "$target" ]; then
            as_owner "$(dirname "$path")" rm -f "$path" && echo "removed $path"
          elif [ -e "$path" ] || [ -L "$path" ]; then
            echo "install.sh: left $path: it no longer is the link this install made" >&2
          fi ;;
        file)
          if [ -f "$path" ]; then rm -f "$path" && echo "removed $path"; fi ;;
      esac
    done < "$LIST"
    awk -F'\t' '$1 == "dir" { print length($2) "\t" $2 }' "$LIST" | sort -rn | cut -f2- |
      while IFS= read -r d; do
        if [ -d "$d" ] && as_owner "$(dirname "$d")" rmdir "$d" 2>/dev/null; then
          echo "removed $d/"
        fi
      done
  fi
  if [ -f /etc/systemd/system/cxlctl.service ]; then
    echo "install.sh: note: cxlctl.service is still installed ($(grep '^ExecStart=' /etc/systemd/system/cxlctl.service)); remove it as docs/daemon.md (\"Undo and uninstall\") says" >&2
  fi
  if [ ! -f "$LIST" ] || grep -qx 'venv' "$LIST"; then
    rm -rf .venv && echo "removed $here/.venv"
  else
    .venv/bin/pip uninstall -q -y cxlctl && rm -rf .venv/share/man/man1/cxlctl*.1 .venv/share/zsh/site-functions/_cxlctl "$LIST"
    echo "removed cxlctl from $here/.venv (the venv itself was there before the install: left)"
  fi
}

case "${1:-}" in
  --uninstall) uninstall; exit 0 ;;
  "") ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
  *) echo "install.sh: unknown option $1 (use --uninstall, or none)" >&2; exit 2 ;;
esac

if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-pip >/dev/null
fi
new_venv=0
[ -x .venv/bin/python ] || { python3 -m venv .venv; new_venv=1; }
.venv/bin/pip install -q --upgrade pip >/dev/null 2>&1 || true
# a build/ left by an earlier install would be reused with stale modules
rm -rf build ./*.egg-info
.venv/bin/pip install -q .
rm -rf build ./*.egg-info  # setuptools' leftovers in the checkout: the install needs none of them
touch "$LIST"
if [ "$new_venv" = 1 ]; then echo venv >> "$LIST"; fi

# record KIND PATH [TARGET]: what --uninstall removes (one line per path, tab-separated)
record() {
  awk -F'\t' -v p="$2" '$2 != p' "$LIST" > "$LIST.new"
  printf '%s\t%s\t%s\n' "$1" "$2" "${3:-}" >> "$LIST.new"
  mv "$LIST.new" "$LIST"
}
# mkdirs DIR: create DIR and its missing parents, recording each one created
mkdirs() {
  local d=$1 missing=()
  while [ ! -d "$d" ]; do missing=("$d" "${missing[@]}"); d=$(dirname "$d"); done
  for d in "${missing[@]}"; do as_owner "$(dirname "$d")" mkdir "$d"; record dir "$d"; done
}
# link TARGET NAME: NAME -> TARGET, unless NAME is a file (or directory) this install did not make
link() {
  if [ -e "$2" ] && [ ! -L "$2" ]; then
    echo "install.sh: left $2 as it is (not a link made by this script); $1 is the one installed here" >&2
    return 1
  fi
  as_owner "$(dirname "$2")" ln -sfn "$1" "$2"
  record link "$2" "$1"
}

# man pages: man(1) maps <dir>/bin on PATH to <dir>/share/man
man_src=$(.venv/bin/python -I -c 'from cxlctl.manpage import shipped_dir; print(shipped_dir())')
mkdir -p .venv/share/man/man1 .venv/share/zsh/site-functions
cp "$man_src"/*.1 .venv/share/man/man1/
.venv/bin/cxlctl completion zsh > .venv/share/zsh/site-functions/_cxlctl

if [ -z "$SUDO" ]; then bindir=/usr/local/bin; else bindir=${HOME:?}/.local/bin; fi
bindir=${CXLCTL_BINDIR-$bindir}
on_path=""
if [ "$bindir" != none ] && [ -n "$bindir" ]; then
  case "$bindir" in /*) ;; *) echo "install.sh: CXLCTL_BINDIR must be an absolute path, not $bindir" >&2; exit 2 ;; esac
  mkdirs "$bindir"
  if link "$here/.venv/bin/cxlctl" "$bindir/cxlctl"; then
    on_path="$bindir/cxlctl"
    mandir=$(dirname "$bindir")/share/man/man1
    mkdirs "$mandir"
    for m in .venv/share/man/man1/*.1; do link "$here/$m" "$mandir/$(basename "$m")" || true; done
  fi
fi

if [ "${CXLCTL_NO_COMPLETION:-0}" != 1 ] && [ -n "${HOME:-}" ]; then
  data=${XDG_DATA_HOME:-$HOME/.local/share}
  mkdirs "$data/bash-completion/completions"
  .venv/bin/cxlctl completion bash > "$data/bash-completion/completions/cxlctl"
  record file "$data/bash-completion/completions/cxlctl"
  echo "bash completion: $data/bash-completion/completions/cxlctl (CXLCTL_NO_COMPLETION=1 skips it)"
  if command -v fish >/dev/null 2>&1; then
    fishdir=${XDG_CONFIG_HOME:-$HOME/.config}/fish/completions
    mkdirs "$fishdir"
    .venv/bin/cxlctl completion fish > "$fishdir/cxlctl.fish"
    record file "$fishdir/cxlctl.fish"
    echo "fish completion: $fishdir/cxlctl.fish"
  fi
fi

echo "installed: $(.venv/bin/cxlctl --version) in $here/.venv"
if [ -n "$on_path" ]; then
  echo "command: $on_path -> $here/.venv/bin/cxlctl (man pages beside it, in $(dirname "$bindir")/share/man)"
  case ":$PATH:" in
    *":$bindir:"*) ;;
    *) if [ "$bindir" = "${HOME:-}/.local/bin" ]; then
         echo "note: $bindir is not on this shell's PATH yet: the next login shell has it (Debian/Ubuntu ~/.profile), or add it"
       else
         echo "note: $bindir is not on this shell's PATH: add it, or run $on_path"
       fi ;;
  esac
  if [ -n "$SUDO" ] && [ "$bindir" != /usr/local/bin ]; then
    echo "note: sudo does not search $bindir; for \`sudo cxlctl\`: CXLCTL_BINDIR=/usr/local/bin bash scripts/install.sh"
  fi
else
  echo "command: $here/.venv/bin/cxlctl (no link on PATH was made)"
fi
echo "undo: bash scripts/install.sh --uninstall"
.venv/bin/cxlctl status
