"""Whether kernel files load, without running a kernel (the `check` command).

Each file is loaded as an evaluation would load it, in one sandboxed process (the kernel
process's limits, scrubbed environment and audit hook): the policy, its NKI dialect, its
package's and kernel libraries' imports, and its module-level code executed with the emulator's
NKI modules installed (fitness.sandbox.modules.Loader). The result of each file: whether it
loads, the first error, and the NKI names it uses that the emulator lacks or only approximates
(`construct_status`, where the emulator's construct table plugs in).

Parent side: `check_files`. Child side: `main` (a JSON request on stdin, one message per file).
"""

from __future__ import annotations

import ast
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Sequence

from fitness.simulator import constructs
from fitness.simulator import dialect as D

from . import policy, process
from .modules import KernelModules

CHECK_FILE = "kernel.py"
# The attribute an emulator object carries when its semantics are approximate:
# ("approximate", how) (the construct table's mark, fitness.simulator.constructs).


# --------------------------------------------------------------------------------------------
# The NKI names a source uses.


def _documented(module: str) -> str:
    """`neuronxcc.nki.language` -> `nki.language`: the documentation's spelling in both dialects."""
    return module[len("neuronxcc."):] if module.startswith("neuronxcc.nki") else module


def nki_names(source: str, dialect: D.Dialect) -> list[str]:
    """The NKI names `source` uses, in the documentation's spelling (`nki.isa.nc_matmul`,
    `nki.language.tile_size.pmax`): every attribute chain rooted at an NKI module it imports,
    as far as the policy's namespaces lead (`nisa.dge_mode.none`), and every name it imports
    from one (`from nki.language import NKIObject`)."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in policy.NKI_MODULES:
                    if a.asname:
                        aliases[a.asname] = a.name
                    else:
                        top = a.name.split(".")[0]
                        aliases[top] = top
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module in policy.NKI_MODULES:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if full in policy.NKI_MODULES:
                    aliases[a.asname or a.name] = full
                elif a.name != "*":
                    found.add(_documented(full))
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or id(node) in inner:
            continue   # a chain is read from its outermost attribute
        chain: list[str] = []
        base: ast.AST = node
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        if not isinstance(base, ast.Name) or base.id not in aliases:
            continue
        name = aliases[base.id]
        for attr in reversed(chain):
            name = f"{name}.{attr}"
            if attr not in policy.NKI_NAMESPACES:
                break
        if name not in policy.NKI_MODULES and not name.rsplit(".", 1)[-1].startswith("_"):
            found.add(_documented(name))
    return sorted(found)


def construct_status(dialect: D.Dialect, names: Sequence[str]) -> tuple[list[str], list[str]]:
    """(missing, approximate) among `names` (documented spellings, `nki.isa.x`): what a kernel
    of `dialect` uses that the emulator lacks, and what it only approximates, by the
    emulator's construct table (fitness.simulator.constructs)."""
    return constructs.lookup(dialect, list(names))


# --------------------------------------------------------------------------------------------
# One file, in the check process.


def _location(exc: BaseException) -> str:
    """'file:line: ' of the innermost frame of a kernel module in the traceback ('' if none)."""
    where = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        if not frame.filename.startswith(str(Path(__file__).resolve().parents[1])) and frame.filename != "<string>":
            where = f"{frame.filename}:{frame.lineno}: "
    return where


def error_message(exc: BaseException) -> str:
    """The one-line first error of a file that does not load."""
    from fitness.simulator.errors import NkiError

    from .modules import KernelPolicyError

    if isinstance(exc, KernelPolicyError):
        return f"policy: {exc}"
    if isinstance(exc, NkiError):
        return str(exc)
    if isinstance(exc, SyntaxError) and exc.filename:   # a module the file imports does not parse
        return f"{exc.filename}:{exc.lineno or 0}: {type(exc).__name__}: {exc.msg} (the file does not parse)"
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return " ".join((_location(exc) + text).split())[:1200]


def check_source(path: str, source: str, modules: KernelModules, target: str) -> dict[str, Any]:
    """The check of one file (this process must have installed the emulator's modules)."""
    from fitness.backends import target_refusal
    from fitness.simulator.perf.hardware import hardware

    from .modules import Loader

    out: dict[str, Any] = {"path": path, "dialect": None, "loads": False, "error": None, "missing": [],
                           "approximate": []}
    default: D.Dialect = hardware(target).dialects[0]  # type: ignore[assignment]
    try:
        verdict = policy.review(source, default, **modules.policy_context())
    except SyntaxError as exc:
        out["error"] = f"{path}:{exc.lineno or 0}: SyntaxError: {exc.msg} (the file does not parse)"
        return out
    out["dialect"] = verdict.dialect
    if verdict.dialect is not None:
        out["missing"], out["approximate"] = construct_status(verdict.dialect, nki_names(source, verdict.dialect))
    if verdict.violations:
        out["error"] = f"policy: {path}: {verdict.violations[0]}"
        return out
    refusal = target_refusal(target, verdict.dialect)
    if refusal:
        out["error"] = refusal
        return out
    try:
        Loader(modules)(source, path, verdict.dialect)
    except BaseException as exc:
        out["error"] = error_message(exc)
        return out
    out["loads"] = True
    return out


def main() -> None:
    """The check process: a JSON request on stdin ({"files": [{"path", "source", "modules"}],
    "target"}), one {"event": "file", "index", "result"} message per file."""
    request = json.loads(sys.stdin.buffer.read())
    process.apply_limits(request["limits"])
    channel = os.fdopen(int(request["channel_fd"]), "w")
    # what loading a file needs, imported before the guard (as a kernel process does)
    from fitness import backends  # noqa: F401
    from fitness.simulator.dialect import ROOTS
    from fitness.simulator.perf import hardware  # noqa: F401
    from fitness.simulator.runner import install

    from . import guard
    from . import modules as _modules  # noqa: F401

    install()
    files = request["files"]
    modules = [KernelModules.from_json(f["modules"]) for f in files]
    roots = {d for m in modules for d in m.readable_dirs()}
    here = Path(__file__).resolve().parents[2]
    guard.install([], guard.python_roots() + [str(here / "fitness"), str(here / "nkibench"), *sorted(roots)],
                  Path.cwd(), provided=tuple(ROOTS.values()))
    for i, (entry, mods) in enumerate(zip(files, modules)):
        try:
            result = check_source(entry["path"], entry["source"], mods, request["target"])
        except Exception as exc:
            result = {"path": entry["path"], "dialect": None, "loads": False, "missing": [], "approximate": [],
                      "error": f"internal error of the check: {type(exc).__name__}: {exc}"}
        channel.write(json.dumps({"event": "file", "index": i, "result": result}) + "\n")
        channel.flush()
    channel.close()


# --------------------------------------------------------------------------------------------
# Parent side.


def check_files(files: Sequence[tuple[str, str, KernelModules]], target: str, timeout_s: float = 300.0,
                memory_mb: int = 8192) -> list[dict[str, Any]]:
    """The check of each (path as shown, source, where it sits), in order, from one sandboxed
    process; the files it did not reach (it timed out or died) say so."""
    results: dict[int, dict[str, Any]] = {}

    def on_message(message: dict[str, Any]) -> bool:
        if message.get("event") == "file":
            results[int(message["index"])] = message["result"]
        return True

    request = {"files": [{"path": p, "source": s, "modules": m.to_json()} for p, s, m in files], "target": target}
    with tempfile.TemporaryDirectory(prefix="accelopt-evo-check-") as work:
        outcome = process.run("fitness.sandbox.check", request, process.Limits(timeout_s, memory_mb), Path(work),
                              on_message)
    missing = [i for i in range(len(files)) if i not in results]
    if missing:
        why = f"the check process exceeded {timeout_s:g} s" if outcome.timed_out else outcome.describe_exit().replace("kernel process", "check process")
        tail = outcome.stderr.strip().splitlines()[-1:] if outcome.stderr.strip() else []
        detail = f"; last output: {tail[0][:300]}" if tail else ""
        for i in missing:
            results[i] = {"path": files[i][0], "dialect": None, "loads": False, "missing": [], "approximate": [],
                          "error": f"not checked: {why} while checking {files[missing[0]][0]}{detail}"}
    return [results[i] for i in range(len(files))]
