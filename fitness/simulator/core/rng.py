"""The engines' pseudo-random number generators (nisa.rng, rand2, dropout, set_rng_seed,
rand_set_state, rand_get_state), approximated: each engine (VectorE, GpSimdE) keeps per-lane
state words (24 per lane on VectorE, 6 on GpSimdE: the documented XORWOW state sizes), but the
numbers come from NumPy's PCG64 seeded with those words, not from the hardware's XORWOW: the
same seeds give the same numbers on every run of the emulator, never the device's numbers.
A kernel run starts from a fixed state (seed 0), so unseeded kernels are deterministic too.
"""

from __future__ import annotations

import numpy as np

from .. import errors
from ..trace import COPY, GPSIMD_ENGINE, MEMSET, PSUM, SBUF, TS, VECTOR
from . import instr as I
from . import tensor as T
from .runtime import machine
from .tensor import NkiTensor
from .vector import column, in_place, instruction, result_dtype, scalar_or_vector

WORDS = {VECTOR: 24, GPSIMD_ENGINE: 6}
U32 = np.dtype(np.uint32)


def _state(engine: str) -> np.ndarray:
    m = machine()
    states = m.state.setdefault("rng_state", {})
    st = states.get(engine)
    if st is None:
        st = states[engine] = np.random.SeedSequence(0).generate_state(T.PMAX * WORDS[engine]).reshape(
            T.PMAX, WORDS[engine]).astype(U32)
    return st


def _generator(engine: str) -> np.random.Generator:
    """A generator from the engine's state, which it then advances."""
    st = _state(engine)
    gen = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(w) for w in st.reshape(-1)[:64]]
                                                                     + [int(st.sum(dtype=np.uint64) % 2 ** 32)])))
    st[...] = gen.integers(0, 2 ** 32, size=st.shape, dtype=np.uint32)
    return gen


def _engine_check(engine: str, api: str, *tiles: NkiTensor) -> None:
    if engine == GPSIMD_ENGINE and any(t._b.memory == PSUM for t in tiles):
        raise errors.UnsupportedMemoryError(f"'{api}' on GpSimd Engine cannot access PSUM; use an SBUF tile")


def rng(api: str, shape: tuple[int, ...], dtype: np.dtype, engine: str, line: int) -> NkiTensor:
    """32 random bits per element, truncated to the least significant bits of the integer dtype."""
    if dtype.kind not in "iu" or dtype.itemsize > 4:
        raise errors.UnsupportedDtypeError(
            f"the destination of '{api}' must be int8, int16, int32, uint8, uint16 or uint32, got "
            f"'{T.dtype_name(dtype)}'")
    m = machine()
    gen = None if m.shape_only else _generator(engine)

    def fn():
        bits = gen.integers(0, 2 ** 32, size=shape, dtype=np.uint32)
        return bits.astype(np.dtype(f"u{dtype.itemsize}")).view(dtype)

    return instruction(api, MEMSET, (engine,), "rng", [], shape, dtype, fn, line)


def rand2(api: str, shape: tuple[int, ...], dtype: np.dtype, lo, hi, line: int) -> NkiTensor:
    """Uniform fp32 values in [lo, hi] (scalars or (P, 1) vectors) on VectorE, cast to dtype."""
    P = shape[0]
    a = scalar_or_vector(lo, P, "min", api)
    b = scalar_or_vector(hi, P, "max", api)
    if not isinstance(a, NkiTensor) and not isinstance(b, NkiTensor) and not a < b:
        raise errors.OperandTypeError(f"'{api}' needs min < max, got min={lo!r}, max={hi!r}")
    m = machine()
    gen = None if m.shape_only else _generator(VECTOR)
    operands = [(n, t) for n, t in (("min", a), ("max", b)) if isinstance(t, NkiTensor)]

    def fn(*arrays):
        arrays = list(arrays)
        lo_ = column(arrays.pop(0) if isinstance(a, NkiTensor) else a, P)
        hi_ = column(arrays.pop(0) if isinstance(b, NkiTensor) else b, P)
        u = gen.random(size=(P, T.prod(shape[1:])), dtype=np.float32)
        return (lo_ + u * (hi_ - lo_)).astype(np.float32).reshape(shape)

    return instruction(api, MEMSET, (VECTOR,), "rand2", operands, shape, dtype, fn, line)


def dropout(api: str, data, prob, dtype, mask, line: int) -> NkiTensor:
    """data with each element replaced by 0 with probability prob (a scalar or a (P, 1) vector
    per partition), on VectorE."""
    x = I.tile(data, "data", api)
    P = x._shape[0]
    pr = scalar_or_vector(prob, P, "prob", api)
    if isinstance(pr, NkiTensor):
        if x._b.dtype.kind in "iu" and pr._b.dtname != "float32":
            raise errors.UnsupportedDtypeError(
                f"'prob' of '{api}' must be float32 for integer data, got '{pr._b.dtname}'")
        if pr._b.dtype.kind not in "fV":
            raise errors.UnsupportedDtypeError(f"'prob' of '{api}' must have a float type, got '{pr._b.dtname}'")
    dt = result_dtype(dtype, x._b.dtype)
    if x._b.dtype.kind in "iu" and dt != x._b.dtype:
        raise errors.UnsupportedDtypeError(
            f"the output of '{api}' must have the data type of the integer data ({x._b.dtname}), got "
            f"'{T.dtype_name(dt)}'")
    m = machine()
    gen = None if m.shape_only else _generator(VECTOR)
    operands = [("data", x)] + ([("prob", pr)] if isinstance(pr, NkiTensor) else [])

    def fn(a, p=None):
        pc = column(pr if p is None else p, P).reshape((P,) + (1,) * (a.ndim - 1))
        u = gen.random(size=a.shape, dtype=np.float32)
        return np.where(u < pc, np.float32(0.0), a)

    return I.compute(api, TS, (VECTOR,), "dropout", operands, x._shape, dt, mask, fn, line=line)


def set_seed(api: str, src_seeds, line: int) -> None:
    """Seed VectorE's generator from the 32-bit value of a [1, 1] SBUF/PSUM tensor."""
    m = machine()
    s = I.tile(src_seeds, "src_seeds", api)
    if T.prod(s._shape) != 1 or len(s._shape) != 2:
        raise errors.ShapeMismatchError(f"'src_seeds' of '{api}' must be a [1, 1] tensor, got {list(s._shape)}")
    if s._b.itemsize != 4:
        raise errors.UnsupportedDtypeError(f"'src_seeds' of '{api}' must hold a 32-bit value, got '{s._b.dtname}'")
    if not m.shape_only:
        seed = int(T.array(s).reshape(-1).view(U32)[0])
        _state(VECTOR)[...] = np.random.SeedSequence(seed).generate_state(T.PMAX * WORDS[VECTOR]).reshape(
            T.PMAX, WORDS[VECTOR])
    m.emit(COPY, api, (VECTOR,), s._b.dtname, (s._b.dtname,), 1, 1, (T.region(s),), (), line, "set_rng_seed",
           None, None, int(s._b.memory == PSUM), False)


def set_state(api: str, src_seeds, engine: str, line: int) -> None:
    """Each partition of `src_seeds` (uint32, SBUF) seeds the generator of its lane."""
    m = machine()
    s = I.tile(src_seeds, "src_seeds", api, (SBUF,))
    if s._b.dtname != "uint32":
        raise errors.UnsupportedDtypeError(f"'src_seeds' of '{api}' must be uint32, got '{s._b.dtname}'")
    w = WORDS[engine]
    if T.prod(s._shape[1:]) != w:
        raise errors.ShapeMismatchError(
            f"'src_seeds' of '{api}' on {'VectorE' if engine == VECTOR else 'GpSimdE'} holds {w} state elements per "
            f"partition (XORWOW), got {T.prod(s._shape[1:])}")
    P = s._shape[0]
    if not m.shape_only:
        _state(engine)[:P] = T.array(s).reshape(P, w)
    m.emit(COPY, api, (engine,), s._b.dtname, (s._b.dtname,), P, w, (T.region(s),), (), line, "rand_set_state",
           None, None, 0, False)


def get_state(api: str, dst, engine: str, line: int) -> None:
    """The lanes' generator state into `dst` (uint32; SBUF, or PSUM on VectorE)."""
    d = dst
    if d._b.dtname != "uint32":
        raise errors.UnsupportedDtypeError(f"'dst' of '{api}' must be uint32, got '{d._b.dtname}'")
    _engine_check(engine, api, d)
    w = WORDS[engine]
    if T.prod(d._shape[1:]) != w:
        raise errors.ShapeMismatchError(
            f"'dst' of '{api}' on {'VectorE' if engine == VECTOR else 'GpSimdE'} holds {w} state elements per "
            f"partition (XORWOW), got {T.prod(d._shape[1:])}")
    P = d._shape[0]
    st = _state(engine)
    in_place(api, COPY, (engine,), "rand_get_state", d, [], lambda cur: st[:P].copy(), line, reads_dst=False)
