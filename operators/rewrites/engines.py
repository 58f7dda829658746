"""Move an element-wise instruction to another engine (VectorE, GpSimd, ScalarE) through the
`engine=` argument NKI's ISA calls take, to balance the engines' loads.

Which engines an instruction may run on depends on the target (the simulator refuses the
others, and the gate with it); the default engine of an instruction without `engine=` is
taken to be VectorE, where the compiler puts element-wise work.
"""

from __future__ import annotations

import ast

from ..edits import Span, replace_spans
from .program import Applied, kernel_functions, parse_nki, text

# The ISA calls that take `engine=`, and the engines each may be moved to.
MOVABLE = {
    "tensor_tensor": ("vector", "gpsimd"),
    "tensor_scalar": ("vector", "gpsimd", "scalar"),
    "tensor_copy": ("vector", "gpsimd", "scalar"),
    "memset": ("vector", "gpsimd"),
    "iota": ("gpsimd",),
}


def _engine_of(call: ast.Call) -> str:
    """'vector', 'gpsimd', 'scalar' (explicit), or 'vector' for the default / unknown engine."""
    node = next((k.value for k in call.keywords if k.arg == "engine"), None)
    if node is None:
        return "vector"
    name = text(node).rsplit(".", 1)[-1].replace("_engine", "")
    return "vector" if name == "unknown" else name


def move_engine(source: str) -> list[Applied]:
    """Every (instruction, other engine) move of the source's movable ISA calls."""
    parsed = parse_nki(source)
    if parsed is None:
        return []
    tree, isa, _ = parsed
    out = []
    for fn in kernel_functions(tree):
        for call in ast.walk(fn):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and call.func.attr in MOVABLE and text(call.func.value) in (isa, "nki.isa")):
                continue
            now = _engine_of(call)
            for engine in MOVABLE[call.func.attr]:
                if engine == now:
                    continue
                choice = f"{isa}.{engine}_engine"
                kw = next((k for k in call.keywords if k.arg == "engine"), None)
                if kw is not None:
                    edit = (Span.of(kw.value), choice)
                else:  # insert before the closing parenthesis
                    end = Span(call.end_lineno, call.end_col_offset - 1, call.end_lineno, call.end_col_offset - 1)
                    sep = ", " if call.args or call.keywords else ""
                    edit = (end, f"{sep}engine={choice}")
                new = replace_spans(source, [edit])
                out.append(Applied(new, f"moved {call.func.attr} on line {call.lineno} from {now} to {engine} engine"))
    return out
