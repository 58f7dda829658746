"""Problems users bring (nkibench/user.py): folders, shape constants, counted work, tolerance."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from fitness.correctness import arrays
from nkibench import registry, user
from nkibench.problem import low_precision_tolerance

REFERENCE = '''
import ml_dtypes
import numpy as np

K = 256
M = 128
N = 64
ROWS = M * 2          # derived constants follow an override


def get_inputs():
    return [np.random.randn(K, M).astype(ml_dtypes.bfloat16), np.random.randn(K, N).astype(ml_dtypes.bfloat16)]


def forward(xT, w):
    y = xT.astype(np.float32).T @ w.astype(np.float32)
    return (y * 2.0).astype(ml_dtypes.bfloat16), np.full((ROWS,), float(M), dtype=np.float32)
'''


def _store(tmp_path, reference=REFERENCE, name="mm"):
    return user.store(tmp_path, name, reference, "def kernel(xT, w):\n    return xT\n", "current")


def test_store_is_content_addressed_and_read_back(tmp_path):
    a, b = _store(tmp_path), _store(tmp_path)
    assert a == b and user.is_problem_folder(a) and a.name.startswith("mm-")
    assert _store(tmp_path, REFERENCE + "\n# changed\n") != a
    assert user.read_meta(a) == {"name": "mm", "dialect": "current"}
    assert registry.own_dialect("mm", str(a)) == "current"


def test_problem_names_come_from_the_file_or_its_folder(tmp_path):
    assert user.problem_name("kernels/my-rmsnorm.py") == "my_rmsnorm"
    assert user.problem_name("examples/softmax_bf16/reference.py") == "softmax_bf16"
    assert user.problem_name("2d.py") == "p_2d"


def test_shape_constants_are_overridden_in_the_module_and_derived_ones_follow(tmp_path):
    folder = _store(tmp_path)
    spec = registry.make_spec("mm", params={"M": 256}, suite_dir=str(folder))
    problem = registry.load(spec)
    assert spec.param_dict == {"K": 256, "M": 256, "N": 64}     # ROWS is computed, not a constant
    xT, w = problem.make_inputs(0)
    assert xT.shape == (256, 256) and xT.dtype == ml_dtypes.bfloat16
    assert problem.reference(xT, w)[1].shape == (512,)


@pytest.mark.parametrize("overrides, message", [
    ({"Q": 3}, "no shape constant 'Q' (its constants: K, M, N)"),
    ({"M": 0}, "shape constant M must be a positive integer"),
])
def test_bad_overrides_name_the_file(tmp_path, overrides, message):
    folder = _store(tmp_path)
    with pytest.raises(registry.ProblemError, match="reference.py: ") as exc:
        registry.make_spec("mm", params=overrides, suite_dir=str(folder))
    assert message in str(exc.value)


def test_work_is_counted_while_the_reference_runs(tmp_path):
    problem = registry.load(registry.make_spec("mm", suite_dir=str(_store(tmp_path))))
    counts = problem.counts
    assert counts.flops_matmul == 2 * 128 * 256 * 64
    assert counts.flops_vector == 128 * 64           # y * 2.0 (casts and np.full are no arithmetic)
    # HBM: both inputs read, both declared outputs written, at their own element sizes
    assert counts.hbm_bytes == 2 * (256 * 128 + 256 * 64) + 2 * 128 * 64 + 4 * 256
    assert counts.matmul_dtype == "bfloat16"
    assert problem.reduction_length == 256


def test_counting_covers_dot_einsum_and_reductions_and_skips_what_it_cannot_count():
    a, b = np.ones((8, 16), np.float32), np.ones((16, 4), np.float32)
    work, (out,) = user.count_work(lambda x, y: (np.dot(x, y),), [a, b])
    assert work.matmul_flops == 2 * 8 * 16 * 4 and work.reduction == 16 and out.shape == (8, 4)
    work, _ = user.count_work(lambda x, y: np.einsum("mk,kn->mn", x, y), [a, b])
    assert work.matmul_flops == 2 * 8 * 16 * 4
    work, _ = user.count_work(lambda x: x.sum(axis=1), [a])
    assert work.vector_flops == 8 * 16 and work.reduction == 16
    work, _ = user.count_work(lambda x, y: np.dot(x, y), [np.ones((3, 8, 16), np.float32), b])
    assert work.matmul_flops == 2 * 3 * 8 * 16 * 4
    work, _ = user.count_work(lambda x: np.einsum("bmk,bkn->bmn", x, x), [np.ones((2, 4, 4))])
    assert work.matmul_flops == 2 * 2 * 4 * 4 * 4 and work.reduction == 4
    # what leaves NumPy's protocols is not counted (the counts are lower bounds, never overcounts)
    work, _ = user.count_work(lambda x: np.asarray(x).view(np.ndarray) @ np.ones((16, 4)), [a])
    assert work.matmul_flops == 0


def test_tolerance_derives_from_the_output_dtype_and_reduction_length(tmp_path):
    u_bf16 = 2.0 ** -8
    assert low_precision_tolerance(np.dtype(np.float32), 4096) == 0
    assert math.isclose(low_precision_tolerance(np.dtype(ml_dtypes.bfloat16), 128), 5 * u_bf16)
    assert math.isclose(low_precision_tolerance(np.dtype(ml_dtypes.bfloat16), 2048), 8 * u_bf16)
    assert math.isclose(low_precision_tolerance(np.dtype(np.float16), 128), 5 * 2.0 ** -11)
    assert low_precision_tolerance(np.dtype(ml_dtypes.float8_e4m3), 128) == 0.25    # capped
    problem = registry.load(registry.make_spec("mm", suite_dir=str(_store(tmp_path))))
    assert math.isclose(problem.tolerance_for(np.dtype(ml_dtypes.bfloat16)), u_bf16 * (4 + math.sqrt(2)))
    assert problem.tolerance_for(np.dtype(np.float32)) == problem.tolerance    # fp32: the problem's own


def test_a_declared_tolerance_replaces_the_formula(tmp_path):
    folder = _store(tmp_path, REFERENCE + "\nTOLERANCE = 0.05\n")
    problem = registry.load(registry.make_spec("mm", suite_dir=str(folder)))
    assert problem.tolerance_for(np.dtype(ml_dtypes.bfloat16)) == 0.05
    bad = _store(tmp_path, REFERENCE + "\nTOLERANCE = -1\n")
    with pytest.raises(registry.ProblemError, match="TOLERANCE must be a positive number"):
        registry.load(registry.make_spec("mm", suite_dir=str(bad)))


@pytest.mark.parametrize("text, message", [
    ("def forward(x):\n    return x\n", r"missing function\(s\) get_inputs\(\)"),
    ("import numpy as np\nN = 4\ndef get_inputs():\n    return [np.zeros((N, N), np.complex64)]\n"
     "def forward(x):\n    return x\n", "get_inputs\\(\\) returned an array of dtype complex64"),
    ("import numpy as np\ndef get_inputs():\n    return [np.zeros(4, np.float32)]\n"
     "def forward(x):\n    raise RuntimeError('boom')\n", r"forward\(\) raised RuntimeError: boom"),
    ("import numpy as np\nraise ImportError('no')\n", "import failed: ImportError: no"),
    ("def get_inputs(:\n", "does not parse"),
])
def test_bad_references_say_what_and_where(tmp_path, text, message):
    folder = _store(tmp_path, text)
    with pytest.raises(registry.ProblemError, match=message) as exc:
        registry.load(registry.make_spec("mm", suite_dir=str(folder))).counts   # noqa: B018
    assert str(folder / "reference.py") in str(exc.value)


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3, ml_dtypes.float8_e5m2, np.float16,
                                   np.float32, np.int8])
def test_array_files_keep_narrow_dtypes(tmp_path, dtype):
    a = (np.arange(12).reshape(3, 4) - 5).astype(dtype)
    arrays.save(tmp_path / "a.npy", a)
    back = arrays.load(tmp_path / "a.npy")
    assert back.dtype == np.dtype(dtype) and np.array_equal(back.astype(np.float32), a.astype(np.float32))
    assert arrays.dtype_of(arrays.dtype_name(back.dtype)) == back.dtype


def test_reductions_inside_numpy_functions_are_counted():
    a = np.ones((8, 16), np.float32)
    work, _ = user.count_work(lambda x: np.mean(x * x, axis=-1), [a])
    assert work.reduction == 16 and work.vector_flops == 2 * 8 * 16 + 8     # square, sum, divide by 16
    work, _ = user.count_work(lambda x, y: np.tensordot(x, y, axes=1), [a, np.ones((16, 4), np.float32)])
    assert work.matmul_flops == 2 * 8 * 16 * 4     # once, not again for the dot inside tensordot
