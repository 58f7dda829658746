"""Simulator backend, worker side: the NKI emulator runs the kernel, the performance model
estimates its latency on the target from the instruction trace (deterministic: the same
source gives the same latency), and the kernel's hot lines from its schedule
(fitness/measures/hotlines.py)."""

from __future__ import annotations

from typing import Any

from fitness.correctness.precision import DtypeUse, trace_dtypes
from fitness.measures import hotlines

KERNEL_FILE = "kernel.py"   # the file name errors give the kernel's source
SEED_TRACES = 20            # a full-data run costs at most this many shape-only traces ...
SLOW_ELEMENTS = 50e6        # ... plus the elements its instructions stream at this rate ...
SLOW_FLOPS = 10e9           # ... plus its matrix products at this rate (FLOP/s)


def check_target_dtypes(trace: Any, target: str) -> None:
    """Refuse, as the compiler would, a kernel using a dtype the target lacks (fp8 on trn1)."""
    from fitness.simulator.errors import UnsupportedDtypeError
    from fitness.simulator.perf.hardware import hardware

    if hardware(target).float8:
        return
    for use in trace_dtypes(trace):
        if use.dtype.startswith("float8"):
            raise UnsupportedDtypeError(f"{use.describe()}: the fp8 types exist on trn2 and trn3, not on {target}",
                                        KERNEL_FILE, use.line)


class SimulatorRunner:
    allow_exec = False

    def __init__(self, target: str, options: dict[str, Any] | None = None) -> None:
        from fitness.simulator import install, placeholders, run_kernel
        from fitness.simulator.perf import estimate
        from fitness.simulator.perf.calibration import from_dict
        from fitness.simulator.perf.model import ENGINE_NAMES

        install()   # both dialects: a kernel may import neuronxcc.nki (legacy) or nki (current)
        self.target = target
        # a user calibration travels with the request (the kernel process reads no files of its own)
        cal = (options or {}).get("calibration")
        self.calibration = from_dict(cal["data"], cal["path"]) if cal else None
        self._run_kernel = run_kernel
        self._placeholders = placeholders
        self._estimate = estimate
        self._engine_names = ENGINE_NAMES
        # What loads the kernel module (fitness.simulator.runner.Loader): the kernel process sets
        # the kernel's modules with their run-time guards (fitness.sandbox.modules); None: plain.
        self.loader: Any = None

    def run(self, source: str, args: list[Any]) -> tuple[Any, Any]:
        result = self._run_kernel(source, args, filename=KERNEL_FILE, kernel_name="kernel", loader=self.loader,
                                  target=self.target)
        check_target_dtypes(result.trace, self.target)
        return result.outputs, result.trace

    def trace(self, source: str, args: list[Any]) -> Any:
        """The kernel's trace without data (shape-only), on the shapes and dtypes of `args`."""
        trace = self._run_kernel(source, self._placeholders(args), filename=KERNEL_FILE, kernel_name="kernel",
                                 shape_only=True, loader=self.loader, target=self.target).trace
        check_target_dtypes(trace, self.target)
        return trace

    def seed_seconds(self, trace: Any, trace_s: float) -> float:
        """A pessimistic estimate of one full-data run of a kernel from its shape-only trace
        (which took `trace_s`): the trace's own work SEED_TRACES times over, the elements its
        instructions stream at SLOW_ELEMENTS and its matrix products at SLOW_FLOPS (README
        "What an evaluation costs": a seed's trace is 5-28% of its CPU time; one BLAS thread
        reached 40-84 GFLOP/s)."""
        flops = sum(2 * i.mm.K * i.mm.M * i.mm.N for i in trace.instrs if i.mm is not None)
        elements = sum(i.partitions * i.free for i in trace.instrs)
        return SEED_TRACES * trace_s + elements / SLOW_ELEMENTS + flops / SLOW_FLOPS

    def measure(self, source: str, args: list[Any], trace: Any) -> tuple[float, dict[str, Any]]:
        # The trace does not depend on the data, so one estimate serves every seed.
        times: dict[tuple[int, str], float] = {}

        def observe(prep: Any, sched: Any) -> None:   # the kernel's hot lines, from the schedule
            times.update(hotlines.schedule_times(prep.ops, sched.start, sched.end, sched.engine, self._engine_names))

        est = self._estimate(trace, self.target, self.calibration, observe=observe)
        profile = dict(est.profile)
        profile["bottleneck"] = est.bottleneck
        hot = hotlines.top(times, float(est.latency_ms) * 1e6)
        if hot:
            profile[hotlines.HOT_LINES] = hotlines.encode(hot)
        return float(est.latency_ms), profile

    def structure_dtypes(self, trace: Any) -> list[DtypeUse]:
        return trace_dtypes(trace)
