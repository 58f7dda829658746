"""In-process guard of the kernel process: a PEP 578 audit hook installed before the kernel runs.

The static policy (fitness.sandbox.policy) keeps a kernel from naming files, processes or sockets; the
guard is the second line for whatever the policy missed. Once installed (it cannot be removed),
the process may read only the Python installation, the project's own packages, the input files
it was given and its working directory, may write only in its working directory, and may not
re-open inherited descriptors, start processes, open sockets, load foreign code through ctypes,
or signal other processes.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path
from typing import Any, Iterable

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC

_EXEC_EVENTS = frozenset({
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "subprocess.Popen",
    "pty.spawn", "os.startfile",
})
_DENIED_EVENTS = frozenset({
    "os.kill", "os.killpg", "signal.pthread_kill", "os.symlink", "os.link", "os.chmod", "os.chown",
    "os.chdir", "os.chroot", "os.chflags", "builtins.input", "builtins.breakpoint", "webbrowser.open",
    "sys.remote_exec", "os.setxattr", "os.removexattr",
})
_DENIED_PREFIXES = ("socket.", "ctypes.", "shutil.", "winreg.", "_winapi.", "msvcrt.", "sqlite3.")
# Path events allowed inside the working directory only.
_WRITE_EVENTS = frozenset({"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.truncate", "os.utime"})
_LIST_EVENTS = frozenset({"os.listdir", "os.scandir", "glob.glob", "glob.glob/2"})
_DENIED_IMPORTS = frozenset({"socket", "_socket", "ctypes", "_ctypes", "subprocess", "_posixsubprocess", "pty",
                             "multiprocessing", "_multiprocessing", "_posixshmem", "urllib", "http", "ssl", "_ssl",
                             "pickle", "webbrowser", "sqlite3", "_sqlite3", "dbm", "_dbm", "_gdbm", "shelve"})
# Functions that start processes or create files without raising an audit event the hook
# could refuse (`_posixsubprocess.fork_exec` raises none). The "import" event fires only for a
# module not yet imported, and the worker's own imports (subprocess, for one) have loaded
# some of these already, so install() replaces every reference to them in loaded modules.
_DISARMED = {
    "_posixsubprocess": ("fork_exec",),
    "_posixshmem": ("shm_open", "shm_unlink"),
    "_multiprocessing": ("sem_unlink",),
    "_sqlite3": ("connect",),
    "sqlite3": ("connect",),
    "sqlite3.dbapi2": ("connect",),
}


class SandboxViolation(PermissionError):
    """The kernel process tried something the sandbox does not allow."""


def python_roots() -> list[str]:
    """Folders the interpreter itself needs to read (standard library, site-packages)."""
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    return sorted(roots)


def install(readable_files: Iterable[str | Path], readable_dirs: Iterable[str | Path], workdir: str | Path,
            allow_exec: bool = False, provided: Iterable[str] = ()) -> None:
    """Install the guard for the rest of this process's life.

    `allow_exec` is for the trainium backend, whose compiler and runtime read the SDK's files,
    start programs and talk to the Neuron driver: there the guard only keeps this process's
    writes inside the working directory, and the static policy is the main line.
    `provided` names top-level packages the backend has put in `sys.modules` itself (the
    emulator's `neuronxcc` and `nki`): importing one of them or their submodules anew, from
    disk (a real SDK, PyPI's placeholder `nki`), is refused, so that a kernel never runs on
    anything but the modules it was given."""
    in_memory = frozenset(provided)
    files = frozenset(os.path.realpath(p) for p in readable_files)
    roots = tuple(os.path.join(os.path.realpath(p), "") for p in readable_dirs)
    work = os.path.join(os.path.realpath(workdir), "")

    def inside(path: Any, prefixes: tuple[str, ...]) -> bool:
        p = os.path.join(os.path.realpath(os.fsdecode(path)), "")
        return p.startswith(prefixes)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None))[:3]
            if isinstance(path, int):
                # Re-opening an inherited descriptor (the report channel is one) is how a kernel
                # would forge the worker's messages; the worker opened its own beforehand.
                if allow_exec:
                    return
                raise SandboxViolation(f"sandbox: opening file descriptor {path} is not allowed")
            if path is None:
                return
            writing = bool(mode and any(c in str(mode) for c in "wax+")) or bool((flags or 0) & _WRITE_FLAGS)
            if inside(path, (work,)):
                return
            if writing:
                raise SandboxViolation(f"sandbox: writing '{os.fsdecode(path)}' is not allowed")
            if allow_exec or os.path.realpath(os.fsdecode(path)) in files or inside(path, roots):
                return
            raise SandboxViolation(f"sandbox: reading '{os.fsdecode(path)}' is not allowed")
        if event in _WRITE_EVENTS:
            if not args or not inside(args[0], (work,)):
                raise SandboxViolation(f"sandbox: {event} outside the working directory is not allowed")
            return
        if allow_exec:
            return   # the Neuron SDK needs the rest
        if event in _LIST_EVENTS:
            if args and args[0] is not None and not isinstance(args[0], int) and not inside(args[0], roots + (work,)):
                raise SandboxViolation(f"sandbox: listing '{os.fsdecode(args[0])}' is not allowed")
            return
        if event == "import":
            top = str(args[0]).split(".")[0] if args else ""
            if top in _DENIED_IMPORTS:
                raise SandboxViolation(f"sandbox: importing '{args[0]}' is not allowed")
            if top in in_memory:
                raise SandboxViolation(f"sandbox: importing '{args[0]}' from disk is not allowed (the simulator "
                                       f"provides the {top} modules a kernel may use)")
            return
        if event in _EXEC_EVENTS:
            raise SandboxViolation(f"sandbox: starting a process ({event}) is not allowed")
        if event in _DENIED_EVENTS or event.startswith(_DENIED_PREFIXES):
            raise SandboxViolation(f"sandbox: {event} is not allowed")

    if not allow_exec:
        disarm()
    sys.addaudithook(hook)


def _denied(qualname: str):
    def denied(*args: Any, **kwargs: Any) -> Any:
        raise SandboxViolation(f"sandbox: {qualname} is not allowed")
    denied.__name__ = denied.__qualname__ = qualname.rsplit(".", 1)[-1]
    return denied


def disarm() -> list[str]:
    """Replace the functions of `_DISARMED` everywhere a loaded module holds them (the module
    itself and aliases such as `subprocess._fork_exec`); returns the names replaced."""
    originals: dict[int, str] = {}
    for mod_name, names in _DISARMED.items():
        mod = sys.modules.get(mod_name)
        for name in names:
            fn = getattr(mod, name, None) if mod is not None else None
            if fn is not None:
                originals[id(fn)] = f"{mod_name}.{name}"
    replaced = []
    if not originals:
        return replaced
    for mod_name, mod in list(sys.modules.items()):
        namespace = getattr(mod, "__dict__", None)
        # a set test first: most modules hold none of them, and a kernel process pays this
        if not isinstance(namespace, dict) or originals.keys().isdisjoint(map(id, namespace.values())):
            continue
        for attr, value in list(namespace.items()):
            qualname = originals.get(id(value))
            if qualname is not None:
                namespace[attr] = _denied(qualname)
                replaced.append(f"{mod_name}.{attr}")
    return replaced
