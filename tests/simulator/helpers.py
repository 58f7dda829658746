"""Shared helpers of the emulator tests: the NKI modules (built without touching
sys.modules), a runner for kernel functions and seeded inputs."""

from __future__ import annotations

import numpy as np

from fitness.simulator import simulate
from fitness.simulator.legacy.shim import build_modules

_MODULES = build_modules()
nki = _MODULES["neuronxcc.nki"]
nl = _MODULES["neuronxcc.nki.language"]
nisa = _MODULES["neuronxcc.nki.isa"]
nt = _MODULES["neuronxcc.nki.typing"]


def run(fn, *args, shape_only: bool = False, **kwargs):
    """Run a kernel function defined in a test on the emulator; returns the KernelRun."""
    return simulate(fn, args, kwargs, shape_only=shape_only)


def rand(*shape, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def instrs(trace, kind=None, op=None):
    return [i for i in trace.instrs if (kind is None or i.kind == kind) and (op is None or i.op == op)]


def assert_consistent(trace) -> None:
    """Every region names a recorded tensor and lies inside its shape; ids are program order."""
    assert [i.id for i in trace.instrs] == list(range(len(trace.instrs)))
    for ins in trace.instrs:
        for reg in ins.reads + ins.writes:
            info = trace.tensors[reg.tensor]
            assert len(reg.box) == len(info.shape), (ins, info)
            assert all(0 <= lo <= hi <= n for (lo, hi), n in zip(reg.box, info.shape)), (ins, info)
        for loop_id, _ in ins.loop_path:
            assert loop_id in trace.loops
