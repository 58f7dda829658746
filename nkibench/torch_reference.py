"""PyTorch references: a user's reference module written with torch (as most NKI code ships
its reference, e.g. the NKI Library's `*_torch.py`).

A reference module that imports torch (`import torch`, `from torch... import`, anywhere in it)
is a PyTorch reference: `forward` takes and returns torch tensors. The problem still speaks
NumPy: `TorchReference` wraps the module so that its inputs are converted from NumPy at the
boundary (bfloat16 and fp8 bit for bit; NumPy scalars become 0-d tensors of their dtype) and
its outputs back to NumPy. `get_inputs()` may return tensors (drawn from torch's generator,
which each seed seeds, from NumPy's seeded generator, and restores afterwards) or arrays.
`forward` may return a tensor, a tuple or list of them, or a dict of them: a dict's outputs are
the kernel's outputs in the dict's order, and a kernel result handed back as a dict is matched
to them by name. `transform_to_nki_inputs` and `transform_nki_outputs` take and return tensors
too; `input_families()` works on the NumPy arrays.

torch is an optional dependency (`pip install 'accelopt-evo[torch]'`, a CPU build is enough);
a PyTorch reference without it is an error naming the file. Work is counted through torch's
dispatcher (`count_work`), as the NumPy references' through NumPy's protocols.
"""

from __future__ import annotations

import ast
import importlib.util
from typing import Any, Sequence

import numpy as np

INSTALL_HINT = "pip install 'accelopt-evo[torch]' (a CPU build of torch is enough)"
# The NumPy dtypes torch has no arithmetic for, and the torch dtypes their bits are viewed as.
_BITS = {"bfloat16": ("int16", "bfloat16"), "float8_e4m3fn": ("uint8", "float8_e4m3fn"),
         "float8_e5m2": ("uint8", "float8_e5m2")}


def imports_torch(text: str) -> bool:
    """Whether a module's source imports torch anywhere (a PyTorch reference)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "torch" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "torch":
            return True
    return False


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def missing_torch(path: Any) -> str:
    """The one-line error of a PyTorch reference where torch is not installed."""
    return f"reference module {path}: it imports torch (a PyTorch reference), which is not installed: {INSTALL_HINT}"


# --------------------------------------------------------------------------------------------
# Conversions at the boundary.


def to_torch(x: Any) -> Any:
    """A NumPy array (or NumPy scalar) as a torch tensor of the same dtype and values; lists,
    tuples and dicts element by element; anything else unchanged."""
    import torch

    if isinstance(x, np.generic):
        return to_torch(np.asarray(x)).reshape(())
    if isinstance(x, np.ndarray):
        name = x.dtype.name
        if x.dtype.hasobject or x.dtype.kind == "V" and name not in _BITS:
            raise TypeError(f"torch has no dtype for a NumPy {name} array")
        arr = x if x.flags.writeable and x.flags.c_contiguous else np.array(x, order="C")
        if name in _BITS:
            view, dtype = _BITS[name]
            return torch.from_numpy(arr.view(view)).view(getattr(torch, dtype))
        try:
            return torch.from_numpy(arr)
        except TypeError:
            raise TypeError(f"torch has no dtype for a NumPy {name} array") from None
    if isinstance(x, (list, tuple)):
        return type(x)(to_torch(v) for v in x)
    if isinstance(x, dict):
        return {k: to_torch(v) for k, v in x.items()}
    return x


def to_numpy(x: Any) -> Any:
    """A torch tensor as a NumPy array of the same dtype (bfloat16 and fp8 as ml_dtypes'); lists,
    tuples and dicts element by element; anything else unchanged."""
    import torch

    if isinstance(x, torch.Tensor):
        t = x.detach().cpu().contiguous()
        name = str(t.dtype).removeprefix("torch.")
        for np_name, (view, dtype) in _BITS.items():
            if name == dtype:
                import ml_dtypes

                return t.view(getattr(torch, view)).numpy().view(getattr(ml_dtypes, np_name))
        return t.numpy()
    if isinstance(x, (list, tuple)):
        return type(x)(to_numpy(v) for v in x)
    if isinstance(x, dict):
        return {k: to_numpy(v) for k, v in x.items()}
    return x


class TorchReference:
    """A PyTorch reference module as the problem uses a NumPy one: its hooks take and give
    NumPy; every other attribute (constants, TOLERANCE, input_families) is the module's."""

    def __init__(self, module: Any) -> None:
        self._module = module
        self.output_names: tuple[str, ...] | None = None   # forward's dict keys, once it ran

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def get_inputs(self) -> list[Any]:
        import torch

        seed = int(np.random.randint(0, 2**31 - 1))   # NumPy's generator is seeded per evaluation seed
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            inputs = self._module.get_inputs()
        return list(to_numpy(list(inputs))) if isinstance(inputs, (list, tuple)) else inputs

    def _outputs(self, result: Any) -> Any:
        """forward's result as NumPy: a dict's values in order (its keys kept as the output names)."""
        if isinstance(result, dict):
            self.output_names = tuple(str(k) for k in result)
            return tuple(to_numpy(v) for v in result.values())
        return to_numpy(result)

    def forward(self, *inputs: Any) -> Any:
        import torch

        with torch.no_grad():
            return self._outputs(self._module.forward(*to_torch(list(inputs))))

    @property
    def transform_to_nki_inputs(self) -> Any:
        hook = getattr(self._module, "transform_to_nki_inputs", None)
        if not callable(hook):
            return None
        return lambda inputs: list(to_numpy(list(hook(to_torch(list(inputs))))))

    @property
    def transform_nki_outputs(self) -> Any:
        hook = getattr(self._module, "transform_nki_outputs", None)
        if not callable(hook):
            return None

        def transform(kernel_result: Any, reference_result: Any) -> Any:
            if self.output_names and isinstance(reference_result, tuple) and len(reference_result) == len(self.output_names):
                reference_result = dict(zip(self.output_names, reference_result))
            return to_numpy(hook(to_torch(kernel_result), to_torch(reference_result)))
        return transform

    def by_name(self, raw: dict[Any, Any]) -> tuple[Any, ...]:
        """A kernel result given as a dict, in the order of forward's outputs (matched by name)."""
        names = self.output_names
        if not names:
            raise ValueError("the kernel's outputs are a dict, but the reference's forward() returns no dict "
                             "of outputs to match their names to")
        unknown = [str(k) for k in raw if str(k) not in names]
        missing = [n for n in names if n not in {str(k) for k in raw}]
        if unknown or missing:
            raise ValueError(f"the kernel's outputs are named {', '.join(map(str, raw))}; the reference's are "
                             f"{', '.join(names)}")
        values = {str(k): v for k, v in raw.items()}
        return tuple(values[n] for n in names)


# --------------------------------------------------------------------------------------------
# Counted work.


def _numel(x: Any) -> int:
    return int(x.numel()) if hasattr(x, "numel") else 0


def count_work(forward: Any, inputs: Sequence[Any], work: Any) -> tuple[Any, ...]:
    """Run a TorchReference's `forward` on NumPy `inputs`, adding its work to `work`
    (nkibench.user.Work), as the NumPy references' is counted: 2·M·K·N flops per matrix product
    (mm, bmm, addmm, baddbmm, dot, mv, and what matmul, einsum and linear become), one vector
    flop per element a pointwise operation writes or a reduction (or softmax, layer norm) reads.
    Operations it does not know are not counted: the counts are lower bounds."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    products = {aten.mm, aten.bmm, aten.addmm, aten.baddbmm, aten.dot, aten.mv, aten.vdot}
    along_dim = {aten._softmax: 1, aten._log_softmax: 1}

    class Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            packet = func.overloadpacket
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            if packet in products and len(tensors) >= 2:
                a = tensors[-2]   # (bias,) a, b: the product of the last two
                k = int(a.shape[-1]) if a.dim() else 1
                work.matmul_flops += 2.0 * _numel(out) * k
                work.reduction = max(work.reduction, k)
            elif packet in along_dim and tensors:
                x, dim = tensors[0], int(args[along_dim[packet]])
                work.vector_flops += float(_numel(x))
                work.reduction = max(work.reduction, int(x.shape[dim]) if x.dim() else 1)
            elif packet is aten.native_layer_norm and tensors:
                x, shape = tensors[0], args[1]
                work.vector_flops += float(_numel(x))
                work.reduction = max(work.reduction, int(np.prod(shape)) if len(shape) else 1)
            elif torch.Tag.reduction in func.tags and tensors:
                first = out[0] if isinstance(out, (tuple, list)) else out
                size = _numel(tensors[0])
                work.vector_flops += float(size)
                work.reduction = max(work.reduction, size // max(_numel(first), 1))
            elif torch.Tag.pointwise in func.tags:
                first = out[0] if isinstance(out, (tuple, list)) else out
                work.vector_flops += float(_numel(first))
            return out

    with Counter():
        return forward(*inputs)
