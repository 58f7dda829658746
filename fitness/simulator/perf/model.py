"""The performance model end to end: trace -> latency, neuron-profile counters, bottleneck.

    lower -> compiler effects -> dependencies -> schedule -> profile

`prepare` does everything that does not depend on timing parameters, so that calibration
can re-time one prepared program many times; `estimate` is the public entry point.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Callable

from .. import trace as tr
from . import compiler, deps, lowering
from .calibration import Calibration
from .costs import hardware_flops
from .hardware import Hardware, hardware, label as target_label
from .lowering import Op, Program
from .params import Params, for_target
from .schedule import Schedule, schedule

ENGINE_NAMES = {tr.TENSOR: "TensorE", tr.VECTOR: "VectorE", tr.SCALAR: "ScalarE",
                tr.GPSIMD_ENGINE: "GpSimdE", tr.DMA: "DMA"}
LATENCY_BOUND_BELOW = 0.5   # no resource busier than this: stalls and overheads dominate
DMA_ENGINE = (tr.DMA,)
SCRATCH_KINDS = ("scratch", "spill")   # kernel-private HBM: its traffic is spill traffic


@dataclass(frozen=True)
class PerfEstimate:
    """The model's answer for one kernel on one target."""

    latency_ms: float
    profile: dict[str, float | int | str]
    bottleneck: str


@dataclass
class Prepared:
    """A lowered, compiler-transformed program with its dependency graph."""

    prog: Program
    preds: list[list[int]]
    report: compiler.CompilerReport

    @property
    def ops(self) -> list[Op]:
        return self.prog.ops


def prepare(trace: tr.Trace, hw: Hardware, params: Params) -> Prepared:
    prog = lowering.lower(trace)
    report = compiler.apply(prog, hw, params)
    preds = deps.build(prog, hw, params)
    return Prepared(prog, preds, report)


def counters(ops: list[Op]) -> dict[str, int]:
    """Byte and flop counters with the profiler's definitions: HBM reads include spill
    reloads, HBM writes include spill saves; traffic to kernel-private HBM scratch counts as
    spill traffic (the compiler's own spill space is such a scratch)."""
    read = write = save = reload = flops = tflops = 0
    for op in ops:
        kind = op.kind
        if op.engines == DMA_ENGINE:
            if not kind:
                continue   # deleted by the compiler pass
            read += op.hbm_read_bytes
            if op.hbm_read_bytes and op.hbm_tensor_kind in SCRATCH_KINDS:
                reload += op.hbm_read_bytes
            write += op.hbm_write_bytes
            if op.hbm_write_kind in SCRATCH_KINDS:
                save += op.hbm_write_bytes
        elif op.mm is not None:
            f = hardware_flops(op)
            flops += f
            if kind == tr.MM_TRANSPOSE or op.mm.is_transpose:
                tflops += f
    return {"hbm_read_bytes": read, "hbm_write_bytes": write, "spill_save_bytes": save,
            "spill_reload_bytes": reload, "hardware_flops": flops, "transpose_flops": tflops}


def profile_of(prep: Prepared, sched: Schedule, hw: Hardware, params: Params) -> tuple[float, dict]:
    latency_ns = sched.makespan_ns + params.launch_us * 1e3
    seconds = latency_ns * 1e-9
    c = counters(prep.ops)
    traffic = c["hbm_read_bytes"] + c["hbm_write_bytes"]
    mm_flops = c["hardware_flops"] - c["transpose_flops"]
    prof: dict[str, float | int | str] = {"latency_ms": latency_ns * 1e-6, **c}
    prof["mm_arithmetic_intensity"] = mm_flops / traffic if traffic else 0.0
    prof["peak_flops_bandwidth_ratio"] = hw.peak_flops_bandwidth_ratio
    # Percent-named metrics are fractions in [0, 1], as neuron-profile reports them.
    prof["hfu_estimated_percent"] = c["hardware_flops"] / (hw.tensor_peak_flops * seconds)
    for e, name in ((tr.TENSOR, "tensor"), (tr.SCALAR, "scalar"), (tr.VECTOR, "vector"),
                    (tr.GPSIMD_ENGINE, "gpsimd")):
        prof[f"{name}_engine_active_time_percent"] = sched.busy_ns.get(e, 0.0) / latency_ns
    prof["dma_active_time_percent"] = sched.dma_active_ns / latency_ns
    prof["dma_bandwidth_utilization_percent"] = sched.dma_ring_busy_ns / (sched.dma_rings * latency_ns)
    prof["target"] = hw.name
    prof["estimate"] = "simulated"
    return latency_ns * 1e-6, prof


def utilisation(prof: dict) -> dict[str, float]:
    """Fraction of the kernel's time each engine (and the DMA bandwidth) is busy."""
    return {
        tr.TENSOR: float(prof["tensor_engine_active_time_percent"]),
        tr.VECTOR: float(prof["vector_engine_active_time_percent"]),
        tr.SCALAR: float(prof["scalar_engine_active_time_percent"]),
        tr.GPSIMD_ENGINE: float(prof["gpsimd_engine_active_time_percent"]),
        tr.DMA: float(prof["dma_bandwidth_utilization_percent"]),
    }


def bottleneck_engine(prof: dict) -> str:
    """The busiest resource ("T", "V", "S", "G", "DMA"), or "latency" when none is busy
    for at least half of the kernel's time."""
    use = utilisation(prof)
    top = max(use, key=use.__getitem__)
    return top if use[top] >= LATENCY_BOUND_BELOW else "latency"


def summary(prof: dict, label: str | None = None) -> str:
    """One line for people and LLM prompts: what bounds the kernel and how busy the rest is.
    `label` names the figures (default: the target's, "simulated trn2, uncalibrated")."""
    use = utilisation(prof)
    order = sorted(use, key=use.__getitem__, reverse=True)
    top = order[0]
    others = ", ".join(f"{ENGINE_NAMES[e]} {100 * use[e]:.0f}%" for e in order[1:4] if use[e] >= 0.01)
    label = label or target_label(str(prof["target"]))
    what = "DMA bandwidth used" if top == tr.DMA else f"{ENGINE_NAMES[top]} busy"
    if use[top] >= LATENCY_BOUND_BELOW:
        line = f"{ENGINE_NAMES[top]}-bound ({label}): {what} {100 * use[top]:.0f}% of the time"
    else:
        line = f"Latency-bound ({label}: dependency stalls and fixed overheads): busiest is " \
               f"{ENGINE_NAMES[top]} at {100 * use[top]:.0f}%"
    if others:
        line += f", then {others}"
    spill = int(prof["spill_save_bytes"]) + int(prof["spill_reload_bytes"])
    if spill:
        line += f"; spill traffic {spill / 1e6:.0f} MB"
    return line


def estimate_with(trace: tr.Trace, hw: Hardware, params: Params, label: str | None = None,
                  observe: Callable[[Prepared, Schedule], None] | None = None) -> PerfEstimate:
    """The estimate of `trace`; `observe(prepared, schedule)`, when given, sees the scheduled
    program before it is freed (e.g. per-line engine time: fitness/measures/hotlines.py),
    and changes nothing of the estimate."""
    # The passes allocate many long-lived objects and no reference cycles: the cyclic
    # garbage collector would only rescan them over and over. They are also freed before
    # collection resumes: the collector's next run would otherwise traverse all of them
    # (they are all in its youngest generation).
    collecting = gc.isenabled()
    gc.disable()
    try:
        prep = prepare(trace, hw, params)
        sched = schedule(prep.prog, prep.preds, hw, params)
        latency_ms, prof = profile_of(prep, sched, hw, params)
        if observe is not None:
            observe(prep, sched)
        del prep, sched
    finally:
        if collecting:
            gc.enable()
    return PerfEstimate(latency_ms, prof, summary(prof, label))


def estimate(trace: tr.Trace, target: str = "trn1", calibration: Calibration | None = None,
             observe: Callable[[Prepared, Schedule], None] | None = None) -> PerfEstimate:
    """Latency, neuron-profile counters and a bottleneck line for `trace` on `target`, with the
    shipped parameters or a user's `calibration` of that target (named in the line);
    `observe` as in `estimate_with`."""
    if calibration is None:
        return estimate_with(trace, hardware(target), for_target(target), observe=observe)
    return estimate_with(trace, hardware(target), calibration.model_params(),
                         f"simulated {target}, {calibration.label}", observe)
