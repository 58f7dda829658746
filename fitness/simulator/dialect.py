"""Which NKI dialect a kernel source is written in, decided by its imports.

NKI has two dialects: the legacy one (`import neuronxcc.nki`, what NKIBench, AccelOpt and the
trn1 measurements use; a compile error since Neuron 2.30) and the current one (`import nki`,
NKI 0.3+, trn2/trn3). A kernel names its dialect by what it imports; a source importing both
is an error, since no toolchain accepts both in one kernel. A source importing neither (a
fragment, or a kernel relying on injected aliases) is taken as `default`.
"""

from __future__ import annotations

import ast
from typing import Literal

Dialect = Literal["legacy", "current"]
DIALECTS: tuple[Dialect, ...] = ("legacy", "current")

# Top-level package each dialect imports its NKI modules from.
ROOTS: dict[Dialect, str] = {"legacy": "neuronxcc", "current": "nki"}
# The import that marks each dialect, as messages show it.
IMPORTS: dict[Dialect, str] = {"legacy": "import neuronxcc.nki", "current": "import nki"}


class DialectError(ValueError):
    """A source imports both dialects. The message is one line naming both imports."""


def _of_module(module: str) -> Dialect | None:
    top = module.split(".")[0]
    for dialect, root in ROOTS.items():
        if top == root:
            return dialect
    return None


def imports(tree: ast.AST) -> dict[Dialect, int]:
    """Dialect -> first line importing it, for every NKI import in `tree`."""
    found: dict[Dialect, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            modules = [node.module]
        else:
            continue
        for module in modules:
            dialect = _of_module(module)
            if dialect is not None and (dialect not in found or node.lineno < found[dialect]):
                found[dialect] = node.lineno
    return found


def detect_tree(tree: ast.AST, default: Dialect = "legacy") -> Dialect:
    """The dialect of a parsed source (see `detect`)."""
    found = imports(tree)
    if len(found) > 1:
        raise DialectError(
            f"the kernel imports both NKI dialects (neuronxcc.nki on line {found['legacy']}, nki on line "
            f"{found['current']}); a kernel is written in one: `import nki` (current) or "
            "`import neuronxcc.nki` (legacy)")
    return next(iter(found), default)


def detect(source: str, default: Dialect = "legacy") -> Dialect:
    """The dialect `source` imports; `default` when it imports no NKI module.

    Raises DialectError when it imports both, SyntaxError when it does not parse."""
    return detect_tree(ast.parse(source), default)
