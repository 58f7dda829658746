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
from .core.launch import KernelRun, ShapeDtype, placeholders
from .core.runtime import FrontEnd, if_body
from .current import shim as current_shim
from .legacy import shim as legacy_shim

__all__ = ["KernelRun", "ShapeDtype", "frontend", "install", "load_kernel", "placeholders", "run_kernel", "simulate"]

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


def load_kernel(source: str, filename: str = "kernel.py", kernel_name: str = "kernel",
                dialect: D.Dialect | None = None) -> Callable:
    """Compile a kernel module from source and return its kernel function. `dialect`: the
    source's NKI dialect (detected from its imports when None). Python `range` inside the
    module becomes the dialect's loop while a kernel runs."""
    fe = frontend(dialect or D.detect(source))
    fe.install()
    tree = ast.parse(source, filename)
    if fe.loop_rules:
        tree = _IfBodies().visit(tree)
    code = compile(tree, filename, "exec", dont_inherit=True)   # not this module's __future__ flags
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": "__nki_kernel__", "__file__": filename,
                                 "__builtins__": builtins, **fe.kernel_globals, IF_BODY_NAME: if_body}
    exec(code, namespace)
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


def run_kernel(source: str, args: Sequence, *, filename: str = "kernel.py", kernel_name: str = "kernel",
               shape_only: bool = False, kwargs: dict | None = None, dialect: D.Dialect | None = None) -> KernelRun:
    """Compile `source`, call `kernel_name` on `args` (NumPy arrays become HBM inputs; in
    shape-only mode ShapeDtype placeholders work too) and return outputs and trace."""
    dialect = dialect or D.detect(source)
    fn = load_kernel(source, filename, kernel_name, dialect)
    key = (source, filename, kernel_name, launch.signature(args), launch.signature(sorted((kwargs or {}).items())))
    return launch.simulate(frontend(dialect), fn, args, kwargs, shape_only=shape_only, plan_key=key)


def simulate(fn: Callable, args: Sequence, kwargs: dict | None = None, *, shape_only: bool = False,
             release: bool | None = None, plan_key=None, dialect: D.Dialect = "legacy") -> KernelRun:
    """Execute kernel function `fn` of `dialect` on the emulator (see `core.launch.simulate`)."""
    return launch.simulate(frontend(dialect), fn, args, kwargs, shape_only=shape_only, release=release,
                           plan_key=plan_key)
