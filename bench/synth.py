"""Grow a recorded single-memdev tree to N memdevs, for scan-cost benchmarks.

Takes a real record (fixtures/linux-6.12/single-noregion by default) and clones its
memdev's device directory, its endpoint port (with its decoders) and the bus links
N-1 times, renaming ``memA``/``endpointB``/``decoderB.*`` and the PCI address.
Only for benchmarks: the clones are not a topology a kernel would build (they all
hang off one host bridge), but each costs the scan what a real memdev costs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys


def grow(src: str, dest: str, n: int) -> str:
    with open(os.path.join(src, "cxlctl-status.json")) as f:
        st = json.load(f)
    (mem,) = st["memdevs"]
    name, ep, host = mem["memdev"], mem["endpoint"], mem["host"]
    ep_id = ep[len("endpoint") :]
    shutil.copytree(src, dest, symlinks=True)
    clones = []
    for root, dirs, files in os.walk(dest):
        for entry in dirs + files:
            p = os.path.join(root, entry)
            rel = os.path.relpath(p, dest)
            if re.search(rf"(^|/)({re.escape(name)}|{re.escape(ep)}|decoder{ep_id}\.\d+|{re.escape(host)})$", rel):
                clones.append(rel)
    # clone the top-most matching entries only
    clones = [c for c in clones if not any(c != o and c.startswith(o + "/") for o in clones)]
    for k in range(1, n):
        new_ep = f"endpoint{1000 + k}"
        bdf = f"0000:{(k >> 8) & 0xFF:02x}:{(k & 0xFF) >> 3:02x}.{k & 7}".replace("0000:", "0001:", 1)

        def sub(s: str, k: int = k, new_ep: str = new_ep, bdf: str = bdf) -> str:
            s = re.sub(rf"\b{re.escape(name)}\b", f"mem{k}", s)
            s = re.sub(rf"\b{re.escape(ep)}\b", new_ep, s)
            s = re.sub(rf"\bdecoder{ep_id}\.", f"decoder{1000 + k}.", s)
            return s.replace(host, bdf)

        for rel in clones:
            srcp = os.path.join(dest, rel)
            dstp = os.path.join(dest, sub(rel))
            if os.path.lexists(dstp):
                continue
            if os.path.islink(srcp):
                os.symlink(sub(os.readlink(srcp)), dstp)
            else:
                shutil.copytree(srcp, dstp, symlinks=True)
                for r2, d2, f2 in os.walk(dstp):
                    for e in d2 + f2:
                        q = os.path.join(r2, e)
                        if os.path.islink(q):
                            t = os.readlink(q)
                            os.unlink(q)
                            os.symlink(sub(t), os.path.join(r2, sub(e)))
                        elif sub(e) != e:
                            os.rename(q, os.path.join(r2, sub(e)))
    return dest


if __name__ == "__main__":
    grow(sys.argv[1], sys.argv[2], int(sys.argv[3]))
