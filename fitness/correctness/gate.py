"""The correctness gate: a kernel's outputs for one seed against the reference outputs.

Runs in the trusted engine process on outputs the kernel process wrote to files; the kernel
process never sees the reference. Checks, per output: count, shape, dtype, NaN/Inf where the
reference is finite, and the L2 relative error ||out - ref|| / ||ref|| computed in float64
(NKIBench's rule, strict `<`) against a tolerance that is the baseline's own error on the same
inputs times YARDSTICK where the baseline's figures are known (`yardstick_tolerance`). A
failure names the output, the seed and the amount.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .precision import ENGINE_PRECISION, mantissa_bits

_CHUNK = 1 << 16   # elements per float64 chunk: a 512 KiB buffer that stays in cache


def _sum_sq(x: np.ndarray) -> float:
    # einsum, not np.dot: BLAS may run a thread team per call, which is slow on a busy machine.
    return float(np.einsum("i,i->", x, x))


def l2_errors(actual: np.ndarray, expected: np.ndarray) -> tuple[float, float, int, int]:
    """(||actual - expected||, ||expected||, non-finite count, index of the first) over the
    elements where `expected` is finite, accumulated in float64 chunk by chunk.

    The common case (everything finite) takes two float64 passes per chunk into one reused
    buffer; only when a sum comes out non-finite are the elements examined one by one."""
    a = np.asarray(actual).reshape(-1)
    e = np.asarray(expected).reshape(-1)
    buf = np.empty(min(_CHUNK, max(e.size, 1)), np.float64)
    diff_sq = ref_sq = 0.0
    for start in range(0, e.size, _CHUNK):
        d = buf[: min(_CHUNK, e.size - start)]
        np.subtract(a[start:start + _CHUNK], e[start:start + _CHUNK], out=d, dtype=np.float64, casting="unsafe")
        diff_sq += _sum_sq(d)
        np.copyto(d, e[start:start + _CHUNK], casting="unsafe")
        ref_sq += _sum_sq(d)
    if np.isfinite(diff_sq) and np.isfinite(ref_sq):
        return float(np.sqrt(diff_sq)), float(np.sqrt(ref_sq)), 0, -1
    return _l2_errors_nonfinite(a, e)


def _l2_errors_nonfinite(a: np.ndarray, e: np.ndarray) -> tuple[float, float, int, int]:
    """l2_errors when NaN or Inf occur: skip the reference's non-finite elements, count the
    kernel's non-finite values where the reference is finite."""
    diff_sq = ref_sq = 0.0
    bad = 0
    first_bad = -1
    for start in range(0, e.size, _CHUNK):
        ac = a[start:start + _CHUNK].astype(np.float64)
        ec = e[start:start + _CHUNK].astype(np.float64)
        finite_ref = np.isfinite(ec)
        finite_out = np.isfinite(ac)
        wrong = finite_ref & ~finite_out
        n_wrong = int(np.count_nonzero(wrong))
        if n_wrong and first_bad < 0:
            first_bad = start + int(np.argmax(wrong))
        bad += n_wrong
        both = finite_ref & finite_out
        d = ac[both] - ec[both]
        diff_sq += _sum_sq(d)
        ref_sq += _sum_sq(ec[finite_ref])
    return float(np.sqrt(diff_sq)), float(np.sqrt(ref_sq)), bad, first_bad


def output_error(index: int, actual: Any, expected: np.ndarray, seed_label: str,
                 dtype: np.dtype | None = None) -> tuple[float, str | None]:
    """(L2 relative error, failure message of the output's form or None) of one output.
    `dtype`: the type the output must have when the expected figures are held wider (a
    bfloat16 problem's reference is computed in float64); default the expected array's."""
    where = f"output {index} ({seed_label})"
    actual = np.asarray(actual)
    want = expected.dtype if dtype is None else np.dtype(dtype)
    if actual.shape != expected.shape:
        return float("inf"), f"{where}: shape {actual.shape} differs from the reference's {expected.shape}"
    if not _dtype_ok(actual.dtype, want):
        return float("inf"), f"{where}: dtype {actual.dtype} differs from the reference's {want}"
    err, norm, bad, first = l2_errors(actual, expected)
    if bad:
        pos = np.unravel_index(first, expected.shape) if expected.ndim else ()
        at = tuple(int(i) for i in pos)
        return float("inf"), f"{where}: {bad} NaN/Inf value(s) where the reference is finite (first at index {at})"
    if err == 0:
        return 0.0, None
    return (err / norm if norm > 0 else float("inf")), None


def _dtype_ok(actual: np.dtype, expected: np.dtype) -> bool:
    """Same dtype; a float64 reference also accepts float32 (the widest type the engines write)."""
    if actual == expected:
        return True
    a, e = mantissa_bits(actual), mantissa_bits(expected)
    return a is not None and e is not None and a >= min(e, ENGINE_PRECISION)


def check_output(index: int, actual: Any, expected: np.ndarray, tolerance: float, seed_label: str,
                 dtype: np.dtype | None = None) -> str | None:
    """The failure message of one output, or None when it passes (`output_error` below
    `tolerance`, strictly)."""
    rel, failure = output_error(index, actual, expected, seed_label, dtype)
    return failure or _beyond(index, seed_label, rel, tolerance)


def _beyond(index: int, seed_label: str, rel: float, tolerance: float) -> str | None:
    """The failure of an output whose error `rel` is not below `tolerance` (0 always passes)."""
    if rel < tolerance or rel == 0:
        return None
    return f"output {index} ({seed_label}): L2 relative error {rel:.3e} exceeds the tolerance {tolerance:.1e}"


def judge_outputs(outputs: Sequence[Any], expected: Sequence[np.ndarray], tolerance: float | Sequence[float],
                  seed_label: str, dtypes: Sequence[np.dtype] | None = None) -> tuple[str | None, list[float]]:
    """(the first failure over all outputs of one seed or None, the L2 relative error of each
    output). `tolerance`: one for all outputs or one per output; `dtypes`: see `output_error`."""
    if len(outputs) != len(expected):
        return f"{seed_label}: the kernel returned {len(outputs)} output(s), the reference has {len(expected)}", []
    tolerances = [tolerance] * len(expected) if isinstance(tolerance, (int, float)) else list(tolerance)
    errors: list[float] = []
    for i, (out, ref) in enumerate(zip(outputs, expected)):
        rel, failure = output_error(i, out, ref, seed_label, dtypes[i] if dtypes else None)
        errors.append(rel)
        failure = failure or _beyond(i, seed_label, rel, tolerances[i])
        if failure:
            return failure, errors
    return None, errors


def check_outputs(outputs: Sequence[Any], expected: Sequence[np.ndarray], tolerance: float | Sequence[float],
                  seed_label: str, dtypes: Sequence[np.dtype] | None = None) -> str | None:
    """The first failure over all outputs of one seed, or None (see `judge_outputs`)."""
    return judge_outputs(outputs, expected, tolerance, seed_label, dtypes)[0]


# A kernel is judged against the baseline's own error on the same inputs: at most YARDSTICK
# times it, floored by the problem's tolerance and, for an output narrower than float32, by one
# unit roundoff of its type (what rounding every element once costs, at most). A skipped
# statistic whose error the dtype formula in the reduction length would hide (rms(x) of a
# standard normal row is 1 within 1/sqrt(2D)) then fails, while an honest kernel that rounds
# where the baseline does, or once more, passes.
YARDSTICK = 2.0


def yardstick_tolerance(loosest: float, floor: float, baseline_error: float | None) -> float:
    """The tolerance of an output whose baseline erred by `baseline_error` on the same inputs
    (None: no baseline figure, `loosest`, the problem's tolerance for the output's type); never
    looser than `loosest`, never tighter than `floor`."""
    if baseline_error is None or not np.isfinite(baseline_error):
        return loosest
    return min(loosest, max(floor, YARDSTICK * baseline_error))
