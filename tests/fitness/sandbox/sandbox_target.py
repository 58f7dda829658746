"""A stand-in child for the sandbox tests: it does what the request's `action` says."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time

from fitness.sandbox.process import apply_limits


def main() -> None:
    request = json.loads(sys.stdin.buffer.read())
    apply_limits(request["limits"])
    channel = os.fdopen(request["channel_fd"], "w")

    def send(**message: object) -> None:
        channel.write(json.dumps(message) + "\n")
        channel.flush()

    action = request["action"]
    if action == "env":
        send(env=dict(os.environ))
    elif action == "facts":
        send(address_space=resource.getrlimit(resource.RLIMIT_AS), cpu=resource.getrlimit(resource.RLIMIT_CPU),
             core=resource.getrlimit(resource.RLIMIT_CORE), cwd=os.getcwd(), pid=os.getpid(),
             pgid=os.getpgid(0), sid=os.getsid(0), stdin_isatty=sys.stdin.isatty())
    elif action == "sleep":
        send(started=True)
        time.sleep(1000)
    elif action == "ignore_term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        send(started=True)
        while True:
            time.sleep(0.1)
    elif action == "budget":   # ask for more time, then take `sleep` seconds
        send(budget_s=float(request["budget_s"]))
        time.sleep(float(request["sleep"]))
        send(done=True)
    elif action == "spin":
        while True:
            pass
    elif action == "allocate":
        try:
            block = bytearray(int(request["bytes"]))
            send(allocated=len(block))
        except MemoryError:
            send(memory_error=True)
    elif action == "print":
        sys.stdout.write("o" * int(request["n"]) + "END")
        sys.stderr.write("e" * int(request["n"]) + "END")
    elif action == "messages":
        for i in range(int(request["n"])):
            send(i=i)
    elif action == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif action == "exit":
        sys.exit(int(request["code"]))
    elif action == "proc_environ":
        with open("/proc/self/environ", "rb") as f:
            send(environ=f.read().decode(errors="replace"))
    elif action == "mark":
        # Leaves state behind in an imported module: a later child must not see it.
        import json as shared_module

        shared_module.left_behind = os.getpid()
        send(marked=True)
    elif action == "check_mark":
        import json as shared_module

        send(left_behind=getattr(shared_module, "left_behind", None))
    elif action == "orphan":
        # A grandchild in the same process group that outlives the child.
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"])
        send(grandchild=child.pid)
    channel.close()
