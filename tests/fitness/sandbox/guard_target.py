"""A stand-in kernel process for the guard tests: installs the guard, then tries each probe."""

from __future__ import annotations

import json
import os
import sys
import types

from fitness.sandbox import guard
from fitness.sandbox.process import apply_limits


def _probe(kind: str, arg: str) -> str:
    try:
        if kind == "read":
            with open(arg, "rb") as f:
                f.read(1)
        elif kind == "write":
            with open(arg, "w") as f:
                f.write("x")
        elif kind == "open_fd":
            with open(int(arg), "w", closefd=False) as f:
                f.write("{}\n")
        elif kind == "listdir":
            os.listdir(arg)
        elif kind == "remove":
            os.remove(arg)
        elif kind == "exec":
            os.system("true")
        elif kind == "socket":
            import socket

            socket.socket()
        elif kind == "ctypes":
            import ctypes

            ctypes.CDLL(None)
        elif kind == "import":
            __import__(arg)
        elif kind == "kill":
            os.kill(os.getppid(), 0)
        elif kind == "sqlite":
            import sqlite3

            sqlite3.connect(arg).close()
        elif kind == "fork_exec":
            # the pre-imported C function that subprocess uses, called directly (no audit event)
            import _posixsubprocess

            r, w = os.pipe()
            pid = _posixsubprocess.fork_exec(
                [b"/bin/sh", b"-c", b"true"], [b"/bin/sh"], True, (w,), None, None, -1, -1, -1, -1, -1, -1,
                r, w, True, False, -1, None, None, None, -1, None, False)
            os.waitpid(pid, 0)
        elif kind == "subprocess_alias":
            import subprocess

            # the reference subprocess itself calls (an alias on 3.12+, the module attribute before)
            fn = getattr(subprocess, "_fork_exec", None) or subprocess._posixsubprocess.fork_exec
            fn()
        elif kind == "numpy_save":
            import numpy as np

            np.save(arg, np.zeros(2))
    except guard.SandboxViolation as exc:
        return f"refused: {exc}"
    except OSError as exc:
        return f"oserror: {exc}"
    except TypeError as exc:   # a disarmed function refuses before it reads its arguments
        return f"typeerror: {exc}"
    return "allowed"


def main() -> None:
    request = json.loads(sys.stdin.buffer.read())
    apply_limits(request["limits"])
    channel = os.fdopen(request["channel_fd"], "w")
    import numpy  # noqa: F401  (imported before the guard, as in the worker)

    for name in request.get("preimport", []):   # modules already loaded when the guard goes on
        __import__(name)
    for name in request.get("in_memory", []):   # modules a backend built itself, as the emulator does
        sys.modules[name] = types.ModuleType(name)
    sys.path[:0] = request.get("sys_path", [])

    guard.install(request["files"], guard.python_roots() + request["dirs"], os.getcwd(),
                  allow_exec=request.get("allow_exec", False), provided=request.get("provided", []))
    results = [_probe(kind, arg) for kind, arg in request["probes"]]
    channel.write(json.dumps({"results": results}) + "\n")
    channel.close()
