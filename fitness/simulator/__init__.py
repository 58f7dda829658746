"""NKI simulator: an emulator of the legacy `neuronxcc.nki` language and a Trainium performance model.

Public API of the emulator:
  install_neuronxcc()             make `import neuronxcc.nki...` resolve to the emulator (this process only)
  run_kernel(source, args, ...)   compile and run a kernel; returns KernelRun(outputs, trace)
  ShapeDtype(shape, dtype)        placeholder argument for shape-only (trace without arithmetic) runs
  simulate(fn, args, ...)         the same for a kernel function object (what nki.jit calls)
  errors.NkiError                 base of the errors raised for kernels that break an NKI rule
The instruction trace contract is `fitness.simulator.trace`; the performance model that
times it lives in `fitness.simulator.perf`.
"""

from . import errors
from .errors import NkiError
from .runner import KernelRun, ShapeDtype, load_kernel, run_kernel, simulate
from .shim import install_neuronxcc

__all__ = ["KernelRun", "NkiError", "ShapeDtype", "errors", "install_neuronxcc", "load_kernel", "run_kernel",
           "simulate"]
