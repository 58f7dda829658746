"""A fork server for kernel processes: fresh processes without the interpreter start-up cost.

Starting Python and importing NumPy and the emulator costs 0.3-2 s per evaluation, more than
a small kernel's whole evaluation. The fork server is a process started once, with the
scrubbed environment of every child, that imports those modules and then only forks: each
kernel process is a fresh copy of a process that never ran untrusted code, so no state
passes from one kernel to the next, and the sandbox guarantees (own session and process
group, limits lowered by the child itself, scrubbed environment, fresh working directory,
captured streams) are the same as for a spawned interpreter.

multiprocessing's own forkserver is not used because it inherits the engine's environment
(API keys), which every forked child would then carry in its memory and in
/proc/self/environ. The server is driven over a Unix SOCK_SEQPACKET socket: the parent sends
a request with the child's pipe ends attached (socket.send_fds); the server forks, answers
with the pid, reaps its children and reports their exit status.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, Sequence

from .process import ChildEnds, clean_env, python_command

CHANNEL_FD = 3            # the report channel's number inside every forked child
_MAX_MESSAGE = 1 << 16


class ForkServerError(OSError):
    """The fork server cannot start a process (it could not start, or it died)."""


class _ForkedChild:
    def __init__(self, server: "ForkServer", pid: int) -> None:
        self.server = server
        self.pid = pid
        self.channel_fd = CHANNEL_FD

    def wait_exit(self, timeout: float) -> bool:
        return self.server._wait_exit(self.pid, timeout)

    def finish(self) -> int:
        # The server killed the child's group before reaping it; it reported the status.
        return self.server._returncode(self.pid)


class ForkServer:
    """Parent side: a `sandbox.Launcher` whose children are forked by the server process."""

    def __init__(self, preload: Sequence[str], workdir: Path) -> None:
        self.preload = list(preload)
        self.workdir = Path(workdir)
        self._lock = threading.Lock()            # one request at a time
        self._cond = threading.Condition()
        self._exits: dict[int, int] = {}
        self._started: list[int] = []
        self._proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._alive = False

    # -- lifecycle ---------------------------------------------------------------------------
    def _ensure_running(self) -> socket.socket:
        if self._alive and self._sock is not None:
            return self._sock
        self._stop_process()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        request = json.dumps({"sock_fd": child.fileno(), "preload": self.preload}).encode()
        log = self.workdir / "forkserver.log"
        try:
            with open(log, "wb") as err:
                proc = subprocess.Popen(python_command("fitness.sandbox.forkserver"), stdin=subprocess.PIPE,
                                        stdout=subprocess.DEVNULL, stderr=err, cwd=self.workdir,
                                        env=clean_env(self.workdir), pass_fds=(child.fileno(),),
                                        start_new_session=True)
        finally:
            child.close()
        assert proc.stdin is not None
        proc.stdin.write(request)
        proc.stdin.close()
        parent.settimeout(120)
        try:
            ready = parent.recv(_MAX_MESSAGE)
        except OSError:
            ready = b""
        if not ready or json.loads(ready) != {"ready": True}:
            proc.kill()
            proc.wait()
            parent.close()
            err = log.read_text(errors="replace").strip().splitlines()[-1:]
            raise ForkServerError(f"the fork server did not start{': ' + err[0] if err else ''}")
        parent.settimeout(None)
        self._proc, self._sock, self._alive = proc, parent, True
        threading.Thread(target=self._read_loop, args=(parent,), name="forkserver-reader", daemon=True).start()
        return parent

    def _read_loop(self, sock: socket.socket) -> None:
        while True:
            try:
                data = sock.recv(_MAX_MESSAGE)
            except OSError:
                data = b""
            with self._cond:
                if not data:
                    if sock is self._sock:
                        self._alive = False
                    self._cond.notify_all()
                    return
                msg = json.loads(data)
                if "exited" in msg:
                    self._exits[int(msg["exited"])] = int(msg["returncode"])
                elif "started" in msg:
                    self._started.append(int(msg["started"]))
                self._cond.notify_all()

    def close(self) -> None:
        with self._lock:
            self._stop_process()

    def _stop_process(self) -> None:
        if self._sock is not None:
            # shutdown, not just close: it also wakes the reader thread blocked in recv.
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()   # the server sees EOF, kills its children and exits
            self._sock = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
            self._proc = None
        self._alive = False

    # -- children ----------------------------------------------------------------------------
    def start(self, module: str, workdir: Path, env: dict[str, str], ends: ChildEnds,
              path: Sequence[str]) -> _ForkedChild:
        with self._lock:
            sock = self._ensure_running()
            msg = json.dumps({"module": module, "workdir": str(workdir), "env": env, "path": list(path)})
            fds = [ends.stdin, ends.stdout, ends.stderr, ends.channel]
            with self._cond:
                self._started.clear()
            try:
                socket.send_fds(sock, [msg.encode()], fds)
            except OSError as exc:
                self._alive = False
                raise ForkServerError(f"the fork server is gone: {exc}") from None
            with self._cond:
                self._cond.wait_for(lambda: self._started or not self._alive, timeout=60)
                if not self._started:
                    raise ForkServerError("the fork server did not start the kernel process")
                return _ForkedChild(self, self._started.pop())

    def _wait_exit(self, pid: int, timeout: float) -> bool:
        with self._cond:
            if self._cond.wait_for(lambda: pid in self._exits or not self._alive, timeout=timeout):
                if pid in self._exits:
                    return True
            else:
                return False
        # The server died: its orphaned child is reaped by the system once it ends.
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    def _returncode(self, pid: int) -> int:
        with self._cond:
            return self._exits.pop(pid, -signal.SIGKILL)


# ---------------------------------------------------------------------------------------------
# Server side.


def main() -> None:
    """The server process: preload, then fork on request until the parent hangs up."""
    request = json.loads(sys.stdin.buffer.read())
    sock = socket.socket(fileno=int(request["sock_fd"]))
    for name in request["preload"]:
        importlib.import_module(name)
    sock.send(json.dumps({"ready": True}).encode())
    children: set[int] = set()
    while True:
        readable, _, _ = select.select([sock], [], [], 0.02 if children else None)
        _reap(children, sock)
        if not readable:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, 4)
        except OSError:
            data, fds = b"", []
        if not data:
            break
        msg = json.loads(data)
        pid = os.fork()
        if pid == 0:
            _become_child(msg, fds, sock)   # never returns
        for fd in fds:
            os.close(fd)
        children.add(pid)
        sock.send(json.dumps({"started": pid}).encode())
    for pid in children:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


def _reap(children: set[int], sock: socket.socket) -> None:
    """Report every child that has exited, after killing what is left of its group."""
    for pid in list(children):
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            children.discard(pid)
            continue
        if info is None:
            continue
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        _, status = os.waitpid(pid, 0)
        children.discard(pid)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        sock.send(json.dumps({"exited": pid, "returncode": code}).encode())


def _become_child(msg: dict[str, Any], fds: list[int], sock: socket.socket) -> None:
    code = 1
    try:
        sock.close()
        os.setsid()
        for target, fd in zip((0, 1, 2, CHANNEL_FD), fds):
            os.dup2(fd, target)
        os.closerange(CHANNEL_FD + 1, os.sysconf("SC_OPEN_MAX"))
        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = open(1, "w", closefd=False, buffering=1)
        sys.stderr = open(2, "w", closefd=False, buffering=1)
        os.chdir(msg["workdir"])
        os.environ.clear()
        os.environ.update(msg["env"])
        sys.path[:0] = msg["path"]
        importlib.import_module(msg["module"]).main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
