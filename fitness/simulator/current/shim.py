"""`import nki...` resolved to the emulator, in the current process only, and the current
front-end as the core sees it (`FRONTEND`).

`install_nki()` puts module objects named `nki`, `nki.language`, `nki.isa` (and its
`nki.isa.constants`), `nki.typing` and `nki.collectives` into `sys.modules` (the `nki` names on PyPI are placeholders, so nothing real is hidden).
Names the emulator does not implement raise `UnsupportedApiError` naming them; names only the
legacy dialect has raise `LegacyConstructError` naming the current way. `@nki.jit` kernels
called with NumPy arrays, and `nki.simulate(kernel)(arrays)`, run through `core.launch`.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

from .. import errors
from ..core import launch, modules, runtime
from ..emulation import APPROXIMATE, emulation
from . import collectives, isa, language, views

# `nki.isa.constants`: the enums of nki.isa under the module name the NKI Library imports them from
# (`from nki.isa.constants import oob_mode`), the same objects as nki.isa's.
ISA_CONSTANTS = ("engine", "reduce_cmd", "dge_mode", "oob_mode", "matmul_perf_mode", "nc_version", "dma_engine")


@emulation(APPROXIMATE, "an annotation only (`dtype: nki.dtype = nl.bfloat16`): the emulator's dtypes are NumPy's")
class dtype:
    """`nki.dtype`: the type kernels annotate dtype parameters with; nothing is an instance of it."""

    __slots__ = ()


# Legacy-only names and what the current dialect uses instead.
LEGACY = {
    "par_dim": "the partition dimension is always dim 0 of an on-chip tensor",
    "arange": "index with integers, slices and nl.ds(start, size)",
    "mgrid": "index with integers, slices and nl.ds(start, size)",
    "loop_reduce": "accumulate with nisa.tensor_tensor(dst=acc, data1=acc, data2=x, op=nl.add)",
    "simulate_kernel": "nki.simulate(kernel)(*arrays)",
    "baremetal": "call the @nki.jit kernel with NumPy arrays",
    "benchmark": "call the @nki.jit kernel with NumPy arrays (the performance model times it)",
    "profile": "call the @nki.jit kernel with NumPy arrays (the performance model times it)",
    "mutable_tensor": "kernel inputs are writable; annotate with nki.typing.tensor",
}


MAX_LNC = 2   # logical NeuronCores of a launch: trn2 and trn3 group two physical cores


class Kernel:
    """A kernel under `@nki.jit`: calling it with arrays runs the emulator (inside a running
    kernel it is just called, inlined); `kernel[lnc]` sets the logical-core degree. An LNC2
    launch runs its two programs (`nl.program_id(0)` 0 and 1) one after the other on one
    machine, sharing the inputs and the `nl.shared_hbm` tensors."""

    def __init__(self, func: Callable, lnc: int = 1, **options):
        self._func = func
        self._lnc = lnc
        self._options = options
        functools.update_wrapper(self, func)

    def __call__(self, *args, **kwargs):
        if runtime.current() is not None:
            return self._func(*args, **kwargs)
        return launch.simulate(FRONTEND, self._launched(), args, kwargs).outputs

    def __getitem__(self, lnc):
        if not isinstance(lnc, int) or isinstance(lnc, bool) or lnc < 1:
            raise errors.OperandTypeError(f"kernel[lnc]: the logical-core degree must be a positive integer, got {lnc!r}")
        if lnc > MAX_LNC:
            raise errors.UnsupportedApiError(
                f"kernel[{lnc}]: a logical NeuronCore groups at most {MAX_LNC} physical cores (trn2, trn3); launch "
                f"with kernel[1] or kernel[2]", *errors.kernel_location(1))
        return Kernel(self._func, lnc, **self._options)

    def _launched(self) -> Callable:
        """The kernel function as launched: with its grid of `lnc` programs when lnc > 1."""
        return self._func if self._lnc == 1 else launch.with_grid(self._func, (self._lnc,))


def jit(fn=None, **options):
    """`@nki.jit` / `@nki.jit(...)`."""
    if fn is None:
        return lambda f: Kernel(unwrap(f), **options)
    return Kernel(unwrap(fn), **options)


def unwrap(fn):
    return fn._launched() if isinstance(fn, Kernel) else fn


def simulate(kernel):
    """`nki.simulate(kernel)(*arrays)`: run on the emulator, return NumPy outputs
    (`nki.simulate(kernel[2])` runs the LNC2 launch)."""
    k = kernel if isinstance(kernel, Kernel) else Kernel(kernel)

    def run(*args, **kwargs):
        return launch.simulate(FRONTEND, k._launched(), args, kwargs).outputs
    return functools.wraps(k._func)(run)


class _TensorType:
    """`nki.typing.tensor[...]` annotations."""

    __slots__ = ("_shape",)

    def __init__(self, shape=None):
        self._shape = shape

    def __getitem__(self, item):
        return _TensorType(item)

    def __repr__(self) -> str:
        return "nki.typing.tensor" + (f"[{self._shape}]" if self._shape is not None else "")


def _fallback(module_name: str, lazy: Callable | None):
    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if lazy is not None:
            try:
                return lazy(name)
            except AttributeError:
                pass
        where = errors.kernel_location(1)
        if name in LEGACY:
            raise errors.LegacyConstructError(
                f"'{module_name}.{name}' is legacy NKI (neuronxcc.nki); in the current NKI, {LEGACY[name]}", *where)
        raise errors.UnsupportedApiError(f"'{module_name}.{name}' is not supported by the NKI emulator", *where)
    return __getattr__


def _module(name: str, attrs: dict[str, Any], package: bool = False, lazy: Callable | None = None) -> types.ModuleType:
    return modules.stand_in(name, attrs, _fallback(name, lazy), package,
                            f"NKI emulator stand-in for `{name}` (fitness.simulator, current dialect).")


def build_modules() -> dict[str, types.ModuleType]:
    """Fresh module objects for the `nki` namespace."""
    nl = _module("nki.language", {n: getattr(language, n) for n in language.EXPORTS}, lazy=language.__getattr__)
    nisa = _module("nki.isa", {n: getattr(isa, n) for n in isa.EXPORTS})
    def constant(name: str) -> Any:
        """nki.isa's enum of that name, looked up when asked (nki.isa is built with them)."""
        if name not in ISA_CONSTANTS:
            raise AttributeError(name)
        return getattr(nisa, name)

    constants = _module("nki.isa.constants", {}, lazy=constant)
    nisa.constants = constants
    nt = _module("nki.typing", {"tensor": _TensorType()})
    ncc = _module("nki.collectives", {n: getattr(collectives, n) for n in collectives.EXPORTS})
    nki = _module("nki", {"jit": jit, "simulate": simulate, "language": nl, "isa": nisa, "typing": nt,
                          "collectives": ncc, "dtype": dtype}, package=True)
    return {"nki": nki, "nki.language": nl, "nki.isa": nisa, "nki.typing": nt, "nki.isa.constants": constants,
            "nki.collectives": ncc}


def install_nki() -> None:
    """Make `import nki...` resolve to the emulator in this process (idempotent)."""
    modules.install("nki", build_modules)


def uninstall_nki() -> None:
    """Remove the emulator's `nki` modules from `sys.modules` (tests)."""
    modules.uninstall("nki")


# The current dialect as the core sees it: no loop rules (all loops are Python ranges,
# unrolled, so tiles created in a loop body may be used after it), kernel inputs are writable, tensors have view methods, and Python `range` is an
# unrolled loop.
FRONTEND = runtime.FrontEnd(
    name="current",
    getitem=views.getitem,
    setitem=views.setitem,
    augmented=views.augmented,
    operator=language.operator,
    broadcast_to=language.tensor_broadcast_to,
    install=install_nki,
    unwrap=unwrap,
    is_mutable=lambda annotation: True,
    kernel_globals={"range": language.kernel_range},
    method=views.method,
    loop_rules=False,
)
