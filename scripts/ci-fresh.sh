#!/usr/bin/env bash
# Run CI exactly as it runs after a session stops: a fresh clone of the committed
# HEAD in a new folder, a copy of shared/ beside it, an empty environment with
# CI's minimal PATH, then `CI=true bash .ci/run`.  Catches every step that only
# works because of something left on this machine (a venv, PATH entries, pip
# settings in the shell, an exported variable).  Run it before stopping.
#
#   scripts/ci-fresh.sh            # clone HEAD, run .ci/run, log to <dir>/ci.log
#   scripts/ci-fresh.sh --cold     # also an empty VM cache: downloads QEMU's kernels again
#   scripts/ci-fresh.sh -- -k vm   # extra arguments go to pytest (through .ci/run)
#   scripts/ci-fresh.sh --path "$PATH" --env CXLCTL_PYTHON=python3
#                                  # another PATH, and variables set in the empty environment: CI's own
#                                  # log shows pyenv's python3 (3.11.7) where the minimal PATH finds
#                                  # Debian's (3.11.2), so CI's PATH is not quite the minimal one
#
# Exit status is .ci/run's.  The clone is left in place for inspection and its
# path printed; remove it with `rm -rf`.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cold=0
ci_path=/usr/sbin:/usr/bin:/sbin:/bin
extra_env=()
while [ $# -gt 0 ]; do
  case $1 in
    --cold) cold=1; shift ;;
    --path) ci_path=$2; shift 2 ;;
    --env) extra_env+=("$2"); shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "ci-fresh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -n "$(git -C "$here" status --porcelain --untracked-files=no)" ]; then
  echo "ci-fresh: note: uncommitted changes are not part of the run (CI clones what is committed)" >&2
fi
work=$(mktemp -d /tmp/cxlctl-ci.XXXXXX)
git clone -q "$here" "$work/main"
shared=$(cd "$here/.." && pwd)/shared
if [ -d "$shared" ]; then
  cp -r "$shared" "$work/shared"
  chmod -R a-w "$work/shared"
fi
if [ "$cold" = 1 ]; then extra_env+=("CXLCTL_VM_CACHE=$work/vm-cache"); fi
echo "ci-fresh: $(git -C "$work/main" log --oneline -1) in $work/main; log: $work/ci.log" >&2
start=$(date +%s)
set +e
(cd "$work/main" && env -i PATH="$ci_path" CI=true "${extra_env[@]}" \
   bash .ci/run "$@" </dev/null) >"$work/ci.log" 2>&1
rc=$?
set -e
tail -n 5 "$work/ci.log" >&2
echo "ci-fresh: exit $rc after $(( $(date +%s) - start )) s; log: $work/ci.log" >&2
exit "$rc"
