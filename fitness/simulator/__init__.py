"""NKI simulator: an emulator of NKI kernels and a Trainium performance model.

Layout (imports run one way: front-ends -> core, perf -> trace; `errors` and `trace` are
shared by all):
  core/      machine semantics, the same for every dialect: the running machine, HBM/SBUF/PSUM
             tensors and their storage, subscripts as affine views, the engines' instructions
             and the trace records they emit, kernel launch
  legacy/    the legacy `neuronxcc.nki` dialect: the `nl` and `nisa` APIs, loop iterators, the
             `neuronxcc` module objects and the dialect's meaning of Python syntax on tiles
  current/   the current `nki` dialect (NKI 0.3+): destination-first `nisa`, `nl`, tensor views
             and `.ap` access patterns, the `nki` module objects (`nki.jit`, `nki.simulate`)
  dialect.py which dialect a kernel source is written in (by its imports)
  runner.py  the entry point (load, run, simulate), dispatching on the source's dialect
  trace.py   the instruction trace: what the emulator records and `perf` times
  perf/      the performance model

Public API of the emulator:
  install_neuronxcc()             make `import neuronxcc.nki...` resolve to the emulator (this process only)
  install_nki()                   the same for `import nki...` (the current dialect)
  install(dialect=None)           one dialect's modules, or both
  run_kernel(source, args, ...)   compile and run a kernel; returns KernelRun(outputs, trace)
  ShapeDtype(shape, dtype)        placeholder argument for shape-only (trace without arithmetic) runs
  placeholders(args)              the ShapeDtype of every array argument (others unchanged)
  simulate(fn, args, ...)         the same for a kernel function object (what nki.jit calls)
  errors.NkiError                 base of the errors raised for kernels that break an NKI rule
The instruction trace contract is `fitness.simulator.trace`; the performance model that
times it lives in `fitness.simulator.perf`.
"""

from . import errors
from .errors import NkiError
from .current.shim import install_nki
from .legacy.shim import install_neuronxcc
from .runner import KernelRun, ShapeDtype, install, load_kernel, placeholders, run_kernel, simulate

__all__ = ["KernelRun", "NkiError", "ShapeDtype", "errors", "install", "install_neuronxcc", "install_nki",
           "load_kernel", "placeholders", "run_kernel", "simulate"]
