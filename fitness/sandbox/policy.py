"""Static policy check of a kernel's source (AST), before anything of it runs.

A kernel computes through NKI calls; it needs numpy (dtypes and NumPy operators passed to NKI),
a few standard modules real kernels use (math, typing, enum, dataclasses, functools, each to an
allow-list of names), the NKI modules of its dialect (`neuronxcc.nki` legacy, `nki` current; its
imports decide, see fitness.simulator.dialect) and, for a module of a package, the modules of
its own package and of the kernel libraries the evaluation names (`package`, `libraries`),
nothing else. A source importing both dialects is refused. Everything that could reach the host
(files, processes, sockets, the interpreter's internals) is refused here, so that a refused
source gets the status `rejected` with the offending line. This is the first of several
layers: the sandboxed worker (limits, scrubbed environment, audit hook) still assumes the
kernel is hostile.

`os` and `sys` are host-free stand-ins (HOST_STAND_INS: an empty read-only environment, os.path's
string functions, discarding streams), for the logging helpers kernel libraries carry. `object`
and `type` may name an annotation (a parameter's, a return's, `x: object`), never a value. A
kernel library's idioms are accepted: `__all__ = [...]`, a class body's `__name__`, `try: ...
except KeyError:`, a current-dialect source taking annotation types from `neuronxcc.nki.typing`.

Classes are allowed (plain, dataclasses, enums, `nl.NKIObject` subclasses), without class
keywords (`metaclass=`) and with only the special methods of KERNEL_DUNDER_METHODS. Reading a
private attribute (`x._offset`) and assigning an attribute (`self.offset = 0`) are allowed where
the kernel process checks them at run time (`guarded`, the simulator: fitness.sandbox.modules
lets them through only on the kernel's own objects); elsewhere only on a method's `self` or
`cls`. Special attributes (`__class__`, `__globals__`) are refused everywhere.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Collection
from dataclasses import dataclass, field

from fitness.simulator.dialect import Dialect, DialectError, detect_tree, imports

MAX_SOURCE_CHARS = 200_000

# Modules a kernel may import; `numpy` and the standard modules by name, the NKI namespaces of
# each dialect as packages (one dialect per source: importing both is refused before anything else).
DIALECT_MODULES: dict[Dialect, frozenset[str]] = {
    "legacy": frozenset({"neuronxcc", "neuronxcc.nki", "neuronxcc.nki.language", "neuronxcc.nki.isa",
                         "neuronxcc.nki.typing", "neuronxcc.nki.compiler"}),
    "current": frozenset({"nki", "nki.language", "nki.isa", "nki.typing", "nki.compiler", "nki.isa.constants",
                          "nki.collectives"}),
}
NKI_MODULES = DIALECT_MODULES["legacy"] | DIALECT_MODULES["current"]

# The standard modules a kernel may import and the names of each it may use (None: all of them,
# math's functions and constants). Left out on purpose: what evaluates strings as code
# (typing.get_type_hints, ForwardRef), defines attributes by name (dataclasses.make_dataclass)
# or copies objects it is handed (dataclasses.asdict, astuple, replace: deep copies of emulator
# tensors), and dataclasses.fields (it hands out the annotations of a class, objects the policy
# lets a signature name only: `x: Optional[type]`).
STDLIB_MODULES: dict[str, frozenset[str] | None] = {
    "math": None,
    "typing": frozenset({
        "Any", "Optional", "Union", "List", "Tuple", "Dict", "Set", "FrozenSet", "Sequence", "Mapping",
        "MutableMapping", "MutableSequence", "Iterable", "Iterator", "Generator", "Callable", "Type", "TypeVar",
        "Generic", "Literal", "Final", "ClassVar", "Protocol", "NamedTuple", "TYPE_CHECKING", "cast", "overload",
        "TypeAlias", "Annotated", "NoReturn", "Never", "Self", "Hashable", "Sized", "Collection", "Container",
        "ParamSpec", "Concatenate",
    }),
    "enum": frozenset({"Enum", "IntEnum", "Flag", "IntFlag", "StrEnum", "auto", "unique"}),
    "dataclasses": frozenset({"dataclass", "field", "is_dataclass", "InitVar", "KW_ONLY", "MISSING",
                              "FrozenInstanceError"}),
    "functools": frozenset({"partial", "reduce", "wraps", "lru_cache", "cache", "cached_property",
                            "total_ordering"}),
}
# `os` and `sys` as host-free stand-ins (fitness.sandbox.modules), for the logging helpers of
# kernel libraries: an empty, read-only `os.environ` (a kernel sees no environment), `os.getenv`,
# the pure string functions of `os.path`, and `sys`'s output streams (writes discarded) and
# version constants. Every other name of them (os.system, os.fdopen, sys.modules, ...) is refused.
HOST_STAND_INS: dict[str, frozenset[str]] = {
    "os": frozenset({"environ", "getenv", "path"}),
    "os.path": frozenset({"join", "basename", "dirname", "splitext"}),
    "sys": frozenset({"stderr", "stdout", "version_info", "maxsize"}),
}
STDLIB_MODULES.update(HOST_STAND_INS)
# What a kernel may read of a stand-in's values (`os.environ.get`, `sys.stderr.write`): read-only
# mapping methods, a stream's write and flush, version_info's fields.
STAND_IN_ATTRIBUTES: dict[str, frozenset[str]] = {
    "os.environ": frozenset({"get", "items", "keys", "values"}),
    "sys.stderr": frozenset({"write", "flush"}),
    "sys.stdout": frozenset({"write", "flush"}),
    "sys.version_info": frozenset({"major", "minor", "micro"}),
}
ALLOWED_MODULES = NKI_MODULES | {"numpy"} | set(STDLIB_MODULES)
# `from __future__ import annotations` (annotations kept as text, never evaluated) is allowed.
FUTURE_FEATURES = frozenset({"annotations"})

# Names and attribute names that are the usual ways out of a sandbox (modules a kernel could
# reach through another object, e.g. `nl.np` or `x.os`; `os` and `sys` only as the stand-ins a
# kernel imports itself).
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
    "memoryview", "type", "object", "super",
    "__build_class__", "__builtins__", "__loader__", "__spec__", "copyright", "credits", "license",
})

# Attribute names that lead from ordinary objects to frames, code, globals, files or raw memory.
FORBIDDEN_ATTRIBUTES = frozenset({
    "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await", "ag_frame",
    "ag_code", "ag_await", "f_globals", "f_locals", "f_builtins", "f_back", "f_code", "f_trace",
    "tb_frame", "tb_next", "func_globals", "func_code", "mro", "tofile", "dump", "dumps",
    "ctypes", "format", "format_map", "with_traceback",
}) | ESCAPE_NAMES

# The special methods a kernel's class may define: construction, the container and comparison
# protocols and calls. Not: `__exit__` (returning True swallows an exception, as the `try` the
# policy refuses would), the attribute hooks (__getattribute__, __getattr__,
# __setattr__), the class-creation hooks (__init_subclass__, __set_name__, __class_getitem__),
# NumPy's protocols (__array_ufunc__, __array_function__: NumPy would hand a kernel object the
# emulator's raw arrays), arithmetic, __del__, __reduce__ and the like.
KERNEL_DUNDER_METHODS = frozenset({
    "__init__", "__post_init__", "__call__", "__repr__", "__str__", "__len__", "__iter__", "__next__",
    "__getitem__", "__setitem__", "__contains__", "__hash__", "__eq__", "__ne__", "__lt__", "__le__",
    "__gt__", "__ge__", "__bool__",
})

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
MODULE_ATTRIBUTES: dict[str, frozenset[str] | None] = {"numpy": NUMPY_ATTRIBUTES, **STDLIB_MODULES}

# Attributes of the NKI modules that are namespaces themselves (nki.language.exp,
# nl.tile_size.pmax, nisa.engine.vector, nki.compiler.sbuf.mod_alloc); any other attribute of an
# NKI module must end the chain.
NKI_NAMESPACES = frozenset({
    "nki", "language", "isa", "typing", "compiler", "tile_size", "constants", "collectives", "sbuf", "psum",
    "engine", "dge_mode", "oob_mode", "nc_version", "matmul_perf_mode", "reduce_cmd", "dma_engine",
})

# Top-level names a kernel library or package may not have: the modules a kernel may import,
# the standard library's and this project's (a package shadowing one of them is refused).
RESERVED_PACKAGES = (frozenset({m.split(".")[0] for m in ALLOWED_MODULES}) | frozenset(sys.stdlib_module_names)
                     | {"fitness", "nkibench", "accelopt_evo", "operators", "ml_dtypes", "torch", "__nki_kernel__"})


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
    not read) and every violation, in line order; no violations = accepted. `kernel_imports`:
    the modules of its package and of kernel libraries it imports (absolute names)."""

    dialect: Dialect | None
    violations: list[Violation] = field(default_factory=list)
    kernel_imports: tuple[str, ...] = ()


def check(source: str, **context) -> list[Violation]:
    """Every policy violation of `source`, in line order; [] = accepted (see `review`)."""
    return review(source, **context).violations


def review(source: str, default: Dialect = "legacy", *, package: str = "", libraries: Collection[str] = (),
           guarded: bool = True) -> Review:
    """The source's dialect (`default` when it imports no NKI module) and its violations. A
    source importing both dialects has that one violation.

    `package`: the dotted package the source is a module of ("" = none: no relative imports);
    `libraries`: top-level names of packages it may import absolutely (its own package's and
    those of `evaluation.kernel_paths`); `guarded`: the kernel process checks private attribute
    reads and attribute assignments at run time (the simulator), else they are allowed on a
    method's `self` or `cls` only.

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
        if not _legacy_typing_only(tree):
            return Review(None, [violation(max(imports(tree).values()), str(exc))])
        dialect = "current"
    checker = _Checker(_module_aliases(tree, dialect), dialect, package, frozenset(libraries), guarded)
    try:
        checker.visit(tree)
    except RecursionError:
        return Review(dialect, [Violation(1, "the source is nested too deeply to be checked")])
    # In source order: for `a.__class__.__base__` the innermost (leftmost) access comes first.
    return Review(dialect, [violation(line, what) for line, _, what in sorted(set(checker.found))],
                  tuple(sorted(set(checker.kernel_imports))))


def _legacy_typing_only(tree: ast.AST) -> bool:
    """A current-dialect source whose only legacy import is `import neuronxcc.nki.typing as nt`
    (for `nt.mutable_tensor` annotations, as the NKI Library's router_topk writes): annotation
    types, no instruction of the legacy dialect, so the source stays a current-dialect one."""
    legacy = [node for node in ast.walk(tree)
              if (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "neuronxcc" for a in node.names))
              or (isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0]
                  == "neuronxcc")]
    return bool(legacy) and all(isinstance(n, ast.Import) and all(a.name == "neuronxcc.nki.typing" and a.asname
                                                                  for a in n.names) for n in legacy)


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


def resolve_relative(package: str, level: int, module: str | None) -> str | None:
    """The absolute name of `from <level dots><module> import ...` in a module of `package`;
    None when it climbs out of the top-level package (or the module is in none)."""
    parts = package.split(".") if package else []
    if level - 1 >= len(parts):
        return None
    base = parts[: len(parts) - (level - 1)]
    return ".".join(base + ([module] if module else []))


class _Scope:
    """What the checker knows of the function it is in: the names that are a method's `self`
    or `cls` there (unguarded sources may use private attributes and assign attributes on them),
    and the names bound in it or an enclosing function (local variables, never the builtins:
    a parameter named `input` or `format` is the kernel's own)."""

    def __init__(self, own: frozenset[str], local: frozenset[str] = frozenset()) -> None:
        self.own = own
        self.local = local


def _bound_names(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """The names a function or lambda binds in its own scope: parameters, assignments, loop and
    `with` targets, imports, nested definitions' names, walruses; not what its nested functions,
    classes and comprehensions bind in theirs, nor names it declares `global` (the module's,
    which fall back to the builtin of that name until assigned)."""
    a = node.args
    out = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs + [v for v in (a.vararg, a.kwarg) if v]}
    declared_global: set[str] = set()
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
    comprehensions = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)

    def walk(n: ast.AST) -> None:
        for child in ast.iter_child_nodes(n):
            if isinstance(child, scopes):
                if not isinstance(child, ast.Lambda):
                    out.add(child.name)
                continue
            if isinstance(child, comprehensions):
                out.update(w.target.id for w in ast.walk(child)
                           if isinstance(w, ast.NamedExpr) and isinstance(w.target, ast.Name))
                continue
            if isinstance(child, ast.Name) and not isinstance(child.ctx, ast.Load):
                out.add(child.id)
            elif isinstance(child, (ast.Import, ast.ImportFrom)):
                out.update((x.asname or x.name).split(".")[0] for x in child.names)
            elif isinstance(child, ast.ExceptHandler) and child.name:
                out.add(child.name)
            elif isinstance(child, ast.Global):
                declared_global.update(child.names)
            walk(child)

    for stmt in (node.body if isinstance(node.body, list) else [node.body]):
        if isinstance(stmt, scopes):
            if not isinstance(stmt, ast.Lambda):
                out.add(stmt.name)
            continue
        walk(ast.Module(body=[stmt], type_ignores=[]) if isinstance(stmt, ast.stmt) else ast.Expr(stmt))
    return out - declared_global


class _Checker(ast.NodeVisitor):
    def __init__(self, modules: dict[str, str], dialect: Dialect, package: str = "",
                 libraries: frozenset[str] = frozenset(), guarded: bool = True) -> None:
        self.found: list[tuple[int, int, str]] = []   # (line, end column, what)
        self.modules = modules                  # local name -> module it is bound to
        self.dialect = dialect
        self.package = package
        self.libraries = libraries | ({package.split(".")[0]} if package else set())
        self.guarded = guarded
        self.kernel_imports: list[str] = []
        self._attribute_bases: set[int] = set()
        self._scopes: list[_Scope] = [_Scope(frozenset())]
        self._in_class: list[bool] = [False]    # whether the node being visited is a class body's
        self._annotation = False                # visiting an annotation (parameter, return, `x: T`)

    def refuse(self, node: ast.AST, what: str) -> None:
        self.found.append((getattr(node, "lineno", 1), getattr(node, "end_col_offset", 0) or 0, what))

    # -- imports -------------------------------------------------------------------------
    def _modules_named(self) -> str:
        items = ["numpy", *(m for m in STDLIB_MODULES if m not in HOST_STAND_INS), "os and sys (host-free stand-ins)",
                 f"the {NKI_PACKAGE[self.dialect]} modules"]
        if self.libraries:
            items.append(f"the modules of {', '.join(sorted(self.libraries))}")
        return f"{', '.join(items[:-1])} and {items[-1]}"

    def _check_module(self, node: ast.AST, module: str) -> str:
        """"allowed", "library" (a module of the kernel's package or of a kernel library), or
        "" once refused."""
        if module in ALLOWED_MODULES:
            return "allowed"
        top = module.split(".")[0]
        if top in self.libraries and top not in RESERVED_PACKAGES:
            self.kernel_imports.append(module)
            return "library"
        hint = f"no {top}: " if top in ESCAPE_NAMES else ""
        self.refuse(node, f"import of module '{module}' is not allowed ({hint}a kernel may import only "
                          f"{self._modules_named()})")
        return ""

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module == "__future__" and not node.level:
            for alias in node.names:
                if alias.name not in FUTURE_FEATURES:
                    self.refuse(node, f"'from __future__ import {alias.name}' is not allowed (only annotations)")
            return
        if node.level:
            if not self.package:
                self.refuse(node, "relative imports are allowed only in a module of a package (a folder with "
                                  "__init__.py); this kernel is not one")
                return
            module = resolve_relative(self.package, node.level, node.module)
            if module is None:
                self.refuse(node, f"the relative import climbs out of the package '{self.package.split('.')[0]}'")
                return
            self.kernel_imports.append(module)
            kind = "library"
        else:
            module = node.module or ""
            kind = self._check_module(node, module)
            if not kind:
                return
        for alias in node.names:
            name = alias.name
            if name == "*":
                self.refuse(node, f"'from {module} import *' is not allowed (import the names you use)")
            elif name.startswith("__"):
                self.refuse(node, f"importing the special name '{name}' is not allowed")
            elif kind == "library":
                continue   # a module of the package or a name of one: the kernel's own
            elif name.startswith("_"):
                self.refuse(node, f"importing the private name '{name}' is not allowed")
            elif name in FORBIDDEN_ATTRIBUTES:
                self.refuse(node, f"importing '{name}' from {module} is not allowed")
            elif MODULE_ATTRIBUTES.get(module) is not None and name not in MODULE_ATTRIBUTES[module]:
                self.refuse(node, f"{module}.{name} is not available to kernels")

    # -- names and attributes ------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        name = node.id
        special = name.startswith("__") and name.endswith("__")
        if name in self._scopes[-1].local and not special and name not in self.modules:
            return   # a function's local variable: a builtin or module of that name is out of its reach
        field = self._in_class[-1] and isinstance(node.ctx, ast.Store) and not special   # `input: nl.ndarray`
        if name in FORBIDDEN_NAMES and not (self._annotation and self.guarded and not special) and not field:
            self.refuse(node, f"'{name}' is not allowed in a kernel")
        elif special and not self._declaration(node):
            self.refuse(node, f"the special name '{name}' is not allowed in a kernel")
        elif name in self.modules:
            if isinstance(node.ctx, ast.Load) and id(node) not in self._attribute_bases:
                self.refuse(node, f"the module '{name}' may only be used as {name}.NAME")
        elif name in ESCAPE_NAMES and isinstance(node.ctx, ast.Load):
            self.refuse(node, f"the name '{name}' is not allowed in a kernel")

    def _declaration(self, node: ast.Name) -> bool:
        """A special name a module or class only declares: `__all__ = [...]` at module level,
        `__name__` / `__doc__` in a class body (attributes of its instances); assigned, never read."""
        if not isinstance(node.ctx, ast.Store):
            return False
        if self._in_class[-1]:
            return node.id in ("__name__", "__doc__")
        return node.id == "__all__" and len(self._scopes) == 1

    def _own(self, base: ast.AST) -> bool:
        """Whether `base` is a method's `self` or `cls` here (an unguarded source's own object)."""
        return isinstance(base, ast.Name) and base.id in self._scopes[-1].own

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr = node.attr
        root, _ = _dotted_root(node)
        module = self.modules.get(root) if root is not None else None   # the chain's allowed module, if any
        if attr.startswith("__") and attr.endswith("__"):
            self.refuse(node, f"access to the special attribute '{attr}' is not allowed")
        elif attr.startswith("_") and (module is not None or not (self.guarded or self._own(node.value))):
            self.refuse(node, f"access to the private attribute '{attr}' is not allowed"
                        + ("" if module is not None else " (a kernel may read the private attributes of its "
                           "methods' self and cls)"))
        elif attr in FORBIDDEN_ATTRIBUTES:
            self.refuse(node, f"the attribute '{attr}' is not allowed in a kernel")
        if not isinstance(node.ctx, ast.Load):
            if module is not None:
                self.refuse(node, f"assigning or deleting the attribute '{attr}' of the module '{root}' is not "
                                  "allowed in a kernel")
            elif not (self.guarded or self._own(node.value)):
                self.refuse(node, f"assigning or deleting the attribute '{attr}' is not allowed here (a kernel "
                                  "may assign the attributes of its methods' self and cls)")
        base = node.value
        if isinstance(base, ast.Name):
            self._attribute_bases.add(id(base))
            allowed = MODULE_ATTRIBUTES.get(self.modules.get(base.id, ""))
            if allowed is not None and attr not in allowed and not attr.startswith("_"):
                name = self.modules[base.id]
                self.refuse(node, f"{base.id}.{attr} ({name}.{attr}) is not available to kernels")
        elif isinstance(base, ast.Attribute):
            # In a chain rooted at an NKI module every link but the last is a namespace.
            broot, bchain = _dotted_root(base)
            if broot is not None and self.modules.get(broot) in NKI_MODULES and bchain[-1] not in NKI_NAMESPACES:
                self.refuse(node, f"'{broot}.{'.'.join(bchain)}.{attr}' reaches into '{bchain[-1]}', which is not "
                                  "an NKI namespace")
            elif broot is not None and self.modules.get(broot, "").split(".")[0] in HOST_STAND_INS:
                self._stand_in_attribute(node, broot, bchain)
        self.generic_visit(node)

    def _stand_in_attribute(self, node: ast.Attribute, root: str, chain: list[str]) -> None:
        """`os.path.join`, `os.environ.get`, `sys.stderr.write`: the names a stand-in's value has
        (STAND_IN_ATTRIBUTES, os.path's functions); nothing deeper."""
        dotted = ".".join([self.modules[root], *chain])
        allowed = STAND_IN_ATTRIBUTES.get(dotted, HOST_STAND_INS.get(dotted))
        if allowed is None or node.attr not in allowed:
            self.refuse(node, f"{root}.{'.'.join(chain)}.{node.attr} ({dotted}.{node.attr}) is not available to "
                              f"kernels" + (f" (only {', '.join(sorted(allowed))})" if allowed else ""))

    def visit_Subscript(self, node: ast.Subscript) -> None:
        """`os.environ["X"] = "y"` / `del os.environ["X"]`: a kernel writes no module's items."""
        if not isinstance(node.ctx, ast.Load):
            root, chain = _dotted_root(node.value)
            if root is not None and root in self.modules and root not in self._scopes[-1].local:
                self.refuse(node, f"assigning or deleting an item of '{'.'.join([root, *chain])}' is not allowed in "
                                  "a kernel (a module's values are read-only)")
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        """`x: T = v`: the annotation as a signature's (it may name `object` or `type` where
        guarded: the kernel process keeps such annotations as text), target and value as usual."""
        self.visit(node.target)
        if node.value is not None:
            self.visit(node.value)
        self._annotation = True
        try:
            self.visit(node.annotation)
        finally:
            self._annotation = False

    # -- statements ----------------------------------------------------------------------
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for kw in node.keywords:
            self.refuse(kw, f"class keywords ({kw.arg or '**'}=) are not allowed in a kernel (no metaclass or "
                            "class-creation hooks)")
        if node.name.startswith("__") and node.name.endswith("__"):
            self.refuse(node, f"the special class name '{node.name}' is not allowed")
        for expr in node.bases + node.decorator_list:
            self.visit(expr)
        self._in_class.append(True)
        for stmt in node.body:
            self.visit(stmt)
        self._in_class.pop()

    def visit_Try(self, node: ast.AST) -> None:
        if isinstance(node, ast.Try) and (_optional_import(node) or _catches_only(node, LOOKUP_ERRORS)):
            self.generic_visit(node)
            return
        self.refuse(node, "try/except is not allowed in a kernel (errors of the NKI rules must surface; only "
                          "`try: <imports> except ImportError: ...` and `try: ... except KeyError: ...` are)")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_Match(self, node: ast.Match) -> None:
        # Class patterns read attributes by name (`case C(__class__=c)`), out of the checker's sight.
        self.refuse(node, "match statements are not allowed in a kernel")
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        method = self._in_class[-1]
        dunder = node.name.startswith("__") and node.name.endswith("__")
        if dunder and not (method and node.name in KERNEL_DUNDER_METHODS):
            allowed = f" (a class may define {', '.join(sorted(KERNEL_DUNDER_METHODS))})" if method else ""
            self.refuse(node, f"the special function name '{node.name}' is not allowed{allowed}")
        for expr in node.decorator_list:
            self.visit(expr)
        self._signature(node)
        bound = _bound_names(node)
        own = self._scopes[-1].own - bound
        params = node.args.posonlyargs + node.args.args
        static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
        if method and params and not static:
            first = params[0].arg
            rebound = any(isinstance(n, ast.Name) and n.id == first and not isinstance(n.ctx, ast.Load)
                          for stmt in node.body for n in ast.walk(stmt))
            if not rebound:
                own = own | {first}
        self._scopes.append(_Scope(frozenset(own), self._scopes[-1].local | bound))
        self._in_class.append(False)
        for stmt in node.body:
            self.visit(stmt)
        self._in_class.pop()
        self._scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def _signature(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """Defaults as any expression; where guarded, annotations may name a builtin such as
        `type` (`dtype: Optional[type]`): the kernel process keeps such annotations as text, never
        evaluated (fitness.sandbox.modules), and a signature's annotations are out of a kernel's
        reach anyway (`__annotations__`)."""
        a = node.args
        for default in a.defaults + [d for d in a.kw_defaults if d is not None]:
            self.visit(default)
        self._annotation = True
        try:
            for arg in a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x is not None]:
                self.visit(arg)
            if node.returns is not None:
                self.visit(node.returns)
        finally:
            self._annotation = False

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.visit(node.args)
        bound = _bound_names(node)
        self._scopes.append(_Scope(self._scopes[-1].own - bound, self._scopes[-1].local | bound))
        self.visit(node.body)
        self._scopes.pop()


IMPORT_ERRORS = ("ImportError", "ModuleNotFoundError")
# `try: Level[name] except KeyError:` (a failed lookup in a kernel's own table, as kernel libraries
# parse a setting): no error of the NKI rules or of the guards is a KeyError.
LOOKUP_ERRORS = ("KeyError",)


def _catches_only(node: ast.Try, errors: tuple[str, ...]) -> bool:
    """Every handler names only `errors` (no bare except, no `finally`, whose `return` would
    swallow any error)."""
    def named(t: ast.AST | None) -> bool:
        items = t.elts if isinstance(t, ast.Tuple) else [t]
        return bool(items) and all(isinstance(i, ast.Name) and i.id in errors for i in items)

    return bool(node.handlers) and all(named(h.type) for h in node.handlers) and not node.finalbody


def _optional_import(node: ast.Try) -> bool:
    """`try: <imports> except ImportError: ...` (an optional import, as kernel libraries write
    for what a runtime lacks): it catches nothing but a failed import."""
    return (bool(node.body) and all(isinstance(s, (ast.Import, ast.ImportFrom)) for s in node.body)
            and _catches_only(node, IMPORT_ERRORS))


def _dotted_root(node: ast.AST) -> tuple[str | None, list[str]]:
    """(root name, attribute chain) of `a.b.c` -> ("a", ["b", "c"]); root None otherwise."""
    chain: list[str] = []
    while isinstance(node, ast.Attribute):
        chain.append(node.attr)
        node = node.value
    chain.reverse()
    return (node.id if isinstance(node, ast.Name) else None), chain


def syntax_error_message(exc: SyntaxError, filename: str = "kernel.py") -> str:
    """The one-line compile error of a source that does not parse."""
    return f"{filename}:{exc.lineno or 0}: SyntaxError: {exc.msg}"
