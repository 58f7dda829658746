"""Hardware descriptions of the NeuronCores the performance model targets, as data.

Only documented facts live here (clocks, widths, capacities, DMA layout and bandwidth); the
numbers the model fits to measurements live in `params.py`. Citation keys are those of
`../shared/docs/trainium-perf-model.md` (ARCH1 = the trn1/inf2 architecture guide, ARCH2 = the
trn2 guide, DMABW / DMAOV = the DMA bandwidth guide / overview, SCHEMA = the profiler's
metric reference, L-ISA = the legacy `nki.isa` cost formulas, L-ALLOC = the legacy
direct-allocation guide, PEAK = AccelOpt's roofline script). The trn3 entry adds ARCH3 =
`nki/guides/architecture/trainium3_arch.rst` and HW3 / HW2 =
`about-neuron/arch/neuron-hardware/trainium{3,2}.rst` of the AWS Neuron SDK documentation
(`../shared/docs/nki-current.md`, "Hardware facts for trn2 and trn3").
"""

from __future__ import annotations

from dataclasses import dataclass

KIB = 1024


@dataclass(frozen=True)
class Hardware:
    """One NeuronCore generation as the performance model sees it."""

    name: str                      # target name: "trn1", "trn2", "trn3"
    core: str                      # "NeuronCore-v2", ...
    calibrated: bool               # True when params were fitted to real measurements
    # Engine clocks (Hz).
    tensor_hz: float
    vector_hz: float
    scalar_hz: float
    gpsimd_hz: float
    # TensorE: systolic array and cycles per moving column by input dtype (II per column).
    pe_rows: int
    pe_cols: int
    mm_cycles_per_column: tuple[tuple[str, float], ...]
    mm_min_ii_cycles: int          # MM_INIT_LATENCY: minimum initiation interval
    # VectorE: per-element cycle multipliers relative to the fp32 rules (trn2 "performance mode").
    vector_fast_dtypes: tuple[str, ...]      # dtypes eligible for the faster modes
    vector_fast_copy_factor: float           # tensor_copy / tensor_scalar speed-up for them
    vector_fast_other_factor: float          # other instructions on them
    vector_fp32_width_factor: float          # fp32 elements/cycle relative to 128 lanes
    # Fixed per-instruction costs from the docs (engine cycles).
    min_ii_cycles: int             # MIN_II of every legacy cost formula
    gpsimd_start_cycles: int       # GPSIMD_START
    # On-chip memories, bytes per partition.
    partitions: int
    sbuf_bytes_per_partition: int
    sbuf_reserved_bytes_per_partition: int
    psum_bytes_per_partition: int
    psum_banks: int
    # DMA.
    dma_engines: int               # DMA engines ("rings") serving one core
    dma_queues: int                # queues per DMA engine
    partitions_per_dma_engine: int
    dma_engine_bytes_per_ns: float  # documented sustained rate of one engine
    hbm_bytes_per_s: float         # HBM bandwidth share of one core
    dma_fixed_ns: float            # descriptor + semaphore-to-start latency per transfer
    dge_ns_per_dma: float          # descriptor generation on the DGE (0: static descriptors)
    # Relative DMA throughput versus contiguous bytes per partition (DMAOV figure).
    dma_efficiency: tuple[tuple[int, float], ...]
    # Engine pairs that cannot use a memory at the same time (trn1 only).
    shared_sbuf_port: tuple[str, ...]
    shared_psum_port: tuple[str, ...]
    # Profiler reference numbers.
    profiler_hz: float
    tensor_peak_flops: float       # the `hfu_estimated_percent` denominator
    # Documented dense FP32 TensorE rate of one core (the roofline's matmul peak).
    fp32_matmul_flops: float
    # NKI dialects whose kernels ran on this core, the default (a run's baseline) first:
    # "legacy" (`import neuronxcc.nki`, Neuron <= 2.29) and "current" (`import nki`, NKI >= 0.3).
    dialects: tuple[str, ...] = ("legacy",)
    # Whether NKI's fp8 types (float8_e4m3, float8_e5m2) exist on this core: trn2 and later.
    float8: bool = True
    notes: str = ""
    sources: str = ""              # the documents the figures come from

    @property
    def peak_flops_bandwidth_ratio(self) -> float:
        """The profiler's ridge point, flops per HBM byte: a kernel whose matmul arithmetic
        intensity is below it is memory bound."""
        return self.tensor_peak_flops / self.hbm_bytes_per_s

    @property
    def psum_bank_bytes(self) -> int:
        """Bytes per partition of one PSUM bank (one matmul writes one bank)."""
        return self.psum_bytes_per_partition // self.psum_banks

    @property
    def sbuf_usable_bytes_per_partition(self) -> int:
        return self.sbuf_bytes_per_partition - self.sbuf_reserved_bytes_per_partition

    def mm_cycles(self, dtype: str) -> float:
        """Cycles per moving column of one matmul for an input dtype (fp32 when unknown)."""
        for name, cycles in self.mm_cycles_per_column:
            if name == dtype:
                return cycles
        return dict(self.mm_cycles_per_column)["float32"]


# DMA throughput relative to the 32 KiB point, by bytes per partition, digitised from the
# unlabeled-axis figure of DMAOV (nki-dma-intro-1.jpg); trainium-perf-model.md §3.1.
DMA_EFFICIENCY = (
    (32, 0.01), (64, 0.03), (128, 0.05), (256, 0.10), (512, 0.21), (1 * KIB, 0.42),
    (2 * KIB, 0.81), (4 * KIB, 0.97), (8 * KIB, 0.98), (16 * KIB, 0.99), (32 * KIB, 1.00),
)

TRN1 = Hardware(
    name="trn1",
    core="NeuronCore-v2",
    calibrated=True,
    tensor_hz=2.8e9,                # ARCH1 engine table
    vector_hz=1.12e9,               # ARCH1
    scalar_hz=1.4e9,                # ARCH1
    gpsimd_hz=1.4e9,                # ARCH1
    pe_rows=128, pe_cols=128,       # ARCH1: 128x128 systolic array
    # ARCH1 "Tensor Engine / Performance Consideration" and L-ISA nc_matmul: II = max(N, 64)
    # cycles for bf16/fp16/tf32/cfp8, x4 for fp32.
    mm_cycles_per_column=(("float32", 4.0), ("tfloat32", 1.0), ("bfloat16", 1.0),
                          ("float16", 1.0), ("float8_e4m3", 1.0), ("float8_e5m2", 1.0)),
    mm_min_ii_cycles=64,            # ARCH1 MM_INIT_LATENCY
    float8=False,                   # cfp8 is an ISA format of NeuronCore-v2, not an NKI type there
    vector_fast_dtypes=(),          # no performance mode on NeuronCore-v2 (ARCH1)
    vector_fast_copy_factor=1.0,
    vector_fast_other_factor=1.0,
    vector_fp32_width_factor=1.0,   # 128 elements/cycle (ARCH1)
    min_ii_cycles=64,               # L-ISA MIN_II
    gpsimd_start_cycles=150,        # L-ISA GPSIMD_START
    partitions=128,
    sbuf_bytes_per_partition=192 * KIB,          # ARCH1: 24 MiB = 128 x 192 KiB
    # L-ALLOC: "16KiB is allocated for compiler internal usage", byte addresses leave 176 KiB
    sbuf_reserved_bytes_per_partition=16 * KIB,  # (the emulator's usable SBUF: core.capacity)
    psum_bytes_per_partition=16 * KIB,           # ARCH1: 2 MiB = 128 x 16 KiB
    psum_banks=8,                                # ARCH1: 8 banks x 2 KiB
    dma_engines=16,                 # ARCH1: 32 per device, 16 per core
    dma_queues=16,                  # DMAOV "DMA Queues"
    partitions_per_dma_engine=8,    # DMAOV: each engine serves 8 partitions
    dma_engine_bytes_per_ns=17.0,   # DMABW / DMAOV: 17 B/ns per engine (272 GB/s per core)
    hbm_bytes_per_s=410e9,          # ARCH1: 820 GB/s per device, two cores
    dma_fixed_ns=1300.0,            # DMABW: ~1300 ns cross-engine fixed cost per transfer
    dge_ns_per_dma=0.0,             # trn1 has no DGE; descriptors are static
    dma_efficiency=DMA_EFFICIENCY,
    shared_sbuf_port=("V", "G"),    # ARCH1 "Data Movement": VectorE/GpSimdE share SBUF access
    shared_psum_port=("V", "S"),    # ARCH1: VectorE/ScalarE share PSUM access
    profiler_hz=1.4e9,              # SCHEMA neuroncore_cycle_count
    tensor_peak_flops=2 * 128 * 128 * 2.8e9,   # SCHEMA hfu: 2 x PEs x clock = 91.75 TFLOP/s
    fp32_matmul_flops=23.75e12,     # PEAK: AccelOpt's TensorE fp32 constant
    # NKI >= 0.3 kernels do not run on Trn1 (release-notes/components/nxd-inference.rst); the
    # simulator still times current kernels for trn1 (the SDK examples), never by default.
    dialects=("legacy", "current"),
    notes="calibrated on the 14 NKIBench baselines measured on trn1 "
          "(procedure in perf/calibrate.py, values in perf/calibrated.py)",
    sources="AWS Neuron SDK docs: trainium_inferentia2_arch.rst, nki-dma-bandwidth-guide.rst",
)

TRN2 = Hardware(
    name="trn2",
    core="NeuronCore-v3",
    calibrated=False,
    tensor_hz=2.4e9,                # ARCH2 engine table
    vector_hz=0.96e9,               # ARCH2
    scalar_hz=1.2e9,                # ARCH2
    gpsimd_hz=1.2e9,                # ARCH2
    pe_rows=128, pe_cols=128,
    # ARCH2: 79 TFLOPS bf16 (1 cycle/column), 20 fp32 (x4), 158 fp8 (double-row: K=256 per
    # instruction, modelled as half the cycles per column).
    mm_cycles_per_column=(("float32", 4.0), ("tfloat32", 1.0), ("bfloat16", 1.0),
                          ("float16", 1.0), ("float8_e4m3", 0.5), ("float8_e5m2", 0.5)),
    mm_min_ii_cycles=64,            # assumed unchanged from NeuronCore-v2
    # ARCH2 "performance mode": x4 for tensor_copy/tensor_scalar on contiguous bf16/fp16 SBUF
    # operands, x2 for other bf16 cases; 256 elements/cycle for other dtypes.
    vector_fast_dtypes=("bfloat16", "float16"),
    vector_fast_copy_factor=4.0,
    vector_fast_other_factor=2.0,
    vector_fp32_width_factor=2.0,
    min_ii_cycles=64,
    gpsimd_start_cycles=150,
    partitions=128,
    sbuf_bytes_per_partition=224 * KIB,          # ARCH2: 28 MiB = 128 x 224 KiB
    # assumed: same reserve as NeuronCore-v2 (no document gives this core's)
    sbuf_reserved_bytes_per_partition=16 * KIB,
    psum_bytes_per_partition=16 * KIB,           # ARCH2: unchanged
    psum_banks=8,
    dma_engines=16,                 # DMABW: 128 per device, 16 per core
    dma_queues=16,                  # assumed unchanged
    partitions_per_dma_engine=8,
    dma_engine_bytes_per_ns=23.0,   # DMABW: 23 B/ns per engine (368 GB/s per core)
    hbm_bytes_per_s=3e12 / 8,       # ARCH2: 3 TB/s per device, 8 cores (HW2: 2.9 TB/s)
    dma_fixed_ns=1300.0,            # assumed unchanged (no trn2 measurement)
    dge_ns_per_dma=0.0,             # ARCH2 quotes ~600 ns per DGE DMA; AccelOpt disables DGE
    dma_efficiency=DMA_EFFICIENCY,  # assumed: same curve shape as trn1
    shared_sbuf_port=(),            # ARCH2 "Data Movement Updates": restriction lifted
    shared_psum_port=(),
    profiler_hz=1.2e9,              # SCHEMA
    tensor_peak_flops=2 * 128 * 128 * 2.4e9,
    fp32_matmul_flops=20e12,        # ARCH2: 20 FP32 TFLOPS per NeuronCore-v3
    dialects=("current", "legacy"),  # NKI 0.3+ supports Trn2 and Trn3; legacy up to Neuron 2.29
    notes="uncalibrated: documented NeuronCore-v3 numbers, trn1-fitted glue; no trn2 measurements",
    sources="AWS Neuron SDK docs: nki/guides/architecture/trainium2_arch.rst, "
            "nki/deep-dives/nki-dma-bandwidth-guide.rst",
)

TRN3 = Hardware(
    name="trn3",
    core="NeuronCore-v4",
    calibrated=False,
    tensor_hz=2.4e9,                # ARCH3 "Compute Engine Specifications"
    vector_hz=1.2e9,                # ARCH3 (NeuronCore-v3: 0.96)
    scalar_hz=1.2e9,                # ARCH3
    gpsimd_hz=1.2e9,                # ARCH3
    pe_rows=128, pe_cols=128,       # ARCH3: "still organized as a grid of 128x128 processing elements"
    # ARCH3: 79 BF16/FP16/TF32 and 20 FP32 TFLOPS (as NeuronCore-v3); input width 2x128 for
    # every non-MX dtype, so plain fp8 runs at the bf16 rate (NeuronCore-v3: 4x128, double
    # FP8). MXFP8/MXFP4 run at 4x bf16 (quad MX), which the emulator has no dtype for.
    mm_cycles_per_column=(("float32", 4.0), ("tfloat32", 1.0), ("bfloat16", 1.0),
                          ("float16", 1.0), ("float8_e4m3", 1.0), ("float8_e5m2", 1.0)),
    mm_min_ii_cycles=64,            # assumed unchanged from NeuronCore-v2
    # ARCH3 VectorE width: 512 BF16/FP16/FP8 elements/cycle, 256 for other dtypes, as ARCH2;
    # the performance-mode factors are assumed those of NeuronCore-v3.
    vector_fast_dtypes=("bfloat16", "float16"),
    vector_fast_copy_factor=4.0,
    vector_fast_other_factor=2.0,
    vector_fp32_width_factor=2.0,
    min_ii_cycles=64,               # assumed unchanged
    gpsimd_start_cycles=150,        # assumed unchanged
    partitions=128,
    sbuf_bytes_per_partition=256 * KIB,          # ARCH3: 32 MiB = 128 x 256 KiB
    # assumed: same reserve as NeuronCore-v2 (no document gives this core's)
    sbuf_reserved_bytes_per_partition=16 * KIB,
    psum_bytes_per_partition=16 * KIB,           # ARCH3: PSUM "remains the same at 2 MiB"
    psum_banks=8,                                # MIG: 8 banks x 2 KiB per partition
    dma_engines=16,                 # DMABW table: 16 engines per NeuronCore on TRN3
    dma_queues=16,                  # assumed unchanged
    partitions_per_dma_engine=8,
    dma_engine_bytes_per_ns=33.0,   # DMABW: 33 B/ns per engine (528 GB/s per core)
    # ARCH3: 4.7 TB/s per device, 8 NeuronCore-v4 (HW3 says 4.9 TB/s; the lower figure is used).
    hbm_bytes_per_s=4.7e12 / 8,
    dma_fixed_ns=1300.0,            # assumed unchanged (no trn3 measurement)
    dge_ns_per_dma=0.0,             # as trn2: descriptors assumed static
    dma_efficiency=DMA_EFFICIENCY,  # assumed: same curve shape as trn1
    shared_sbuf_port=(),            # assumed: as NeuronCore-v3
    shared_psum_port=(),
    profiler_hz=1.2e9,              # assumed: as NeuronCore-v3
    tensor_peak_flops=2 * 128 * 128 * 2.4e9,
    fp32_matmul_flops=20e12,        # ARCH3: 20 FP32 TFLOPS per NeuronCore-v4
    dialects=("current",),          # legacy neuronxcc.nki never ran on Trn3
    notes="uncalibrated: documented NeuronCore-v4 numbers, trn1-fitted glue; no trn3 measurements",
    sources="AWS Neuron SDK docs: nki/guides/architecture/trainium3_arch.rst, "
            "nki/deep-dives/nki-dma-bandwidth-guide.rst",
)

HARDWARE: dict[str, Hardware] = {TRN1.name: TRN1, TRN2.name: TRN2, TRN3.name: TRN3}
TARGETS: tuple[str, ...] = tuple(HARDWARE)


def hardware(target: str) -> Hardware:
    """The description of `target`; a clear error for an unknown name."""
    try:
        return HARDWARE[target]
    except KeyError:
        raise ValueError(f"unknown target {target!r}; known: {', '.join(TARGETS)}") from None


def label(target: str) -> str:
    """How figures of `target` are named wherever shown: "simulated trn2, uncalibrated"."""
    return f"simulated {target}" + ("" if hardware(target).calibrated else ", uncalibrated")
