"""The profile counters a kernel's evaluation reports and the LLM prompts show: one declaration.

Both backends report these counters under these names: the simulator's performance model
(`fitness.simulator.perf.model.profile_of`) estimates them, and the trainium backend
(`fitness.backends.trainium.hardware_counters`) maps the profiler's summary onto them. The
names and definitions are neuron-profile's (the Summary table of the profiler's schema,
aws-neuron-sdk tools/neuron-explorer/profile-schema-reference.rst) except
`dma_bandwidth_utilization_percent`, which the profiler does not report (see its definition).
The prompts (`operators.llm.prompts`) show them in this order with their units and define
each one in the system message.

A leaf module: it imports nothing of the project, so that the evaluation side (which owns the
profile) and the prompts can share it without either depending on the other's machinery.
`fitness.simulator` imports nothing of ours, so the model writes the names itself;
tests/operators/test_profile_counters.py checks that they are these.
"""

from __future__ import annotations

from dataclasses import dataclass

PERCENT = "%"


@dataclass(frozen=True)
class Counter:
    """One profile counter: its name in a profile, its unit, and a one-line definition."""

    name: str
    unit: str           # "ms", "bytes", "flops", "flops/byte", or PERCENT
    definition: str

    @property
    def percent(self) -> bool:
        """A `*_percent` counter: a fraction in [0, 1] in the profile, as neuron-profile reports
        it; prompts show it as a percentage."""
        return self.unit == PERCENT


# Latency first, then HBM traffic, then flops and intensity, then engine and DMA activity.
COUNTERS: tuple[Counter, ...] = (
    Counter("latency_ms", "ms",
            "the kernel's execution time on one NeuronCore, start to end (the profiler's total_time; on "
            "hardware the mean of the timed runs): the figure the search minimizes."),
    Counter("hbm_read_bytes", "bytes",
            "bytes the DMA engines read from HBM, spill reloads included; data read twice counts twice."),
    Counter("hbm_write_bytes", "bytes", "bytes the DMA engines wrote to HBM, spill saves included."),
    Counter("spill_save_bytes", "bytes",
            "bytes of intermediate tiles saved to HBM because they did not fit in SBUF (0 unless SBUF "
            "overflowed)."),
    Counter("spill_reload_bytes", "bytes",
            "bytes of spilled tiles loaded back into SBUF, once per reload."),
    Counter("hardware_flops", "flops",
            "flops of every TensorE instruction, transposes included (2 per multiply-add)."),
    Counter("transpose_flops", "flops",
            "the part of hardware_flops spent on transposes done on TensorE, which compute nothing new."),
    Counter("mm_arithmetic_intensity", "flops/byte",
            "(hardware_flops - transpose_flops) / (hbm_read_bytes + hbm_write_bytes): matmul work per byte "
            "of HBM traffic."),
    Counter("peak_flops_bandwidth_ratio", "flops/byte",
            "the target's peak TensorE flops per second divided by its HBM bandwidth per core: the "
            "intensity at which matmul work and HBM traffic take equally long."),
    Counter("hfu_estimated_percent", PERCENT,
            "hardware_flops / (peak TensorE flops per second x latency): the share of TensorE's peak "
            "the kernel used."),
    Counter("tensor_engine_active_time_percent", PERCENT,
            "share of the kernel's time TensorE is executing an instruction (matmuls, transposes)."),
    Counter("vector_engine_active_time_percent", PERCENT,
            "share of the time VectorE is executing an instruction (element-wise operations, reductions, "
            "copies)."),
    Counter("scalar_engine_active_time_percent", PERCENT,
            "share of the time ScalarE is executing an instruction (activation functions)."),
    Counter("gpsimd_engine_active_time_percent", PERCENT,
            "share of the time GpSimdE is executing an instruction."),
    Counter("dma_active_time_percent", PERCENT,
            "share of the time at least one DMA transfer is moving data."),
    Counter("dma_bandwidth_utilization_percent", PERCENT,
            "share of the core's DMA capacity in use: the time its DMA engines spent transferring, summed "
            "over the engines, divided by (engines x latency); near 100% data movement bounds the kernel."),
)

NAMES: tuple[str, ...] = tuple(c.name for c in COUNTERS)
BY_NAME: dict[str, Counter] = {c.name: c for c in COUNTERS}

# The two counters of the memory-bound / compute-bound rule (the profiler's own definition).
INTENSITY = "mm_arithmetic_intensity"
RIDGE = "peak_flops_bandwidth_ratio"

