"""Normalized kernel source and the content address (kernel id) derived from it.

Two sources that differ only in comments, blank lines or formatting normalize to the same
text, so they get the same id and are evaluated once.
"""

from __future__ import annotations

import ast
import hashlib


def normalize_source(source: str) -> str:
    """Canonical text of a kernel: the AST unparsed (drops comments and layout). Sources that
    do not parse, or that are nested too deeply to unparse (a hostile source can pass
    `ast.parse` and still exhaust the recursion of `ast.unparse`), keep their text with
    trailing whitespace stripped. Never raises for a `str`: every source gets an id."""
    try:
        return ast.unparse(ast.parse(source)) + "\n"
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "\n".join(line.rstrip() for line in source.strip().splitlines()) + "\n"


def kernel_id(source: str) -> str:
    """First 16 hex digits of the sha256 of the normalized source."""
    return hashlib.sha256(normalize_source(source).encode()).hexdigest()[:16]
