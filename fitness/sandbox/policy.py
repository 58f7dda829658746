"""Static policy check of a kernel's source (AST), before anything of it runs.

A kernel computes through NKI calls; it needs numpy (dtypes and NumPy operators passed to NKI),
math and the NKI modules of its dialect (`neuronxcc.nki` legacy, `nki` current; its imports
decide, see fitness.simulator.dialect), nothing else. A source importing both dialects is
refused. Everything that could reach the host
(files, processes, sockets, the interpreter's internals) is refused here, so that a refused
source gets the status `rejected` with the offending line. This is the first of several
layers: the sandboxed worker (limits, scrubbed environment, audit hook) still assumes the
kernel is hostile.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from fitness.simulator.dialect import Dialect, DialectError, detect_tree, imports

MAX_SOURCE_CHARS = 200_000

# Modules a kernel may import; `numpy` and `math` by name, the NKI namespaces of each dialect
# as packages (one dialect per source: importing both is refused before anything else).
DIALECT_MODULES: dict[Dialect, frozenset[str]] = {
    "legacy": frozenset({"neuronxcc", "neuronxcc.nki", "neuronxcc.nki.language", "neuronxcc.nki.isa",
                         "neuronxcc.nki.typing", "neuronxcc.nki.compiler"}),
    "current": frozenset({"nki", "nki.language", "nki.isa", "nki.typing", "nki.compiler"}),
}
NKI_MODULES = DIALECT_MODULES["legacy"] | DIALECT_MODULES["current"]
ALLOWED_MODULES = NKI_MODULES | {"numpy", "math"}

# Names and attribute names that are the usual ways out of a sandbox (modules a kernel could
# reach through another object, e.g. `nl.np` or `x.os`).
ESCAPE_NAMES = frozenset({
    "os", "sys", "subprocess", "socket", "ctypes", "gc", "inspect", "importlib", "builtins",
    "pickle", "marshal", "types", "io", "pathlib", "shutil", "posix", "numpy", "np", "ml_dtypes",
})

# Builtins that read files, run code, or look objects up by a string name; and those whose value
# depends on the process (`id` is an address, `hash` of a string is salted per process, `repr`,
# `ascii` and `format` of most objects spell out an address): a kernel branching on them traces
# one instruction stream here and another there.
FORBIDDEN_NAMES = frozenset({
    "id", "hash", "repr", "ascii", "format",
    "open", "exec", "eval", "compile", "__import__", "getattr", "setattr", "delattr", "hasattr",
    "globals", "locals", "vars", "dir", "breakpoint", "input", "help", "exit", "quit",
    "memoryview", "type", "object", "super", "classmethod", "staticmethod", "property",
    "__build_class__", "__builtins__", "__loader__", "__spec__", "copyright", "credits", "license",
})

# Attribute names that lead from ordinary objects to frames, code, globals, files or raw memory.
FORBIDDEN_ATTRIBUTES = frozenset({
    "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await", "ag_frame",
    "ag_code", "ag_await", "f_globals", "f_locals", "f_builtins", "f_back", "f_code", "f_trace",
    "tb_frame", "tb_next", "func_globals", "func_code", "mro", "tofile", "dump", "dumps",
    "ctypes", "format", "format_map", "with_traceback",
}) | ESCAPE_NAMES

# numpy attributes a kernel may use: dtypes, constants, ufuncs passed as NKI operators and
# small constant constructors (np.identity). No file I/O (load, save, fromfile, memmap),
# no ctypeslib, lib, testing or random.
NUMPY_ATTRIBUTES = frozenset({
    "float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64", "uint8",
    "uint16", "uint32", "uint64", "bool_", "intp", "uintp", "int_", "double", "single", "half",
    "dtype", "finfo", "iinfo", "generic", "number", "floating", "integer",
    "pi", "e", "inf", "nan", "newaxis", "euler_gamma",
    "add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "power", "maximum",
    "minimum", "fmax", "fmin", "max", "min", "amax", "amin", "sum", "prod", "mean", "var", "std",
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "cbrt", "square",
    "reciprocal", "abs", "absolute", "negative", "positive", "sign", "tanh", "sinh", "cosh",
    "sin", "cos", "tan", "arctan", "arcsin", "arccos", "arctan2", "floor", "ceil", "round",
    "rint", "trunc", "clip", "where", "logical_and", "logical_or", "logical_not", "logical_xor",
    "bitwise_and", "bitwise_or", "bitwise_xor", "invert", "left_shift", "right_shift", "equal",
    "not_equal", "less", "less_equal", "greater", "greater_equal", "mod", "remainder", "fmod",
    "cumsum", "cumprod", "argmax", "argmin", "all", "any", "isnan", "isinf", "isfinite",
    "array", "asarray", "zeros", "ones", "full", "empty", "zeros_like", "ones_like", "full_like",
    "empty_like", "arange", "linspace", "identity", "eye", "tri", "triu", "tril", "concatenate",
    "stack", "reshape", "transpose", "broadcast_to", "expand_dims", "squeeze", "matmul", "dot",
    "outer", "einsum", "shape", "size", "ndim",
})

# Attributes of the NKI modules that are namespaces themselves (nki.language.exp,
# nl.tile_size.pmax); any other attribute of an NKI module must end the chain.
NKI_NAMESPACES = frozenset({"nki", "language", "isa", "typing", "compiler", "tile_size"})


# The conventional aliases count as modules even without an import (the emulator may provide
# them), so that their attribute rules still apply; the NKI ones name the source's dialect.
NKI_PACKAGE: dict[Dialect, str] = {"legacy": "neuronxcc.nki", "current": "nki"}
DEFAULT_ALIASES: dict[Dialect, dict[str, str]] = {
    dialect: {"np": "numpy", "math": "math", "nki": package, "nl": f"{package}.language",
              "nisa": f"{package}.isa", "nt": f"{package}.typing"}
    for dialect, package in NKI_PACKAGE.items()
}


@dataclass(frozen=True)
class Violation:
    line: int
    what: str            # why the construct is refused
    code: str = ""       # the offending source line, stripped

    def __str__(self) -> str:
        where = f"line {self.line}: {self.code}" if self.code else f"line {self.line}"
        return f"{where} -- {self.what}"


@dataclass(frozen=True)
class Review:
    """The policy's verdict on one source: its NKI dialect (None when it imports both, or was
    not read) and every violation, in line order; no violations = accepted."""

    dialect: Dialect | None
    violations: list[Violation] = field(default_factory=list)


def check(source: str) -> list[Violation]:
    """Every policy violation of `source`, in line order; [] = accepted (see `review`)."""
    return review(source).violations


def review(source: str, default: Dialect = "legacy") -> Review:
    """The source's dialect (`default` when it imports no NKI module) and its violations. A
    source importing both dialects has that one violation.

    Raises SyntaxError (with its line) when the source does not parse: that is a
    compile error, not a policy matter.
    """
    if len(source) > MAX_SOURCE_CHARS:
        return Review(None, [Violation(1, f"the source has {len(source)} characters (at most {MAX_SOURCE_CHARS})")])
    try:
        tree = ast.parse(source, filename="kernel.py")
    except (RecursionError, MemoryError):
        return Review(None, [Violation(1, "the source is nested too deeply to be checked")])
    except ValueError as exc:  # e.g. null bytes
        raise SyntaxError(str(exc)) from None
    lines = source.splitlines()

    def violation(line: int, what: str) -> Violation:
        code = lines[line - 1].strip() if 0 < line <= len(lines) else ""
        return Violation(line, what, code[:160])

    try:
        dialect = detect_tree(tree, default)
    except DialectError as exc:
        return Review(None, [violation(max(imports(tree).values()), str(exc))])
    checker = _Checker(_module_aliases(tree, dialect), dialect)
    try:
        checker.visit(tree)
    except RecursionError:
        return Review(dialect, [Violation(1, "the source is nested too deeply to be checked")])
    # In source order: for `a.__class__.__base__` the innermost (leftmost) access comes first.
    return Review(dialect, [violation(line, what) for line, _, what in sorted(set(checker.found))])


def _module_aliases(tree: ast.AST, dialect: Dialect) -> dict[str, str]:
    """Local name -> allowed module it is bound to, from every import of the source."""
    aliases = dict(DEFAULT_ALIASES[dialect])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in ALLOWED_MODULES:
                    top = a.name.split(".")[0]
                    aliases[a.asname or top] = a.name if a.asname else top
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module in ALLOWED_MODULES:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if full in ALLOWED_MODULES:
                    aliases[a.asname or a.name] = full
    return aliases


class _Checker(ast.NodeVisitor):
    def __init__(self, modules: dict[str, str], dialect: Dialect) -> None:
        self.found: list[tuple[int, int, str]] = []   # (line, end column, what)
        self.modules = modules                  # local name -> module it is bound to
        self.dialect = dialect
        self._attribute_bases: set[int] = set()

    def refuse(self, node: ast.AST, what: str) -> None:
        self.found.append((getattr(node, "lineno", 1), getattr(node, "end_col_offset", 0) or 0, what))

    # -- imports -------------------------------------------------------------------------
    def _check_module(self, node: ast.AST, module: str) -> bool:
        if module in ALLOWED_MODULES:
            return True
        top = module.split(".")[0]
        hint = f"no {top}: " if top in ESCAPE_NAMES else ""
        self.refuse(node, f"import of module '{module}' is not allowed ({hint}a kernel may import only numpy, "
                          f"math and the {NKI_PACKAGE[self.dialect]} modules)")
        return False

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.refuse(node, "relative imports are not allowed in a kernel")
            return
        module = node.module or ""
        if not self._check_module(node, module):
            return
        for alias in node.names:
            name = alias.name
            if name == "*":
                self.refuse(node, f"'from {module} import *' is not allowed (import the names you use)")
            elif name.startswith("_"):
                self.refuse(node, f"importing the private name '{name}' is not allowed")
            elif name in FORBIDDEN_ATTRIBUTES:
                self.refuse(node, f"importing '{name}' from {module} is not allowed")
            elif module == "numpy" and name not in NUMPY_ATTRIBUTES:
                self.refuse(node, f"numpy.{name} is not available to kernels")

    # -- names and attributes ------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        name = node.id
        if name in FORBIDDEN_NAMES:
            self.refuse(node, f"'{name}' is not allowed in a kernel")
        elif name.startswith("__") and name.endswith("__"):
            self.refuse(node, f"the special name '{name}' is not allowed in a kernel")
        elif name in self.modules:
            if isinstance(node.ctx, ast.Load) and id(node) not in self._attribute_bases:
                self.refuse(node, f"the module '{name}' may only be used as {name}.NAME")
        elif name in ESCAPE_NAMES and isinstance(node.ctx, ast.Load):
            self.refuse(node, f"the name '{name}' is not allowed in a kernel")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr = node.attr
        if attr.startswith("_"):
            kind = "special" if attr.startswith("__") and attr.endswith("__") else "private"
            self.refuse(node, f"access to the {kind} attribute '{attr}' is not allowed")
        elif attr in FORBIDDEN_ATTRIBUTES:
            self.refuse(node, f"the attribute '{attr}' is not allowed in a kernel")
        if not isinstance(node.ctx, ast.Load):
            self.refuse(node, f"assigning or deleting the attribute '{attr}' is not allowed in a kernel")
        base = node.value
        if isinstance(base, ast.Name):
            self._attribute_bases.add(id(base))
            if self.modules.get(base.id) == "numpy" and attr not in NUMPY_ATTRIBUTES:
                self.refuse(node, f"{base.id}.{attr} (numpy.{attr}) is not available to kernels")
        elif isinstance(base, ast.Attribute):
            # In a chain rooted at an NKI module every link but the last is a namespace.
            root, chain = _dotted_root(base)
            if root is not None and self.modules.get(root) in NKI_MODULES and chain[-1] not in NKI_NAMESPACES:
                self.refuse(node, f"'{root}.{'.'.join(chain)}.{attr}' reaches into '{chain[-1]}', which is not "
                                  "an NKI namespace")
        self.generic_visit(node)

    # -- statements ----------------------------------------------------------------------
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.refuse(node, "class definitions are not allowed in a kernel")
        self.generic_visit(node)

    def visit_Try(self, node: ast.AST) -> None:
        self.refuse(node, "try/except is not allowed in a kernel (errors of the NKI rules must surface)")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_Match(self, node: ast.Match) -> None:
        # Class patterns read attributes by name (`case C(__class__=c)`), out of the checker's sight.
        self.refuse(node, "match statements are not allowed in a kernel")
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if node.name.startswith("__"):
            self.refuse(node, f"the special function name '{node.name}' is not allowed")
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef


def _dotted_root(node: ast.AST) -> tuple[str | None, list[str]]:
    """(root name, attribute chain) of `a.b.c` -> ("a", ["b", "c"]); root None otherwise."""
    chain: list[str] = []
    while isinstance(node, ast.Attribute):
        chain.append(node.attr)
        node = node.value
    chain.reverse()
    return (node.id if isinstance(node, ast.Name) else None), chain


def syntax_error_message(exc: SyntaxError) -> str:
    """The one-line compile error of a source that does not parse."""
    return f"kernel.py:{exc.lineno or 0}: SyntaxError: {exc.msg}"
