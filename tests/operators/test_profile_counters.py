"""One list of profile counters (fitness/measures/counters.py): the simulator and the hardware backend
report the same names, the prompts show them in the declared order with their units and the
bottleneck line, and the system message defines each one with the memory-bound rule.

The snapshot: the same kernel's figures as the simulator reports them and as the profiler
measures them render to the same lines, with the same definitions, except the bottleneck
line's label."""

from __future__ import annotations

import dataclasses
import re
from importlib import resources
from types import SimpleNamespace

import numpy as np
import pytest

from fitness.backends import trainium
from fitness.measures import counters
from fitness.simulator import ShapeDtype, run_kernel, trace as tr
from fitness.simulator.perf import estimate, hardware, model
from operators.base import Parent
from operators.llm import prompts

from llm_support import baseline_parent, context

EXPECTED_DEFINITIONS = """\
Each kernel's profile shows these counters, in this order, under the same names and with the same meaning whether the simulator estimated them or the profiler measured them on the device (percent counters are shown as percentages):

- `latency_ms` (ms): the kernel's execution time on one NeuronCore, start to end (the profiler's total_time; on hardware the mean of the timed runs): the figure the search minimizes.
- `hbm_read_bytes` (bytes): bytes the DMA engines read from HBM, spill reloads included; data read twice counts twice.
- `hbm_write_bytes` (bytes): bytes the DMA engines wrote to HBM, spill saves included.
- `spill_save_bytes` (bytes): bytes of intermediate tiles saved to HBM because they did not fit in SBUF (0 unless SBUF overflowed).
- `spill_reload_bytes` (bytes): bytes of spilled tiles loaded back into SBUF, once per reload.
- `hardware_flops` (flops): flops of every TensorE instruction, transposes included (2 per multiply-add).
- `transpose_flops` (flops): the part of hardware_flops spent on transposes done on TensorE, which compute nothing new.
- `mm_arithmetic_intensity` (flops/byte): (hardware_flops - transpose_flops) / (hbm_read_bytes + hbm_write_bytes): matmul work per byte of HBM traffic.
- `peak_flops_bandwidth_ratio` (flops/byte): the target's peak TensorE flops per second divided by its HBM bandwidth per core: the intensity at which matmul work and HBM traffic take equally long.
- `hfu_estimated_percent` (%): hardware_flops / (peak TensorE flops per second x latency): the share of TensorE's peak the kernel used.
- `tensor_engine_active_time_percent` (%): share of the kernel's time TensorE is executing an instruction (matmuls, transposes).
- `vector_engine_active_time_percent` (%): share of the time VectorE is executing an instruction (element-wise operations, reductions, copies).
- `scalar_engine_active_time_percent` (%): share of the time ScalarE is executing an instruction (activation functions).
- `gpsimd_engine_active_time_percent` (%): share of the time GpSimdE is executing an instruction.
- `dma_active_time_percent` (%): share of the time at least one DMA transfer is moving data.
- `dma_bandwidth_utilization_percent` (%): share of the core's DMA capacity in use: the time its DMA engines spent transferring, summed over the engines, divided by (engines x latency); near 100% data movement bounds the kernel.

If `mm_arithmetic_intensity` is below `peak_flops_bandwidth_ratio` the kernel is memory bound: HBM traffic limits it, so move fewer bytes (load each byte once, reuse tiles on chip, avoid spills). Otherwise it is compute bound: TensorE work limits it, so remove transposes and redundant matmuls and keep TensorE busy. A kernel without matmuls has `mm_arithmetic_intensity` 0; the bottleneck line says what limits it: the busiest engine or the DMA, from the `*_active_time_percent` counters and `dma_bandwidth_utilization_percent`, or latency (dependency stalls and fixed overheads) when none is busy half of the time."""

# One kernel on trn1, 1 ms: 48 MiB read, 16 MiB written, 2^35 TensorE flops of which 2^30
# transposes; TensorE busy 62%, VectorE 15%, ScalarE 8%, DMA engines 45%, some DMA 70%.
READ, WRITE, FLOPS, TRANSPOSE = 48 * 2**20, 16 * 2**20, 2**35, 2**30
PEAK = 2 * 128 * 128 * 2.8e9   # trn1's TensorE peak, the profiler's hfu denominator

EXPECTED_SIMULATED = """\
- speedup over the baseline kernel: 1.250x
- percent of peak throughput (roofline): 37.0%
- bottleneck: TensorE-bound (simulated trn1): TensorE busy 62% of the time, then DMA 45%, VectorE 15%, ScalarE 8%
- latency_ms: 1 ms
- hbm_read_bytes: 50,331,648 bytes
- hbm_write_bytes: 16,777,216 bytes
- spill_save_bytes: 0 bytes
- spill_reload_bytes: 0 bytes
- hardware_flops: 34,359,738,368 flops
- transpose_flops: 1,073,741,824 flops
- mm_arithmetic_intensity: 496 flops/byte
- peak_flops_bandwidth_ratio: 223.8 flops/byte
- hfu_estimated_percent: 37.4%
- tensor_engine_active_time_percent: 62.0%
- vector_engine_active_time_percent: 15.0%
- scalar_engine_active_time_percent: 8.0%
- gpsimd_engine_active_time_percent: 0.0%
- dma_active_time_percent: 70.0%
- dma_bandwidth_utilization_percent: 45.0%"""

EXPECTED_MEASURED = EXPECTED_SIMULATED.replace("(simulated trn1)", "(measured on trn1 hardware)")

# `neuron-profile view --output-format summary-json` of the same kernel: the profiler's layout
# (times in seconds, `*_percent` as fractions) with the fields the prompts leave out.
HARDWARE_SUMMARY = {"kernel-010": {
    "total_time": 0.001, "total_exec_time": 0.00098, "total_active_time": 0.00095, "neuroncore_cycle_count": 1400000,
    "neff_name": "kernel-010.neff",
    "hbm_read_bytes": READ, "hbm_write_bytes": WRITE, "spill_save_bytes": 0, "spill_reload_bytes": 0,
    "sbuf_read_bytes": 20000000, "sbuf_write_bytes": 52000000, "psum_write_bytes": 8000000,
    "hardware_flops": FLOPS, "transpose_flops": TRANSPOSE, "model_flops": 0, "mfu_estimated_percent": 0.0,
    "mm_arithmetic_intensity": (FLOPS - TRANSPOSE) / (READ + WRITE), "peak_flops_bandwidth_ratio": 223.781463973542,
    "hfu_estimated_percent": FLOPS / (PEAK * 0.001),
    "tensor_engine_active_time": 0.00062, "tensor_engine_active_time_percent": 0.62,
    "vector_engine_active_time": 0.00015, "vector_engine_active_time_percent": 0.15,
    "scalar_engine_active_time": 0.00008, "scalar_engine_active_time_percent": 0.08,
    "gpsimd_engine_active_time": 0.0, "gpsimd_engine_active_time_percent": 0.0,
    "dma_active_time": 0.0007, "dma_active_time_percent": 0.70, "dma_packet_time": 0.0072,
    "dma_transfer_count": 1536, "dma_transfer_average_bytes": 43690.7,
}}


def simulated_profile(monkeypatch) -> dict:
    """What the simulator backend returns (profile_of + the bottleneck line) for the kernel."""
    monkeypatch.setattr(model, "counters", lambda ops: {
        "hbm_read_bytes": READ, "hbm_write_bytes": WRITE, "spill_save_bytes": 0, "spill_reload_bytes": 0,
        "hardware_flops": FLOPS, "transpose_flops": TRANSPOSE})
    sched = SimpleNamespace(makespan_ns=1e6, busy_ns={tr.TENSOR: 6.2e5, tr.VECTOR: 1.5e5, tr.SCALAR: 8e4},
                            dma_active_ns=7e5, dma_ring_busy_ns=16 * 0.45 * 1e6, dma_rings=16)
    latency, profile = model.profile_of(SimpleNamespace(ops=[]), sched, hardware("trn1"),
                                        SimpleNamespace(launch_us=0.0))
    assert latency == pytest.approx(1.0)
    return {**profile, "bottleneck": model.summary(profile)}


def measured_profile() -> dict:
    """What the trainium backend returns for the kernel: the curated counters, the bottleneck line
    derived from them, the series' figures."""
    _, summary = trainium.parse_summary(HARDWARE_SUMMARY)
    profile = trainium.hardware_counters(summary, 1.0, "trn1")
    return {**profile, "bottleneck": trainium.bottleneck_line(profile, "trn1"), "target": "trn1",
            "min_ms": 0.998, "max_ms": 1.003, "rel_diffs": 0.005, "series_spreads": [0.005],
            "device_core": "0", "sdk_path": "legacy"}


def parent(profile: dict) -> Parent:
    return Parent("k" * 64, "def kernel(x): ...", 1.25, 1.0, 37.0, profile)


def test_snapshot_same_counters_and_definitions_on_both_backends(monkeypatch):
    simulated = prompts.format_profile(parent(simulated_profile(monkeypatch)))
    measured = prompts.format_profile(parent(measured_profile()))
    assert simulated == EXPECTED_SIMULATED
    assert measured == EXPECTED_MEASURED
    assert prompts.counter_definitions() == EXPECTED_DEFINITIONS
    # every counter either profile shows is defined, under the same name, in the system message
    shown = [line.split(":")[0][2:] for text in (simulated, measured) for line in text.splitlines()[3:]]
    assert shown == list(counters.NAMES) * 2
    defined = re.findall(r"^- `([a-z_]+)` \(", EXPECTED_DEFINITIONS, flags=re.MULTILINE)
    assert defined == list(counters.NAMES)


@pytest.mark.parametrize("dialect", ["legacy", "current"])
def test_the_system_message_carries_the_section_before_the_knob_rules(dialect):
    ctx = context()
    if dialect == "current":
        current = resources.files("nkibench").joinpath("baselines", "nki", "silu.py").read_text()
        ctx = dataclasses.replace(ctx, baseline_source=current)
    for c in (ctx, dataclasses.replace(ctx, machine=None), dataclasses.replace(ctx, tuning=False)):
        system = prompts.planner_messages(baseline_parent(), c)[0]["content"]
        assert f"## Profile counters\n\n{EXPECTED_DEFINITIONS}\n" in system
        if c.tuning:
            assert system.index("## Profile counters") < system.index("## Tunable knobs")
        assert system.count("## Profile counters") == 1 and "${" not in system


def test_the_list_is_ordered_typed_and_percent_means_a_fraction():
    names = counters.NAMES
    assert len(names) == 16 and len(set(names)) == 16 and names[0] == "latency_ms"
    assert names.index("hbm_write_bytes") < names.index("hardware_flops") < names.index(counters.INTENSITY) \
        < names.index(counters.RIDGE) < names.index("tensor_engine_active_time_percent")
    for c in counters.COUNTERS:
        assert c.percent == c.name.endswith("_percent") and c.definition.endswith(".") and "\n" not in c.definition
    # the bottleneck rule's threshold the definitions state ("half of the time")
    assert model.LATENCY_BOUND_BELOW == 0.5


def test_the_simulator_reports_every_counter_with_the_profilers_ridge_point():
    silu = resources.files("nkibench").joinpath("baselines", "silu.py").read_text()
    trace = run_kernel(silu, [ShapeDtype((256, 1024), np.float32)], filename="silu.py", shape_only=True).trace
    for target in ("trn1", "trn2", "trn3"):
        profile = estimate(trace, target).profile
        assert set(counters.NAMES) <= set(profile), target
        for c in counters.COUNTERS:
            if c.percent:
                assert 0.0 <= profile[c.name] <= 1.0, (target, c.name)
        hw = hardware(target)
        assert profile[counters.RIDGE] == hw.tensor_peak_flops / hw.hbm_bytes_per_s
    # the profiler's own figure on trn1 (the AccelOpt authors' profiles, trn1_measurements.json)
    assert estimate(trace).profile[counters.RIDGE] == pytest.approx(223.781463973542, rel=1e-8)


def test_the_hardware_profile_keeps_only_the_counters_and_derives_what_the_profiler_lacks():
    # an older profiler's summary: no intensity, ridge point, hfu or DMA packet time
    summary = {"total_time": 0.002, "total_exec_time": 0.0019, "hbm_read_bytes": 272e9 * 0.002 * 0.5,
               "hbm_write_bytes": 0.0, "hardware_flops": PEAK * 0.002 * 0.25, "transpose_flops": 0.0,
               "vector_engine_active_time": 0.0016, "vector_engine_active_time_percent": 0.8,
               "mfu_estimated_percent": 0.1}
    profile = trainium.hardware_counters(summary, 2.1, "trn1")
    assert list(profile) == [n for n in counters.NAMES if n in profile]           # declared order
    assert profile["latency_ms"] == 2.1                                            # the judged mean
    assert profile["mm_arithmetic_intensity"] == pytest.approx(PEAK * 0.0005 / (272e9 * 0.001))
    assert profile[counters.RIDGE] == pytest.approx(223.78146341463415)
    assert profile["hfu_estimated_percent"] == pytest.approx(0.25)
    # bytes / (latency x the core's documented DMA rate, 16 engines x 17 B/ns)
    assert profile["dma_bandwidth_utilization_percent"] == pytest.approx(0.5)
    assert not {"total_time", "total_exec_time", "vector_engine_active_time", "mfu_estimated_percent"} & set(profile)
    line = trainium.bottleneck_line(profile, "trn1")
    assert line == "VectorE-bound (measured on trn1 hardware): VectorE busy 80% of the time, then DMA 50%"
    assert trainium.bottleneck_line({"latency_ms": 1.0}, "trn1") == ""
    # the profiler's own figures win over derived ones; DMA use never exceeds the whole capacity
    own = trainium.hardware_counters({**summary, "peak_flops_bandwidth_ratio": 200.0, "dma_packet_time": 0.05},
                                     2.0, "trn1")
    assert own[counters.RIDGE] == 200.0 and own["dma_bandwidth_utilization_percent"] == 1.0


def test_prompts_show_nothing_but_the_counters_and_skip_missing_ones():
    profile = {"bottleneck": "VectorE-bound (simulated trn1): VectorE busy 80% of the time",
               "vector_engine_active_time_percent": 0.8, "hbm_read_bytes": 4096, "target": "trn1",
               "estimate": "simulated", "series_spreads": [0.01], "min_ms": 0.5, "flag": True,
               "hfu_estimated_percent": True}
    text = prompts.format_profile(Parent("p", "src", None, 0.5, None, profile))
    assert text.splitlines() == [
        "- bottleneck: VectorE-bound (simulated trn1): VectorE busy 80% of the time",
        "- latency_ms: 0.5 ms", "- hbm_read_bytes: 4,096 bytes", "- vector_engine_active_time_percent: 80.0%"]
    assert prompts.format_profile(Parent("p", "src")) == "(no profile available)"
