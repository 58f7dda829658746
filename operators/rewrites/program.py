"""What the rewrites read of an NKI source: its blocks of statements and, per statement, the
instruction it runs, in either dialect.

The legacy dialect assigns an instruction's result (`t = nisa.reciprocal(d)`); the current one
names the destination (`nisa.reciprocal(dst=t, data=d)`). `Instr` hides the difference: the
destination, the callee and its operands, whichever way they were written.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterator

from fitness.correctness.arrays import dtype_of

from .aliases import aliases


@dataclass(frozen=True)
class Applied:
    """One application of a rewrite: the new source and what was done, for notes and memory."""

    source: str
    note: str


@dataclass
class Instr:
    """An instruction statement: `dst = call(...)` or `call(dst=dst, ...)`."""

    stmt: ast.stmt
    call: ast.Call
    dst: ast.expr
    current: bool                 # written in the current dialect's dst= form

    @property
    def callee(self) -> str:
        """`nl.add`, `nisa.activation`, ... (the dotted name as written, last two parts)."""
        parts = []
        f: ast.AST = self.call.func
        while isinstance(f, ast.Attribute):
            parts.append(f.attr)
            f = f.value
        if isinstance(f, ast.Name):
            parts.append(f.id)
        return ".".join(reversed(parts[:2]))

    def kw(self, name: str) -> ast.expr | None:
        return next((k.value for k in self.call.keywords if k.arg == name), None)

    def arg(self, i: int, name: str) -> ast.expr | None:
        """The operand passed at position `i` or by keyword `name` (positions count after dst)."""
        value = self.kw(name)
        if value is None and i < len(self.call.args):
            value = self.call.args[i]
        return value


def last_name(node: ast.AST | None) -> str:
    """`add` of `nl.add`, `x` of `x`; "" for any other expression."""
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def call_name(node: ast.AST) -> str:
    """The called function's last name (`affine_range` of `nl.affine_range(4)`); "" for a non-call."""
    return last_name(node.func) if isinstance(node, ast.Call) else ""


DTYPE_POSITION = {"ndarray": 1, "zeros": 1, "ones": 1, "empty": 1, "full": 2}   # positional dtype argument


def element_bytes(call: ast.Call) -> int:
    """Bytes per element of an allocation's dtype as written (`dtype=nl.bfloat16`, or the
    positional one); 4 when it does not say or names no dtype (`x.dtype`): fp32, the widest the
    targets compute in."""
    node = next((k.value for k in call.keywords if k.arg == "dtype"), None)
    at = DTYPE_POSITION.get(call_name(call))
    if node is None and at is not None and len(call.args) > at:
        node = call.args[at]
    try:
        return dtype_of(last_name(node)).itemsize
    except TypeError:
        return 4


def text(node: ast.AST) -> str:
    return ast.unparse(node)


def base_name(node: ast.AST) -> str | None:
    """The variable a reference reads or writes (`v6` of `v6[i0, ...]`, `e` of `e`)."""
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def instr(stmt: ast.stmt) -> Instr | None:
    """The instruction a statement runs, or None for any other statement."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.Call):
        return Instr(stmt, stmt.value, stmt.targets[0], current=False)
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        dst = next((k.value for k in stmt.value.keywords if k.arg == "dst"), None)
        if dst is not None:
            return Instr(stmt, stmt.value, dst, current=True)
    return None


def blocks(tree: ast.AST) -> Iterator[list[ast.stmt]]:
    """Every statement list of the tree (function bodies, loop bodies, branches)."""
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                yield body


def kernel_functions(tree: ast.Module) -> list[ast.FunctionDef]:
    """The module's top-level functions (a kernel and its helpers)."""
    return [n for n in tree.body if isinstance(n, ast.FunctionDef)]


def names_read(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def names_written(stmts: list[ast.stmt]) -> set[str]:
    """Variables assigned (or written through dst=) anywhere in the statements, loop variables too."""
    out: set[str] = set()
    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                out.add(node.id)
            elif isinstance(node, ast.Call):
                for k in node.keywords:
                    if k.arg == "dst" and base_name(k.value):
                        out.add(base_name(k.value))  # type: ignore[arg-type]
            elif isinstance(node, (ast.Assign, ast.AugAssign)):
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    if isinstance(t, ast.Subscript) and base_name(t):
                        out.add(base_name(t))  # type: ignore[arg-type]
    return out


def parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def parse_nki(source: str) -> tuple[ast.Module, str, str] | None:
    """(tree, isa module name, language module name) of a kernel source that parses and imports
    both NKI modules, else None (rewritten code names the modules as the kernel does)."""
    tree = parse(source)
    names = None if tree is None else aliases(tree)
    return None if names is None else (tree, names[0], names[1])  # type: ignore[return-value]


def lines_of(stmts: list[ast.stmt]) -> str:
    """'line 12' or 'lines 12-15' for notes."""
    first = min(s.lineno for s in stmts)
    last = max(s.end_lineno or s.lineno for s in stmts)
    return f"line {first}" if first == last else f"lines {first}-{last}"
