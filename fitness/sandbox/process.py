"""Sandboxed child processes: one fresh process per evaluation, never reused.

Parent side (`run`): a launcher starts the child, either as a new interpreter
(`SpawnLauncher`) or as a fork of the preloaded fork server (fitness.sandbox.forkserver), always with a
scrubbed environment (an explicit allow-list: no API keys, tokens or credentials survive), in
its own session and process group, in a fresh working directory, with stdout/stderr captured
and truncated. A wall-clock deadline ends it with SIGTERM and then SIGKILL to the whole group;
a message of the child carrying `budget_s` stretches it, up to STRETCH times the timeout.
The request goes in on stdin as JSON; the child reports on a private pipe (JSON lines).

Child side (`apply_limits`): the first thing the child does is to lower its own hard limits
(address space, CPU time, file size, open files, no core dumps), which it cannot raise again;
its CPU-time soft limit starts at the timeout, and the worker's own code may raise it up to the
hard limit (`raise_cpu_limit`) before it runs the kernel on data (kernels cannot reach it).
"""

from __future__ import annotations

import json
import math
import os
import resource
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

# Variables copied from the engine's environment; everything else is dropped.
ENV_ALLOWED = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "LD_LIBRARY_PATH")
# One thread per numeric library: the pool runs one process per core already, and every
# extra thread reserves address space that the memory limit counts.
ENV_FIXED = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
             "NUMEXPR_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}

KERNEL_FILES = 256          # open files of a kernel process (simulator)
TOOLCHAIN_FILES = 4096      # with the Neuron compiler and runtime in it
TOOLCHAIN_FILE_MB = 4096    # largest file the toolchain may write (NEFFs and NTFFs grow with the kernel)
_REPO_ROOT = str(Path(__file__).resolve().parents[2])


# How many times `timeout_s` an evaluation may take when its kernel process, having traced the
# kernel shape-only, expects that much work (fitness.sandbox.worker.time_budget): a busy machine must not
# turn an honest large kernel into a timeout, and no kernel may hold a worker for long beyond it.
STRETCH = 4


@dataclass(frozen=True)
class Limits:
    timeout_s: float
    memory_mb: int
    output_bytes: int = 8192      # kept of stdout and of stderr each (head and tail halves)
    grace_s: float = 2.0          # between SIGTERM and SIGKILL
    # The Neuron compiler and runtime run in the kernel process (trainium backend): they
    # reserve far more address space than they use and open many files, so the address-space
    # limit is left to the machine and more files may be open (TOOLCHAIN_FILES).
    toolchain: bool = False

    @property
    def cpu_s(self) -> int:
        """CPU-time limit: the wall-clock limit plus a margin, so that the deadline, not the
        CPU limit, normally ends a runaway kernel (the CPU limit covers a stalled parent)."""
        return int(math.ceil(self.timeout_s)) + 5

    @property
    def most_s(self) -> float:
        """The longest the wall-clock limit may be stretched to (STRETCH)."""
        return self.timeout_s * STRETCH

    def to_child(self) -> dict[str, int]:
        return {"memory_mb": self.memory_mb, "cpu_s": self.cpu_s, "cpu_most_s": int(math.ceil(self.most_s)) + 5,
                "file_mb": max(self.memory_mb, TOOLCHAIN_FILE_MB) if self.toolchain else self.memory_mb,
                "toolchain": int(self.toolchain)}


@dataclass
class Deadline:
    """The wall-clock deadline of one child: `timeout_s` after its start, stretched (never
    shortened) by a `budget_s` the child reports, up to `most_s` after its start."""

    start: float
    at: float
    latest: float

    def stretch(self, seconds: float) -> None:
        self.at = max(self.at, min(self.start + seconds, self.latest))


@dataclass
class Outcome:
    """How a sandboxed child ended."""

    returncode: int | None        # None: it could not be started
    timed_out: bool = False       # the deadline ended it
    limit_s: float = 0.0          # the wall-clock limit it ran under (timeout_s, or as stretched)
    stopped: bool = False         # the parent ended it early (on_message returned False)
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    spawn_error: str = ""

    @property
    def signal(self) -> int | None:
        return -self.returncode if self.returncode is not None and self.returncode < 0 else None

    def describe_exit(self) -> str:
        if self.spawn_error:
            return f"the kernel process could not be started: {self.spawn_error}"
        sig = self.signal
        if sig is not None:
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = f"signal {sig}"
            hint = " (the system may have run out of memory)" if sig == signal.SIGKILL else ""
            return f"the kernel process was killed by {name}{hint}"
        return f"the kernel process exited with status {self.returncode}"


class ProcessRegistry:
    """The live children of an owner, so that closing it leaves no process behind."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pids: set[int] = set()

    def add(self, pid: int) -> None:
        with self._lock:
            self._pids.add(pid)

    def discard(self, pid: int) -> None:
        with self._lock:
            self._pids.discard(pid)

    def pids(self) -> list[int]:
        with self._lock:
            return sorted(self._pids)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pids)

    def kill_all(self) -> None:
        with self._lock:
            pids = list(self._pids)
        for pid in pids:
            _signal_group(pid, signal.SIGKILL)


def clean_env(workdir: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's whole environment: the allow-listed variables, fixed settings, HOME and
    TMPDIR inside its working directory, and `extra` (e.g. NEURON_RT_VISIBLE_CORES)."""
    env = {k: os.environ[k] for k in ENV_ALLOWED if k in os.environ}
    env.update(ENV_FIXED)
    env["HOME"] = env["TMPDIR"] = str(workdir)
    env.update(extra or {})
    return env


def python_command(module: str, path: Sequence[str] = ()) -> list[str]:
    """Run `module.main()` in an isolated interpreter (-I: no user site, no PYTHON* variables,
    no current directory on sys.path) with this checkout (and `path`) first on sys.path."""
    entries = [_REPO_ROOT, *path]
    boot = f"import sys; sys.path[:0] = {entries!r}; import {module} as m; m.main()"
    return [sys.executable, "-I", "-c", boot]


class _Capture:
    """First and last bytes of a stream, with the number of bytes dropped in between."""

    def __init__(self, limit: int) -> None:
        self.half = max(limit // 2, 1)
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_len = 0
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail.append(data)
            self.tail_len += len(data)
            while self.tail_len - len(self.tail[0]) >= self.half:
                self.tail_len -= len(self.tail.popleft())

    def text(self) -> str:
        tail = b"".join(self.tail)[-self.half:]
        dropped = self.total - len(self.head) - len(tail)
        middle = f"\n[... {dropped} bytes omitted ...]\n".encode() if dropped > 0 else b""
        return (bytes(self.head) + middle + tail).decode("utf-8", errors="replace")


@dataclass(frozen=True)
class ChildEnds:
    """The pipe ends a child gets: its stdin, stdout, stderr and the report channel."""

    stdin: int
    stdout: int
    stderr: int
    channel: int


class Child(Protocol):
    pid: int              # also the id of the child's process group
    channel_fd: int       # the report channel's descriptor number inside the child

    def wait_exit(self, timeout: float) -> bool:
        """True once the child has exited (within `timeout` seconds)."""

    def finish(self) -> int:
        """After exit: kill what is left of its process group; its return code."""


class Launcher(Protocol):
    def start(self, module: str, workdir: Path, env: dict[str, str], ends: ChildEnds,
              path: Sequence[str]) -> Child:
        """Start `module.main()` in a new session and process group."""


class _SpawnedChild:
    def __init__(self, proc: subprocess.Popen, channel_fd: int) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.channel_fd = channel_fd

    def wait_exit(self, timeout: float) -> bool:
        return _wait_exit(self.pid, timeout)

    def finish(self) -> int:
        _signal_group(self.pid, signal.SIGKILL)   # before reaping: the group id cannot be reused yet
        return self.proc.wait()


class SpawnLauncher:
    """A new interpreter per child (subprocess); the general way, used by every backend."""

    def start(self, module: str, workdir: Path, env: dict[str, str], ends: ChildEnds,
              path: Sequence[str]) -> Child:
        proc = subprocess.Popen(python_command(module, path), stdin=ends.stdin, stdout=ends.stdout,
                                stderr=ends.stderr, cwd=workdir, env=env, pass_fds=(ends.channel,),
                                start_new_session=True)
        return _SpawnedChild(proc, ends.channel)


def run(module: str, request: dict[str, Any], limits: Limits, workdir: Path,
        on_message: Callable[[dict[str, Any]], bool] | None = None, *,
        extra_env: Mapping[str, str] | None = None, registry: ProcessRegistry | None = None,
        path: Sequence[str] = (), launcher: Launcher | None = None,
        cancel: threading.Event | None = None) -> Outcome:
    """Run `module.main()` sandboxed in `workdir` and feed it `request`.

    `on_message` gets each JSON message the child reports and returns False to end the child
    early; `cancel`, once set, ends it too (within a fraction of a second). Whatever happens (also an exception in `on_message`), the child's process group is
    killed and the child reaped before this returns.
    """
    start = time.monotonic()
    pipes = [os.pipe() for _ in range(4)]   # stdin, stdout, stderr, channel: (read, write)
    ends = ChildEnds(pipes[0][0], pipes[1][1], pipes[2][1], pipes[3][1])
    ours = [pipes[0][1], pipes[1][0], pipes[2][0], pipes[3][0]]
    try:
        child = (launcher or SpawnLauncher()).start(module, workdir, clean_env(workdir, extra_env), ends, path)
    except OSError as exc:
        for fd in ours:
            os.close(fd)
        return Outcome(None, spawn_error=str(exc), seconds=time.monotonic() - start)
    finally:
        for fd in (ends.stdin, ends.stdout, ends.stderr, ends.channel):
            os.close(fd)
    # The deadline starts with the child (a fork server's own first start is not the kernel's).
    began = time.monotonic()
    deadline = Deadline(began, began + limits.timeout_s, began + limits.most_s)
    if registry is not None:
        registry.add(child.pid)
    payload = json.dumps(dict(request, channel_fd=child.channel_fd, limits=limits.to_child())).encode()
    outcome = Outcome(None)
    captures = {"stdout": _Capture(limits.output_bytes), "stderr": _Capture(limits.output_bytes)}
    kill_now = True   # until the child's streams closed on their own
    try:
        outcome.timed_out, outcome.stopped = _pump(child, payload, ours, captures, deadline, on_message, cancel)
        kill_now = outcome.timed_out or outcome.stopped
    finally:
        if kill_now or not child.wait_exit(max(deadline.at - time.monotonic(), 0)):
            outcome.timed_out = outcome.timed_out or not kill_now
            _signal_group(child.pid, signal.SIGTERM)
            if not child.wait_exit(limits.grace_s):
                _signal_group(child.pid, signal.SIGKILL)
                child.wait_exit(10.0)
        outcome.returncode = child.finish()
        if registry is not None:
            registry.discard(child.pid)
        for fd in ours:
            if fd >= 0:
                os.close(fd)
    outcome.stdout = captures["stdout"].text()
    outcome.stderr = captures["stderr"].text()
    outcome.seconds = time.monotonic() - start
    outcome.limit_s = deadline.at - deadline.start
    return outcome


def _pump(child: Child, payload: bytes, fds: list[int], captures: dict[str, _Capture], deadline: Deadline,
          on_message: Callable[[dict[str, Any]], bool] | None,
          cancel: threading.Event | None = None) -> tuple[bool, bool]:
    """Write the request and read the child's streams until they close or the child has exited
    (a process it left behind may hold them open); returns (timed_out, stopped). A message
    carrying `budget_s` stretches the deadline (Deadline.stretch).

    The stdin end is closed here once the request is written (the child reads to EOF); its
    slot in `fds` becomes -1 so that the caller does not close a number another thread may
    have been given since."""
    stdin_w, stdout_r, stderr_r, channel_r = fds
    pending = b""
    os.set_blocking(stdin_w, False)
    with selectors.DefaultSelector() as sel:
        sel.register(stdin_w, selectors.EVENT_WRITE, "stdin")
        sel.register(stdout_r, selectors.EVENT_READ, "stdout")
        sel.register(stderr_r, selectors.EVENT_READ, "stderr")
        sel.register(channel_r, selectors.EVENT_READ, "channel")
        exited = False
        while sel.get_map():
            remaining = deadline.at - time.monotonic()
            if remaining <= 0:
                return True, False
            if cancel is not None and cancel.is_set():
                return False, True
            # Once the child is gone, whatever it wrote is already in the pipes: drain them.
            events = sel.select(0 if exited else min(remaining, 0.2))
            if exited and not events:
                break
            for key, _ in events:
                if key.data == "stdin":
                    try:
                        payload = payload[os.write(stdin_w, payload[:1 << 16]):]
                    except OSError:   # the child closed its stdin or died: its exit tells why
                        payload = b""
                    if not payload:
                        sel.unregister(stdin_w)
                        os.close(stdin_w)
                        fds[0] = -1
                    continue
                data = os.read(key.fd, 1 << 16)
                if not data:
                    sel.unregister(key.fd)
                    continue
                if key.data != "channel":
                    captures[key.data].feed(data)
                    continue
                pending += data
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    message = json.loads(line)
                    if isinstance(message, dict) and isinstance(message.get("budget_s"), (int, float)):
                        deadline.stretch(float(message["budget_s"]))
                    if on_message is not None and on_message(message) is False:
                        return False, True
            exited = exited or child.wait_exit(0)
    return False, False


def _wait_exit(pid: int, timeout: float) -> bool:
    """Wait until the child has exited, without reaping it (so that its process group id
    cannot be reused before the group is killed)."""
    end = time.monotonic() + timeout
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None:
                return True
        except ChildProcessError:
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.01)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# ---------------------------------------------------------------------------------------------
# Child side.


def raise_cpu_limit(seconds: float) -> None:
    """Raise this process's CPU-time soft limit to `seconds` (never above its hard limit, never
    lower than it is): the worker's own step once it knows its kernel's expected work."""
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    want = int(math.ceil(seconds))
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    if soft != resource.RLIM_INFINITY and want > soft:
        resource.setrlimit(resource.RLIMIT_CPU, (want, hard))


def apply_limits(limits: Mapping[str, int]) -> None:
    """Lower this process's limits (soft and hard, so the kernel cannot raise them again; the
    CPU time's hard limit leaves room for a stretched deadline)."""
    mb = 1 << 20

    def lower(which: int, value: int) -> None:
        _, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))

    toolchain = bool(limits.get("toolchain"))
    if not toolchain:
        lower(resource.RLIMIT_AS, int(limits["memory_mb"]) * mb)
    lower(resource.RLIMIT_FSIZE, int(limits["file_mb"]) * mb)
    lower(resource.RLIMIT_CORE, 0)
    lower(resource.RLIMIT_NOFILE, TOOLCHAIN_FILES if toolchain else KERNEL_FILES)
    cpu = int(limits["cpu_s"])
    most = max(cpu, int(limits.get("cpu_most_s", cpu))) + 5   # the worker may raise its soft limit this far
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, most if hard == resource.RLIM_INFINITY else min(most, hard)))
    # Past the file-size limit a write fails with EFBIG instead of killing the process.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
