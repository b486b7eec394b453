#!/usr/bin/env bash
# Install cxlctl, put `cxlctl` on PATH, and show this host's CXL/NUMA status.
# Works on a fresh Debian/Ubuntu machine; uses sudo for apt only when needed.
#
#   sudo bash scripts/install.sh               install for root and every user into /opt/cxlctl
#   bash scripts/install.sh                    (not root) install for this user into ./.venv
#   bash scripts/install.sh --prefix DIR       as root: into DIR instead of /opt/cxlctl (CXLCTL_PREFIX=DIR)
#   bash scripts/install.sh --uninstall        remove exactly what the install wrote, nothing else
#
# As root (what `sudo cxlctl` and the daemon run), the code must be root's alone: whoever can change
# it, or rename a directory above it, gets root at the next `sudo cxlctl` or daemon start (issue 43,
# docs/security.md "Installation").  So the root install
#   * builds a venv in PREFIX (default /opt/cxlctl) with /usr/bin/python3, under umask 022;
#   * installs the dependencies pinned and hash-checked from scripts/install.lock
#     (pip --require-hashes), then cxlctl itself from this checkout, without build isolation
#     (nothing unpinned is fetched);
#   * refuses (exit 1, naming each reason) when PREFIX's directory, the Python, or anything
#     installed is not root-owned or is writable by group or others
#     (python -m cxlctl.hostio.trust, and every file under PREFIX);
#   * links BINDIR/cxlctl (default /usr/local/bin: root's PATH, sudo's secure_path, and what the
#     daemon's unit runs) to PREFIX/bin/cxlctl, and the man pages beside it.
# The checkout can then be removed or changed: nothing root runs lives in it.
#
# Not root: a venv in ./.venv for this user, with the link in ~/.local/bin.  A link in a directory
# root searches (/usr/local/bin: any root-owned one) is refused: that would have root run code this
# user can change.  For `sudo cxlctl`, install as root.
#
# What it writes outside the venv is listed in VENV/cxlctl-install.list, which --uninstall reads:
#   * BINDIR/cxlctl, a symbolic link (CXLCTL_BINDIR=DIR: any directory; CXLCTL_BINDIR=none: no link);
#   * links to the man pages in BINDIR/../share/man/man1 (where man(1) looks for a command found in BINDIR);
#   * shell completion for the invoking user: bash in
#     ${XDG_DATA_HOME:-~/.local/share}/bash-completion/completions/cxlctl, fish (if installed)
#     in ${XDG_CONFIG_HOME:-~/.config}/fish/completions/cxlctl.fish (as root only into a root-owned
#     home).  CXLCTL_NO_COMPLETION=1 leaves the user's dot-directories alone.
# A file it did not make is never replaced: a cxlctl that is not a link already in BINDIR
# (a `pip install` there, say) is left as it is, and the install says so.
set -euo pipefail
cd "$(dirname "$0")/.."
here=$PWD
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
PY=/usr/bin/python3
# the one trust check, run from this checkout before anything is installed (it imports only os and stat)
trust() { "$PY" -I "$here/cxlctl/hostio/trust.py" "$@"; }

prefix=${CXLCTL_PREFIX:-/opt/cxlctl}
action=install
while [ $# -gt 0 ]; do
  case "$1" in
    --uninstall) action=uninstall ;;
    --prefix) [ $# -ge 2 ] || { echo "install.sh: --prefix needs a directory" >&2; exit 2; }; prefix=$2; shift ;;
    --prefix=*) prefix=${1#--prefix=} ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "install.sh: unknown option $1 (use --uninstall, --prefix DIR, or none)" >&2; exit 2 ;;
  esac
  shift
done
case "$prefix" in /*) ;; *) echo "install.sh: --prefix must be an absolute path, not $prefix" >&2; exit 2 ;; esac
prefix=${prefix%/}
if [ -z "$SUDO" ]; then venv=$prefix; else venv=$here/.venv; fi
LIST=$venv/cxlctl-install.list

uninstall() {
  if [ ! -e "$venv" ]; then echo "install.sh: nothing to uninstall (no $venv)"; return 0; fi
  if [ -f "$LIST" ]; then
    # links and files first, then the directories the install created (deepest first, if empty)
    while IFS=$'\t' read -r kind path target; do
      case "$kind" in
        link)
          if [ -L "$path" ] && [ "$(readlink "$path")" = "$target" ]; then
            rm -f "$path" && echo "removed $path"
          elif [ -e "$path" ] || [ -L "$path" ]; then
            echo "install.sh: left $path: it no longer is the link this install made" >&2
          fi ;;
        file)
          if [ -f "$path" ] && [ ! -L "$path" ]; then rm -f "$path" && echo "removed $path"; fi ;;
      esac
    done < "$LIST"
    awk -F'\t' '$1 == "dir" { print length($2) "\t" $2 }' "$LIST" | sort -rn | cut -f2- |
      while IFS= read -r d; do
        if [ -d "$d" ] && rmdir "$d" 2>/dev/null; then echo "removed $d/"; fi
      done
  fi
  if [ -f /etc/systemd/system/cxlctl.service ]; then
    echo "install.sh: note: cxlctl.service is still installed ($(grep '^ExecStart=' /etc/systemd/system/cxlctl.service)); remove it as docs/daemon.md (\"Undo and uninstall\") says" >&2
  fi
  if [ ! -f "$LIST" ] || grep -qx 'venv' "$LIST"; then
    rm -rf "$venv" && echo "removed $venv"
  else
    "$venv/bin/pip" uninstall -q -y cxlctl && rm -rf "$venv"/share/man/man1/cxlctl*.1 "$venv/share/zsh/site-functions/_cxlctl" "$LIST"
    echo "removed cxlctl from $venv (the venv itself was there before the install: left)"
  fi
}
if [ "$action" = uninstall ]; then uninstall; exit 0; fi

if [ -z "$SUDO" ]; then bindir=/usr/local/bin; else bindir=${HOME:?}/.local/bin; fi
bindir=${CXLCTL_BINDIR-$bindir}
if [ "$bindir" != none ] && [ -n "$bindir" ]; then
  case "$bindir" in /*) ;; *) echo "install.sh: CXLCTL_BINDIR must be an absolute path, not $bindir" >&2; exit 2 ;; esac
fi

if ! "$PY" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-pip >/dev/null
fi

# nearest existing directory at or above $1
existing() { local d=$1; while [ ! -e "$d" ]; do d=$(dirname "$d"); done; echo "$d"; }

if [ -z "$SUDO" ]; then
  umask 022
  # before anything is written: what root will run must be root's alone
  if ! why=$(trust "$PY" "$(existing "$prefix")" 2>&1); then
    echo "install.sh: refusing to install for root into $prefix: another user can change it or the Python it runs:" >&2
    echo "$why" | sed 's/^/  /' >&2
    echo "  hint: choose a --prefix under a root-owned directory that only root can write (the default: /opt/cxlctl)" >&2
    exit 1
  fi
  if [ -e "$prefix" ] && [ ! -x "$prefix/bin/python" ] && [ -n "$(ls -A "$prefix")" ]; then
    echo "install.sh: $prefix exists, is not empty and holds no venv: choose another --prefix" >&2
    exit 1
  fi
else
  if [ "$bindir" != none ] && [ -n "$bindir" ] && trust "$(existing "$bindir")" >/dev/null 2>&1; then
    echo "install.sh: refusing to link cxlctl in $bindir: root searches it, and root would then run code in $venv that $(id -un) can change" >&2
    echo "  hint: for \`sudo cxlctl\` and the daemon, install as root (sudo bash scripts/install.sh: into /opt/cxlctl); for yourself, CXLCTL_BINDIR=\$HOME/.local/bin" >&2
    exit 2
  fi
fi

new_venv=0
if [ ! -x "$venv/bin/python" ]; then
  [ -n "$SUDO" ] || [ -d "$prefix" ] || { install -d -m 0755 "$prefix"; }
  "$PY" -m venv "$venv"
  new_venv=1
fi
# recorded at once: a failed install is undone by --uninstall too
touch "$LIST"
if [ "$new_venv" = 1 ]; then echo venv >> "$LIST"; fi
# a build/ left by an earlier install would be reused with stale modules
rm -rf build ./*.egg-info
if [ -z "$SUDO" ]; then
  # pinned and hash-checked dependencies, setuptools among them: nothing unpinned is fetched
  "$venv/bin/pip" install -q --require-hashes --no-deps --no-build-isolation -r scripts/install.lock
  "$venv/bin/pip" install -q --no-deps --no-build-isolation .
else
  "$venv/bin/pip" install -q .
fi
rm -rf build ./*.egg-info  # setuptools' leftovers in the checkout: the install needs none of them

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
  for d in "${missing[@]}"; do mkdir "$d"; record dir "$d"; done
}
# link TARGET NAME: NAME -> TARGET, unless NAME is a file (or directory) this install did not make
link() {
  if [ -e "$2" ] && [ ! -L "$2" ]; then
    echo "install.sh: left $2 as it is (not a link made by this script); $1 is the one installed here" >&2
    return 1
  fi
  ln -sfn "$1" "$2"
  record link "$2" "$1"
}

# man pages: man(1) maps <dir>/bin on PATH to <dir>/share/man
man_src=$("$venv/bin/python" -I -c 'from cxlctl.manpage import shipped_dir; print(shipped_dir())')
mkdir -p "$venv/share/man/man1" "$venv/share/zsh/site-functions"
cp "$man_src"/*.1 "$venv/share/man/man1/"
"$venv/bin/cxlctl" completion zsh > "$venv/share/zsh/site-functions/_cxlctl"

if [ -z "$SUDO" ]; then
  # everything root will run: root's, and nobody else's to write (each file, and the paths above)
  bad=$(find "$venv" \( ! -user 0 -o \( -perm /022 ! -type l \) \) -print | head -n 5)
  if [ -n "$bad" ] || ! why=$("$venv/bin/python" -I -m cxlctl.hostio.trust "$venv/bin/cxlctl" "$venv/bin/python" \
      "$("$venv/bin/python" -I -c 'import cxlctl, os; print(os.path.dirname(cxlctl.__file__))')" 2>&1); then
    echo "install.sh: the install in $venv is not root's alone; refusing to link it:" >&2
    { [ -z "$bad" ] || echo "$bad" | sed 's/$/: not root-owned, or writable by group or others/'; echo "${why:-}"; } | sed '/^$/d; s/^/  /' >&2
    exit 1
  fi
fi

on_path=""
if [ "$bindir" != none ] && [ -n "$bindir" ]; then
  mkdirs "$bindir"
  if link "$venv/bin/cxlctl" "$bindir/cxlctl"; then
    on_path="$bindir/cxlctl"
    mandir=$(dirname "$bindir")/share/man/man1
    mkdirs "$mandir"
    for m in "$venv"/share/man/man1/*.1; do link "$m" "$mandir/$(basename "$m")" || true; done
  fi
fi

# as root, only into a home that is root's own (writing into another user's dot-directories as root
# would follow their links)
if [ "${CXLCTL_NO_COMPLETION:-0}" != 1 ] && [ -n "${HOME:-}" ] && { [ -n "$SUDO" ] || trust "$HOME" >/dev/null 2>&1; }; then
  data=${XDG_DATA_HOME:-$HOME/.local/share}
  mkdirs "$data/bash-completion/completions"
  "$venv/bin/cxlctl" completion bash > "$data/bash-completion/completions/cxlctl"
  record file "$data/bash-completion/completions/cxlctl"
  echo "bash completion: $data/bash-completion/completions/cxlctl (CXLCTL_NO_COMPLETION=1 skips it)"
  if command -v fish >/dev/null 2>&1; then
    fishdir=${XDG_CONFIG_HOME:-$HOME/.config}/fish/completions
    mkdirs "$fishdir"
    "$venv/bin/cxlctl" completion fish > "$fishdir/cxlctl.fish"
    record file "$fishdir/cxlctl.fish"
    echo "fish completion: $fishdir/cxlctl.fish"
  fi
fi

echo "installed: $("$venv/bin/cxlctl" --version) in $venv"
if [ -n "$on_path" ]; then
  echo "command: $on_path -> $venv/bin/cxlctl (man pages beside it, in $(dirname "$bindir")/share/man)"
  case ":$PATH:" in
    *":$bindir:"*) ;;
    *) if [ "$bindir" = "${HOME:-}/.local/bin" ]; then
         echo "note: $bindir is not on this shell's PATH yet: the next login shell has it (Debian/Ubuntu ~/.profile), or add it"
       else
         echo "note: $bindir is not on this shell's PATH: add it, or run $on_path"
       fi ;;
  esac
  if [ -n "$SUDO" ]; then
    echo "note: this install is yours: \`sudo cxlctl\` and the daemon need the root install (sudo bash scripts/install.sh)"
  fi
else
  echo "command: $venv/bin/cxlctl (no link on PATH was made)"
fi
undo="bash scripts/install.sh"
if [ -z "$SUDO" ] && [ "$prefix" != /opt/cxlctl ]; then undo="$undo --prefix $prefix"; fi
echo "undo: $undo --uninstall"
"$venv/bin/cxlctl" status
