"""Array files (.npy) that keep the dtypes NumPy lacks: bfloat16 and the fp8 types of ml_dtypes.

NumPy writes an ml_dtypes array as raw bytes ('|V2') and reads it back untyped. Here such an
array is written as a one-field structured array whose field is named after its dtype
(`[('bfloat16', '<u2')]`, still a plain .npy file) and read back as that dtype. Every array
that crosses a process boundary (reference data, kernel outputs) goes through this module.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np

# The ml_dtypes types an array may hold, by name; NumPy knows every other dtype by name.
_EXTRA = ("bfloat16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
          "float8_e4m3b11fnuz", "float8_e3m4")


def dtype_of(name: str) -> np.dtype:
    """The dtype named `name` ("float32", "bfloat16", "float8_e4m3", ...); TypeError if none."""
    if name in _EXTRA:
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def dtype_name(dtype: np.dtype) -> str:
    """The name `dtype_of` reads back (NumPy's `dtype.str` is '|V2' for a bfloat16)."""
    return np.dtype(dtype).name


def _bits(dtype: np.dtype) -> np.dtype | None:
    """The structured dtype that stores an ml_dtypes dtype, or None for NumPy's own."""
    name = dtype.name
    if name not in _EXTRA:
        return None
    return np.dtype([(name, f"<u{dtype.itemsize}")])


def save(path: str | Path, array: np.ndarray) -> None:
    """Write `array` as a .npy file that `load` reads back with its dtype."""
    a = np.asarray(array)
    stored = _bits(a.dtype)
    if stored is not None:
        a = np.ascontiguousarray(a).view(stored)
    np.save(path, a, allow_pickle=False)


def load(path: str | Path, mmap: bool = False) -> np.ndarray:
    """Read a file `save` wrote (or any plain .npy file), memory-mapped read-only with `mmap`."""
    a = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    names = a.dtype.names
    if names and len(names) == 1 and names[0] in _EXTRA:
        a = a.view(dtype_of(names[0]))
    return a
