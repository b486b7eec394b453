"""Guest side: a warm ``cxlctl`` for the guest scripts' many short commands (``$CXLCTL``).

Under TCG a cold ``python -m cxlctl`` costs ~1.7 s of guest CPU before it does any work: the
interpreter (~0.25-0.4 s) and the imports of typer, rich and cxlctl's command modules
(~1.1 s, measured in a 6.12 guest on 2026-12-07: ``capacity --json`` 1.73 s, ``python -c
'import cxlctl.cli.app'`` 1.08 s, ``python -c pass`` 0.42 s), and a VM run makes about 200 of
them.  This server imports all of that once per boot; each request then gets a process of its
own, forked from the warm one, that runs the console script's own entry point
(``cxlctl.__main__.entry``: the fast path, typer's app, the same exit handling) with the caller's
argv, working directory, environment and standard streams, and exits with its exit status.

The client (``tests/vm/cxz.c``, the file ``$CXLCTL`` names) sends those over a Unix socket and
passes its three streams along (``SCM_RIGHTS``); it forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT
to the command's process and exits as the command did, so a script sees what a real
``python -m cxlctl`` would give it.  Where the server is not (yet) listening, the client
``exec``s ``$PY -m cxlctl`` itself: the server is a shortcut, never a dependency.

What differs from a real start, and why it does not matter here: the command's process is a
child of this server, not of the caller (its cgroup and memory policy are the server's: the
runner's, the guest's root cgroup and the default policy); checks that run cxlctl inside a
cgroup, under ``numactl`` or on a terminal keep ``"$PY" -m cxlctl``.  Imports made before the
fork are done once; a command's own later imports still happen in its process.

Usage: ``python cxz.py SOCKET`` (tests/vm/harness.py's runner starts it after the prelude).
"""

from __future__ import annotations

import array
import io
import os
import signal
import socket
import struct
import sys
from typing import List, Tuple

#: bytes a request may take (argv, cwd and the environment): a larger one is refused
MAX_REQUEST = 1 << 20


def _recv_request(conn: socket.socket) -> Tuple[List[int], List[bytes]]:
    """(fds, fields): the caller's three streams and its NUL-separated fields, read to EOF."""
    fds = array.array("i")
    data, anc, _flags, _addr = conn.recvmsg(65536, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    chunks = [data]
    size = len(data)
    while data:
        data = conn.recv(65536)
        chunks.append(data)
        size += len(data)
        if size > MAX_REQUEST:
            raise ValueError("request too large")
    fields = b"".join(chunks).split(b"\0")
    return list(fds), fields


def _run(fds: List[int], fields: List[bytes]) -> None:
    """In the command's own process: become the caller's ``python -m cxlctl`` and exit as it would."""
    argc = int(fields[0])
    args = [os.fsdecode(a) for a in fields[1 : 1 + argc]]
    cwd = os.fsdecode(fields[1 + argc])
    int_ignored = fields[2 + argc] == b"1"
    env = [e for e in fields[3 + argc :] if b"=" in e]
    for i, fd in enumerate(fds[:3]):
        os.dup2(fd, i)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(cwd)
    os.environb.clear()
    for e in env:
        k, _, v = e.partition(b"=")
        os.environb[k] = v
    # the signal dispositions a fresh interpreter would have had in the caller's place
    signal.signal(signal.SIGINT, signal.SIG_IGN if int_ignored else signal.default_int_handler)
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(s, signal.SIG_DFL)
    # the streams now write to the caller's files; a fresh interpreter line-buffers stdout on a terminal
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=os.isatty(1))
    import atexit
    import threading

    import cxlctl.__main__ as console

    sys.argv = [str(console.__file__), *args]  # what `python -m cxlctl` sets

    code = 0
    try:
        console.entry()  # the fast path ends the process itself (os._exit)
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            sys.stderr.write(f"{e.code}\n")
            code = 1
    except BaseException:  # what the interpreter would print for an uncaught exception
        import traceback

        traceback.print_exc()
        code = 1
    # the interpreter's own exit: threads joined, atexit handlers, streams flushed
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            code = code or 120
    os._exit(code & 0xFF)


def _serve_one(conn: socket.socket) -> None:
    """In a handler process: fork the command, send its pid, then how it ended."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        fds, fields = _recv_request(conn)
    except (OSError, ValueError):
        os._exit(1)
    pid = os.fork()
    if pid == 0:
        conn.close()
        try:
            _run(fds, fields)
        finally:
            os._exit(125)
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(struct.pack("=i", pid))
        _, status = os.waitpid(pid, 0)
        # the client's exit: the status itself, or the signal (>= 256 + signal number) it should re-raise
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 256 + os.WTERMSIG(status)
        conn.sendall(struct.pack("=i", code))
    except OSError:
        pass
    os._exit(0)


def main() -> None:
    path = sys.argv[1]
    # everything a command may need, imported once: the fast path, typer's app and every command module
    import gc

    import cxlctl.__main__  # noqa: F401
    import cxlctl.cli.app  # noqa: F401
    import cxlctl.commands  # noqa: F401

    gc.collect()
    gc.freeze()  # the warm objects stay out of every child's collections (and their pages shared)
    tmp = f"{path}.{os.getpid()}"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(tmp)
    srv.listen(64)
    os.rename(tmp, path)  # the socket appears only once it accepts
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the handlers are reaped by the kernel
    while True:
        conn, _ = srv.accept()
        if os.fork() == 0:
            srv.close()
            _serve_one(conn)
        conn.close()


if __name__ == "__main__":
    main()
