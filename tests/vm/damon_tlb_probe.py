"""Does DAMON see a busy program's accesses in the TCG guest, with and without a TLB flush per pass?

Why this exists: CI once saw ``migrate_hot`` leave test_vm_damon.py's hot helper on CXL for 180 s.
This probe boots one 6.12 guest and runs two helpers that each keep writing 1 MiB, one of them
dropping its TLB entries before each pass (``mprotect`` read-only and back), with a monitoring-only
kdamond (``vaddr``, a ``stat`` scheme) on each; every 5 s it prints DAMON's ``nr_accesses`` (of 20
samples per aggregation) for the regions covering each buffer.  First run: the flushing helper's
region read 20 of 20 in all six rounds, the other's 0-13.  Run as root from the repository:
``.venv/bin/python -m tests.vm.damon_tlb_probe``.
"""

import tempfile
from pathlib import Path

from tests.vm.harness import build_c, run_guest

SPIN_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int flush = atoi(argv[1]);
    size_t len = 1 << 20;
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    madvise(p, len, MADV_NOHUGEPAGE);
    memset(p, 1, len);
    FILE *f = fopen(argv[2], "w");
    fprintf(f, "%d %lu\n", getpid(), (unsigned long)p);
    fclose(f);
    for (unsigned char v = 0;; v++) {
        if (flush) { mprotect(p, len, PROT_READ); mprotect(p, len, PROT_READ | PROT_WRITE); }
        for (size_t i = 0; i < len; i += 4096) p[i] = (char)v;
    }
}
"""

GUEST = r"""
T=TOOLS
$T/spin 0 $OUT/noflush.txt & sleep 1
$T/spin 1 $OUT/flush.txt & sleep 1
D=/sys/kernel/mm/damon/admin/kdamonds
echo 2 > $D/nr_kdamonds
for k in 0 1; do
  f=$([ $k = 0 ] && echo noflush || echo flush)
  read pid addr < $OUT/$f.txt
  C=$D/$k/contexts
  echo 1 > $C/nr_contexts
  echo vaddr > $C/0/operations
  echo 100000 > $C/0/monitoring_attrs/intervals/sample_us
  echo 2000000 > $C/0/monitoring_attrs/intervals/aggr_us
  echo 4000000 > $C/0/monitoring_attrs/intervals/update_us
  echo 1 > $C/0/targets/nr_targets
  echo $pid > $C/0/targets/0/pid_target
  echo 1 > $C/0/schemes/nr_schemes
  echo stat > $C/0/schemes/0/action
  A=$C/0/schemes/0/access_pattern
  echo 18446744073709551615 > $A/sz/max
  echo 1000 > $A/nr_accesses/max
  echo 4294967295 > $A/age/max
  echo on > $D/$k/state
done
for round in 1 2 3 4 5 6; do
  sleep 5
  for k in 0 1; do
    f=$([ $k = 0 ] && echo noflush || echo flush)
    read pid addr < $OUT/$f.txt
    echo update_schemes_tried_regions > $D/$k/state
    S=$D/$k/contexts/0/schemes/0/tried_regions
    for r in $S/[0-9]*; do
      s=$(cat $r/start); e=$(cat $r/end)
      if [ $e -gt $addr ] && [ $s -lt $((addr + 1048576)) ]; then
        echo "round $round $f region $s-$e nr_accesses $(cat $r/nr_accesses) age $(cat $r/age)"
      fi
    done
  done
done | tee $OUT/result.txt
"""


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="cxlvm-tlb-"))
    tools = work / "tools"
    build_c(tools, "spin", SPIN_C)
    res = run_guest("single", GUEST.replace("TOOLS", str(tools)), kernel="6.12", workdir=work, timeout=600)
    result = res.outdir / "result.txt"
    print(f"guest exit {res.returncode}; files in {work}")
    print(result.read_text() if result.exists() else res.stderr[-3000:])


if __name__ == "__main__":
    main()
