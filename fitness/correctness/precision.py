"""Precision downgrades read from a kernel's structure, not from its text.

A kernel may not compute in a float type narrower than the narrowest the problem itself uses:
the float inputs of its reference and the dtypes its baseline names (capped at float32, the
engines' arithmetic type). An fp32 problem refuses bfloat16 arithmetic (NKIBench's rule, which
AccelOpt enforced by searching the text for "float16"); a bfloat16 problem accepts bfloat16
and float32 and refuses fp8, unless its baseline computes in fp8. The evidence is structural:
the dtypes of the tensors and instructions the emulator traced; on hardware, where there is
no trace, the dtype names the source refers to (`nl.bfloat16`, `dtype="float16"`; a comment
or a variable named `float16_free` is not evidence, an alias `d = nl.bfloat16` is).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import ml_dtypes
import numpy as np

# Float types NKI knows that numpy does not spell the same way; value = explicit mantissa bits.
_EXTRA_FLOATS = {"tfloat32": 10, "float8_e4m3": 3, "float8_e5m2": 2, "float8_e3m4": 4, "fp8_e4m3": 3,
                 "fp8_e5m2": 2, "half": 10}
_FLOAT_NAMES = frozenset({"float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e4m3fnuz",
                          "float8_e5m2fnuz", "float8_e4m3b11fnuz"}) | _EXTRA_FLOATS.keys()
ENGINE_PRECISION = np.finfo(np.float32).nmant   # engines compute in fp32 (nki-semantics.md §8)


@dataclass(frozen=True)
class DtypeUse:
    dtype: str      # canonical name, e.g. "bfloat16"
    line: int       # line in the kernel source (0 = unknown)
    what: str       # where it was seen, e.g. "dtype argument", "sbuf tensor 'x_bf'"

    def describe(self) -> str:
        where = f" at line {self.line}" if self.line else ""
        return f"{self.what} of type {self.dtype}{where}"


def mantissa_bits(dtype: Any) -> int | None:
    """Explicit mantissa bits of a float dtype (name or dtype); None for non-float types."""
    name = str(getattr(dtype, "name", dtype))
    if name in _EXTRA_FLOATS:
        return _EXTRA_FLOATS[name]
    try:
        dt = np.dtype(getattr(ml_dtypes, name)) if hasattr(ml_dtypes, name) else np.dtype(name)
    except TypeError:
        return None
    if dt.kind != "f" and not hasattr(ml_dtypes, dt.name):
        return None
    try:
        return int(ml_dtypes.finfo(dt).nmant)
    except (ValueError, TypeError):
        return None


def source_dtypes(source: str) -> list[DtypeUse]:
    """Float dtypes the source names: attributes such as `nl.bfloat16` anywhere, and strings
    given as a dtype (`dtype="float16"`, `np.dtype("float16")`, `.astype("float16")`)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    uses: list[DtypeUse] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in _FLOAT_NAMES:
            uses.append(DtypeUse(node.attr, node.lineno, "dtype reference"))
        elif isinstance(node, ast.Call):
            texts = [kw.value for kw in node.keywords if kw.arg == "dtype"]
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in ("dtype", "astype", "view") and node.args:
                texts.append(node.args[0])
            for value in texts:
                if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value in _FLOAT_NAMES:
                    uses.append(DtypeUse(value.value, value.lineno, "dtype argument"))
    return uses


def trace_dtypes(trace: Any) -> list[DtypeUse]:
    """Float dtypes of the traced tensors and instructions (first occurrence of each)."""
    seen: dict[str, DtypeUse] = {}

    def note(dtype: str, line: int, what: str) -> None:
        if dtype not in seen and mantissa_bits(dtype) is not None:
            seen[dtype] = DtypeUse(dtype, line, what)

    for info in trace.tensors.values():
        name = f"{info.memory} tensor '{info.name}'" if info.name else f"an unnamed {info.memory} tensor"
        note(info.dtype, info.line, name)
    for instr in trace.instrs:
        note(instr.dtype, instr.line, f"output of {instr.op}")
        for d in instr.in_dtypes:
            note(d, instr.line, f"input of {instr.op}")
    return list(seen.values())


@dataclass(frozen=True)
class Floor:
    """The narrowest float type a problem's kernels may compute in, and where it comes from."""

    bits: int | None     # explicit mantissa bits; None: no float anywhere, no rule
    dtype: str           # its name, for messages
    why: str             # "the reference's inputs" or "the baseline"


def floor(input_dtypes: Sequence[Any], baseline_uses: Iterable[DtypeUse]) -> Floor:
    """The precision floor of a problem: the narrowest float among the reference's inputs and
    the dtypes its baseline uses, capped at the engines' fp32."""
    found: list[tuple[int, str, str]] = []
    for d in input_dtypes:
        if (bits := mantissa_bits(d)) is not None:
            found.append((min(bits, ENGINE_PRECISION), str(getattr(d, "name", d)), "the reference's inputs"))
    for u in baseline_uses:
        if (bits := mantissa_bits(u.dtype)) is not None:
            found.append((min(bits, ENGINE_PRECISION), u.dtype, "the baseline"))
    if not found:
        return Floor(None, "", "")
    bits, dtype, why = min(found, key=lambda f: f[0])
    return Floor(bits, dtype, why)


def downgrades(uses: Iterable[DtypeUse], limit: Floor) -> list[DtypeUse]:
    """The uses of a float type narrower than the problem's floor."""
    if limit.bits is None:
        return []
    return [u for u in uses if (bits := mantissa_bits(u.dtype)) is not None and bits < limit.bits]
