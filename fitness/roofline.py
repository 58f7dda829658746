"""The paper's roofline: the best latency a problem could reach on a target.

peak latency = max(matmul flops / TensorE fp32 peak, vector flops / vector peak,
HBM bytes / HBM bandwidth); percent_of_peak = peak latency / latency * 100. The flop and
byte counts come from the problem (nkibench); the peaks are per target.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Peaks:
    hbm_bytes_per_s: float
    vector_flops_per_s: float
    matmul_flops_per_s: float
    note: str


PEAKS = {
    # AccelOpt's constants (experiments/full_complete_local/calculate_percentage_of_peak.py):
    # 410 GiB/s HBM share of one NeuronCore-v2, VectorE + ScalarE 2 x 128 lanes x 1.12 GHz,
    # TensorE fp32 23.75 TFLOP/s.
    "trn1": Peaks(410 * 2**30, 2 * 128 * 1.12e9, 23.75e12, "AccelOpt's trn1 roofline constants"),
    # NeuronCore-v3 (trn2 architecture guide): 3 TB/s HBM over 8 cores = 375 GB/s per core,
    # VectorE + ScalarE 2 x 128 lanes x 0.96 GHz, TensorE fp32 20 TFLOP/s (dense).
    "trn2": Peaks(3e12 / 8, 2 * 128 * 0.96e9, 20e12, "trn2 equivalents from the architecture guide"),
}


@dataclass(frozen=True)
class Roofline:
    peak_latency_ms: float
    bound: str  # "mm", "vec" or "memory" (the paper's names)


def roofline(flops_matmul: float, flops_vector: float, hbm_bytes: float, target: str) -> Roofline:
    peaks = PEAKS[target]
    terms = {
        "vec": flops_vector / peaks.vector_flops_per_s,
        "mm": flops_matmul / peaks.matmul_flops_per_s,
        "memory": hbm_bytes / peaks.hbm_bytes_per_s,
    }
    bound = max(terms, key=terms.__getitem__)
    return Roofline(terms[bound] * 1e3, bound)


def percent_of_peak(peak_latency_ms: float | None, latency_ms: float | None) -> float | None:
    if not peak_latency_ms or not latency_ms:
        return None
    return 100.0 * peak_latency_ms / latency_ms
