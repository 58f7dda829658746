"""The names a kernel imports NKI's modules under, so that rewritten code uses the same."""

from __future__ import annotations

import ast

MODULES = {"isa": ("neuronxcc.nki.isa", "nki.isa"), "language": ("neuronxcc.nki.language", "nki.language")}


def imported(tree: ast.Module) -> dict[str, str]:
    """{"isa": name, "language": name} for the NKI modules imported at module level."""
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                for role, paths in MODULES.items():
                    if a.name in paths:
                        found.setdefault(role, a.asname or a.name)
        elif isinstance(node, ast.ImportFrom) and node.module in ("neuronxcc.nki", "nki"):
            for a in node.names:
                if a.name in MODULES:
                    found.setdefault(a.name, a.asname or a.name)
    return found


def aliases(tree: ast.Module) -> tuple[str, str] | None:
    """(isa name, language name) as imported at module level (`nisa`, `nl`), or None when the
    kernel does not import both."""
    found = imported(tree)
    if "isa" in found and "language" in found:
        return found["isa"], found["language"]
    return None
