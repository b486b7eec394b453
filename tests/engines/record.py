"""Record each installed engine's help text and version into fixtures/engines/<venv>/ (never by hand).

    .venv/bin/python -m tests.engines.record [VENV...]     # scripts/record-engines.sh runs this

For every venv scripts/install-engines.sh made (or those named), runs the engine's version and help
commands exactly as cxlctl's feature detection does (``vllm --version``, ``vllm serve --help=all``,
SGLang's ``launch_server --help``, ``lmcache server --help``), in an environment of only ``PATH``,
``HOME`` and the engine's own variables, and writes:

* ``help.txt``, ``version.txt``: the commands' standard output, byte for byte, and ``<key>.txt`` for each of
  the engine's ``extra_cmds`` (another probe cxlctl runs on that release: vLLM 0.10's ``serve --help=all``);
* ``meta.json``: the commands (``$VENV`` for the venv), their exit status, the environment, the installed
  distribution's version as pip recorded it, the Python, the lock file's hash and the date.

A command that fails leaves the recording as it was and makes the run fail.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import subprocess
import sys
from typing import Dict, List, Tuple

from tests.engines import ENGINES, Engine, installed, recording, venv
from tests.kit import REPO


def _run(argv: List[str], env: Dict[str, str], cwd: str) -> Tuple[int, str, str]:
    p = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def _env(e: Engine, v: str) -> Dict[str, str]:
    env = {"PATH": f"{v}/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": os.environ.get("HOME", "/root")}
    env.update(e.env)
    return env


def record(name: str) -> str:
    e = ENGINES[name]
    v = venv(name)
    env = _env(e, v)
    dist_code = f"import importlib.metadata as m; print(m.version({e.distribution!r}))"
    rc, dist_version, err = _run([f"{v}/bin/python3", "-c", dist_code], env, v)
    if rc != 0 or dist_version.strip() != e.version:
        raise SystemExit(f"{name}: {e.distribution} is {dist_version.strip() or err.strip()!r}, not {e.version}")
    out: Dict[str, str] = {}
    status: Dict[str, int] = {}
    extra = e.extra_cmds or {}
    for what, cmd in (("version", e.version_cmd), ("help", e.help_cmd), *extra.items()):
        assert cmd is not None
        rc, stdout, stderr = _run([os.path.join(v, cmd[0]), *cmd[1:]], env, v)
        if rc != 0 or not stdout.strip():
            raise SystemExit(f"{name}: `{' '.join(cmd)}` exited {rc}:\n{stderr[-3000:]}")
        out[what] = stdout
        status[what] = rc
    py = subprocess.run([f"{v}/bin/python3", "-V"], capture_output=True, text=True).stdout.strip()
    lock = os.path.join(REPO, "scripts", "engines", f"{name}.txt")
    with open(lock, "rb") as f:
        lock_sha = hashlib.sha256(f.read()).hexdigest()
    from cxlctl.launch.engines import _flags

    meta = {
        "engine": e.engine,
        "distribution": e.distribution,
        "distribution_version": dist_version.strip(),
        "version_command": ["$VENV/" + e.version_cmd[0], *e.version_cmd[1:]] if e.version_cmd else None,
        "help_command": ["$VENV/" + e.help_cmd[0], *e.help_cmd[1:]],
        **({"extra_commands": {k: ["$VENV/" + c[0], *c[1:]] for k, c in extra.items()}} if extra else {}),
        "exit_status": status,
        "environment": {k: val for k, val in env.items() if k not in ("PATH", "HOME")},
        "python": py,
        "lock": f"scripts/engines/{name}.txt",
        "lock_sha256": lock_sha,
        "flags": len(_flags(out["help"])),
        "recorded": datetime.date.today().isoformat(),
        "recorded_by": "tests/engines/record.py (scripts/record-engines.sh)",
    }
    d = recording(name)
    os.makedirs(d, exist_ok=True)
    for what, text in out.items():
        with open(os.path.join(d, f"{what}.txt"), "w", encoding="utf-8") as f:
            f.write(text)
    with open(os.path.join(d, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
        f.write("\n")
    return f"{name}: {meta['flags']} flags, version {out['version'].strip().splitlines()[-1]!r}"


def main(argv: List[str]) -> int:
    names = argv or [n for n in ENGINES if installed(n)]
    if not names:
        print("record: no engine venvs (run scripts/install-engines.sh first)", file=sys.stderr)
        return 1
    for n in names:
        if n not in ENGINES:
            print(f"record: unknown venv {n!r} (one of {', '.join(ENGINES)})", file=sys.stderr)
            return 2
        if not installed(n):
            print(f"record: {n} is not installed (scripts/install-engines.sh {n})", file=sys.stderr)
            return 1
        print(record(n))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
