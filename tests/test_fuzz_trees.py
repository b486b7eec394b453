"""Mutation fuzzer over the recorded trees: odd sysfs content never crashes cxlctl.

Each case copies one recorded fixture once, then, per tree, applies a few random
mutations (seeded, so a failure names a seed that reproduces it), runs the
commands that read the tree, and restores the touched paths from the fixture.
A run must end with a documented exit code, no traceback and no "internal
error", and ``--json`` must print valid JSON.  A crash found here is fixed in the
code, never tolerated here.

Knobs (environment):

* ``CXLCTL_FUZZ_TREES``  trees per fixture (default 25: 1,000 trees over the 40 recorded ones, the CI slice)
* ``CXLCTL_FUZZ_SEED``   base seed (default 10); a failure prints the seed to re-run
* ``CXLCTL_FUZZ_SPECIAL=0`` leaves out :data:`SPECIAL_MUTATIONS` (FIFO attributes,
  links to ``/dev/zero`` and out of the root), which the bounded, non-blocking,
  root-confined reads of the host-I/O layer (cxlctl/hostio/reader.py) handle
"""

from __future__ import annotations

import json
import os
import random
import shutil
from typing import Callable, List, Optional, Sequence, Tuple

import pytest

from tests.kit import cli, copy_fixture, environ, fixture_id, fixture_roots

TREES = int(os.environ.get("CXLCTL_FUZZ_TREES", "25"))
SEED = int(os.environ.get("CXLCTL_FUZZ_SEED", "10"))
MUTATIONS_PER_TREE = (1, 4)
#: every this-many trees also go through the real ``python -m cxlctl`` fast path
SUBPROCESS_EVERY = 10
ROOTS = fixture_roots()
MANIFEST = "cxlctl-record.json"


# -- where to mutate ------------------------------------------------------------------


def _entries(root: str) -> Tuple[List[str], List[str], List[str]]:
    """(files, dirs, links) relative to root, in a stable order."""
    files: List[str] = []
    dirs: List[str] = []
    links: List[str] = []
    for dp, dns, fns in os.walk(root):
        dns.sort()
        rel = os.path.relpath(dp, root)
        for n in sorted(dns + fns):
            p = os.path.normpath(os.path.join(rel, n))
            full = os.path.join(root, p)
            if os.path.islink(full):
                links.append(p)
            elif os.path.isdir(full):
                dirs.append(p)
            elif p != MANIFEST:
                files.append(p)
    return files, dirs, links


def _copy(fixture: str, root: str) -> None:
    """A copy made of hard links (6x faster than copying); mutations unlink before writing."""
    copy_fixture(fixture, root, hardlinks=True)


# -- mutations: each changes the existing entry p and says what it did and touched -----

Done = Tuple[str, List[str]]

CONTENTS: List[Tuple[str, bytes]] = [
    ("garbage", b"\x07zz!?junk"),
    ("non-utf8", b"\xff\xfe\x80\xc3("),
    ("empty", b""),
    ("huge number", b"9" * 400 + b"\n"),
    ("huge hex", b"0x" + b"f" * 40 + b"\n"),
    ("negative", b"-2\n"),
    ("negative hex", b"-0x80\n"),
    ("non-ASCII digits", "١٢\n".encode()),
    ("superscript digit", "²\n".encode()),
    ("rich markup", b"[/]\n"),
    ("rich markup bold", b"[bold]x[/bold] [red\n"),
    ("NUL bytes", b"1\x002\x00\n"),
    ("long line", b"x" * 5000),
    ("list junk", b"0-,,3-1\n"),
]


def _content(rng: random.Random, root: str, p: str) -> Done:
    what, data = rng.choice(CONTENTS)
    full = os.path.join(root, p)
    os.unlink(full)  # never write through: the copy's files are hard links to the fixture's
    with open(full, "wb") as f:
        f.write(data)
    return f"{what} in {p}", [p]


def _rename_digit(rng: random.Random, root: str, p: str) -> Optional[Done]:
    base = os.path.basename(p)
    digits = [k for k, c in enumerate(base) if "0" <= c <= "9"]
    if not digits:
        return None
    i = digits[-1]
    new = base[:i] + rng.choice(["²", "١", "٣", "𝟙"]) + base[i + 1 :]
    dst = os.path.join(os.path.dirname(p), new)
    os.rename(os.path.join(root, p), os.path.join(root, dst))
    return f"rename {p} -> {dst}", [p, dst]


def _delete(rng: random.Random, root: str, p: str) -> Done:
    full = os.path.join(root, p)
    if os.path.isdir(full) and not os.path.islink(full):
        shutil.rmtree(full)
    else:
        os.unlink(full)
    return f"delete {p}", [p]


def _relink(root: str, p: str, target: str) -> None:
    full = os.path.join(root, p)
    os.unlink(full)
    os.symlink(target, full)


def _dangle(rng: random.Random, root: str, p: str) -> Done:
    _relink(root, p, "../no/such/device")
    return f"dangle {p}", [p]


def _fifo(rng: random.Random, root: str, p: str) -> Done:
    full = os.path.join(root, p)
    os.unlink(full)
    os.mkfifo(full)
    return f"fifo at {p}", [p]


def _dev_zero(rng: random.Random, root: str, p: str) -> Done:
    _relink(root, p, "/dev/zero")
    return f"link to /dev/zero at {p}", [p]


def _out_of_root(rng: random.Random, root: str, p: str) -> Done:
    _relink(root, p, "/" + "../" * 12 + "etc")
    return f"link out of the root at {p}", [p]


Mutation = Callable[[random.Random, str, str], Optional[Done]]
MUTATIONS: List[Tuple[Mutation, str]] = [
    # (mutation, what it picks from: files | names | links)
    (_content, "files"),
    (_content, "files"),
    (_content, "files"),
    (_rename_digit, "names"),
    (_delete, "names"),
    (_dangle, "links"),
]
#: Mutations that need bounded, non-blocking, root-confined reads (the host-I/O layer).
SPECIAL_MUTATIONS: List[Tuple[Mutation, str]] = [
    (_fifo, "files"),
    (_dev_zero, "files"),
    (_out_of_root, "links"),
]


def _mutations() -> List[Tuple[Mutation, str]]:
    return MUTATIONS + (SPECIAL_MUTATIONS if os.environ.get("CXLCTL_FUZZ_SPECIAL", "1") != "0" else [])


class Tree:
    """A mutable copy of one fixture; :meth:`restore` undoes exactly what was touched."""

    def __init__(self, fixture: str, root: str) -> None:
        self.fixture, self.root = fixture, root
        _copy(fixture, root)
        files, dirs, links = _entries(fixture)
        self.pools = {"files": files, "names": files + dirs + links, "links": links}
        self.touched: List[str] = []

    def mutate(self, rng: random.Random) -> List[str]:
        """Apply 1-4 random mutations; the list says what was done (the failure report)."""
        done: List[str] = []
        for _ in range(rng.randint(*MUTATIONS_PER_TREE)):
            fn, pool = rng.choice(_mutations())
            p = rng.choice(self.pools[pool])
            if not os.path.lexists(os.path.join(self.root, p)):
                continue  # under something an earlier mutation removed or renamed
            res = fn(rng, self.root, p)
            if res:
                done.append(res[0])
                self.touched.extend(res[1])
        return done

    def restore(self) -> None:
        """Put back every touched path from the fixture (parents before children)."""
        restored: List[str] = []
        for rel in sorted(set(self.touched), key=len):
            if any(rel.startswith(r + "/") for r in restored):
                continue
            dst, src = os.path.join(self.root, rel), os.path.join(self.fixture, rel)
            if os.path.isdir(dst) and not os.path.islink(dst):
                shutil.rmtree(dst)
            elif os.path.lexists(dst):
                os.unlink(dst)
            if os.path.islink(src):
                os.symlink(os.readlink(src), dst)
            elif os.path.isdir(src):
                _copy(src, dst)
            elif os.path.lexists(src):
                shutil.copy2(src, dst)  # mutations unlink before writing
            restored.append(rel)
        self.touched = []


# -- running cxlctl ---------------------------------------------------------------------


def _run_inproc(argv: List[str]) -> Tuple[int, str, str]:
    p = cli(*argv, inprocess=True)
    return p.returncode, p.stdout, p.stderr


def _check(argv: List[str], rc: int, out: str, err: str, ok: Sequence[int] = (0, 1)) -> Optional[str]:
    """None when the run was acceptable, else what was wrong."""
    both = out + err
    if rc not in ok:
        return f"exit {rc} not in {list(ok)}"
    if "Traceback" in both or "internal error" in both:
        return "crashed:\n" + err[-2000:]
    if "--json" in argv and argv[-2:] in (["status", "--json"], ["doctor", "--json"]):
        try:
            json.loads(out)
        except ValueError as e:
            return f"invalid JSON: {e}"
    return None


def _commands(root: str) -> List[Tuple[List[str], Sequence[int]]]:
    return [
        (["--root", root, "status", "--json"], (0, 1)),
        (["--root", root, "status"], (0, 1)),
        (["--root", root, "tune", "plan", "inference-bandwidth"], (0, 1, 2)),
        (["--root", root, "region", "plan", "--all"], (0, 1, 2)),
        (["--root", root, "region", "plan", "-w", "2", "-s", "512M"], (0, 1, 2)),
        (["--root", root, "stat", "--json", "--top", "3"], (0, 1)),
        (["--root", root, "stat", "--cgroup", "/"], (0, 1, 2)),
        (["--root", root, "doctor", "--json"], (0, 1)),
        (["--root", root, "doctor"], (0, 1)),
        # RAS: the fault domain over the odd tree, and a real event stream mapped onto it
        (["--root", root, "health", "--no-poison", "--json"], (0, 1)),
        (["--root", root, "events", "--input", _RAS_STREAM, "--json"], (0, 1)),
        # the rest of the commands that read the host (issue 22)
        (["--root", root, "top", "--count", "1"], (0, 1)),
        (["--root", root, "launch", "exec", "--dry-run", "--json", "--", "true"], (0, 1, 2)),
        (["--root", root, "daemon", "run", "--once", "--config", _daemon_config()], (0, 1)),
        # issue 36: capacity reads memory blocks, zones, DAX devices and /proc/*/fd and maps
        (["--root", root, "capacity", "--json"], (0, 1)),
        (["--root", root, "capacity", "release", "mem0", "--dry-run", "--json"], (0, 1, 2)),
    ]


def _daemon_config() -> str:
    """The one-shot daemon's configuration: no HTTP endpoint (no port shared between runs), no `cxl list`."""
    import tempfile

    path = os.path.join(tempfile.gettempdir(), f"cxlctl-fuzz-daemon-{os.getpid()}.toml")
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.write(
                '[metrics]\nlisten = ""\ntelemetry_interval = 0\n[health]\nenabled = false\n[nfd]\nenabled = false\n'
            )
    return path


#: a real 6.12 event stream (tests/vm/record_ras_events.py): DPA-only, so it is
#: translated through the mutated tree's decoders
_RAS_STREAM = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "linux-6.12", "events", "dram-in-region.txt"
)


@pytest.mark.parametrize("fixture", ROOTS, ids=[fixture_id(r) for r in ROOTS])
def test_mutated_trees_never_crash(fixture: str, tmp_path: object) -> None:
    root = os.path.join(str(tmp_path), "tree")
    tree = Tree(fixture, root)
    base = SEED * 1000 + ROOTS.index(fixture) * 100
    failures: List[str] = []
    with environ({"COLUMNS": "80", "CXLCTL_ROOT": ""}):
        for n in range(TREES):
            seed = base + n
            done = tree.mutate(random.Random(seed))
            for argv, ok in _commands(root):
                rc, out, err = _run_inproc(argv)
                bad = _check(argv, rc, out, err, ok)
                if bad:
                    failures.append(f"seed {seed} {done}: cxlctl {' '.join(argv[2:])}: {bad}")
            if n % SUBPROCESS_EVERY == 0:
                p = cli("--root", root, "status", "--json", timeout=60)
                bad = _check(["status", "--json"], p.returncode, p.stdout, p.stderr)
                if bad:
                    failures.append(f"seed {seed} {done}: python -m cxlctl status --json: {bad}")
            tree.restore()
    assert not failures, f"{len(failures)} failing trees (CXLCTL_FUZZ_SEED={SEED}):\n" + "\n".join(failures[:20])


def test_mutations_are_reproducible(tmp_path: object) -> None:
    """The same seed gives the same mutations: a failure's seed is a reproducer."""
    a = Tree(ROOTS[0], os.path.join(str(tmp_path), "a"))
    b = Tree(ROOTS[0], os.path.join(str(tmp_path), "b"))
    for seed in range(5):
        assert a.mutate(random.Random(seed)) == b.mutate(random.Random(seed))


def test_restore_gives_back_the_fixture(tmp_path: object) -> None:
    """Restoring undoes every mutation exactly (else later trees would pile up damage)."""
    t = Tree(ROOTS[-1], os.path.join(str(tmp_path), "t"))
    before = _snapshot(t.root)
    done = 0
    for seed in range(40):
        done += len(t.mutate(random.Random(seed)))
        t.restore()
        assert _snapshot(t.root) == before, seed
    assert done > 40


def _snapshot(root: str) -> List[Tuple[str, str]]:
    out = []
    for dp, dns, fns in os.walk(root):
        for n in dns + fns:
            full = os.path.join(dp, n)
            if os.path.islink(full):
                what = "->" + os.readlink(full)
            elif os.path.isfile(full):
                with open(full, "rb") as f:
                    what = f.read().hex()
            else:
                what = "dir"
            out.append((os.path.relpath(full, root), what))
    return sorted(out)
