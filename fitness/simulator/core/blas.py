"""Single-threaded BLAS while a kernel runs.

The emulator multiplies thousands of small tiles (128 x 128 by 128 x 512). Multi-threaded
OpenBLAS gains nothing on matrices that small and, when the cores are shared with other
processes, its spinning worker threads make each call 10-20x slower. NumPy's OpenBLAS is
found among the libraries loaded in the process and told to use one thread for the
duration of the run; with another BLAS (or none found) this does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import re
import sys
from collections.abc import Iterator

_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_", "openblas_set_num_threads")
_GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
            "openblas_get_num_threads64_", "openblas_get_num_threads")

_api: tuple | None = None
_searched = False


def _find() -> tuple | None:
    """(set_num_threads, get_num_threads) of NumPy's OpenBLAS, or None."""
    global _api, _searched
    if _searched:
        return _api
    _searched = True
    if not sys.platform.startswith("linux"):
        return None
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return None
    for path in sorted(set(re.findall(r"(/\S*openblas\S*\.so\S*)", maps))):
        if "numpy" not in path:
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        setter = next((getattr(lib, n) for n in _SETTERS if hasattr(lib, n)), None)
        getter = next((getattr(lib, n) for n in _GETTERS if hasattr(lib, n)), None)
        if setter is not None and getter is not None:
            getter.restype = ctypes.c_int
            _api = (setter, getter)
            return _api
    return None


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Run the block with one BLAS thread, restoring the previous count afterwards."""
    api = _find()
    if api is None:
        yield
        return
    setter, getter = api
    before = getter()
    setter(1)
    try:
        yield
    finally:
        setter(before)
