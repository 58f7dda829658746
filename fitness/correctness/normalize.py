"""Normalized kernel source and the content address (kernel id) derived from it, and the form
of a source that decides its evaluation (`judged_form`, the cache's key).

Two sources that differ only in comments, blank lines or formatting normalize to the same
text, so they get the same id (one individual of a search). Their evaluations may still differ:
the performance model tells allocation sites apart by their source lines and messages cite
lines, so the evaluation cache keys a source by its syntax tree with every node's lines.
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


def judged_form(source: str) -> str:
    """What an evaluation of `source` depends on: its syntax tree with each node's first and
    last line (not its columns, comments or trailing blank lines). A source that does not parse
    keeps its text."""
    try:
        tree = ast.parse(source)
        for node in ast.walk(tree):
            for attr in ("col_offset", "end_col_offset"):
                if hasattr(node, attr):
                    setattr(node, attr, 0)
        return ast.dump(tree, include_attributes=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return source
