"""Work-arounds for interpreter bugs the engine's threads run into.

CPython 3.11.0-3.11.7 and 3.12.0-3.12.1 build AST objects with one recursion-depth counter
shared by all threads (python/cpython gh-106905, fixed in 3.11.8 and 3.12.2): when the garbage
collector lets another thread parse in the middle of a parse, either may fail with "SystemError:
AST constructor recursion depth mismatch". Runs parse kernel sources on several threads at once
(LLM replies, kernel ids, the evaluator's policy check, and more of them in an asynchronous run),
so on those versions `ast.parse` is made to run one call at a time.
"""

from __future__ import annotations

import ast
import functools
import sys
import threading
from typing import Any

_LOCK = threading.Lock()


def affected(version: tuple[int, ...] = tuple(sys.version_info[:3])) -> bool:
    """Whether this interpreter shares the AST constructor's depth counter between threads."""
    return (3, 11, 0) <= version < (3, 11, 8) or (3, 12, 0) <= version < (3, 12, 2)


def serialize_ast_parse() -> None:
    """Make `ast.parse` take a process-wide lock on an affected interpreter (idempotent)."""
    if not affected() or getattr(ast.parse, "serialized", False):
        return
    parse = ast.parse

    @functools.wraps(parse)
    def locked(*args: Any, **kwargs: Any) -> Any:
        with _LOCK:
            return parse(*args, **kwargs)

    locked.serialized = True  # type: ignore[attr-defined]
    ast.parse = locked
