"""The emulator's entry point for legacy (`neuronxcc.nki`) kernels: compile a kernel module's
source and run its kernel function on the core (`core.launch`) with the legacy front-end.

Kernels that declare more than `core.launch.AUTO_RELEASE_BYTES` of kernel-level tensors are
first traced without data (shape-only, fast) to learn the last access of every on-chip
block; the full-data run then drops each block after that access, so kernels declaring
several GiB of logical buffers run in a few GiB.
"""

from __future__ import annotations

import builtins
import linecache
from collections.abc import Callable, Sequence
from typing import Any

from .core import launch
from .core.launch import KernelRun, ShapeDtype
from .legacy.loops import kernel_range
from .legacy.shim import FRONTEND, JitKernel, install_neuronxcc

__all__ = ["KernelRun", "ShapeDtype", "load_kernel", "run_kernel", "simulate"]


def load_kernel(source: str, filename: str = "kernel.py", kernel_name: str = "kernel") -> Callable:
    """Compile a kernel module from source and return its kernel function. Python `range`
    inside the module becomes NKI's sequential loop while a kernel runs."""
    install_neuronxcc()
    code = compile(source, filename, "exec", dont_inherit=True)   # not this module's __future__ flags
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": "__nki_kernel__", "__file__": filename,
                                 "__builtins__": builtins, "range": kernel_range}
    exec(code, namespace)
    obj = namespace.get(kernel_name)
    if obj is None:
        raise NameError(f"{filename} defines no kernel function named '{kernel_name}'")
    if isinstance(obj, JitKernel):
        obj = obj._func
    if not callable(obj):
        raise TypeError(f"'{kernel_name}' in {filename} is not a function")
    return obj


def run_kernel(source: str, args: Sequence, *, filename: str = "kernel.py", kernel_name: str = "kernel",
               shape_only: bool = False, kwargs: dict | None = None) -> KernelRun:
    """Compile `source`, call `kernel_name` on `args` (NumPy arrays become HBM inputs; in
    shape-only mode ShapeDtype placeholders work too) and return outputs and trace."""
    fn = load_kernel(source, filename, kernel_name)
    key = (source, filename, kernel_name, launch.signature(args), launch.signature(sorted((kwargs or {}).items())))
    return launch.simulate(FRONTEND, fn, args, kwargs, shape_only=shape_only, plan_key=key)


def simulate(fn: Callable, args: Sequence, kwargs: dict | None = None, *, shape_only: bool = False,
             release: bool | None = None, plan_key=None) -> KernelRun:
    """Execute legacy kernel function `fn` on the emulator (see `core.launch.simulate`)."""
    return launch.simulate(FRONTEND, fn, args, kwargs, shape_only=shape_only, release=release, plan_key=plan_key)
