"""Problems users bring: a NumPy reference module and the baseline kernel a search starts from.

The reference follows the NKIBench convention: `get_inputs()` (drawing from NumPy's global
RNG), `forward(*inputs)`, optionally `transform_to_nki_inputs(inputs)` and
`transform_nki_outputs(kernel_result, reference_result)`, and module-level shape constants
(`N = 4096`: upper-case names bound to integers). A constant can be overridden (`--set
problem.N=8192`): the module is executed with the new value in place of the literal, so that
constants derived from it follow. An optional `TOLERANCE = 1e-2` replaces the tolerance that
the output dtype and reduction length give (fitness/correctness/gate.py).

Both files are kept in a problem folder, `<root>/<name>-<digest>/` with `reference.py`,
`baseline.py` and `problem.json` ({"name", "dialect"}), named by a digest of their contents:
a run folder holds its problems' files, so that resume and report need nothing else, and a
changed file is another problem. A spec names the folder in its `suite_dir`.

Roofline counts are counted while `forward` runs on one seed's inputs (see `count_work`).
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any, Sequence

import numpy as np

from . import torch_reference
from .families import DERIVED_NAMES, STANDARD, Family
from .official import DEFAULT_TOLERANCE, OfficialProblem, SuiteError, exec_reference
from .problem import Counts, ProblemSpec, as_tuple, reshape_like
from .torch_reference import TorchReference

REFERENCE_FILE, BASELINE_FILE, META_FILE = "reference.py", "baseline.py", "problem.json"
COUNTING_SEED = 0
# The most NumPy operations of a reference that one NKI instruction applies to an element in one
# pass: nisa.activation's scale, bias, function and accumulating reduction. The element-wise
# term of a user problem's roofline divides its counted operations by it, so that a kernel that
# fuses them as far as the ISA allows stays within 100% of peak (fitness.measures.roofline).
FUSED_OPS = 4
# The dtypes of the arrays a reference may give and take: those NKI tensors hold (nki.language).
KERNEL_DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3", "float8_e5m2", "float8_e4m3fn", "int32", "int16",
                 "int8", "uint32", "uint16", "uint8", "bool", "float64", "int64")


class UserProblemError(SuiteError):
    """A reference or baseline file that cannot define a problem; the message names the file."""


def is_problem_folder(path: str | Path) -> bool:
    return bool(path) and (Path(path) / META_FILE).is_file() and (Path(path) / REFERENCE_FILE).is_file()


GENERIC_STEMS = ("reference", "ref", "problem", "task")   # a file named so takes its folder's name


def problem_name(reference_path: str | Path) -> str:
    """A problem's name from its reference file: the file name's stem as an identifier (the
    folder's name for `reference.py` and the like)."""
    path = Path(reference_path).resolve()
    stem = path.parent.name if path.stem.lower() in GENERIC_STEMS and path.parent.name else path.stem
    stem = re.sub(r"\W", "_", stem) or "problem"
    return stem if not stem[0].isdigit() else f"p_{stem}"


def store(root: str | Path, name: str, reference: str, baseline: str, dialect: str) -> Path:
    """The problem folder of these files under `root` (written once; equal contents, one folder)."""
    digest = hashlib.sha256(json.dumps([name, reference, baseline, dialect]).encode()).hexdigest()[:12]
    folder = Path(root) / f"{name}-{digest}"
    if not is_problem_folder(folder):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / REFERENCE_FILE).write_text(reference)
        (folder / BASELINE_FILE).write_text(baseline)
        (folder / META_FILE).write_text(json.dumps({"name": name, "dialect": dialect}) + "\n")
    return folder.resolve()


def read_meta(folder: str | Path) -> dict[str, str]:
    path = Path(folder) / META_FILE
    try:
        meta = json.loads(path.read_text())
        return {"name": str(meta["name"]), "dialect": str(meta["dialect"])}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserProblemError(f"{path}: unreadable problem description ({exc})") from None


# --------------------------------------------------------------------------------------------
# Shape constants.


def _constant_nodes(tree: ast.Module) -> dict[str, ast.Constant]:
    """Top-level `NAME = <int>` (or `NAME: int = <int>`) assignments, by name (the last wins)."""
    found: dict[str, ast.Constant] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if (isinstance(target, ast.Name) and target.id.isupper() and isinstance(value, ast.Constant)
                and type(value.value) is int):
            found[target.id] = value
    return found


def _parse(text: str, path: str) -> ast.Module:
    try:
        return ast.parse(text, filename=path)
    except SyntaxError as exc:
        raise UserProblemError(f"reference module {path}: does not parse (line {exc.lineno}: {exc.msg})") from None


def shape_constants(text: str, path: str = REFERENCE_FILE) -> dict[str, int]:
    """The reference's shape constants and their values as written."""
    return {k: int(v.value) for k, v in _constant_nodes(_parse(text, path)).items()}


def check_overrides(text: str, overrides: dict[str, int], path: str) -> dict[str, int]:
    """The shape parameters of the reference with `overrides` applied; an error naming the
    file for an unknown constant or a value that is not a positive integer."""
    values = shape_constants(text, path)
    for key, value in overrides.items():
        if key not in values:
            known = ", ".join(values) or "none"
            raise UserProblemError(f"reference module {path}: no shape constant '{key}' (its constants: {known})")
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise UserProblemError(f"reference module {path}: shape constant {key} must be a positive integer, "
                                   f"got {value!r}")
        values[key] = value
    return values


def _module(folder: Path, params: dict[str, int]) -> ModuleType | TorchReference:
    """The reference module executed with its shape constants set to `params` (a PyTorch
    reference wrapped so that it takes and gives NumPy, nkibench.torch_reference)."""
    path = folder / REFERENCE_FILE
    try:
        text = path.read_text()
    except OSError as exc:
        raise UserProblemError(f"reference module {path}: cannot be read ({exc.strerror or exc})") from None
    tree = _parse(text, str(path))
    for name, node in _constant_nodes(tree).items():
        if name in params:
            node.value = params[name]
    uses_torch = torch_reference.imports_torch(text)
    if uses_torch and not torch_reference.torch_available():
        raise UserProblemError(torch_reference.missing_torch(path))
    name = "_accelopt_user_reference_" + folder.name.replace("-", "_")
    module = exec_reference(path, name, compile(tree, str(path), "exec"), UserProblemError)
    return TorchReference(module) if uses_torch else module


def kernel_inputs_as_drawn(folder: str | Path) -> bool:
    """Whether the kernel of a stored problem takes the reference's inputs as they are, known
    without executing the reference: a PyTorch reference that does not name
    transform_to_nki_inputs (the kernel process then need not import torch for its arguments)."""
    try:
        text = (Path(folder) / REFERENCE_FILE).read_text()
    except OSError:
        return False
    return torch_reference.imports_torch(text) and "transform_to_nki_inputs" not in text


def spec(folder: str | Path, overrides: dict[str, int] | None = None) -> ProblemSpec:
    """The spec of a stored problem with its shape constants overridden."""
    folder = Path(folder).resolve()
    meta = read_meta(folder)
    path = folder / REFERENCE_FILE
    values = check_overrides(path.read_text(), dict(overrides or {}), str(path))
    return ProblemSpec.make(meta["name"], values, str(folder))


# --------------------------------------------------------------------------------------------
# Counted work.


@dataclass
class Work:
    """What `forward` did, as counted through NumPy's array protocols."""

    matmul_flops: float = 0.0
    vector_flops: float = 0.0
    reduction: int = 1           # the longest contraction or reduction (elements summed into one)


def _plain(x: Any) -> Any:
    if isinstance(x, _Counting):
        return x.view(np.ndarray)
    if isinstance(x, (list, tuple)):
        return type(x)(_plain(v) for v in x)
    return x


def _wrap(x: Any) -> Any:
    if type(x) is np.ndarray:
        return x.view(_Counting)
    if isinstance(x, tuple):
        return tuple(_wrap(v) for v in x)
    return x


# Functions counted as one contraction each (on plain arrays, so that the dot a tensordot
# calls is not counted again).
PAIRWISE = ("dot", "tensordot", "inner", "vdot")
CONTRACTIONS = PAIRWISE + ("einsum",)
_EINSUM = re.compile(r"^([a-zA-Z]*),([a-zA-Z]*)->([a-zA-Z]*)$")


class _Counting(np.ndarray):
    """An array that adds the work done on it to `_Counting.work`."""

    work: Work | None = None

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        args = [_plain(x) for x in inputs]
        if "out" in kwargs:
            kwargs["out"] = _plain(kwargs["out"])
        result = getattr(ufunc, method)(*args, **kwargs)
        work = _Counting.work
        if work is not None:
            if ufunc is np.matmul and len(args) == 2:
                a, b = (np.asarray(x) for x in args)
                k = a.shape[-1] if a.ndim else 1
                work.matmul_flops += 2.0 * np.size(result) * k
                work.reduction = max(work.reduction, int(k))
            elif method == "__call__":
                work.vector_flops += float(np.size(result))
            elif method in ("reduce", "accumulate") and args:
                size = np.size(args[0])
                work.vector_flops += float(size)
                work.reduction = max(work.reduction, int(size // max(np.size(result), 1)))
        return _wrap(result)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        if getattr(func, "__name__", "") not in CONTRACTIONS:
            # NumPy's own implementation on these arrays: the ufuncs it calls (np.mean's sum,
            # np.linalg.norm's multiply and sum, ...) are counted in __array_ufunc__.
            return super().__array_function__(func, types, args, kwargs)
        plain_args = _plain(tuple(args))
        result = func(*plain_args, **{k: _plain(v) for k, v in kwargs.items()})
        work = _Counting.work
        if work is not None:
            flops, k = _contraction(func, plain_args, result)
            work.matmul_flops += flops
            work.reduction = max(work.reduction, k)
        return _wrap(result)


def _contraction(func: Any, args: Sequence[Any], result: Any) -> tuple[float, int]:
    """(flops, contraction length) of dot/tensordot/inner/einsum; (0, 1) for anything else.
    Counted exactly or not at all: an overcount would raise the latency bound a correct
    kernel is held to."""
    name = getattr(func, "__name__", "")
    if name in PAIRWISE and len(args) >= 2:
        a, b = np.asarray(args[0]), np.asarray(args[1])
        out = max(int(np.size(result)), 1)
        if a.size == 0 or b.size == 0:
            return 0.0, 1
        c = math.isqrt(int(a.size) * int(b.size) // out)
        if c * c * out != a.size * b.size:   # shared batch axes: not a plain contraction
            return 0.0, 1
        return 2.0 * out * c, c
    if name == "einsum" and len(args) == 3 and isinstance(args[0], str):
        m = _EINSUM.match(args[0].replace(" ", ""))
        if not m:
            return 0.0, 1
        sizes: dict[str, int] = {}
        for letters, arr in ((m.group(1), np.asarray(args[1])), (m.group(2), np.asarray(args[2]))):
            if len(letters) != arr.ndim:
                return 0.0, 1
            sizes.update(zip(letters, arr.shape))
        contracted = [s for ch, s in sizes.items() if ch not in m.group(3)]
        return 2.0 * math.prod(sizes.values()), max([math.prod(contracted)] if contracted else [1])
    return 0.0, 1


def count_work(forward: Any, inputs: Sequence[Any]) -> tuple[Work, tuple[np.ndarray, ...]]:
    """Run `forward` on `inputs`, counting its work: 2·M·K·N flops per matmul, dot, tensordot
    and two-operand einsum; one flop per element an element-wise ufunc writes or a reduction
    reads. Work done on arrays that left NumPy's protocols (`np.asarray` of an intermediate,
    a Python loop over elements) is not counted: the counts are lower bounds."""
    work = Work()
    saved, _Counting.work = _Counting.work, work
    try:
        outputs = forward(*[x.view(_Counting) if type(x) is np.ndarray else x for x in inputs])
    finally:
        _Counting.work = saved
    return work, tuple(np.asarray(_plain(o)) for o in as_tuple(outputs))


# --------------------------------------------------------------------------------------------
# The problem.


@dataclass
class UserProblem(OfficialProblem):
    """A problem of a user's reference module; its baseline is the folder's `baseline.py`."""

    folder: Path = field(default=Path(), repr=False)
    declared_tolerance: float | None = None    # the module's TOLERANCE, which replaces the formula
    own_families: tuple[Family, ...] = ()       # the module's input_families()
    derived_names: tuple[str, ...] = DERIVED_NAMES   # the module's DERIVED_FAMILIES

    @classmethod
    def load(cls, spec: ProblemSpec) -> "UserProblem":
        folder = Path(spec.suite_dir)
        module = _module(folder, spec.param_dict)
        tolerance = getattr(module, "TOLERANCE", None)
        if tolerance is not None and (isinstance(tolerance, bool) or not isinstance(tolerance, (int, float))
                                      or not tolerance > 0):
            raise UserProblemError(f"reference module {folder / REFERENCE_FILE}: TOLERANCE must be a positive number, "
                                   f"got {tolerance!r}")
        path = folder / REFERENCE_FILE
        return cls(spec=spec, module=module, reference_path=path, baseline_path=folder / BASELINE_FILE,
                   tolerance=float(tolerance) if tolerance is not None else DEFAULT_TOLERANCE, folder=folder,
                   declared_tolerance=float(tolerance) if tolerance is not None else None,
                   own_families=_declared_families(module, path), derived_names=_derived_names(module, path))

    @property
    def declared_families(self) -> tuple[Family, ...]:
        return self.own_families

    @property
    def derived_family_names(self) -> tuple[str, ...]:
        return self.derived_names

    @property
    def reference_source(self) -> str:
        """The reference module as the user wrote it (shape constants as written)."""
        return self.reference_path.read_text()

    @cached_property
    def _work(self) -> tuple[Work, float, str, tuple[np.dtype, ...]]:
        """(work, HBM bytes, matmul operand dtype, output dtypes) counted on the inputs of
        `COUNTING_SEED`; an error naming the file for inputs or outputs a kernel cannot hold."""
        inputs = self.make_inputs(COUNTING_SEED)
        self._check_dtypes("get_inputs() returned", inputs)
        try:   # one run on the inputs as drawn: its outputs have the dtypes a kernel must return
            if isinstance(self.module, TorchReference):
                work = Work()
                outs = tuple(np.asarray(o) for o in as_tuple(torch_reference.count_work(self.module.forward, inputs,
                                                                                        work)))
            else:
                work, outs = count_work(self.module.forward, inputs)
        except Exception as exc:
            raise UserProblemError(f"reference module {self.reference_path}: forward() raised "
                                   f"{type(exc).__name__}: {exc}") from None
        self._check_dtypes("forward() returned", outs)
        dtypes = [x.dtype for x in inputs if isinstance(x, np.ndarray) and x.dtype.kind in "fV"]
        nbytes = sum(int(x.nbytes) for x in self.to_kernel_inputs(inputs) if isinstance(x, np.ndarray))
        nbytes += sum(int(o.nbytes) for o in outs)
        narrow = min(dtypes, key=lambda d: d.itemsize) if dtypes else np.dtype(np.float32)
        return work, float(nbytes), narrow.name, tuple(o.dtype for o in outs)

    def _check_dtypes(self, what: str, arrays: Sequence[Any]) -> None:
        for i, x in enumerate(arrays):
            if isinstance(x, np.ndarray) and x.dtype.name not in KERNEL_DTYPES:
                raise UserProblemError(f"reference module {self.reference_path}: {what} an array of dtype "
                                       f"{x.dtype} (#{i}), which no NKI kernel holds (known: "
                                       f"{', '.join(KERNEL_DTYPES)})")

    @property
    def counts(self) -> Counts:  # type: ignore[override]
        work, nbytes, dtype, _outputs = self._work
        return Counts(work.matmul_flops, work.vector_flops, nbytes, dtype, vector_ops_per_pass=FUSED_OPS)

    @counts.setter
    def counts(self, value: Any) -> None:   # the dataclass initializer assigns it; counts are counted
        pass

    @property
    def reduction_length(self) -> int:
        return self._work[0].reduction

    @property
    def output_dtypes(self) -> tuple[np.dtype, ...]:
        return self._work[3]

    def from_kernel_outputs(self, raw: Any, reference_out: tuple[np.ndarray, ...]) -> list[np.ndarray]:
        """As an official problem's, and a result given as a dict (by `transform_nki_outputs`, or
        by a kernel) matched to the outputs of a PyTorch reference's dict by name."""
        if callable(getattr(self.module, "transform_nki_outputs", None)):
            ref = reference_out[0] if len(reference_out) == 1 else reference_out
            raw = self._call("transform_nki_outputs", raw, ref)
        if isinstance(raw, dict):
            if not isinstance(self.module, TorchReference):
                raise ValueError("the kernel's outputs are a dict; a NumPy reference's are matched by position")
            self._work   # noqa: B018 - forward has run once: the names of its outputs are known
            raw = self.module.by_name(raw)
        return reshape_like(raw, reference_out)

    def tolerance_for(self, dtype: np.dtype) -> float:
        if self.declared_tolerance is not None:
            return self.declared_tolerance
        return super().tolerance_for(dtype)

    def tolerance_floor(self, dtype: np.dtype) -> float:
        if self.declared_tolerance is not None:
            return self.declared_tolerance
        return super().tolerance_floor(dtype)


def _declared_families(module: ModuleType, path: Path) -> tuple[Family, ...]:
    """The families of the module's `input_families()`: a dict of name -> function(rng, arrays)
    returning the arrays changed (the reference's array inputs, in order; same shapes and dtypes)."""
    hook = getattr(module, "input_families", None)
    if hook is None:
        return ()
    where = f"reference module {path}: input_families()"
    if not callable(hook):
        raise UserProblemError(f"{where} must be a function returning a dict of name -> function(rng, arrays)")
    try:
        found = hook()
    except Exception as exc:
        raise UserProblemError(f"{where} raised {type(exc).__name__}: {exc}") from None
    if not isinstance(found, dict):
        raise UserProblemError(f"{where} returned {type(found).__name__}, expected a dict of name -> function")
    out = []
    for name, transform in found.items():
        if not isinstance(name, str) or not name.isidentifier() or name in (STANDARD, *DERIVED_NAMES):
            raise UserProblemError(f"{where}: {name!r} cannot name a family (an identifier other than "
                                   f"{', '.join((STANDARD, *DERIVED_NAMES))})")
        if not callable(transform):
            raise UserProblemError(f"{where}: family {name!r} is not a function(rng, arrays)")
        out.append(Family(name, f"declared by {path.name}", transform))
    return tuple(out)


def _derived_names(module: ModuleType, path: Path) -> tuple[str, ...]:
    """The module's DERIVED_FAMILIES (default: all of nkibench.families.DERIVED)."""
    names = getattr(module, "DERIVED_FAMILIES", DERIVED_NAMES)
    if (not isinstance(names, (tuple, list)) or not all(isinstance(n, str) for n in names)
            or any(n not in DERIVED_NAMES for n in names)):
        raise UserProblemError(f"reference module {path}: DERIVED_FAMILIES must list some of "
                               f"{', '.join(DERIVED_NAMES)}, got {names!r}")
    return tuple(names)


def load_user(spec: ProblemSpec) -> UserProblem:
    return UserProblem.load(spec)
