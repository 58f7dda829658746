"""A stand-in kernel process for the guard tests: installs the guard, then tries each probe."""

from __future__ import annotations

import json
import os
import sys

from fitness import guard
from fitness.sandbox import apply_limits


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
        elif kind == "numpy_save":
            import numpy as np

            np.save(arg, np.zeros(2))
    except guard.SandboxViolation as exc:
        return f"refused: {exc}"
    except OSError as exc:
        return f"oserror: {exc}"
    return "allowed"


def main() -> None:
    request = json.loads(sys.stdin.buffer.read())
    apply_limits(request["limits"])
    channel = os.fdopen(request["channel_fd"], "w")
    import numpy  # noqa: F401  (imported before the guard, as in the worker)

    guard.install(request["files"], guard.python_roots() + request["dirs"], os.getcwd(),
                  allow_exec=request.get("allow_exec", False))
    results = [_probe(kind, arg) for kind, arg in request["probes"]]
    channel.write(json.dumps({"results": results}) + "\n")
    channel.close()
