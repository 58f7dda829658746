"""A kernel's modules: where a kernel module sits (its package, the kernel libraries it may
import), and how the kernel process executes it with them (`Loader`), the run-time half of the
static policy (fitness.sandbox.policy).

Where (`KernelModules`): a kernel read from a file inside a package (parent folders with
`__init__.py`) is that package's module, e.g. `nkilib.core.attention.attention_cte`, so that
its relative imports resolve; `evaluation.kernel_paths` names folders whose packages (and
top-level modules) a kernel may import absolutely (`import nkilib.core.utils.allocator`). The
kernel process may read the kernel's top-level package folder and those folders, nothing else
new (`readable_dirs`).

How (`Loader`, one fresh load per call, so that nothing a kernel does survives into the next
seed's run):
- every module is checked by the policy before it runs (a refusal is a `KernelPolicyError`:
  status `rejected`, naming the file), and must be of the kernel's dialect;
- imports go through the loader alone: numpy, the NKI modules the emulator installed (another
  NKI module is an unsupported API), the standard modules as stand-ins holding their allowed
  names only (`enum`'s classes refuse the functional API, `Enum("E", [("__eq__", f)])`, which
  defines attributes by name; `os` and `sys` reach nothing of the host: an empty read-only
  environment, discarding streams), and the package's modules, read from their files and never put
  in `sys.modules`. A package's `__init__.py` runs only when a kernel takes a name from the
  package itself rather than from one of its modules (package `__init__` files are mostly
  packaging code: nkilib's sets up its standalone copy with os, sys and importlib);
- another module's module objects are not reachable through it (`helpers.np`: a kernel imports
  what it uses itself, under the policy's rules);
- a class statement may derive only from the kernel's own classes, the enum classes,
  `typing.Protocol`, `Generic`, `NamedTuple` and `nl.NKIObject`; the classes it makes are the
  kernel's own;
- reading a private attribute (`x._offset`) and assigning or deleting an attribute
  (`self.offset = 0`) are rewritten into checks (`__nki_private__`, `__nki_owned__`) that let
  them through on the kernel's own objects only: its modules, its classes and their instances
  (whose classes derive from nothing else that could hold state); never on an emulator object
  (a tensor's `_b` is its storage) or a module of NumPy or NKI.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import enum
import functools
import hashlib
import math
import os
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from fitness.simulator import dialect as D
from fitness.simulator import runner
from fitness.simulator.errors import UnsupportedApiError

from . import policy

PRIVATE, OWNED = "__nki_private__", "__nki_owned__"
MAX_MODULES = 2_000          # modules one load may read (a package importing itself in a loop)


class KernelPolicyError(Exception):
    """A module of the kernel, or what it does with an object, that the policy refuses: the
    kernel is `rejected` (fitness.sandbox.worker.classify). The message names file and line."""


class UnsupportedModuleError(UnsupportedApiError, ModuleNotFoundError):
    """An NKI module the emulator does not have (`nki.collectives`): an unsupported API, and a
    failed import (`try: from nki.collectives import ... except ImportError:` catches it)."""


class ModulesError(ValueError):
    """A kernel path that cannot be used (not a folder); the message says which."""


# --------------------------------------------------------------------------------------------
# Where a kernel module sits.


def _is_name(part: str) -> bool:
    return part.isidentifier() and not part.startswith("__")


@dataclass(frozen=True)
class KernelModules:
    """Where a kernel module sits: `name`, its dotted name in its package ("" = a file of its
    own, `kernel.py`); `root`, the folder holding its top-level package; `paths`, the folders of
    `evaluation.kernel_paths` (absolute)."""

    name: str = ""
    root: str = ""
    paths: tuple[str, ...] = ()

    @classmethod
    def of_file(cls, path: str | Path, paths: tuple[str, ...] | list[str] = ()) -> "KernelModules":
        """The place of the kernel file `path`: the module of the package it lies in (its parent
        folders with `__init__.py`), or a file of its own when it lies in none or in a package
        named like a module the evaluation uses (policy.RESERVED_PACKAGES)."""
        found = cls.with_paths(paths)
        path = Path(path).resolve()
        parts = [path.stem] if path.name != "__init__.py" else []
        folder = path.parent
        while (folder / "__init__.py").is_file() and folder.parent != folder:
            parts.insert(0, folder.name)
            folder = folder.parent
        if path.name == "__init__.py" or len(parts) < 2 or not all(map(_is_name, parts)) \
                or parts[0] in policy.RESERVED_PACKAGES:
            return found
        return dataclasses.replace(found, name=".".join(parts), root=str(folder))

    @classmethod
    def with_paths(cls, paths: tuple[str, ...] | list[str]) -> "KernelModules":
        """No package, the kernel libraries of `paths` (folders, made absolute; ModulesError
        for one that is not a folder)."""
        out = []
        for p in paths:
            folder = Path(p).expanduser()
            if not folder.is_dir():
                raise ModulesError(f"evaluation.kernel_paths: '{p}' is not a folder")
            out.append(str(folder.resolve()))
        return cls(paths=tuple(out))

    @property
    def package(self) -> str:
        """The dotted package of the kernel module ("" = none)."""
        return self.name.rpartition(".")[0]

    @property
    def top(self) -> str:
        return self.name.split(".")[0] if self.name else ""

    def libraries(self) -> dict[str, Path]:
        """Top-level name -> file or package folder a kernel may import it from: the kernel's own
        package, then the packages and modules of each kernel path in order (the first wins)."""
        found: dict[str, Path] = {}
        if self.name:
            found[self.top] = Path(self.root) / self.top
        for folder in self.paths:
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                stem, ext = os.path.splitext(entry.name)
                if entry.is_dir() and _is_name(entry.name) and os.path.isfile(os.path.join(entry.path, "__init__.py")):
                    name, where = entry.name, Path(entry.path)
                elif entry.is_file() and ext == ".py" and _is_name(stem):
                    name, where = stem, Path(entry.path)
                else:
                    continue
                if name not in policy.RESERVED_PACKAGES:
                    found.setdefault(name, where)
        return found

    def policy_context(self) -> dict[str, Any]:
        """The keywords of policy.review for the kernel module."""
        return {"package": self.package, "libraries": tuple(sorted(self.libraries()))}

    def readable_dirs(self) -> list[str]:
        """What the kernel process may read besides the Python installation and the project:
        the kernel's top-level package folder and the kernel paths."""
        return ([str(Path(self.root) / self.top)] if self.name else []) + list(self.paths)

    def digest(self) -> str:
        """A digest of everything the kernel may import from (the names and contents of the
        `.py` files of its package and of the kernel paths' packages and modules), for cache
        keys: an edited helper module is another evaluation."""
        h = hashlib.sha256(repr((self.name, self.paths)).encode())
        for name, where in sorted(self.libraries().items()):
            for path in _py_files(where):
                h.update(f"\0{name}/{path.relative_to(where) if where.is_dir() else ''}\0".encode())
                try:
                    h.update(path.read_bytes())
                except OSError:
                    h.update(b"\0unreadable")
        return h.hexdigest()[:16]

    @property
    def empty(self) -> bool:
        return not self.name and not self.paths

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "root": self.root, "paths": list(self.paths)}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> "KernelModules":
        data = data or {}
        return cls(str(data.get("name", "")), str(data.get("root", "")), tuple(str(p) for p in data.get("paths", ())))


def _py_files(where: Path) -> Iterator[Path]:
    if where.is_file():
        yield where
        return
    for folder, dirs, files in os.walk(where):
        dirs[:] = sorted(d for d in dirs if os.path.isfile(os.path.join(folder, d, "__init__.py")))
        for f in sorted(files):
            if f.endswith(".py"):
                yield Path(folder) / f


# --------------------------------------------------------------------------------------------
# The standard modules as kernels see them.


class _KernelEnumType(enum.EnumType):
    """The metaclass of the kernel's enums: `E(value)` looks a member up; the functional API
    (`E("Name", names)`), which defines class attributes by name, special ones included, is
    refused."""

    def __call__(cls, value, *args, **kwargs):
        if args or kwargs:
            raise KernelPolicyError(f"{_where()}the functional Enum API (Enum('Name', names)) is not allowed in a kernel; "
                                    "define the enum with a class statement")
        return super().__call__(value)


def _guarded_enum(base: type) -> type:
    class Guarded(base, metaclass=_KernelEnumType):   # type: ignore[misc,valid-type]
        pass
    Guarded.__name__ = Guarded.__qualname__ = base.__name__
    Guarded.__module__ = "enum"
    return Guarded


def _stand_in(name: str, attrs: dict[str, Any]) -> types.ModuleType:
    mod = types.ModuleType(name, f"the {name} names a kernel may use (fitness.sandbox.modules)")
    mod.__dict__.update(attrs)
    return mod


# The kernel modules of the latest loads by name, for `_dataclass` (a load adds its own).
_VISIBLE: dict[str, "KernelModule"] = {}


def _dataclass(cls: Any = None, /, **options: Any) -> Any:
    """`dataclasses.dataclass` for a kernel's class: with `from __future__ import annotations`
    it reads the class's module from sys.modules (to tell a ClassVar annotation), where a
    kernel module never is; it is there, under its own name, while the class is processed."""
    def wrap(c: type) -> type:
        name = getattr(c, "__module__", "")
        module = _VISIBLE.get(name)
        if module is None or name in sys.modules:
            return dataclasses.dataclass(c, **options)
        sys.modules[name] = module
        try:
            return dataclasses.dataclass(c, **options)
        finally:
            if sys.modules.get(name) is module:
                del sys.modules[name]
    return wrap if cls is None else wrap(cls)


class _DiscardedStream:
    """`sys.stderr` / `sys.stdout` as a kernel sees them: writes go nowhere (never the real
    streams: a kernel's output is the tensors it writes)."""

    __slots__ = ()

    def write(self, text: str) -> int:
        return len(str(text))

    def flush(self) -> None:
        return None


def _getenv(key: str, default: Any = None) -> Any:
    """`os.getenv` of a kernel: it sees no environment, so always the default."""
    return default


def _host_stand_ins() -> dict[str, types.ModuleType]:
    """`os`, `os.path` and `sys` holding only policy.HOST_STAND_INS: an empty read-only
    `os.environ`, `os.getenv` (always the default), os.path's pure string functions, discarding
    streams, the version constants; nothing of the host."""
    import posixpath
    path = _stand_in("os.path", {n: getattr(posixpath, n) for n in sorted(policy.HOST_STAND_INS["os.path"])})
    os_ = _stand_in("os", {"environ": types.MappingProxyType({}), "getenv": _getenv, "path": path})
    sys_ = _stand_in("sys", {"stderr": _DiscardedStream(), "stdout": _DiscardedStream(),
                             "version_info": sys.version_info, "maxsize": sys.maxsize})
    assert all(set(vars(m)) - {"__name__", "__doc__", "__package__", "__loader__", "__spec__"}
               == policy.HOST_STAND_INS[m.__name__] for m in (os_, path, sys_))
    return {"os": os_, "os.path": path, "sys": sys_}


def _stdlib() -> dict[str, types.ModuleType]:
    real = {"typing": typing, "dataclasses": dataclasses, "functools": functools, "enum": enum}
    out: dict[str, types.ModuleType] = {"math": math, **_host_stand_ins()}
    for name, allowed in policy.STDLIB_MODULES.items():
        if name in out:
            continue
        module = real[name]
        attrs = {n: getattr(module, n) for n in sorted(allowed or ()) if hasattr(module, n)}
        if name == "enum":
            for n in ("Enum", "IntEnum", "Flag", "IntFlag", "StrEnum"):
                if n in attrs:
                    attrs[n] = _guarded_enum(attrs[n])
        if name == "dataclasses":
            attrs["dataclass"] = functools.wraps(dataclasses.dataclass)(_dataclass)
        out[name] = _stand_in(name, attrs)
    return out


STDLIB = _stdlib()
# Classes a kernel's class may derive from besides its own (and what they derive from).
_GENERIC_BASES = (typing.Protocol, typing.Generic, *types.resolve_bases((typing.NamedTuple,)))
_BASES = tuple(c for c in vars(STDLIB["enum"]).values() if isinstance(c, type)) + _GENERIC_BASES
SUBCLASSABLE_NKI = ("NKIObject",)    # NKI classes a kernel's class may derive from


def _nki_bases() -> tuple[type, ...]:
    """The emulator's classes of SUBCLASSABLE_NKI, in either dialect (those it has)."""
    out = []
    for root in D.ROOTS.values():
        for package in (f"{root}.language", f"{root}.nki.language"):
            mod = sys.modules.get(package)
            for name in SUBCLASSABLE_NKI:
                value = vars(mod).get(name) if mod is not None else None
                if isinstance(value, type):
                    out.append(value)
    return tuple(out)


def _inert(classes: tuple[type, ...]) -> frozenset[type]:
    """The classes of `classes`' method resolution orders (classes that hold no emulator state)."""
    return frozenset(c for base in classes for c in base.__mro__)


# --------------------------------------------------------------------------------------------
# The kernel's modules.


class KernelModule(types.ModuleType):
    """A module of the kernel (its package's, a kernel library's, the kernel itself) as other
    kernel modules see it: its functions, classes and values, not the modules it imported."""

    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        if isinstance(value, types.ModuleType) and not isinstance(value, KernelModule) \
                and not (name.startswith("__") and name.endswith("__")):
            raise KernelPolicyError(f"{_where()}'{name}' of the module '{super().__getattribute__('__name__')}' is "
                                    f"a module it imported: a kernel module imports the modules it uses itself")
        return value


@dataclass
class _Source:
    text: str
    filename: str          # as errors and tracebacks name it (relative to its kernel path)
    package: bool          # an __init__.py


# Compiled modules, shared by the loads of this process (code objects are immutable): (filename,
# text, dialect, package) -> code.
_CODE: dict[tuple[str, str, str, str], Any] = {}
_CODE_MAX = 512


class Loader:
    """Executes a kernel module with its package's modules and the run-time guards (a
    fitness.simulator.runner.Loader: `loader(source, filename, dialect)` -> the namespace of
    the kernel module). Every call is a fresh load: new module objects, new classes."""

    def __init__(self, modules: KernelModules | None = None) -> None:
        self.modules = modules or KernelModules()
        self._libraries: dict[str, Path] | None = None

    @property
    def libraries(self) -> dict[str, Path]:
        if self._libraries is None:
            self._libraries = self.modules.libraries()
        return self._libraries

    def __call__(self, source: str, filename: str, dialect: D.Dialect) -> dict:
        return _Load(self, dialect).main(source, filename)


def _caller(depth: int = 2) -> tuple[str, int]:
    frame = sys._getframe(depth)
    return frame.f_code.co_filename, frame.f_lineno


class _Load:
    """One load of a kernel: its module objects by name and the classes it made."""

    def __init__(self, loader: Loader, dialect: D.Dialect) -> None:
        self.loader = loader
        self.dialect = dialect
        self.modules: dict[str, KernelModule] = {}
        self.packages: set[str] = set()
        self.pending_init: dict[str, _Source] = {}     # packages whose __init__.py has not run
        self.classes: set[type] = set()
        self.inert = _inert(_BASES + _nki_bases()) | {object, tuple}
        self.bases = frozenset(_BASES + _nki_bases())
        self.builtins = dict(vars(builtins))
        self.builtins.update({"__import__": self.import_, "__build_class__": self.build_class,
                              PRIVATE: self.private, OWNED: self.owned})
        for name in policy.FORBIDDEN_NAMES - {"__import__", "__build_class__"}:
            self.builtins.pop(name, None)   # the policy refuses their names; nothing may reach them either
        self.guards = _Guards()

    # -- modules -------------------------------------------------------------------------
    def main(self, source: str, filename: str) -> dict:
        name = self.loader.modules.name or runner.KERNEL_MODULE
        src = _Source(source, filename, False)
        if self.loader.modules.name:
            self._parents(name)
        namespace = self._new(name, src)
        exec(self._code(src), namespace)
        return namespace

    def _code(self, src: _Source) -> Any:
        key = (src.filename, src.text, self.dialect, "p" if src.package else "m")
        code = _CODE.get(key)
        if code is None:
            code = runner.compile_module(src.text, src.filename, self.dialect, self.guards.rewrite)
            if len(_CODE) >= _CODE_MAX:
                _CODE.clear()
            _CODE[key] = code
        return code

    def _parents(self, name: str) -> None:
        """The packages above module `name`, created (without running their __init__.py)."""
        parts = name.split(".")
        for i in range(1, len(parts)):
            self._package(".".join(parts[:i]))

    def _attach(self, name: str, module: KernelModule) -> None:
        parent, _, last = name.rpartition(".")
        if parent:
            vars(self.modules[parent])[last] = module

    def _find(self, name: str) -> tuple[Path, bool] | None:
        """(file, is a package) of module `name` of a kernel library; None if there is none."""
        top, *rest = name.split(".")
        where = self.loader.libraries.get(top)
        if where is None or not all(map(_is_name, rest)):
            return None
        if where.is_file():
            return (where, False) if not rest else None
        folder = where.joinpath(*rest)
        if (folder / "__init__.py").is_file():
            return folder / "__init__.py", True
        if rest and folder.with_suffix(".py").is_file():
            return folder.with_suffix(".py"), False
        return None

    def _read(self, name: str, path: Path, package: bool) -> _Source:
        """The source of module `name` from `path`, which must lie inside its library (no link out)."""
        where = self.loader.libraries[name.split(".")[0]]
        real = os.path.realpath(path)
        inside = os.path.join(os.path.realpath(where), "") if where.is_dir() else os.path.realpath(where)
        if not (real == inside or real.startswith(inside)):
            raise KernelPolicyError(f"{path}: a module of the kernel's package must lie inside it "
                                    f"({os.path.realpath(where)}), not elsewhere through a link")
        if os.path.getsize(real) > policy.MAX_SOURCE_CHARS * 4:
            raise KernelPolicyError(f"{path}: the module is larger than a kernel module may be")
        with open(real, encoding="utf-8") as f:
            text = f.read()
        return _Source(text, str(path.relative_to(where.parent)), package)

    def _new(self, name: str, src: _Source) -> dict:
        """A new module `name` of the kernel, registered and an attribute of its parent (before it
        runs, so that a circular import finds it, as in Python); its namespace."""
        if len(self.modules) >= MAX_MODULES:
            raise KernelPolicyError(f"the kernel imports more than {MAX_MODULES} modules")
        module = KernelModule(name)
        namespace = runner.module_namespace(self.dialect, name, src.filename, self.builtins, vars(module))
        if src.package:
            namespace["__package__"] = name
        self.modules[name] = module
        _VISIBLE[name] = module
        self._attach(name, module)
        return namespace

    def _forget(self, name: str) -> None:
        """A module whose execution failed: gone, as Python leaves none behind."""
        self.modules.pop(name, None)
        parent, _, last = name.rpartition(".")
        if parent in self.modules:
            vars(self.modules[parent]).pop(last, None)

    def _package(self, name: str) -> KernelModule:
        """The package `name` as a namespace, its __init__.py pending until a name of the package
        itself is needed (`from pkg import x`, `pkg.x`: `run_init`)."""
        module = self.modules.get(name)
        if module is not None:
            return module
        found = self._find(name)
        if found is None or not found[1]:
            raise ModuleNotFoundError(f"No module named '{name}' in the kernel's package or evaluation.kernel_paths")
        self._parents(name)
        src = self._read(name, found[0], True)
        namespace = self._new(name, src)
        self.packages.add(name)
        self.pending_init[name] = src
        namespace["__getattr__"] = functools.partial(self._init_for, name)
        return self.modules[name]

    def _init_for(self, name: str, attr: str) -> Any:
        """Module `__getattr__` of a package whose __init__.py has not run: run it, then look again."""
        if attr.startswith("__"):
            raise AttributeError(attr)
        self.run_init(name)
        try:
            return vars(self.modules[name])[attr]
        except KeyError:
            raise AttributeError(f"module '{name}' has no attribute '{attr}'") from None

    def run_init(self, name: str) -> None:
        """Run the __init__.py of package `name` if it has not run."""
        src = self.pending_init.pop(name, None)
        if src is None:
            return
        namespace = vars(self.modules[name])
        namespace.pop("__getattr__", None)
        self._exec(src, name, namespace)

    def _exec(self, src: _Source, name: str, namespace: dict) -> None:
        package = name if src.package else name.rpartition(".")[0]
        try:
            verdict = policy.review(src.text, self.dialect, package=package, libraries=tuple(self.loader.libraries))
        except SyntaxError as exc:   # named as the module's file, not as the kernel's
            raise SyntaxError(exc.msg, (src.filename, exc.lineno, exc.offset, exc.text)) from None
        if verdict.violations:
            raise KernelPolicyError(f"{src.filename}: {verdict.violations[0]}")
        if verdict.dialect != self.dialect:
            raise KernelPolicyError(f"{src.filename}: the module is written in the {verdict.dialect} NKI dialect "
                                    f"({D.IMPORTS[verdict.dialect]}), the kernel in the {self.dialect} dialect "
                                    f"({D.IMPORTS[self.dialect]})")
        exec(self._code(src), namespace)

    def module(self, name: str) -> KernelModule:
        """Module `name` of the kernel's package or a kernel library, loaded (and its parents)."""
        module = self.modules.get(name)
        if module is not None:
            return module
        found = self._find(name)
        if found is None:
            raise ModuleNotFoundError(f"No module named '{name}' in the kernel's package or evaluation.kernel_paths")
        if found[1]:
            return self._package(name)
        self._parents(name)
        src = self._read(name, found[0], False)
        namespace = self._new(name, src)
        try:
            self._exec(src, name, namespace)
        except BaseException:
            self._forget(name)
            raise
        return self.modules[name]

    def import_(self, name: str, globals: dict | None = None, locals: Any = None, fromlist: Any = (),
                level: int = 0) -> Any:
        """`__import__` of the kernel's modules."""
        fromlist = tuple(fromlist or ())
        if level:
            package = (globals or {}).get("__package__") or ""
            full = policy.resolve_relative(package, level, name or None)
            if full is None:
                raise KernelPolicyError(f"{_where()}" + ("a relative import climbs out of the kernel's package"
                                                         if package else "relative imports need a module of a package"))
        else:
            full = name
        top = full.split(".")[0]
        if full == "__future__" and set(fromlist) <= policy.FUTURE_FEATURES:
            import __future__
            return __future__
        if full in policy.ALLOWED_MODULES or top in D.ROOTS.values() or top == "numpy":
            return self._allowed(full, fromlist)
        if top not in self.loader.libraries:
            raise KernelPolicyError(f"{_where()}import of module '{full}' is not allowed in a kernel")
        module = self.module(full)
        if not fromlist:
            return self.modules[top]
        if full in self.packages:
            self.run_init(full)   # a name of the package itself: its __init__.py runs first, as in Python
        for item in fromlist:
            if item == "*" or item.startswith("__"):
                raise KernelPolicyError(f"{_where()}'from {full} import {item}' is not allowed in a kernel")
            if item not in vars(module) and full in self.packages and self._find(f"{full}.{item}") is not None:
                self.module(f"{full}.{item}")
        return module

    def _allowed(self, full: str, fromlist: tuple[str, ...]) -> Any:
        """numpy, a standard module's stand-in, or an NKI module the emulator installed."""
        top = full.split(".")[0]
        if full in STDLIB:
            return STDLIB[full] if fromlist else STDLIB[top]   # `import os.path` binds `os`
        if top == "numpy":
            if full != "numpy" and full in sys.modules:
                # NumPy's C code imports its own loaded submodules (numpy._core._dtype for str(dtype))
                # through the builtins of the calling frame, a kernel's; the policy refuses such an
                # import written in a kernel, so only NumPy's own lookups come here.
                module = sys.modules[full]
                return module if fromlist else sys.modules["numpy"]
            if full != "numpy":
                raise KernelPolicyError(f"import of module '{full}' is not allowed in a kernel")
            import numpy
            return numpy
        if full not in policy.ALLOWED_MODULES:
            raise KernelPolicyError(f"import of module '{full}' is not allowed in a kernel")
        parts = full.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if prefix not in sys.modules:
                raise UnsupportedModuleError(f"the module '{prefix}' is not supported by the NKI emulator", *_caller(3))
        # an unknown name of it: the stand-in's own error, raised where the kernel imports it
        return sys.modules[full] if fromlist else sys.modules[top]

    # -- classes -------------------------------------------------------------------------
    def build_class(self, func: Any, name: str, *bases: Any, **keywords: Any) -> type:
        """`__build_class__` of the kernel's class statements: no keywords, known bases only."""
        if keywords:
            raise KernelPolicyError(f"class {name}: class keywords are not allowed in a kernel")
        for base in types.resolve_bases(bases):
            if base not in self.classes and base not in self.bases:
                what = getattr(base, "__qualname__", type(base).__name__)
                raise KernelPolicyError(
                    f"{_where()}class {name} derives from {what}: a kernel's class may derive from its own classes, "
                    f"the enum classes, typing's Protocol, Generic and NamedTuple, and nl.NKIObject only")
        cls = builtins.__build_class__(func, name, *bases)
        self.classes.add(cls)
        return cls

    def _own_class(self, cls: type) -> bool:
        """A class of this load whose bases are its own or hold no state."""
        return cls in self.classes and all(c in self.classes or c in self.inert for c in cls.__mro__)

    def _defined_by_own(self, mro: tuple[type, ...], name: str) -> bool | None:
        """Whether the first class of `mro` defining `name` is the kernel's own (None: none defines it)."""
        for c in mro:
            if name in vars(c):
                return c in self.classes
        return None

    def _owns(self, obj: Any, name: str) -> bool:
        if name.startswith("__") and name.endswith("__"):
            return False
        if isinstance(obj, KernelModule):
            return obj in self.modules.values()
        if isinstance(obj, type):
            if not self._own_class(obj):
                return False
            own = self._defined_by_own(obj.__mro__, name)
            return own if own is not None else self._defined_by_own(type(obj).__mro__, name) is None
        if not self._own_class(type(obj)):
            return False
        own = self._defined_by_own(type(obj).__mro__, name)
        return own is not False

    def private(self, obj: Any, name: str) -> Any:
        """`obj._name` in a kernel: allowed on the kernel's own objects only."""
        if not self._owns(obj, name):
            raise KernelPolicyError(f"{_where()}access to the private attribute '{name}' of "
                                    f"{_describe(obj)} is not allowed (a kernel may use the private attributes "
                                    f"of its own modules, classes and their instances only)")
        return getattr(obj, name)

    def owned(self, obj: Any, name: str) -> Any:
        """The object of `obj.name = ...` / `del obj.name` in a kernel, once allowed (its own)."""
        if not self._owns(obj, name):
            raise KernelPolicyError(f"{_where()}assigning or deleting the attribute '{name}' of "
                                    f"{_describe(obj)} is not allowed (a kernel may assign the attributes of its "
                                    f"own modules, classes and their instances only)")
        return obj


def _describe(obj: Any) -> str:
    return f"the class {obj.__qualname__}" if isinstance(obj, type) else f"a {type(obj).__name__}"


def _where() -> str:
    """'file:line: ' of the kernel line that called the guard."""
    frame = sys._getframe(2)
    return f"{frame.f_code.co_filename}:{frame.f_lineno}: "


def _as_text(annotation: ast.expr | None) -> ast.expr | None:
    if annotation is None or not any(isinstance(n, ast.Name) and n.id in policy.FORBIDDEN_NAMES
                                     for n in ast.walk(annotation)):
        return annotation
    return ast.copy_location(ast.Constant(ast.unparse(annotation)), annotation)


class _Guards(ast.NodeTransformer):
    """Rewrites a module's private attribute reads into `__nki_private__(obj, "_name")` and the
    object of every attribute assignment or deletion into `__nki_owned__(obj, "name")`; names
    mangled in a class body (`self.__x`) as Python mangles them."""

    def __init__(self) -> None:
        self._classes: list[str] = []

    def rewrite(self, tree: ast.Module) -> ast.Module:
        self._classes = []
        return ast.fix_missing_locations(self.visit(tree))

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        self._classes.append(node.name)
        self.generic_visit(node)
        self._classes.pop()
        return node

    def _name(self, attr: str) -> str:
        if attr.startswith("__") and not attr.endswith("__") and self._classes:
            cls = self._classes[-1].lstrip("_")
            return f"_{cls}{attr}" if cls else attr
        return attr

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
        """Annotations naming a builtin the policy refuses elsewhere (`x: Optional[type]`) are
        kept as text: evaluated, they would need the builtin, which a kernel's builtins lack."""
        a = node.args
        for arg in a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x is not None]:
            arg.annotation = _as_text(arg.annotation)
        node.returns = _as_text(node.returns)
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        """`dtype: object` (a dataclass field) as text too: a class body evaluates it."""
        node.annotation = _as_text(node.annotation)
        self.generic_visit(node)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        attr = node.attr
        call = lambda helper, obj, name: ast.copy_location(
            ast.Call(ast.Name(helper, ast.Load()), [obj, ast.Constant(name)], []), node)
        if not isinstance(node.ctx, ast.Load):
            node.value = call(OWNED, node.value, self._name(attr))
            return node
        if attr.startswith("_") and not (attr.startswith("__") and attr.endswith("__")):
            return call(PRIVATE, node.value, self._name(attr))
        return node
