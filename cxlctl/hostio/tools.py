"""Running external tools: the one place cxlctl starts a program and waits for it.

Why one runner: cxlctl asks a few tools what only they can say (ndctl's
``cxl list`` for the device health log, ``numactl --help`` for its options,
an inference engine's ``--help`` for its flags, ``systemctl show`` for the
service).  Each call must be bounded the same way, or one of them hangs the
daemon's reconcile or fills its memory.  So every call goes through
:func:`run`, which:

* always has a timeout (:data:`DEFAULT_TIMEOUT`, or the caller's); on expiry
  the tool and everything it started (its own process group) are killed;
* runs the child with ``LC_ALL=C``, so the text cxlctl parses is not
  translated or localised (decimal commas, translated usage text);
* closes the child's stdin (``/dev/null``): a tool that asks a question gets
  EOF instead of waiting on the operator's terminal;
* keeps at most ``max_output`` bytes of each of stdout and stderr (the rest is
  read and dropped, so the tool never blocks on a full pipe), and says so in
  :attr:`Completed.truncated`;
* decodes output as UTF-8 with replacement (odd bytes never raise);
* maps every failure once into :class:`ToolError` (:data:`ErrorKind` says
  which), whose message names the tool and whose hint names the fix.

The one reader of ``cxl list`` (run, parse the JSON, validate its shape) is
:func:`cxl_list` with :func:`memdev_objects`; the daemon's health metrics and
``cxlctl health`` both use it.

``os.exec*`` in ``cxlctl launch`` is not "running a tool" (cxlctl becomes the
engine) and stays there.  ``subprocess`` is imported lazily: ``cxlctl status``
never runs a tool, and its start-up time is benchmarked.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Dict, List, Literal, Mapping, NamedTuple, Optional, Sequence, Tuple

from cxlctl.errors import CxlctlError

if TYPE_CHECKING:
    import subprocess

#: seconds a tool may take when the caller does not say
DEFAULT_TIMEOUT = 10.0
#: bytes kept of each of stdout and stderr when the caller does not say
MAX_OUTPUT = 1 << 20
#: set in every child's environment
CHILD_LOCALE = {"LC_ALL": "C"}

#: missing: not installed; timeout: killed at the deadline; exit: non-zero status; signal: killed by one;
#: os: the OS refused to start it; output: it ran but printed what the caller cannot use
ErrorKind = Literal["missing", "timeout", "exit", "signal", "os", "output"]


class Completed(NamedTuple):
    """A tool that ran to its end (any exit status when ``check=False``)."""

    argv: Tuple[str, ...]  # as run (the program resolved to its path)
    returncode: int  # negative: killed by that signal
    stdout: str
    stderr: str
    truncated: bool  # stdout or stderr was longer than max_output and was cut

    @property
    def output(self) -> str:
        """stdout then stderr, as the tools' usage texts are read (some print help on either)."""
        return self.stdout + self.stderr


class ToolError(CxlctlError):
    """A tool that could not be run or did not succeed: one type, one message per kind.

    ``kind`` is one of :data:`ErrorKind`; ``tool`` the command as the caller
    named it; ``detail`` the gist of the tool's stderr (exit) or the OS error;
    ``result`` the completed run for ``exit`` and ``signal``.
    """

    def __init__(
        self,
        kind: ErrorKind,
        tool: str,
        message: str,
        *,
        hint: str = "",
        detail: str = "",
        result: Optional[Completed] = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.kind: ErrorKind = kind
        self.tool = tool
        self.detail = detail
        self.result = result

    @property
    def note(self) -> str:
        """The message and its fix on one line, for reports that list notes."""
        return f"{self}; fix: {self.hint}" if self.hint else str(self)


def describe(argv: Sequence[str], limit: int = 120) -> str:
    """The command as messages show it (``cxl list -M -H``), cut at ``limit`` characters."""
    text = " ".join(argv)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def gist(stderr: str) -> str:
    """The line of a tool's stderr that says what went wrong.

    The last line that reads as an error (``error: unknown option …`` before
    ndctl's usage text, a Python traceback's exception line), else the last
    line; at most 200 characters."""
    lines = [x.strip() for x in stderr.splitlines() if x.strip()]
    bad = [x for x in lines if "error:" in x.lower() or "unknown option" in x.lower()]
    pick = (bad or lines or [""])[-1]
    return pick[:200]


def child_env(env: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The environment a tool runs with: ``env`` (default: cxlctl's own) plus ``LC_ALL=C``."""
    out = dict(os.environ if env is None else env)
    out.update(CHILD_LOCALE)
    return out


def which(name: str, env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """Where ``name`` is, searched on the PATH of ``env`` (default: cxlctl's own), or None.

    A name with a slash is taken as a path: it is returned when it exists.  As root the
    result is always an absolute path root alone can change: only PATH's absolute
    directories are searched, and a candidate that fails the trust check
    (:func:`cxlctl.hostio.trust.untrusted`: a ``~/bin`` kept by ``sudo -E``) is passed over
    for the next -- else whoever wrote it would run as root."""
    if "/" in name:
        return name if os.path.exists(name) else None
    import shutil

    path = (os.environ if env is None else env).get("PATH")
    if os.geteuid() != 0:
        return shutil.which(name, path=path)
    from .trust import untrusted

    for d in dict.fromkeys(d for d in (path or "").split(os.pathsep) if os.path.isabs(d)):
        exe = shutil.which(name, path=d)
        if exe is not None and not untrusted(exe):
            return exe
    return None


def run(
    argv: Sequence[str],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    env: Optional[Mapping[str, str]] = None,
    max_output: int = MAX_OUTPUT,
    check: bool = True,
    package: str = "",
    cwd: Optional[str] = None,
) -> Completed:
    """Run ``argv`` to its end, bounded in time and memory; :class:`ToolError` when it cannot be.

    ``env`` replaces cxlctl's environment for the child (``LC_ALL=C`` is added
    either way).  With ``check`` (the default) a non-zero exit or a signal is
    a ``ToolError`` too; without it the caller gets the status in the result.
    ``package`` names what to install when the tool is missing (``ndctl``).
    ``cwd`` is the child's working directory (default: cxlctl's): a probe that runs
    Python code gives ``/``, so nothing planted in the caller's directory is imported.
    A missing tool, a timeout and an OS error always raise.
    """
    if not argv:
        raise ValueError("run: empty argv")
    name = argv[0]
    cmd = describe(argv)
    exe = which(name, env)
    if exe is None:
        fix = f"install {package}" if package else f"install {name}, or add its directory to PATH"
        where = "" if "/" in name else " (not on PATH)"
        raise ToolError("missing", name, f"{name} is not installed{where}", hint=fix)
    full = (exe, *argv[1:])
    import subprocess

    try:
        proc = subprocess.Popen(
            full,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(env),
            cwd=cwd,
            close_fds=True,
            start_new_session=True,  # its own process group: a timeout kills what it started too
        )
    except OSError as e:
        why = e.strerror or str(e)
        raise ToolError(
            "os", name, f"cannot run {exe}: {why}", hint=f"check that {exe} is an executable program", detail=why
        ) from None
    try:
        out, err, cut, finished = _collect(proc, timeout, max_output)
    except BaseException:  # KeyboardInterrupt included: never leave the tool running
        _kill(proc)
        raise
    if not finished:
        _kill(proc)
        raise ToolError(
            "timeout",
            name,
            f"{cmd} did not finish within {timeout:g} s",
            hint=f"run `{cmd}` by hand to see why it hangs",
        )
    res = Completed(
        tuple(full),
        proc.returncode,
        out.decode("utf-8", "replace"),
        err.decode("utf-8", "replace"),
        cut,
    )
    if check:
        _check(name, cmd, res)
    return res


def _check(name: str, cmd: str, res: Completed) -> None:
    """:func:`run`'s ``check``: a signal or a non-zero exit as a :class:`ToolError`."""
    if res.returncode < 0:
        raise ToolError(
            "signal",
            name,
            f"{cmd} was killed by signal {_signame(-res.returncode)}",
            hint="see the kernel log (dmesg) or the journal for who sent it",
            result=res,
        )
    if res.returncode != 0:
        g = gist(res.stderr)
        raise ToolError(
            "exit",
            name,
            f"{cmd} exited {res.returncode}" + (f": {g}" if g else ""),
            hint=f"run `{cmd}` by hand to see its full output",
            detail=g,
            result=res,
        )


def _collect(proc: subprocess.Popen[bytes], timeout: float, limit: int) -> Tuple[bytes, bytes, bool, bool]:
    """Read both pipes until EOF and the exit, or until ``timeout``: (stdout, stderr, cut, finished)."""
    import selectors
    import subprocess
    import time

    assert proc.stdout is not None and proc.stderr is not None  # both are pipes (run)
    deadline = time.monotonic() + timeout
    fds = (proc.stdout.fileno(), proc.stderr.fileno())
    bufs = {fd: bytearray() for fd in fds}
    cut = False
    with selectors.DefaultSelector() as sel:
        for fd in fds:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return b"", b"", cut, False
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                buf = bufs[key.fd]
                room = limit - len(buf)
                cut = cut or len(chunk) > room
                if room > 0:
                    buf += chunk[:room]
    proc.stdout.close()
    proc.stderr.close()
    try:
        proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
    except subprocess.TimeoutExpired:  # closed its output but did not exit
        return b"", b"", cut, False
    return bytes(bufs[fds[0]]), bytes(bufs[fds[1]]), cut, True


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill the tool's process group (it leads its own session), then reap the tool."""
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        try:
            proc.kill()
        except OSError:
            pass
    for f in (proc.stdout, proc.stderr):
        if f is not None:
            f.close()
    proc.wait()


def _signame(n: int) -> str:
    import signal

    try:
        return signal.Signals(n).name
    except ValueError:
        return str(n)


# --------------------------------------------------------------------------- cxl list (ndctl)


class CxlList(NamedTuple):
    """What ``cxl list`` printed, parsed and checked."""

    argv: Tuple[str, ...]  # as run (``/usr/bin/cxl list -M -H``)
    doc: Any  # the JSON: a list or an object
    memdevs: List[Dict[str, Any]]  # :func:`memdev_objects` of ``doc``


def cxl_list(
    *flags: str, command: str = "cxl", timeout: float = DEFAULT_TIMEOUT, env: Optional[Mapping[str, str]] = None
) -> CxlList:
    """Run ``cxl list FLAGS`` (ndctl) and parse it; :class:`ToolError` for any failure.

    ndctl prints an array of objects, a bare object (one match with ``-u``),
    an object of arrays (several kinds listed at once), or nothing when there
    is no match (an empty list here).  Output cut at the bound, output that is
    not JSON and JSON of another shape are errors (kind ``output``) naming the
    command.
    """
    argv = [command, "list", *flags]
    cmd = describe(argv)
    res = run(argv, timeout=timeout, env=env, package="ndctl")
    if res.truncated:
        raise ToolError(
            "output",
            command,
            f"{cmd} printed more than {MAX_OUTPUT} bytes",
            hint="list fewer objects (filter by memdev)",
        )
    text = res.stdout.strip()
    doc: Any = []
    if text:
        import json

        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            raise ToolError(
                "output", command, f"{cmd} printed something that is not JSON", hint=f"run `{cmd}` by hand"
            ) from None
    if not isinstance(doc, (list, dict)):
        raise ToolError(
            "output", command, f"{cmd} printed JSON that is not a list or object", hint=f"run `{cmd}` by hand"
        )
    return CxlList(res.argv, doc, memdev_objects(doc))


def memdev_objects(doc: Any) -> List[Dict[str, Any]]:
    """The memdev objects of a ``cxl list`` document, wherever it put them.

    Flat with ``-M``, nested under buses and ports with ``-vvv``; an object is
    a memdev when its ``memdev`` field is a string.  Anything else is skipped."""
    out: List[Dict[str, Any]] = []
    stack: List[Any] = [doc]
    while stack:  # iterative: deep nesting is no RecursionError
        x = stack.pop()
        if isinstance(x, dict):
            if isinstance(x.get("memdev"), str):
                out.append(x)
                continue
            stack.extend(reversed(list(x.values())))
        elif isinstance(x, list):
            stack.extend(reversed(x))
    return out
