"""Text edits of a kernel source at AST positions, leaving every other character as it was.

Offline operators change a kernel the way a person would: a few spans or statements, the rest
of the text (comments, layout) untouched, so that diffs and notes stay readable.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """A region of the source in AST coordinates (1-based lines, UTF-8 byte columns)."""

    lineno: int
    col: int
    end_lineno: int
    end_col: int

    @classmethod
    def of(cls, node: ast.AST) -> "Span":
        return cls(node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)


def replace_spans(source: str, edits: list[tuple[Span, str]]) -> str:
    """`source` with each span replaced by its text; spans must not overlap."""
    lines = [ln.encode() for ln in source.splitlines(keepends=True)]
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))
    data = b"".join(lines)
    ordered = sorted(edits, key=lambda e: (e[0].lineno, e[0].col), reverse=True)
    end = len(data) + 1
    for span, text in ordered:
        a = starts[span.lineno - 1] + span.col
        b = starts[span.end_lineno - 1] + span.end_col
        if b > end:
            raise ValueError("overlapping edits")
        data = data[:a] + text.encode() + data[b:]
        end = a
    return data.decode()


def indentation(line: str) -> str:
    """The leading whitespace of a source line."""
    return line[: len(line) - len(line.lstrip())]


def statement_lines(stmt: ast.stmt) -> tuple[int, int]:
    """The 0-based [first, last] line range of a statement, decorators included."""
    first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
    return first - 1, stmt.end_lineno - 1


def replace_statements(source: str, edits: dict[ast.stmt, list[str] | None]) -> str:
    """`source` with whole statements replaced by the given lines (without indentation: the
    statement's own is added) or removed (None). Statements must not overlap."""
    lines = source.splitlines(keepends=True)
    for stmt in sorted(edits, key=lambda s: s.lineno, reverse=True):
        first, last = statement_lines(stmt)
        indent = indentation(lines[first])
        new = edits[stmt]
        lines[first:last + 1] = [] if new is None else [indent + text + "\n" for text in new]
    return "".join(lines)


def move_statements(source: str, moved: list[ast.stmt], before: ast.stmt) -> str:
    """`source` with the `moved` statements (in their order) cut and put right before `before`,
    at its indentation; `before` must not be one of them and must come before all of them."""
    lines = source.splitlines(keepends=True)
    first_before = statement_lines(before)[0]
    indent = indentation(lines[first_before])
    blocks = []
    for stmt in sorted(moved, key=lambda s: s.lineno, reverse=True):
        first, last = statement_lines(stmt)
        block = lines[first:last + 1]
        own = indentation(block[0])
        blocks.append([indent + ln[len(own):] if ln.startswith(own) else ln for ln in block])
        del lines[first:last + 1]
    for block in blocks:  # reversed order of removal: the first moved statement ends on top
        lines[first_before:first_before] = block
    return "".join(lines)
