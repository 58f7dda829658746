"""A user's own kernel and NumPy reference: `eval --reference` and `run --reference --baseline`
in bf16, fp8 and fp32, in both NKI dialects (README: Optimize your own kernel)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from accelopt_evo.cli.main import main

REPO = Path(__file__).resolve().parents[2]

# out = xT.T @ w, the inputs in IN, the output in OUT; the kernel's matmul operands may be cast.
REFERENCE = '''
import ml_dtypes
import numpy as np

K = 256
M = 128
N = 256


def get_inputs():
    return [np.random.randn(K, M).astype({IN}), np.random.randn(K, N).astype({IN})]


def forward(xT, w):
    return (xT.astype(np.float32).T @ w.astype(np.float32)).astype({OUT})
'''

LEGACY = '''
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def kernel(xT, w):
    K, M = xT.shape
    N = w.shape[1]
    out = nl.ndarray((M, N), dtype=nl.{OUT}, buffer=nl.shared_hbm)
    acc = nl.zeros((nl.par_dim(M), N), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range({TILES}):
        a = nl.load(xT[k * 128:(k + 1) * 128, 0:M])
        b = nl.load(w[k * 128:(k + 1) * 128, 0:N])
        acc += nisa.nc_matmul({CAST_A}, b)
    res = nl.copy(acc, dtype=nl.{OUT})
    nl.store(out, value=res)
    return out
'''

CURRENT = '''
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matmul_kernel(xT, w):
    K, M = xT.shape
    N = w.shape[1]
    out = nl.ndarray((M, N), dtype=nl.{OUT}, buffer=nl.shared_hbm)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range({TILES}):
        a = nl.ndarray((128, M), dtype=xT.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=xT[k * 128:(k + 1) * 128, 0:M])
        b = nl.ndarray((128, N), dtype=w.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=b, src=w[k * 128:(k + 1) * 128, 0:N])
        nisa.nc_matmul(dst=acc, stationary={CAST_A}, moving=b)
    res = nl.ndarray((M, N), dtype=nl.{OUT}, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out
'''

# The stationary operand cast to another dtype on chip first (a precision change the trace shows).
LEGACY_CAST = "nl.copy(a, dtype=nl.{DTYPE})"
CURRENT_CAST_SETUP = ("        a2 = nl.ndarray((128, M), dtype=nl.{DTYPE}, buffer=nl.sbuf)\n"
                      "        nisa.tensor_copy(dst=a2, src=a)\n")

# problem -> (input dtype, output dtype) of the reference
DTYPES = {"bf16": ("ml_dtypes.bfloat16", "ml_dtypes.bfloat16"), "fp8": ("ml_dtypes.float8_e4m3", "ml_dtypes.bfloat16"),
          "fp32": ("np.float32", "np.float32")}


def reference(tmp_path: Path, problem: str) -> str:
    path = tmp_path / f"mm_{problem}.py"
    in_dtype, out_dtype = DTYPES[problem]
    path.write_text(REFERENCE.replace("{IN}", in_dtype).replace("{OUT}", out_dtype))
    return str(path)


def kernel(tmp_path: Path, dialect: str, out: str, *, tiles: str = "K // 128", cast: str = "",
           name: str = "kernel.py") -> str:
    if dialect == "legacy":
        src = LEGACY.replace("{CAST_A}", LEGACY_CAST.replace("{DTYPE}", cast) if cast else "a")
    else:
        src = CURRENT.replace("{CAST_A}", "a2" if cast else "a")
        if cast:
            src = src.replace("        nisa.nc_matmul(", CURRENT_CAST_SETUP.replace("{DTYPE}", cast)
                              + "        nisa.nc_matmul(")
    path = tmp_path / name
    path.write_text(src.replace("{OUT}", out).replace("{TILES}", tiles))
    return str(path)


def evaluate(capsys, *args: str) -> dict:
    assert main(["eval", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def failure(capsys, *args: str) -> str:
    assert main(list(args)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    return err[0]


@pytest.mark.parametrize("dialect", ["legacy", "current"])
@pytest.mark.parametrize("problem", ["bf16", "fp8"])
def test_low_precision_kernels_are_judged_on_trn2(tmp_path, capsys, dialect, problem):
    ref = reference(tmp_path, problem)
    good = evaluate(capsys, kernel(tmp_path, dialect, "bfloat16"), "--reference", ref, "--target", "trn2")
    assert good["status"] == "ok" and good["speedup"] is None and good["percent_of_peak"] > 0
    wrong = evaluate(capsys, kernel(tmp_path, dialect, "bfloat16", tiles="K // 128 - 1"), "--reference", ref,
                     "--target", "trn2")
    assert wrong["status"] == "incorrect" and "exceeds the tolerance" in wrong["error"]


@pytest.mark.parametrize("dialect", ["legacy", "current"])
def test_a_bf16_problem_refuses_fp8_arithmetic_and_accepts_fp32(tmp_path, capsys, dialect):
    ref = reference(tmp_path, "bf16")
    fp8 = evaluate(capsys, kernel(tmp_path, dialect, "bfloat16", cast="float8_e4m3"), "--reference", ref,
                   "--target", "trn2")
    assert fp8["status"] == "incorrect"
    assert fp8["error"].startswith("precision downgrade:") and "float8_e4m3" in fp8["error"]
    assert "narrower than bfloat16, the narrowest type the reference's inputs use" in fp8["error"]
    wider = evaluate(capsys, kernel(tmp_path, dialect, "bfloat16", cast="float32"), "--reference", ref,
                     "--target", "trn2")
    assert wider["status"] == "ok"


def test_an_fp32_problem_still_refuses_bf16_arithmetic(tmp_path, capsys):
    ref = reference(tmp_path, "fp32")
    ok = evaluate(capsys, kernel(tmp_path, "legacy", "float32"), "--reference", ref)
    assert ok["status"] == "ok" and ok["target"] == "trn1"
    bf16 = evaluate(capsys, kernel(tmp_path, "legacy", "float32", cast="bfloat16"), "--reference", ref)
    assert bf16["status"] == "incorrect" and "bfloat16" in bf16["error"] and "narrower than float32" in bf16["error"]


def test_fp8_does_not_exist_on_trn1(tmp_path, capsys):
    result = evaluate(capsys, kernel(tmp_path, "legacy", "bfloat16"), "--reference", reference(tmp_path, "fp8"))
    assert result["status"] == "compile_error"
    assert result["error"].startswith("kernel.py:") and "fp8 types exist on trn2 and trn3, not on trn1" in result["error"]


def test_a_baseline_gives_the_speedup_and_the_baseline_may_set_a_lower_floor(tmp_path, capsys):
    ref = reference(tmp_path, "bf16")
    slow = kernel(tmp_path, "current", "bfloat16", cast="float32", name="slow.py")
    fast = kernel(tmp_path, "current", "bfloat16")
    result = evaluate(capsys, fast, "--reference", ref, "--baseline", slow, "--target", "trn2")
    assert result["status"] == "ok" and result["speedup"] > 1.0
    fp8_base = kernel(tmp_path, "current", "bfloat16", cast="float8_e4m3", name="fp8_base.py")
    fp8 = evaluate(capsys, fp8_base, "--reference", ref, "--baseline", fp8_base, "--target", "trn2")
    assert "precision downgrade" not in fp8["error"]   # the baseline itself computes in fp8


def test_bad_input_is_one_line_naming_the_file(tmp_path, capsys):
    ref = reference(tmp_path, "bf16")
    good = kernel(tmp_path, "current", "bfloat16")
    no_forward = tmp_path / "noforward.py"
    no_forward.write_text("import numpy as np\nN = 4\ndef get_inputs():\n    return [np.zeros((N, N))]\n")
    line = failure(capsys, "eval", good, "--reference", str(no_forward), "--target", "trn2")
    assert str(no_forward) in line and "missing function(s) forward()" in line
    line = failure(capsys, "eval", good, "--reference", ref, "--target", "trn2", "--set", "problem.Q=3")
    assert ref in line and "no shape constant 'Q'" in line
    both = failure(capsys, "eval", good, "--reference", ref, "--problem", "silu")
    assert "either --problem NAME or --reference" in both
    wrong_signature = tmp_path / "sig.py"
    wrong_signature.write_text(Path(good).read_text().replace("def matmul_kernel(xT, w):",
                                                              "def matmul_kernel(xT, w, bias):"))
    line = failure(capsys, "run", "--reference", ref, "--baseline", str(wrong_signature), "--target", "trn2",
                   "--gens", "0", "--out", str(tmp_path / "runs"), "--no-progress")
    assert "the baseline of 'mm_bf16'" in line and str(wrong_signature) in line and "bias" in line
    fp32_out = tmp_path / "fp32_out.py"
    fp32_out.write_text(Path(good).read_text().replace("nl.bfloat16", "nl.float32"))
    line = failure(capsys, "run", "--reference", ref, "--baseline", str(fp32_out), "--target", "trn2",
                   "--gens", "0", "--out", str(tmp_path / "runs"), "--no-progress")
    assert str(fp32_out) in line and "output 0 has dtype float32, wider than the reference's bfloat16" in line
    line = failure(capsys, "run", "--reference", ref, "--baseline", good, "--baseline", good, "--target", "trn2")
    assert "one --baseline per --reference" in line
    line = failure(capsys, "run", "--reference", ref, "--baseline", good, "--target", "trn2", "--dialect", "legacy",
                   "--gens", "0", "--out", str(tmp_path / "runs"))
    assert "problem 'mm_bf16' has no baseline in the legacy dialect" in line


@pytest.mark.slow
def test_the_readme_example_runs_resumes_and_reports(tmp_path, capsys, monkeypatch):
    """README: Optimize your own kernel, with the example shipped in examples/rmsnorm_bf16."""
    example = tmp_path / "rmsnorm_bf16"
    shutil.copytree(REPO / "examples" / "rmsnorm_bf16", example)
    monkeypatch.chdir(tmp_path)
    args = ["run", "--reference", "rmsnorm_bf16/reference.py", "--baseline", "rmsnorm_bf16/kernel.py",
            "--target", "trn2", "--gens", "3", "--out", "runs", "--run-id", "own", "--no-progress"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "best rmsnorm_bf16: " in out and "report: " in out
    run = tmp_path / "runs" / "own"
    (stored,) = (run / "problems").iterdir()
    assert (stored / "reference.py").read_text() == (example / "reference.py").read_text()
    # the run folder needs nothing else: resume and report work with the user's files gone
    shutil.rmtree(example)
    moved = tmp_path / "moved"
    run.rename(moved)
    assert main(["resume", str(moved), "--gens", "4", "--no-progress"]) == 0
    out = capsys.readouterr().out
    speedup = float(out.split("speedup ")[1].split("x")[0])
    assert speedup > 1.0    # the knob search finds the faster settings of the example
    assert main(["report", str(moved)]) == 0
    report = (moved / "report.md").read_text()
    assert "rmsnorm_bf16 (D=1024, N=2048)" in report


def test_another_shape_of_the_example_through_set(tmp_path, capsys):
    example = REPO / "examples" / "rmsnorm_bf16"
    result = evaluate(capsys, str(example / "kernel.py"), "--reference", str(example / "reference.py"),
                      "--target", "trn2", "--set", "problem.N=256", "--set", "problem.D=512")
    assert result["status"] == "ok" and result["problem"].startswith("rmsnorm_bf16")


def test_several_pairs_are_several_problems(tmp_path, capsys):
    example = REPO / "examples" / "rmsnorm_bf16"
    ref, good = reference(tmp_path, "bf16"), kernel(tmp_path, "current", "bfloat16")
    args = ["run", "--reference", ref, "--baseline", good, "--reference", str(example / "reference.py"),
            "--baseline", str(example / "kernel.py"), "--target", "trn2", "--gens", "0", "--out",
            str(tmp_path / "runs"), "--run-id", "two", "--no-progress", "--set", "problem.N=256"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "best mm_bf16: " in out and "best rmsnorm_bf16: " in out
    assert len(list((tmp_path / "runs" / "two" / "problems").iterdir())) == 2
    same_name = ["run", "--reference", ref, "--baseline", good, "--reference", ref, "--baseline", good,
                 "--target", "trn2", "--gens", "0", "--out", str(tmp_path / "runs")]
    assert "two problems are named 'mm_bf16'" in failure(capsys, *same_name)


def test_prompts_get_the_problem_s_precision_floor_and_argument_names(tmp_path):
    from accelopt_evo.run.user_problems import Pair, stage
    from accelopt_evo.search.engine import describe_kernel_inputs, kernel_precision
    from nkibench import registry

    example = REPO / "examples" / "rmsnorm_bf16"
    folder = stage(Pair(example / "reference.py", example / "kernel.py"), tmp_path)
    problem = registry.load(registry.make_spec("rmsnorm_bf16", params={"N": 256}, suite_dir=str(folder)))
    inputs = problem.make_inputs(0)
    assert kernel_precision(problem, inputs) == "bfloat16"
    assert problem.output_tolerance() == pytest.approx(2.0 ** -8 * (4 + math.sqrt(1024 / 128)))
    assert describe_kernel_inputs(problem, inputs) == "x: bfloat16[256, 1024], w: bfloat16[1024]"
    silu = registry.load(registry.make_spec("silu", "tiny"))
    assert kernel_precision(silu, silu.make_inputs(0)) == "float32"
