"""ALU operators and activation functions, by canonical name, and how kernel code names them.

Kernels pass operators as `nl.*` functions (`op=nl.add`, `op0=nl.maximum`), NumPy functions
(`op=np.add`, `op=np.max`) or, in reductions, `nl.max`/`nl.sum`. `alu_name` and
`activation_name` map any of these to one canonical name; the compute functions work on
float32 arrays (the engines compute in fp32) and return float32.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import errors

F32 = np.float32


def _cmp(fn):
    return lambda a, b: fn(a, b).astype(F32)


def _bitwise(fn):
    def apply(a, b):
        ai = np.asarray(a).astype(np.int32)
        bi = np.asarray(b).astype(np.int32)
        return fn(ai, bi)
    return apply


# Binary ALU operators: name -> f(a, b) on fp32 arrays / scalars.
ALU: dict[str, Callable[[Any, Any], np.ndarray]] = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "power": np.power,
    "mod": np.mod,
    "fmod": np.fmod,   # remainder with the sign of the dividend (C fmod)
    "equal": _cmp(np.equal),
    "not_equal": _cmp(np.not_equal),
    "greater": _cmp(np.greater),
    "greater_equal": _cmp(np.greater_equal),
    "less": _cmp(np.less),
    "less_equal": _cmp(np.less_equal),
    "logical_and": _cmp(np.logical_and),
    "logical_or": _cmp(np.logical_or),
    "logical_xor": _cmp(np.logical_xor),
    "bitwise_and": _bitwise(np.bitwise_and),
    "bitwise_or": _bitwise(np.bitwise_or),
    "bitwise_xor": _bitwise(np.bitwise_xor),
    "left_shift": _bitwise(np.left_shift),
    "right_shift": _bitwise(np.right_shift),
    "abs_max": lambda a, b: np.maximum(np.abs(a), np.abs(b)),
}

# ALU operators that can reduce along the free axis, with the NumPy reduction.
REDUCE: dict[str, Callable] = {
    "add": np.add.reduce,
    "multiply": np.multiply.reduce,
    "maximum": np.maximum.reduce,
    "minimum": np.minimum.reduce,
    "bitwise_and": np.bitwise_and.reduce,
    "bitwise_or": np.bitwise_or.reduce,
    "bitwise_xor": np.bitwise_xor.reduce,
    "logical_and": np.logical_and.reduce,
    "logical_or": np.logical_or.reduce,
}

# Identity elements, for masked-out positions of reductions.
REDUCE_IDENTITY = {"add": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}

ARITHMETIC = {"add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "mod", "fmod", "abs_max"}


def _sigmoid(x):
    from scipy.special import expit
    return expit(x)


def _erf(x):
    from scipy.special import erf
    return erf(x)


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x * F32(1.0 / np.sqrt(2.0))))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(F32(np.sqrt(2.0 / np.pi)) * (x + F32(0.044715) * x * x * x)))


def _softplus(x):
    return np.logaddexp(F32(0.0), x)


_SQRT_1_2 = F32(1.0 / np.sqrt(2.0))
_INV_SQRT_2PI = F32(1.0 / np.sqrt(2.0 * np.pi))
_TWO_INV_SQRT_PI = F32(2.0 / np.sqrt(np.pi))
GELU_SIGMOID = F32(1.702)   # the usual sigmoid approximation of GELU: x * sigmoid(1.702 x) (undocumented constant)


def _silu_dx(x):
    s = _sigmoid(x)
    return s * (F32(1.0) + x * (F32(1.0) - s))


def _gelu_dx(x):
    """d/dx of the erf GELU: Phi(x) + x * phi(x)."""
    return F32(0.5) * (F32(1.0) + _erf(x * _SQRT_1_2)) + x * np.exp(F32(-0.5) * x * x) * _INV_SQRT_2PI


# Activation functions (ScalarE lookup tables): name -> f(x) on fp32 arrays.
ACTIVATION: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: F32(1.0) / np.sqrt(x),
    "square": np.square,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "silu": lambda x: x * _sigmoid(x),
    "gelu": _gelu,
    "gelu_apprx_tanh": _gelu_tanh,
    "relu": lambda x: np.maximum(x, F32(0.0)),
    "abs": np.abs,
    "sin": np.sin,
    "cos": np.cos,
    "arctan": np.arctan,
    "erf": _erf,
    "softplus": _softplus,
    "mish": lambda x: x * np.tanh(_softplus(x)),
    "reciprocal": lambda x: F32(1.0) / x,
    "copy": lambda x: x,
    "sign": np.sign,
    "negative": np.negative,
    # derivative and approximation tables, rounding and tan (nl.gelu_dx, nl.floor, ...)
    "erf_dx": lambda x: _TWO_INV_SQRT_PI * np.exp(-x * x),
    "gelu_dx": _gelu_dx,
    "silu_dx": _silu_dx,
    "gelu_apprx_sigmoid": lambda x: x * _sigmoid(GELU_SIGMOID * x),
    "ceil": np.ceil,
    "floor": np.floor,
    "trunc": np.trunc,
    "tan": np.tan,
}

_NUMPY_ALU = {
    np.add: "add", np.subtract: "subtract", np.multiply: "multiply", np.divide: "divide",
    np.true_divide: "divide", np.maximum: "maximum", np.minimum: "minimum", np.fmax: "maximum",
    np.fmin: "minimum", np.power: "power", np.mod: "mod", np.fmod: "fmod", np.equal: "equal", np.not_equal: "not_equal",
    np.greater: "greater", np.greater_equal: "greater_equal", np.less: "less", np.less_equal: "less_equal",
    np.logical_and: "logical_and", np.logical_or: "logical_or", np.logical_xor: "logical_xor",
    np.bitwise_and: "bitwise_and", np.bitwise_or: "bitwise_or", np.bitwise_xor: "bitwise_xor",
    np.left_shift: "left_shift", np.right_shift: "right_shift",
    # NumPy reductions used as operators (`op=np.max` in loop_reduce / tensor_reduce)
    np.max: "maximum", np.amax: "maximum", np.min: "minimum", np.amin: "minimum",
    np.sum: "add", np.prod: "multiply",
}

_NUMPY_ACT = {
    np.exp: "exp", np.log: "log", np.sqrt: "sqrt", np.square: "square", np.tanh: "tanh",
    np.abs: "abs", np.absolute: "abs", np.sin: "sin", np.cos: "cos", np.arctan: "arctan",
    np.sign: "sign", np.negative: "negative", np.reciprocal: "reciprocal",
    np.ceil: "ceil", np.floor: "floor", np.trunc: "trunc", np.tan: "tan",
}

_ALU_ALIASES = {"max": "maximum", "min": "minimum", "sum": "add", "prod": "multiply",
                "subtract": "subtract", "sub": "subtract", "mult": "multiply", "mul": "multiply"}


def _lookup(table: dict, op) -> str | None:
    try:
        return table.get(op)
    except TypeError:  # unhashable
        return None


def alu_name(op, api: str = "", param: str = "op") -> str:
    """Canonical ALU operator name of `op` (nl function, NumPy function or name string)."""
    name = _lookup(_NUMPY_ALU, op) or getattr(op, "nki_alu", None)
    if name is None and isinstance(op, str):
        name = _ALU_ALIASES.get(op, op if op in ALU else None)
    if name is None:
        raise errors.UnsupportedOpError(
            f"{_op_label(op)} is not supported as '{param}' of '{api}' (expected an ALU operator such as "
            f"nl.add, nl.multiply, nl.maximum, np.add, np.max)")
    return name


def activation_name(op, api: str = "nisa.activation") -> str:
    """Canonical activation function name of `op`."""
    name = _lookup(_NUMPY_ACT, op) or getattr(op, "nki_act", None)
    if name is None and isinstance(op, str) and op in ACTIVATION:
        name = op
    if name is None:
        raise errors.UnsupportedOpError(
            f"{_op_label(op)} is not supported as the activation function of '{api}' (supported: "
            f"{', '.join(sorted(ACTIVATION))})")
    return name


def reduce_name(op, api: str) -> str:
    name = alu_name(op, api)
    if name not in REDUCE:
        raise errors.UnsupportedOpError(f"{_op_label(op)} is not a legal reduction operator of '{api}'")
    return name


def ufunc_operator(ufunc) -> str | None:
    """The ALU name of a binary NumPy ufunc (for `np.float32(2) * tile`), else None."""
    return _lookup(_NUMPY_ALU, ufunc)


def _op_label(op) -> str:
    name = getattr(op, "__name__", None)
    mod = getattr(op, "__module__", None)
    if name:
        return f"'{mod + '.' if mod else ''}{name}'"
    return repr(op)
