"""The emulator's entry point: compile a kernel module's source and run its kernel function
on the core (`core.launch`) with the front-end of the dialect the source imports
(`dialect.detect`: `import neuronxcc.nki` -> legacy, `import nki` -> current; neither ->
legacy).

Kernels that declare more than `core.launch.AUTO_RELEASE_BYTES` of kernel-level tensors are
first traced without data (shape-only, fast) to learn the last access of every on-chip
block; the full-data run then drops each block after that access, so kernels declaring
several GiB of logical buffers run in a few GiB.
"""

from __future__ import annotations

import ast
import builtins
import linecache
from collections.abc import Callable, Sequence
from typing import Any

from . import dialect as D
from .core import launch
from .core.capacity import Capacity
from .core.launch import KernelRun, ShapeDtype, placeholders
from .core.runtime import FrontEnd, if_body
from .current import shim as current_shim
from .legacy import shim as legacy_shim

__all__ = ["KERNEL_MODULE", "KernelRun", "Loader", "ShapeDtype", "capacity", "compile_module", "frontend", "install",
           "load_kernel", "module_namespace", "placeholders", "run_kernel", "simulate"]

FRONTENDS: dict[str, FrontEnd] = {"legacy": legacy_shim.FRONTEND, "current": current_shim.FRONTEND}


def frontend(dialect: D.Dialect) -> FrontEnd:
    """The front-end of `dialect` ("legacy" or "current")."""
    try:
        return FRONTENDS[dialect]
    except KeyError:
        raise ValueError(f"unknown NKI dialect {dialect!r}; expected one of {', '.join(D.DIALECTS)}") from None


def install(dialect: D.Dialect | None = None) -> None:
    """Make the emulator's modules of `dialect` importable (both dialects when None)."""
    for name in (D.DIALECTS if dialect is None else (dialect,)):
        frontend(name).install()


# The module name of a kernel that is a file of its own (a kernel of a package has its dotted name).
KERNEL_MODULE = "__nki_kernel__"
# What loads a kernel module for `load_kernel`: (source, filename, dialect) -> the namespace the
# module was executed in (fitness.sandbox.modules: a kernel with its package and guards).
Loader = Callable[[str, str, D.Dialect], dict]


def compile_module(source: str, filename: str, dialect: D.Dialect,
                   transform: Callable[[ast.Module], ast.Module] | None = None) -> Any:
    """The code object of a kernel module of `dialect`: its if/else bodies scoped as the dialect's
    loop rules require, after `transform` (a further rewrite of its syntax tree); its lines are
    registered for tracebacks."""
    fe = frontend(dialect)
    tree = ast.parse(source, filename)
    if transform is not None:
        tree = transform(tree)
    if fe.loop_rules:
        tree = _IfBodies().visit(tree)
    code = compile(tree, filename, "exec", dont_inherit=True)   # not this module's __future__ flags
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return code


def module_namespace(dialect: D.Dialect, name: str = KERNEL_MODULE, filename: str = "kernel.py",
                     builtins_: Any = builtins, namespace: dict | None = None) -> dict:
    """The globals a kernel module of `dialect` runs in (`namespace`, filled in, or a new dict):
    its name and file, `builtins_`, and the names the dialect's kernels see instead of the builtin
    ones (Python `range` as the dialect's loop)."""
    fe = frontend(dialect)
    out = {} if namespace is None else namespace
    out.update({"__name__": name, "__file__": filename, "__builtins__": builtins_, **fe.kernel_globals,
                IF_BODY_NAME: if_body})
    if "." in name:
        out["__package__"] = name.rpartition(".")[0]
    return out


def load_kernel(source: str, filename: str = "kernel.py", kernel_name: str = "kernel",
                dialect: D.Dialect | None = None, loader: Loader | None = None) -> Callable:
    """Compile a kernel module from source and return its kernel function. `dialect`: the
    source's NKI dialect (detected from its imports when None). Python `range` inside the
    module becomes the dialect's loop while a kernel runs. `loader`: what executes the module
    (its imports and guards; default: plain execution)."""
    dialect = dialect or D.detect(source)
    fe = frontend(dialect)
    fe.install()
    if loader is None:
        namespace = module_namespace(dialect, filename=filename)
        exec(compile_module(source, filename, dialect), namespace)
    else:
        namespace = loader(source, filename, dialect)
    obj = namespace.get(kernel_name)
    if obj is None:
        raise NameError(f"{filename} defines no kernel function named '{kernel_name}'")
    obj = fe.unwrap(obj)
    if not callable(obj):
        raise TypeError(f"'{kernel_name}' in {filename} is not a function")
    return obj


IF_BODY_NAME = "__nki_if_body__"


class _IfBodies(ast.NodeTransformer):
    """Wraps every if/else body of the module in `with __nki_if_body__():`, so that a tensor
    created in one is refused after it, as neuronx-cc refuses it (its scope rule for control
    blocks); line numbers stay those of the source."""

    def visit_If(self, node: ast.If) -> ast.If:
        self.generic_visit(node)
        node.body = [self._scoped(node.body)]
        if node.orelse:
            node.orelse = [self._scoped(node.orelse)]
        return node

    @staticmethod
    def _scoped(body: list[ast.stmt]) -> ast.With:
        call = ast.Call(func=ast.Name(IF_BODY_NAME, ast.Load()), args=[], keywords=[])
        return ast.fix_missing_locations(ast.copy_location(ast.With(items=[ast.withitem(call)], body=body), body[0]))


_CAPACITIES: dict[tuple[str, bool], Capacity] = {}


def capacity(target: str | None, spills: bool = True) -> Capacity:
    """The SBUF/PSUM capacity of `target` ("trn1", "trn2", "trn3"; None: trn1) from its
    hardware description (`perf.hardware`), as the core checks kernels against it. `spills`:
    tiles live at once beyond it are spilled, as the compiler does (False: refused)."""
    key = (target or "trn1", spills)
    cap = _CAPACITIES.get(key)
    if cap is None:
        from .perf.hardware import hardware
        hw = hardware(key[0])
        cap = _CAPACITIES[key] = Capacity(
            target=hw.name, partitions=hw.partitions, sbuf_partition_bytes=hw.sbuf_bytes_per_partition,
            sbuf_usable_bytes=hw.sbuf_usable_bytes_per_partition, psum_bank_bytes=hw.psum_bank_bytes,
            psum_banks=hw.psum_banks, spills=spills)
    return cap


def run_kernel(source: str, args: Sequence, *, filename: str = "kernel.py", kernel_name: str = "kernel",
               shape_only: bool = False, kwargs: dict | None = None, dialect: D.Dialect | None = None,
               loader: Loader | None = None, target: str | None = None, spills: bool = True) -> KernelRun:
    """Compile `source`, call `kernel_name` on `args` (NumPy arrays become HBM inputs; in
    shape-only mode ShapeDtype placeholders work too) and return outputs and trace. `loader`:
    see `load_kernel`. `target`: the chip whose SBUF/PSUM capacity the kernel must fit
    (None: trn1); `spills`: see `capacity`."""
    dialect = dialect or D.detect(source)
    fn = load_kernel(source, filename, kernel_name, dialect, loader)
    key = (source, filename, kernel_name, launch.signature(args), launch.signature(sorted((kwargs or {}).items())))
    return launch.simulate(frontend(dialect), fn, args, kwargs, shape_only=shape_only, plan_key=key,
                           capacity=capacity(target, spills))


def simulate(fn: Callable, args: Sequence, kwargs: dict | None = None, *, shape_only: bool = False,
             release: bool | None = None, plan_key=None, dialect: D.Dialect = "legacy",
             target: str | None = None, spills: bool = True) -> KernelRun:
    """Execute kernel function `fn` of `dialect` on the emulator (see `core.launch.simulate`),
    checked against `target`'s SBUF/PSUM capacity (None: trn1; `spills`: see `capacity`)."""
    return launch.simulate(frontend(dialect), fn, args, kwargs, shape_only=shape_only, release=release,
                           plan_key=plan_key, capacity=capacity(target, spills))
