"""Fuse a chain of element-wise instructions into one ScalarE activation where NKI has the
function: x * 1/(1 + exp(-x)) -> activation(silu), 1/(1 + exp(-x)) -> activation(sigmoid),
x * sigmoid(x) -> activation(silu), f(c * x) computed in two instructions -> activation(f, scale=c).

The chain is read as an expression: each operand of an instruction that an earlier instruction
of the same block wrote (same text) is replaced by that instruction's expression. A chain is
fused only when every intermediate it removes is read nowhere else, the data it starts from is
not written in between, and all of it runs under the same mask.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from ..edits import replace_statements
from .program import (Applied, Instr, base_name, blocks, call_name, instr, kernel_functions, last_name, lines_of,
                      names_written, parse_nki, text)

UNARY = ("exp", "sigmoid", "tanh", "gelu", "silu", "relu", "log", "sqrt", "rsqrt", "square", "reciprocal")
Term = tuple[Any, ...]


def _const(node: ast.AST) -> float | None:
    """The number a literal operand stands for (`1.0`, `-1`, `np.dtype(np.float32).type(1)`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _const(node.operand)
        return None if v is None else -v
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "type"
            and len(node.args) == 1):
        return _const(node.args[0])
    return None


def _canon(term: Term) -> Term:
    """Commutative operands ordered constants first, so that patterns have one form."""
    if term[0] in ("add", "mul"):
        a, b = term[1], term[2]
        if b[0] == "const" and a[0] != "const":
            a, b = b, a
        return (term[0], a, b)
    return term


@dataclass
class _Reader:
    """Reads a block's instructions as expressions (see the module doc)."""

    block: list[ast.stmt]
    zeros: set[str]                       # buffers only ever set to 0 by memset

    def __post_init__(self) -> None:
        self.instrs = [instr(s) for s in self.block]

    def operand(self, node: ast.AST, before: int, used: list[int], masks: list[str]) -> Term:
        c = _const(node)
        if c is not None:
            return ("const", c)
        if base_name(node) in self.zeros:
            return ("const", 0.0)
        key, base = text(node), base_name(node)
        for j in range(before - 1, -1, -1):   # the statement that last wrote the operand
            if base not in names_written([self.block[j]]):
                continue
            ins = self.instrs[j]
            if ins is not None and text(ins.dst) == key:
                term = self.term(j, used, masks)
                if term is not None:
                    used.append(j)
                    return term
            break                             # written some other way: a value of its own
        return ("ref", key)

    def term(self, k: int, used: list[int], masks: list[str]) -> Term | None:
        """The expression instruction `k` computes, or None for an instruction of another kind."""
        ins = self.instrs[k]
        if ins is None:
            return None
        mask = ins.kw("mask")
        masks.append("" if mask is None or _const(mask) is not None or text(mask) == "None" else text(mask))
        name = ins.callee.split(".")[-1]

        def opnd(i: int, *kws: str) -> Term | None:
            node = next((n for n in (ins.kw(kw) for kw in kws) if n is not None), None)
            if node is None and i < len(ins.call.args):
                node = ins.call.args[i]
            return None if node is None else self.operand(node, k, used, masks)

        if name == "activation":
            fn = last_name(ins.kw("op") or (ins.call.args[0] if ins.call.args else None))
            data = ins.kw("data") if ins.kw("data") is not None else (ins.call.args[1] if len(ins.call.args) > 1 else None)
            if fn not in UNARY or data is None or ins.kw("reduce_op") is not None:
                return None
            x = self.operand(data, k, used, masks)
            scale, bias = ins.kw("scale"), ins.kw("bias")
            if scale is not None:
                s = self.operand(scale, k, used, masks)
                if s != ("const", 1.0):
                    x = _canon(("mul", s, x))
            if bias is not None:
                b = self.operand(bias, k, used, masks)
                if b != ("const", 0.0):
                    x = _canon(("add", x, b))
            return (fn, x)
        if name in UNARY:                                   # nl.exp(x), nisa.reciprocal(data), ...
            x = opnd(0, "x", "data")
            return None if x is None else ("recip", x) if name == "reciprocal" else (name, x)
        if name == "negative":
            x = opnd(0, "x")
            return None if x is None else ("mul", ("const", -1.0), x)
        if name in ("add", "multiply", "divide"):            # nl.add(x, y), ...
            a, b = opnd(0, "x"), opnd(1, "y")
            return None if a is None or b is None else _binary(name, a, b)
        if name == "tensor_tensor":
            op = last_name(ins.kw("op") if ins.kw("op") is not None else (ins.call.args[2] if len(ins.call.args) > 2 else None))
            a, b = opnd(0, "data1"), opnd(1, "data2")
            return None if a is None or b is None or op not in ("add", "multiply", "divide") else _binary(op, a, b)
        if name == "tensor_scalar":
            x = opnd(0, "data")
            if x is None:
                return None
            for n in ("0", "1"):
                op = last_name(ins.kw("op" + n))
                if not op:
                    break
                operand = ins.kw("operand" + n)
                if operand is None or op not in ("add", "multiply"):   # commutative: reverse does not matter
                    return None
                x = _binary(op, x, self.operand(operand, k, used, masks))
            return x
        return None


def _binary(op: str, a: Term, b: Term) -> Term:
    if op == "divide":
        return _canon(("mul", a, ("recip", b)))
    return _canon(("add" if op == "add" else "mul", a, b))


def _sigmoid_of(term: Term) -> Term | None:
    """X when `term` is 1 / (1 + exp(-X)) or sigmoid(X)."""
    if term[0] == "sigmoid":
        return term[1]
    if term[0] == "recip" and term[1][0] == "add" and term[1][1] == ("const", 1.0):
        e = term[1][2]
        if e[0] == "exp" and e[1][0] == "mul" and e[1][1] == ("const", -1.0):
            return e[1][2]
    return None


def _match(term: Term) -> tuple[str, Term, float] | None:
    """(function, data, scale) of one activation computing `term`, or None."""
    if term[0] == "mul":
        for a, b in ((term[1], term[2]), (term[2], term[1])):
            x = _sigmoid_of(b)
            if x is not None and x == a and a[0] == "ref":
                return "silu", a, 1.0
    x = _sigmoid_of(term)
    if x is not None and x[0] == "ref":
        return "sigmoid", x, 1.0
    if term[0] in UNARY and term[0] != "reciprocal":
        inner = term[1]
        if inner[0] == "ref":
            return term[0], inner, 1.0
        if inner[0] == "mul" and inner[1][0] == "const" and inner[2][0] == "ref":
            return term[0], inner[2], inner[1][1]
    return None


def _zero_buffers(fn: ast.FunctionDef) -> set[str]:
    """Buffers of `fn` whose every write is a memset to 0 (a zero bias tile)."""
    writes: dict[str, list[Instr | None]] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.stmt) and not isinstance(node, (ast.For, ast.FunctionDef, ast.If, ast.While, ast.With)):
            ins = instr(node)
            if ins is not None and base_name(ins.dst):
                writes.setdefault(base_name(ins.dst), []).append(ins)  # type: ignore[arg-type]
    zeros = set()
    for name, ws in writes.items():
        real = [w for w in ws if w is not None and w.callee.split(".")[-1] not in ("ndarray", "zeros", "empty")]
        if real and all(w.callee.split(".")[-1] == "memset" and _const(w.kw("value") or ast.Constant(None)) == 0.0
                        for w in real):
            zeros.add(name)
    return zeros


def _references(fn: ast.FunctionDef, name: str) -> list[ast.stmt]:
    """The innermost statements of `fn` that mention `name`."""
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.stmt) and not isinstance(node, (ast.For, ast.FunctionDef, ast.If, ast.While, ast.With)):
            if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node)):
                out.append(node)
    return out


def _allocation(stmt: ast.stmt) -> bool:
    return (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)
            and call_name(stmt.value) in ("ndarray", "zeros", "empty"))


def fuse_activation(source: str) -> list[Applied]:
    """Every chain of the source that one activation can compute, fused (one Applied each)."""
    parsed = parse_nki(source)
    if parsed is None:
        return []
    tree, isa, lang = parsed
    out: list[Applied] = []
    for fn in kernel_functions(tree):
        zeros = _zero_buffers(fn)
        for block in blocks(fn):
            reader = _Reader(block, zeros)
            for k, ins in enumerate(reader.instrs):
                if ins is None:
                    continue
                used: list[int] = []
                masks: list[str] = []
                term = reader.term(k, used, masks)
                found = None if term is None else _match(term)
                if found is None or not used or len(set(masks)) > 1:
                    continue
                fn_name, data, scale = found
                applied = _fuse(source, fn, block, reader, k, sorted(set(used)), fn_name, data[1], scale, isa, lang)
                if applied is not None:
                    out.append(applied)
    return out


def _fuse(source: str, fn: ast.FunctionDef, block: list[ast.stmt], reader: _Reader, k: int, used: list[int],
          fn_name: str, data: str, scale: float, isa: str, lang: str) -> Applied | None:
    final = reader.instrs[k]
    assert final is not None
    chain = [block[j] for j in used] + [block[k]]
    removed = {id(block[j]) for j in used}
    # The data must hold the same value at the chain's first instruction and at its last.
    data_base = base_name(ast.parse(data, mode="eval").body)
    if any(data_base in names_written([block[j]]) for j in range(used[0], k)):
        return None
    for j in used:
        temp = base_name(reader.instrs[j].dst)  # type: ignore[union-attr]
        for ref in _references(fn, temp):  # type: ignore[arg-type]
            if id(ref) not in removed and ref is not block[k] and not _allocation(ref):
                return None
    extra = [f"{kw.arg}={text(kw.value)}" for kw in final.call.keywords if kw.arg in ("mask", "dtype")]
    if scale != 1.0:
        extra.insert(0, f"scale={scale!r}")
    args = ", ".join([f"op={lang}.{fn_name}", f"data={data}"] + extra)
    call = (f"{isa}.activation(dst={text(final.dst)}, {args})" if final.current
            else f"{text(final.dst)} = {isa}.activation({args})")
    edits: dict[ast.stmt, list[str] | None] = {block[j]: None for j in used}
    edits[block[k]] = [call]
    new = replace_statements(source, edits)
    new = _drop_unused_allocations(new, {base_name(reader.instrs[j].dst) for j in used})  # type: ignore[union-attr]
    steps = "/".join(dict.fromkeys(ins.callee.split(".")[-1] for ins in (reader.instrs[j] for j in used + [k]) if ins))
    return Applied(new, f"fused {steps} into one activation({fn_name}) on {lines_of(chain)}")


def _drop_unused_allocations(source: str, names: set[str | None]) -> str:
    """`source` without the allocations of `names` that nothing else mentions any more."""
    tree = ast.parse(source)
    edits: dict[ast.stmt, list[str] | None] = {}
    for fn in kernel_functions(tree):
        for name in names:
            refs = _references(fn, name) if name else []
            if refs and all(_allocation(r) for r in refs):
                edits.update({r: None for r in refs})
    return replace_statements(source, edits) if edits else source
