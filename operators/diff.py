"""Unified diffs of kernel sources, for memory entries, prompts and reports."""

from __future__ import annotations

import difflib

MAX_DIFF_LINES = 80


def kernel_diff(before: str, after: str, max_lines: int = MAX_DIFF_LINES) -> str:
    """A unified diff of two kernel sources (parent -> child), cut to `max_lines`."""
    lines = list(difflib.unified_diff(before.splitlines(), after.splitlines(), "parent.py", "child.py",
                                      n=2, lineterm=""))
    if not lines:
        return "(no textual difference)"
    if len(lines) > max_lines:
        lines = lines[:max_lines] + [f"... ({len(lines) - max_lines} more diff lines)"]
    return "\n".join(lines)
