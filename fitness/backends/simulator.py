"""Simulator backend, worker side: the NKI emulator runs the kernel, the performance model
estimates its latency on the target from the instruction trace (deterministic: the same
source gives the same latency)."""

from __future__ import annotations

from typing import Any

from ..precision import DtypeUse, trace_dtypes

KERNEL_FILE = "kernel.py"   # the file name errors give the kernel's source


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
        from fitness.simulator import install, run_kernel
        from fitness.simulator.perf import estimate
        from fitness.simulator.perf.calibration import from_dict

        install()   # both dialects: a kernel may import neuronxcc.nki (legacy) or nki (current)
        self.target = target
        # a user calibration travels with the request (the kernel process reads no files of its own)
        cal = (options or {}).get("calibration")
        self.calibration = from_dict(cal["data"], cal["path"]) if cal else None
        self._run_kernel = run_kernel
        self._estimate = estimate

    def run(self, source: str, args: list[Any]) -> tuple[Any, Any]:
        result = self._run_kernel(source, args, filename=KERNEL_FILE, kernel_name="kernel")
        check_target_dtypes(result.trace, self.target)
        return result.outputs, result.trace

    def measure(self, source: str, args: list[Any], trace: Any) -> tuple[float, dict[str, Any]]:
        # The trace does not depend on the data, so one estimate serves every seed.
        est = self._estimate(trace, self.target, self.calibration)
        profile = dict(est.profile)
        profile["bottleneck"] = est.bottleneck
        return float(est.latency_ms), profile

    def structure_dtypes(self, trace: Any) -> list[DtypeUse]:
        return trace_dtypes(trace)
