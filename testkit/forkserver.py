"""Python processes for the tests, forked from one that has imported the app already.

A test's system runs its workers, dispatcher, reconciler and web server as processes of their own, and the proof
is often the process itself: killed in the middle of a call, stopped by a signal, its exit code. Each was a new
interpreter importing the app again, 0.4 to 0.5 s of CPU here (3.4 s for a stack of seven), and the fault tests
start hundreds. `spawn` asks a server process instead, started once per pytest process with the app imported, to
fork: the child takes the test's environment, working directory and log file, and runs the command line a new
`python` would (`-m module args...` or `script args...`) as `__main__`. It is a process of its own as before (its
own pid, connections and signals; killed, stopped and waited for through `Forked`, which answers as
`subprocess.Popen` does); what it does not repeat is the imports.

How it differs from a new interpreter: the preloaded modules were imported once, under the server's environment.
None of ours reads the environment when imported (pipeline/settings.py reads it when called), and what does is not
preloaded: `bin.rqconfig` connects when imported, gunicorn's defaults read PORT and WEB_CONCURRENCY. The child's
parent is the server, which dies with pytest (and the child with it). Commands whose proof is the interpreter's
own start (cron's bare environment, the README's commands, `rq` as installed) still start one with
`subprocess`: tests/acceptance/test_commands.py, the dev-stack tests.
"""

from __future__ import annotations

import ctypes
import io
import json
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRELOAD = ("rq.cli", "bin.worker", "bin.commands", "pipeline.reconcile", "web")


def die_with_parent() -> None:
    """In a child about to run: be killed when the parent dies (so nothing a test started outlives the run)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Forked:
    """A forked child, answering as `subprocess.Popen` does for what the tests ask of it."""

    def __init__(self, server: "Server", pid: int, args: list[str]):
        self.server, self.pid, self.args = server, pid, args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.poll() is None:
            self.returncode = self.server.wait(self.pid, timeout, self.args)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:   # exited meanwhile; its exit is on its way
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Server:
    """The fork server of this pytest process, and what it told us: the pid of each child, and each one's exit."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "testkit.forkserver", str(theirs.fileno())], cwd=ROOT, pass_fds=[theirs.fileno()],
            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        theirs.close()
        self.sock = ours
        self.asking = threading.Lock()            # one request at a time: its answer is the next pid read
        self.changed = threading.Condition()
        self.pids: list[int] = []
        self.exits: dict[int, int] = {}
        self.gone = False
        threading.Thread(target=self._read, name="forkserver", daemon=True).start()

    def _read(self) -> None:
        for line in self.sock.makefile("rb"):
            message = json.loads(line)
            with self.changed:
                if "pid" in message:
                    self.pids.append(message["pid"])
                else:
                    self.exits[message["exited"]] = message["code"]
                self.changed.notify_all()
        with self.changed:
            self.gone = True
            self.changed.notify_all()

    def spawn(self, argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> Forked:
        request = json.dumps({"argv": argv, "env": env, "cwd": str(cwd), "log": str(log)}).encode() + b"\n"
        with self.asking:
            self.sock.sendall(request)
            with self.changed:
                if not self.changed.wait_for(lambda: self.pids or self.gone, timeout=30) or not self.pids:
                    raise RuntimeError(f"the fork server did not start {argv} (exit code {self.process.poll()})")
                return Forked(self, self.pids.pop(0), [sys.executable, *argv])

    def exit_code(self, pid: int) -> int | None:
        with self.changed:
            return self.exits.get(pid)

    def wait(self, pid: int, timeout: float | None, args: list[str]) -> int:
        with self.changed:
            if not self.changed.wait_for(lambda: pid in self.exits or self.gone, timeout=timeout):
                raise subprocess.TimeoutExpired(args, timeout)
            if pid not in self.exits:
                raise RuntimeError(f"the fork server exited before process {pid} did")
            return self.exits[pid]


_server: Server | None = None
_starting = threading.Lock()


def spawn(argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> Forked:
    """`python *argv` with exactly `env`, in `cwd`, its output and errors appended to `log`: forked from this
    pytest process's fork server (started on first use)."""
    global _server
    with _starting:
        if _server is None or _server.gone:
            _server = Server()
    return _server.spawn(argv, env, cwd, log)


# The server's side.

def _send(sock: socket.socket, message: dict) -> None:
    sock.sendall(json.dumps(message).encode() + b"\n")


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def serve(sock: socket.socket) -> dict | None:
    """Fork a child for each request until pytest goes away (None); in a child, return its request."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)   # the wake-up byte is the news
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    pending = b""
    while True:
        for key, _ in selector.select():
            if key.fileobj == wake_r:
                os.read(wake_r, 512)
                _reap(sock)
                continue
            data = sock.recv(65536)
            if not data:
                return None
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    # as a Python started from a terminal has it, however the suite was started (a shell's `cmd &`
                    # ignores SIGINT, and an ignored signal stays ignored down every fork: a pool's worker still
                    # starting then ignored the pool's stop and took a job)
                    signal.signal(signal.SIGINT, signal.default_int_handler)
                    selector.close()
                    sock.close()
                    os.close(wake_r)
                    os.close(wake_w)
                    return json.loads(line)
                _send(sock, {"pid": pid})


def _stream(fd: int, *, errors: str, line_buffering: bool) -> io.TextIOWrapper:
    return io.TextIOWrapper(io.open(fd, "wb", closefd=False), encoding="utf-8", errors=errors,
                            line_buffering=line_buffering, write_through=bool(os.environ.get("PYTHONUNBUFFERED")))


def become(request: dict) -> None:
    """Turn this forked child into `python *argv` as the request has it."""
    die_with_parent()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    time.tzset()
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdout = sys.__stdout__ = _stream(1, errors="strict", line_buffering=False)
    sys.stderr = sys.__stderr__ = _stream(2, errors="backslashreplace", line_buffering=True)
    argv = request["argv"]
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        sys.path[0] = str(Path(argv[0]).resolve().parent)
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    die_with_parent()
    for name in PRELOAD:
        __import__(name)
    if threading.active_count() != 1:   # a fork copies one thread: whatever another held would stay held
        raise SystemExit(f"testkit.forkserver: importing {PRELOAD} started threads: {threading.enumerate()}")
    child = serve(socket.socket(fileno=int(sys.argv[1])))
    if child is not None:
        become(child)
