"""Guest devices reach CXL memory: the check the 6.12 ``single`` shared boot runs last.

No VM test here: ``tests/vm/test_vm_linux612.py`` runs :func:`guest_script` after the launch and
DAMON checks and calls :func:`check` on its files.  The harness keeps every 9p device able to reach
guest memory on the CXL node (``harness.NINEP_DMA_TO_CXL``: modern-only devices behind the platform's
DMA with a 16 MiB bounce limit); without it QEMU's 4 KiB bounce buffer for the emulated CXL window
refuses a 9p request whose buffer sits there, marks the device broken and every later request waits
forever -- CI's 6.12 launch check hung so twice on 2026-12-07.  Here 24 readers at once, each
bound to the CXL node (``numactl --membind``), read a 512 KiB file from ``$OUT`` (the ``--rwdir`` 9p
device) in 256 KiB blocks (``dd``; the checksum is taken outside the binding).  The 9p client
``kmalloc``s each request's buffers in the calling task's context (net/9p/client.c ``p9_fcall_init()``),
so a large one comes from the page allocator under the reader's binding, on the CXL node: without the fix this broke the device in a 6.12 guest (and 24 such readers of 4 MiB did
in their first round), with it five rounds passed.  Each reader's checksum must match the host's view
of the file, and QEMU must not have said ``bogus descriptor``.  One round: a read through the bounce
buffer is slow under TCG (three rounds of 4 MiB took 343 s of guest time).
"""

from __future__ import annotations

import hashlib

from tests.vm.harness import GuestResult

ROUNDS = 1
READERS = 24

SCRIPT = r"""
R=$(create_ram_region decoder0.0 256 $(memdev_by_serial 0x1001)) || {{ echo "region creation failed" >&2; exit 10; }}
CXL=$(cxlvm_cxl_node) || exit 11
echo "$CXL" > "$OUT/cxl-node"
head -c 512K /dev/urandom > "$OUT/big"
for i in $(seq 1 {rounds}); do
  for j in $(seq 1 {readers}); do
    {{ timeout 120 numactl --membind="$CXL" dd if="$OUT/big" bs=256k status=none | sha256sum > "$OUT/sum.$i.$j"; }} 2> "$OUT/err.$i.$j" &
  done
  wait
done
echo done > "$OUT/done"
"""


def guest_script() -> str:
    return SCRIPT.format(rounds=ROUNDS, readers=READERS)


def check(res: GuestResult) -> None:
    assert res.returncode == 0, res.stderr[-3000:]
    assert (res.outdir / "done").exists(), res.stderr[-3000:]
    want = hashlib.sha256((res.outdir / "big").read_bytes()).hexdigest()
    sums = sorted(res.outdir.glob("sum.*"))
    assert len(sums) == ROUNDS * READERS, [p.name for p in sums]
    bad = [p.name for p in sums if p.read_text().split()[:1] != [want]]
    assert not bad, f"readers bound to the CXL node read wrong or nothing: {bad[:5]}"
    console = res.console.read_text(errors="replace") if res.console.exists() else ""
    assert "bogus descriptor" not in console, "QEMU refused a virtio request (a device could not reach CXL memory)"
