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
#   scripts/ci-fresh.sh --cpus 1      # the whole run in a cgroup with 1 CPU of time in all (cpu.max, or
#                                  # cpu.cfs_quota_us on cgroup v1): two cores at half speed, as on the
#                                  # slowest CI machine seen; prints the CPU time the run used (root)
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
cpus=""
ci_path=/usr/sbin:/usr/bin:/sbin:/bin
extra_env=()
while [ $# -gt 0 ]; do
  case $1 in
    --cold) cold=1; shift ;;
    --path) ci_path=$2; shift 2 ;;
    --env) extra_env+=("$2"); shift 2 ;;
    --cpus) cpus=$2; shift 2
      case $cpus in ''|*[!0-9.]*) echo "ci-fresh: --cpus takes a number of CPUs, such as 1 or 1.5" >&2; exit 2 ;; esac ;;
    --) shift; break ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
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
# --cpus: this shell (and so the whole run) into a cgroup of its own with that much CPU time per period
cg=""
if [ -n "$cpus" ]; then
  quota=$(awk -v c="$cpus" 'BEGIN { printf "%d", c * 100000 }')
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then  # cgroup v2
    cg=/sys/fs/cgroup/cxlctl-ci-fresh.$$
    echo +cpu > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
    mkdir "$cg" && echo "$quota 100000" > "$cg/cpu.max" && echo $$ > "$cg/cgroup.procs"
    used() { awk '/^usage_usec/ { printf "%d", $2 / 1000000 }' "$cg/cpu.stat"; }
  else  # cgroup v1: the cpu and cpuacct hierarchies
    cg=/sys/fs/cgroup/cpu/cxlctl-ci-fresh.$$; acct=/sys/fs/cgroup/cpuacct/cxlctl-ci-fresh.$$
    mkdir "$cg" "$acct" && echo 100000 > "$cg/cpu.cfs_period_us" && echo "$quota" > "$cg/cpu.cfs_quota_us" &&
      echo $$ > "$cg/cgroup.procs" && echo $$ > "$acct/cgroup.procs"
    used() { awk '{ printf "%d", $1 / 1e9 }' "$acct/cpuacct.usage"; }
  fi || { echo "ci-fresh: cannot make a cgroup with $cpus CPU(s) (root and a cpu controller are needed)" >&2; exit 2; }
  echo "ci-fresh: the run gets $cpus CPU(s) of time in all (cgroup $cg)" >&2
fi
start=$(date +%s)
set +e
(cd "$work/main" && env -i PATH="$ci_path" CI=true "${extra_env[@]}" \
   bash .ci/run "$@" </dev/null) >"$work/ci.log" 2>&1
rc=$?
set -e
tail -n 5 "$work/ci.log" >&2
echo "ci-fresh: exit $rc after $(( $(date +%s) - start )) s; log: $work/ci.log" >&2
if [ -n "$cg" ]; then
  echo "ci-fresh: CPU time used: $(used) s (at most $cpus CPU(s))" >&2
  # out of the cgroup, then remove it (and v1's accounting group)
  # (a process the run left behind keeps the cgroup: it is then left, and said)
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    { echo $$ > /sys/fs/cgroup/cgroup.procs && rmdir "$cg"; } 2>/dev/null || echo "ci-fresh: $cg left (processes in it)" >&2
  else
    { echo $$ > /sys/fs/cgroup/cpu/cgroup.procs && echo $$ > /sys/fs/cgroup/cpuacct/cgroup.procs && rmdir "$cg" "$acct"; } 2>/dev/null ||
      echo "ci-fresh: $cg left (processes in it)" >&2
  fi
fi
exit "$rc"
