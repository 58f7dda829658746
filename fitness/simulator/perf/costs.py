"""Per-instruction costs on each engine (trainium-perf-model.md §3.2 and §7.6).

Compute instructions cost `max(MIN_II, a * N) + overhead` cycles of their engine, with `a`
the per-element multiplier of the instruction class; TensorE matmuls cost
`c * max(min(64, M), N)` cycles, `c` by input dtype. DMA timing depends on sharing and is
done by the scheduler; this module gives its efficiency curve.
"""

from __future__ import annotations

import bisect
import math

from .. import trace as tr
from .hardware import Hardware
from .lowering import Op
from .params import Params


def duration_ns(op: Op, engine: str, hw: Hardware, params: Params) -> float:
    """Time `op` occupies `engine`, in ns."""
    if engine == tr.TENSOR:
        return _tensor_cycles(op, hw, params) / hw.tensor_hz * 1e9
    if engine == tr.VECTOR:
        return _vector_cycles(op, hw, params) / hw.vector_hz * 1e9
    if engine == tr.SCALAR:
        return _scalar_cycles(op, hw, params) / hw.scalar_hz * 1e9
    if engine == tr.GPSIMD_ENGINE:
        n = op.N * (2 if op.strided else 1)
        own = (hw.gpsimd_start_cycles + n + params.gpsimd_overhead_cycles) / hw.gpsimd_hz * 1e9
        if op.kind != tr.GPSIMD:
            # An instruction VectorE also runs, moved to GpSimdE (engine=gpsimd): the documented
            # `150 + N` is the cost of iota and affine_select, and "unlike VectorE/ScalarE, there
            # is no rule-of-thumb to estimate execution cost of a GpSimdE instruction" (NKI
            # architecture guide, NeuronCore-v2); GpSimdE is the general-purpose engine for what
            # the specialised ones cannot run efficiently. Without a measurement, a move there
            # is not priced below the same instruction on VectorE.
            return max(own, _vector_cycles(op, hw, params) / hw.vector_hz * 1e9)
        return own
    raise ValueError(f"no cost rule for engine {engine!r}")


def _in_dtype(op: Op) -> str:
    return op.in_dtypes[0] if op.in_dtypes else op.dtype


def _tensor_cycles(op: Op, hw: Hardware, params: Params) -> float:
    mm = op.mm
    if mm is None:
        return float(hw.mm_min_ii_cycles)
    dt = _in_dtype(op)
    c = hw.mm_cycles(dt)
    if dt == "float32":
        if op.kind == tr.MM_TRANSPOSE or mm.is_transpose:
            c = params.transpose_cycles_fp32
        elif op.kind == tr.MM_BCAST or mm.stationary_onezero:
            c = params.bcast_cycles_fp32
    return c * max(min(hw.mm_min_ii_cycles, mm.M), mm.N)


def _vector_cycles(op: Op, hw: Hardware, params: Params) -> float:
    kind = op.kind
    if kind == tr.TT:
        fast_bf16 = (not op.psum_inputs and all(d == "bfloat16" for d in op.in_dtypes)
                     and op.func in ("add", "subtract", "multiply"))
        a = params.tt_psum_cycles_per_elem if op.psum_inputs or fast_bf16 else params.tt_cycles_per_elem
    elif kind == tr.TTS:
        a = params.scan_cycles_per_elem
    elif kind == tr.RECIP:
        a = params.recip_cycles_per_elem
    elif kind == tr.RED and op.in_dtypes and op.in_dtypes[0] == "bfloat16":
        a = 0.5
    else:  # TS, COPY, MEMSET, RED, and anything else streamed once
        a = 1.0
    dt = _in_dtype(op)
    if dt in hw.vector_fast_dtypes:
        a /= hw.vector_fast_copy_factor if kind in (tr.COPY, tr.TS) else hw.vector_fast_other_factor
    else:
        a /= hw.vector_fp32_width_factor
    n = op.N * (2 if op.strided else 1)
    # tensor_scalar_reduce: a tensor_scalar whose result VectorE also reduces into a (P, 1)
    # vector, "at a small additional performance cost" (documented: max(MIN_II, N) + MIN_II
    # cycles), as activation_reduce's read-out on ScalarE is priced
    extra = hw.min_ii_cycles if kind == tr.TS and "reduce" in op.func else 0
    return max(hw.min_ii_cycles, a * n) + extra + params.vector_overhead_cycles


def _scalar_cycles(op: Op, hw: Hardware, params: Params) -> float:
    n = op.N * (2 if op.strided else 1)
    extra = hw.min_ii_cycles if "reduce" in op.func else 0  # activation_reduce read-out
    return max(hw.min_ii_cycles, n) + extra + params.scalar_overhead_cycles


def hardware_flops(op: Op) -> int:
    """The profiler's `hardware_flops` of one TensorE instruction: 2*K*M*N, counted twice
    for fp32 operands except with a ones stationary (measured on trn1, perf-model §6.2)."""
    mm = op.mm
    if mm is None:
        return 0
    twice = _in_dtype(op) == "float32" and not mm.stationary_onezero
    return 2 * mm.K * mm.M * mm.N * (2 if twice else 1)


class DmaEfficiency:
    """Relative DMA throughput by contiguous bytes per descriptor (log-linear in bytes)."""

    def __init__(self, table: tuple[tuple[int, float], ...]):
        self.log_bytes = [math.log2(b) for b, _ in table]
        self.values = [v for _, v in table]
        self.first_bytes = table[0][0]

    def __call__(self, descriptor_bytes: float) -> float:
        if descriptor_bytes <= self.first_bytes:
            # Below the first point the rate is per descriptor: proportional to its size.
            return max(self.values[0] * descriptor_bytes / self.first_bytes, 1e-4)
        x = math.log2(descriptor_bytes)
        i = bisect.bisect_right(self.log_bytes, x)
        if i >= len(self.log_bytes):
            return self.values[-1]
        x0, x1 = self.log_bytes[i - 1], self.log_bytes[i]
        v0, v1 = self.values[i - 1], self.values[i]
        return v0 + (v1 - v0) * (x - x0) / (x1 - x0)
