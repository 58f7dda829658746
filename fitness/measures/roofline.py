"""The paper's roofline: the best latency a problem could reach on a target.

peak latency = max(matmul flops / TensorE peak, vector flops / vector peak,
HBM bytes / HBM bandwidth); percent_of_peak = peak latency / latency * 100, never above 100 for
a selectable kernel (`lower_bound`). The flop and
byte counts come from the problem (nkibench); the peaks are per target: AccelOpt's constants
for trn1, the documented figures of the target's `Hardware` entry for trn2 and trn3. The
TensorE peak is the fp32 one (four passes per row) scaled to the problem's matmul dtype by
the target's cycles per column: 4x for bfloat16 and fp16, more for fp8 where the target has
a double-rate mode.
"""

from __future__ import annotations

from dataclasses import dataclass

from fitness.simulator.perf.hardware import hardware
from nkibench.problem import Counts


@dataclass(frozen=True)
class Peaks:
    hbm_bytes_per_s: float
    vector_flops_per_s: float
    matmul_flops_per_s: float
    note: str


# AccelOpt's constants (experiments/full_complete_local/calculate_percentage_of_peak.py):
# 410 GiB/s HBM share of one NeuronCore-v2, VectorE + ScalarE 2 x 128 lanes x 1.12 GHz,
# TensorE fp32 23.75 TFLOP/s.
TRN1 = Peaks(410 * 2**30, 2 * 128 * 1.12e9, 23.75e12, "AccelOpt's trn1 roofline constants")


def peaks(target: str) -> Peaks:
    """The roofline peaks of `target`. Beyond trn1, AccelOpt's formula on the documented
    figures of the target's Hardware entry: its HBM share, VectorE + ScalarE as 2 x 128 lanes
    at the VectorE clock, and the dense FP32 TensorE rate."""
    if target == "trn1":
        return TRN1
    hw = hardware(target)
    note = (f"{target} documented figures: HBM {hw.hbm_bytes_per_s / 1e9:.0f} GB/s per core, VectorE "
            f"{hw.vector_hz / 1e9:g} GHz, TensorE FP32 {hw.fp32_matmul_flops / 1e12:g} TFLOP/s ({hw.sources})")
    return Peaks(hw.hbm_bytes_per_s, 2 * hw.partitions * hw.vector_hz, hw.fp32_matmul_flops, note)


@dataclass(frozen=True)
class Roofline:
    peak_latency_ms: float
    bound: str  # "mm", "vec" or "memory" (the paper's names)


def matmul_peak(p: Peaks, target: str, dtype: str) -> float:
    """TensorE flops per second on operands of `dtype` (the fp32 peak for float32)."""
    hw = hardware(target)
    return p.matmul_flops_per_s * hw.mm_cycles("float32") / hw.mm_cycles(dtype)


def _terms(counts: Counts, target: str) -> dict[str, float]:
    """Seconds of each roofline term of `counts` on `target`."""
    p = peaks(target)
    return {
        "vec": counts.flops_vector / (p.vector_flops_per_s * counts.vector_ops_per_pass),
        "mm": counts.flops_matmul / matmul_peak(p, target, counts.matmul_dtype),
        "memory": counts.hbm_bytes / p.hbm_bytes_per_s,
    }


def roofline(counts: Counts, target: str) -> Roofline:
    terms = _terms(counts, target)
    bound = max(terms, key=terms.__getitem__)
    return Roofline(terms[bound] * 1e3, bound)


@dataclass(frozen=True)
class Bound:
    """The least latency a correct kernel can have on a target, and which work sets it."""

    latency_ms: float
    why: str


def lower_bound(counts: Counts, kernel_hbm_bytes: float, target: str) -> Bound:
    """The latency below which a latency is an error of the model (or of the problem's counts):
    every term of the roofline (the problem's HBM bytes, matmul flops and element-wise work, each
    at the target's peak) and the HBM bytes the kernel itself moves. A latency at least this
    long is at most 100% of peak. The element-wise term counts the work in engine passes
    (`Counts.vector_ops_per_pass`): a user problem's counted operations are divided by the most
    an instruction fuses into one pass, the paper's formulas are taken as they are."""
    p = peaks(target)
    terms = _terms(counts, target)
    named = {
        f"the problem's {counts.hbm_bytes / 1e6:.3g} MB of HBM traffic": terms["memory"],
        f"the problem's {counts.flops_matmul / 1e9:.3g} GFLOP of matmul": terms["mm"],
        f"the problem's {counts.flops_vector / 1e9:.3g} GFLOP of element-wise work": terms["vec"],
        f"the kernel's own {kernel_hbm_bytes / 1e6:.3g} MB of HBM traffic": kernel_hbm_bytes / p.hbm_bytes_per_s,
    }
    why = max(named, key=named.__getitem__)
    return Bound(named[why] * 1e3, f"{why} at {target}'s peak")


def percent_of_peak(peak_latency_ms: float | None, latency_ms: float | None) -> float | None:
    if not peak_latency_ms or not latency_ms:
        return None
    return 100.0 * peak_latency_ms / latency_ms
