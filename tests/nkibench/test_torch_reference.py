"""PyTorch references (`--reference` of a module that imports torch): NumPy in and out at the
boundary, work counted through torch's dispatcher, outputs of a dict matched by position or
name, and a clear error where torch is not installed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from accelopt_evo.cli.main import main
from nkibench import registry, torch_reference, user

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (pip install 'accelopt-evo[torch]')")
REPO = Path(__file__).resolve().parents[2]

MATMUL = '''"""a @ b in torch, and its transpose, named."""
import torch

M = 64
K = 256
N = 32


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def forward(a, b):
    c = torch.matmul(a, b)
    return {"c": c, "t": c.T.contiguous()}
'''


def problem(tmp_path: Path, reference: str, name: str = "mm") -> user.UserProblem:
    folder = user.store(tmp_path, name, reference, "", "current")
    return registry.load(user.spec(folder))


def test_a_module_importing_torch_is_a_pytorch_reference():
    assert torch_reference.imports_torch("import torch\n")
    assert torch_reference.imports_torch("def f():\n    from torch.nn import functional as F\n")
    assert not torch_reference.imports_torch("import numpy as np\nimport torchvision_like\n")


@needs_torch
def test_conversions_keep_dtypes_and_bits():
    import torch

    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    for dtype in (np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
                  np.int32, np.uint8, np.bool_):
        a = x.astype(dtype)
        t = torch_reference.to_torch(a)
        back = torch_reference.to_numpy(t)
        assert back.dtype == a.dtype and np.array_equal(back.view(np.uint8), a.view(np.uint8)), dtype
    assert torch_reference.to_torch(np.float32(2.5)).dtype == torch.float32
    assert torch_reference.to_torch(1e-5) == 1e-5
    with pytest.raises(TypeError, match="torch has no dtype for a NumPy float8_e4m3 array"):
        torch_reference.to_torch(x.astype(ml_dtypes.float8_e4m3))


@needs_torch
def test_inputs_outputs_and_counted_work_of_a_pytorch_reference(tmp_path):
    import torch

    p = problem(tmp_path, MATMUL)
    state = torch.random.get_rng_state()
    a, b = p.make_inputs(0)
    assert torch.equal(torch.random.get_rng_state(), state)          # torch's generator left as it was
    assert isinstance(a, np.ndarray) and a.dtype == np.float32 and a.shape == (64, 256)
    assert np.array_equal(p.make_inputs(0)[0], a) and not np.array_equal(p.make_inputs(1)[0], a)
    c, t = p.reference(a, b)
    assert np.allclose(c, a @ b, rtol=1e-4, atol=1e-4) and np.array_equal(t, c.T)
    assert p.counts.flops_matmul == 2 * 64 * 256 * 32 and p.reduction_length == 256
    assert [d.name for d in p.output_dtypes] == ["float32", "float32"]
    # the kernel's outputs by position, or by name when handed back as a dict
    arranged = p.from_kernel_outputs((c, t), (c, t))
    assert np.array_equal(arranged[0], c) and np.array_equal(arranged[1], t)
    arranged = p.from_kernel_outputs({"t": t, "c": c}, (c, t))
    assert np.array_equal(arranged[0], c) and np.array_equal(arranged[1], t)
    with pytest.raises(ValueError, match="named c, u; the reference's are c, t"):
        p.from_kernel_outputs({"c": c, "u": t}, (c, t))
    # the kernel process builds its arguments without executing the reference (and importing torch)
    assert registry.kernel_inputs(p.spec) is list


@needs_torch
def test_counted_work_of_reductions_and_element_wise_operations(tmp_path):
    softmax = MATMUL.replace('''    c = torch.matmul(a, b)
    return {"c": c, "t": c.T.contiguous()}''', '''    return torch.softmax(a, dim=-1) * 2.0, a.sum(dim=1)''')
    p = problem(tmp_path, softmax, "sm")
    work = p.counts
    assert work.flops_matmul == 0
    assert work.flops_vector == 64 * 256 + 64 * 256 + 64 * 256   # softmax, the product, the sum
    assert p.reduction_length == 256


def test_a_pytorch_reference_without_torch_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch_reference, "torch_available", lambda: False)
    folder = user.store(tmp_path, "mm", MATMUL, "", "current")
    with pytest.raises(user.UserProblemError, match=r"imports torch \(a PyTorch reference\), which is not installed: "
                                                    r"pip install 'accelopt-evo\[torch\]'"):
        user.UserProblem.load(user.spec(folder))
    ref = tmp_path / "ref_torch.py"
    ref.write_text(MATMUL)
    monkeypatch.chdir(tmp_path)
    assert main(["eval", str(REPO / "examples/rmsnorm_bf16/kernel.py"), "--reference", str(ref)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "which is not installed" in err, err


RMSNORM_TORCH = '''"""RMSNorm in bfloat16: the PyTorch reference of examples/rmsnorm_bf16/kernel.py."""
import torch

N = 256
D = 1024


def get_inputs():
    return [torch.randn(N, D).to(torch.bfloat16), (1.0 + 0.1 * torch.randn(D)).to(torch.bfloat16)]


def forward(x, w):
    x = x.float()
    return {"out": (x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + 1e-6) * w.float()).to(torch.bfloat16)}
'''


@needs_torch
def test_eval_judges_a_kernel_against_a_pytorch_reference(tmp_path, monkeypatch, capsys):
    ref = tmp_path / "rmsnorm_torch.py"
    ref.write_text(RMSNORM_TORCH)
    monkeypatch.chdir(tmp_path)
    kernel = REPO / "examples/rmsnorm_bf16/kernel.py"
    assert main(["eval", str(kernel), "--reference", str(ref), "--target", "trn2", "--json"]) == 0
    import json

    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "ok", result["error"]
    assert result["percent_of_peak"] and result["errors"] and max(result["errors"][0]) < 0.0039
    # a wrong kernel is still wrong: the mean of squares over 2D
    wrong = tmp_path / "wrong.py"
    wrong.write_text(kernel.read_text().replace("scale=1.0 / D", "scale=0.5 / D"))
    assert wrong.read_text() != kernel.read_text()
    assert main(["eval", str(wrong), "--reference", str(ref), "--target", "trn2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "incorrect"
