"""`check PATH...`: whether kernel files load in the emulator, without running a kernel.

Each file (every `.py` under a folder) is loaded as `eval` would load it (fitness.sandbox.check):
the policy, its dialect, its package's and `evaluation.kernel_paths`' imports, its module-level
code with the emulator's NKI modules. One line per file (or `--json`: a list with an object per
file); exit status 0 when every file loads, 1 when one does not, 2 for a mistake of the user's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

from accelopt_evo.errors import UserError


def kernel_files(paths: Sequence[str]) -> list[Path]:
    """The files named, and every `.py` under a folder named (sorted), each once."""
    out: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.py") if p.is_file())
            if not found:
                raise UserError(f"check: folder '{path}' holds no .py file")
            out += found
        elif path.is_file():
            out.append(path)
        else:
            raise UserError(f"check: '{path}' is not a file or folder")
    seen: set[Path] = set()
    unique = []
    for p in out:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


def describe(result: dict[str, Any]) -> str:
    """The one line of a file's check."""
    dialect = f" ({result['dialect']})" if result["dialect"] else ""
    line = f"{result['path']}: " + (f"loads{dialect}" if result["loads"] else f"does not load{dialect}: {result['error']}")
    for key in ("missing", "approximate"):
        if result[key]:
            line += f"; {key}: {', '.join(result[key])}"
    return line


def run_check(paths: Sequence[str], target: str, kernel_paths: Sequence[str], timeout_s: float, memory_mb: int,
              as_json: bool, out: Callable[[str], None] = print) -> int:
    from fitness.sandbox.check import check_files
    from fitness.sandbox.modules import KernelModules, ModulesError

    files = kernel_files(paths)
    entries = []
    for path in files:
        try:
            source = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"check: cannot read '{path}': {getattr(exc, 'strerror', None) or exc}") from None
        try:
            entries.append((str(path), source, KernelModules.of_file(path, tuple(kernel_paths))))
        except ModulesError as exc:
            raise UserError(str(exc)) from None
    results = check_files(entries, target, timeout_s, memory_mb)
    if as_json:
        out(json.dumps(results, indent=1))
    else:
        for result in results:
            out(describe(result))
    return 0 if all(r["loads"] for r in results) else 1
