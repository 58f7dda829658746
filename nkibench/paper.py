"""The AccelOpt paper's published figures for NKIBench (../shared/nkibench/README.md): per
kernel on trn1, the baseline's and AccelOpt's % of peak throughput read off the paper's chart,
and the geometric means per target. Shown next to this project's figures for comparison."""

# problem -> (baseline % of peak, AccelOpt % of peak), trn1
TRN1_PERCENT_OF_PEAK: dict[str, tuple[float, float]] = {
    "rope_single_freq_apply": (21, 30),
    "mamba": (28, 36),
    "gqa_full": (30, 35),
    "bmm_softmax": (39, 75),
    "silu": (40, 69),
    "adamw": (51, 61),
    "matmul_add_rmsnorm": (54, 64),
    "bmm": (55, 57),
    "add_rmsnorm_matmul": (59, 69),
    "matmul": (62, 83),
    "rmsnorm_matmul": (69, 72),
    "lora": (75, 77),
    "swiglu": (77, 80),
    "transpose_matmul": (81, 83),
}

# target -> (baseline, AccelOpt) geometric mean % of peak over the 14 kernels
GEOMEAN_PERCENT_OF_PEAK: dict[str, tuple[float, float]] = {"trn1": (49, 61), "trn2": (45, 59)}
