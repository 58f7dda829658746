"""`import neuronxcc.nki...` resolved to the emulator, in the current process only, and the
legacy front-end as the core sees it (`FRONTEND`).

`install_neuronxcc()` puts module objects named `neuronxcc`, `neuronxcc.nki`,
`neuronxcc.nki.language`, `.isa`, `.typing` (and `.compiler`) into `sys.modules`. Nothing
named `neuronxcc` exists on disk, so on a Trainium host the real SDK is used unless the
evaluating process asks for the emulator. Names the emulator does not implement raise
`UnsupportedApiError` naming them. The launchers (`nki.jit` kernels called with arrays,
`simulate_kernel`, `baremetal`, ...) run kernels through `core.launch` with `FRONTEND`; a
kernel decorated with `@nki.baremetal(...)` itself is its function. `neuronxcc.nki.compiler`
has the direct-allocation API (`sbuf`/`psum` with `alloc`, `mod_alloc`, `auto_alloc`:
core.placement), `skip_middle_end_transformations`, `enable_stack_allocator` and
`force_auto_alloc` (recorded in `Trace.options`) and the `no_reorder()` loop directive
(`Trace.loop_directives`). `nki.tensor` is the type of the tensors kernels see.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

from .. import errors
from ..core import instr, launch, modules, placement, runtime, subscript
from ..core.tensor import NkiTensor
from ..emulation import APPROXIMATE, emulation
from . import isa, language
from .loops import kernel_range, no_reorder


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
    """`@nki.jit` / `@nki.jit(mode="simulation", additional_compile_opt="...")`."""
    _check_options(options, "nki.jit")
    if func is None:
        return lambda f: JitKernel(_unwrap(f), mode, **options)
    return JitKernel(_unwrap(func), mode, **options)


def _check_options(options: dict, api: str) -> None:
    """Compiler flags (`additional_compile_opt`) are the compiler's business: the emulator
    accepts a string and does nothing with it (the performance model prices the program as
    written; the flags' effects on neuronx-cc are not documented)."""
    opt = options.get("additional_compile_opt")
    if opt is not None and not isinstance(opt, str):
        raise errors.OperandTypeError(f"'additional_compile_opt' of '{api}' must be a string of compiler flags, "
                                      f"got {type(opt).__name__}")


class Launcher:
    """A kernel under `@nki.baremetal(...)` (or `nki.benchmark`, `nki.profile`): called with
    arrays, it runs the emulator; as the kernel being evaluated it is its function. Called
    inside a running kernel it is a launch of another kernel, which is refused."""

    def __init__(self, func: Callable, **options):
        self._func = func
        self._options = options
        functools.update_wrapper(self, func)

    def __call__(self, *args, **kwargs):
        return launch.simulate(FRONTEND, self._func, args, kwargs).outputs


def _unwrap(func):
    return func._func if isinstance(func, (JitKernel, Launcher)) else func


def trace(func=None, **options):
    """`@nki.trace` marks helper kernels; they run inline."""
    if func is None:
        return lambda f: f
    return func


def simulate_kernel(kernel, *args, **kwargs):
    """`nki.simulate_kernel(kernel, *arrays)`: run on the emulator, return NumPy outputs."""
    return launch.simulate(FRONTEND, _unwrap(kernel), args, kwargs).outputs


def baremetal(kernel=None, **options):
    """`nki.baremetal(kernel, save_neff_name=..., ...)(*arrays)` or `@nki.baremetal(...)` on the
    kernel itself: here, the emulator."""
    _check_options(options, "nki.baremetal")
    if kernel is None:
        return lambda k: baremetal(k, **options)
    return Launcher(_unwrap(kernel), **options)


# --- neuronxcc.nki.compiler ------------------------------------------------------------------------

def _set_option(func, name: str, api: str):
    target = _unwrap(func)
    if not callable(target) or not hasattr(target, "__dict__"):
        raise errors.OperandTypeError(f"@{api} decorates a kernel function, got {type(func).__name__}")
    setattr(target, launch.OPTIONS, tuple(dict.fromkeys((*getattr(target, launch.OPTIONS, ()), name))))
    return func


def skip_middle_end_transformations(func=None):
    """`@nki.compiler.skip_middle_end_transformations`: neuronx-cc runs the kernel as written
    (the performance model applies none of its middle-end effects, perf/compiler.py)."""
    name = "skip_middle_end_transformations"
    if func is None:
        return lambda f: _set_option(f, name, f"nki.compiler.{name}")
    return _set_option(func, name, f"nki.compiler.{name}")


@emulation(APPROXIMATE, "recorded in Trace.options; the emulator places tensors as it always does (its automatic "
                        "allocation, or the kernel's direct allocations), so the stack allocator changes neither "
                        "values nor the modelled latency")
def enable_stack_allocator(func=None, log_level: int = 50):
    """`@nki.compiler.enable_stack_allocator` (with skip_middle_end_transformations): neuronx-cc
    allocates the kernel's SBUF/PSUM tensors with a stack allocator."""
    name = "enable_stack_allocator"
    if not isinstance(log_level, int) or isinstance(log_level, bool):
        raise errors.OperandTypeError(f"'log_level' of 'nki.compiler.{name}' must be an int, got {log_level!r}")
    if func is None:
        return lambda f: _set_option(f, name, f"nki.compiler.{name}")
    return _set_option(func, name, f"nki.compiler.{name}")


@emulation(APPROXIMATE, "recorded in Trace.options; the kernel's direct allocations are still placed as written "
                        "(core.placement), so a kernel that relies on two allocations aliasing keeps that aliasing "
                        "here, unlike neuronx-cc's automatic allocation")
def force_auto_alloc(func=None):
    """`@nki.compiler.force_auto_alloc`: neuronx-cc ignores the kernel's direct allocations."""
    name = "force_auto_alloc"
    if func is None:
        return lambda f: _set_option(f, name, f"nki.compiler.{name}")
    return _set_option(func, name, f"nki.compiler.{name}")


class _Memory(language.BufferKind):
    """`nki.compiler.sbuf` / `.psum`: the memory as a buffer (automatic allocation, like nl.sbuf)
    and its allocation API (`alloc`, `mod_alloc`, `auto_alloc`)."""

    def __new__(cls, name: str, alloc, mod_alloc):
        obj = super().__new__(cls, name)
        obj.alloc = alloc
        obj.mod_alloc = mod_alloc
        return obj

    def auto_alloc(self):
        return language.sbuf if self == "sbuf" else language.psum


compiler_sbuf = _Memory("sbuf", placement.sbuf_alloc, placement.sbuf_mod_alloc)
compiler_psum = _Memory("psum", placement.psum_alloc, placement.psum_mod_alloc)


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


class _TensorType_(type):
    """`isinstance(x, nki.tensor)` holds for the emulator's tensors."""

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, NkiTensor)


@emulation(APPROXIMATE, "isinstance checks and annotations see the emulator's tensors; they have shape, dtype, ndim, "
                        "broadcast_to and reshape (HBM tensors) as documented; itemsize, assert_shape, astype, "
                        "expand_dims and view raise an unsupported-attribute error (use nl.copy(dtype=...) and "
                        "nl.expand_dims)")
class tensor(metaclass=_TensorType_):
    """`nki.tensor`: the type of the tensors a kernel works on."""

    def __new__(cls, *args, **kwargs):
        raise errors.OperandTypeError("nki.tensor is a type: create tensors with nl.ndarray, nl.zeros, nl.load, ...")


def build_modules() -> dict[str, types.ModuleType]:
    """Fresh module objects for the `neuronxcc` namespace."""
    nl = _module("neuronxcc.nki.language", {n: getattr(language, n) for n in language.EXPORTS},
                 lazy=language.__getattr__)
    nisa = _module("neuronxcc.nki.isa", {n: getattr(isa, n) for n in isa.EXPORTS})
    nt = _module("neuronxcc.nki.typing", {"tensor": _TensorType("tensor", False),
                                          "mutable_tensor": _TensorType("mutable_tensor", True),
                                          "scalar": _TensorType("scalar", False)})
    ncc = _module("neuronxcc.nki.compiler", {
        "sbuf": compiler_sbuf, "psum": compiler_psum,
        "skip_middle_end_transformations": skip_middle_end_transformations, "no_reorder": no_reorder,
        "enable_stack_allocator": enable_stack_allocator, "force_auto_alloc": force_auto_alloc,
    })
    nki = _module("neuronxcc.nki", {
        "jit": jit, "trace": trace, "simulate_kernel": simulate_kernel, "baremetal": baremetal,
        "benchmark": benchmark, "profile": profile, "tensor": tensor,
        "language": nl, "isa": nisa, "typing": nt, "compiler": ncc,
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
