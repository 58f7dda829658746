"""`import neuronxcc.nki...` resolved to the emulator, in the current process only, and the
legacy front-end as the core sees it (`FRONTEND`).

`install_neuronxcc()` puts module objects named `neuronxcc`, `neuronxcc.nki`,
`neuronxcc.nki.language`, `.isa`, `.typing` (and `.compiler`) into `sys.modules`. Nothing
named `neuronxcc` exists on disk, so on a Trainium host the real SDK is used unless the
evaluating process asks for the emulator. Names the emulator does not implement raise
`UnsupportedApiError` naming them. The launchers (`nki.jit` kernels called with arrays,
`simulate_kernel`, `baremetal`, ...) run kernels through `core.launch` with `FRONTEND`.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

from .. import errors
from ..core import instr, launch, modules, runtime, subscript
from . import isa, language
from .loops import kernel_range



class JitKernel:
    """A kernel under `@nki.jit`: calling it runs the emulator (or, inside a running kernel,
    just calls the function, like NKI's nested kernel calls)."""

    def __init__(self, func: Callable, mode: str | None = None, **options):
        self._func = func
        self._mode = mode
        self._options = options
        functools.update_wrapper(self, func)

    def __call__(self, *args, **kwargs):
        if runtime.current() is not None:
            return self._func(*args, **kwargs)
        return launch.simulate(FRONTEND, self._func, args, kwargs).outputs

    def __getitem__(self, grid):
        dims = grid if isinstance(grid, tuple) else (grid,)
        if all(int(d) == 1 for d in dims):
            return self
        raise errors.UnsupportedApiError(
            f"SPMD launch grids ({grid}) are not supported by the emulator; launch the kernel without a grid")


def jit(func=None, mode: str | None = None, **options):
    """`@nki.jit` / `@nki.jit(mode="simulation")`."""
    if func is None:
        return lambda f: JitKernel(_unwrap(f), mode, **options)
    return JitKernel(_unwrap(func), mode, **options)


def _unwrap(func):
    return func._func if isinstance(func, JitKernel) else func


def trace(func=None, **options):
    """`@nki.trace` marks helper kernels; they run inline."""
    if func is None:
        return lambda f: f
    return func


def simulate_kernel(kernel, *args, **kwargs):
    """`nki.simulate_kernel(kernel, *arrays)`: run on the emulator, return NumPy outputs."""
    return launch.simulate(FRONTEND, _unwrap(kernel), args, kwargs).outputs


def baremetal(kernel=None, **options):
    """`nki.baremetal(kernel, save_neff_name=..., ...)(*arrays)`: here, the emulator."""
    if kernel is None:
        return lambda k: baremetal(k, **options)

    def run(*args, **kwargs):
        return launch.simulate(FRONTEND, _unwrap(kernel), args, kwargs).outputs
    return functools.wraps(_unwrap(kernel))(run)


def benchmark(kernel=None, warmup: int = 0, iters: int = 1, **options):
    """`nki.benchmark(...)(kernel)(*arrays)`: runs the emulator once. Latency figures come from
    the performance model (fitness.simulator.perf), not from this call."""
    if kernel is None:
        return lambda k: benchmark(k, warmup, iters, **options)
    return baremetal(kernel, **options)


def profile(kernel=None, **options):
    """`nki.profile(...)(kernel)(*arrays)`: runs the emulator once (no profile files; the
    performance model gives the profile)."""
    if kernel is None:
        return lambda k: profile(k, **options)
    return baremetal(kernel, **options)


class _TensorType:
    """`nt.tensor[...]` / `nt.mutable_tensor[...]` annotations."""

    __slots__ = ("_name", "_mutable", "_shape")

    def __init__(self, name: str, mutable: bool, shape=None):
        self._name, self._mutable, self._shape = name, mutable, shape

    def __getitem__(self, item):
        return _TensorType(self._name, self._mutable, item)

    def __call__(self, *args, **kwargs):
        return _TensorType(self._name, self._mutable, args)

    def __repr__(self) -> str:
        return f"nt.{self._name}" + (f"[{self._shape}]" if self._shape is not None else "")


def is_mutable_annotation(ann) -> bool:
    return isinstance(ann, _TensorType) and ann._mutable


def _unsupported(module_name: str):
    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise errors.UnsupportedApiError(
            f"'{module_name}.{name}' is not supported by the NKI emulator", *errors.kernel_location(1))
    return __getattr__


def _module(name: str, attrs: dict[str, Any], lazy: Callable | None = None,
            package: bool = False) -> types.ModuleType:
    fallback = _unsupported(name)
    if lazy is None:
        return modules.stand_in(name, attrs, fallback, package)

    def __getattr__(attr: str):
        try:
            return lazy(attr)
        except AttributeError:
            return fallback(attr)
    return modules.stand_in(name, attrs, __getattr__, package)


def build_modules() -> dict[str, types.ModuleType]:
    """Fresh module objects for the `neuronxcc` namespace."""
    nl = _module("neuronxcc.nki.language", {n: getattr(language, n) for n in language.EXPORTS},
                 lazy=language.__getattr__)
    nisa = _module("neuronxcc.nki.isa", {n: getattr(isa, n) for n in isa.EXPORTS})
    nt = _module("neuronxcc.nki.typing", {"tensor": _TensorType("tensor", False),
                                          "mutable_tensor": _TensorType("mutable_tensor", True),
                                          "scalar": _TensorType("scalar", False)})
    ncc = _module("neuronxcc.nki.compiler", {})
    nki = _module("neuronxcc.nki", {
        "jit": jit, "trace": trace, "simulate_kernel": simulate_kernel, "baremetal": baremetal,
        "benchmark": benchmark, "profile": profile, "language": nl, "isa": nisa, "typing": nt, "compiler": ncc,
    }, package=True)
    root = _module("neuronxcc", {"nki": nki}, package=True)
    return {"neuronxcc": root, "neuronxcc.nki": nki, "neuronxcc.nki.language": nl,
            "neuronxcc.nki.isa": nisa, "neuronxcc.nki.typing": nt, "neuronxcc.nki.compiler": ncc}


def install_neuronxcc() -> None:
    """Make `import neuronxcc.nki...` resolve to the emulator in this process (idempotent)."""
    modules.install("neuronxcc", build_modules)


def uninstall_neuronxcc() -> None:
    """Remove the emulator's `neuronxcc` modules from `sys.modules` (tests)."""
    modules.uninstall("neuronxcc")


# The legacy dialect as the core sees it: Python syntax on tiles follows the legacy rules
# (`t[...] = nl.exp(x)` writes t directly, `a + b` lowers like nl.add), and kernel code's
# Python `range` is a sequential loop.
FRONTEND = runtime.FrontEnd(
    name="legacy",
    getitem=subscript.subscript,
    setitem=instr.setitem,
    augmented=instr.augmented,
    operator=language.operator,
    broadcast_to=language.broadcast_to,
    install=install_neuronxcc,
    unwrap=_unwrap,
    is_mutable=is_mutable_annotation,
    kernel_globals={"range": kernel_range},
    method=language.tensor_method,
)
