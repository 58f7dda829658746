"""Choosing the kernel function of a file with several (fitness.sandbox.entry)."""

from __future__ import annotations

import pytest

from fitness.sandbox import policy
from fitness.sandbox.entry import EntryError, select

FILE = '''"""Two kernels and a demo."""
import os
import nki
import nki.language as nl
import numpy as np

os.environ["X"] = "1"
SCALE = 2.0
TILE = 128
a = np.random.rand(4, 4)


def helper(t):
    return t * SCALE


@nki.jit
def first(a):
    b = nl.load(a)
    return helper(b)


@nki.jit
def second(x):
    return nl.load(x[0:TILE])


if __name__ == "__main__":
    print(first(a))
'''


def test_the_chosen_function_keeps_what_it_uses_and_its_line_numbers():
    src = select(FILE, "first")
    lines = src.splitlines()
    assert lines[-1] == "kernel = first"
    # kept where they were: the imports the function uses, the helper and its constant
    for line in ("import nki", "import nki.language as nl", "SCALE = 2.0", "def helper(t):", "@nki.jit",
                 "def first(a):"):
        assert lines[FILE.splitlines().index(line)] == line
    # left out: the other kernel, unused imports and constants, module-level code, the demo;
    # the module-level `a` is not the function's argument `a`
    for gone in ("import os", "os.environ", "TILE = 128", "def second", "__main__", "np.random", "import numpy"):
        assert gone not in src, gone
    assert policy.review(src) == policy.Review("current", [])


def test_kernel_is_kept_as_it_is_and_unknown_functions_are_named():
    assert "kernel = " not in select(FILE.replace("def second", "def kernel"), "kernel")
    with pytest.raises(EntryError, match="defines no function 'third' \\(its functions: helper, first, second\\)"):
        select(FILE, "third")
    with pytest.raises(EntryError, match="does not parse"):
        select("def (", "x")


def test_a_class_the_function_uses_and_the_future_import_are_kept():
    src = select('''from __future__ import annotations
import os
import nki
import nki.language as nl
from dataclasses import dataclass

os.environ["X"] = "1"


@dataclass
class Tiles:
    rows: int = 128

    def count(self, n: int) -> int:
        return n // self.rows


class Unused:
    pass


@nki.jit
def third(x):
    return Tiles().count(x.shape[0])
''', "third")
    assert src.startswith("from __future__ import annotations\n")
    assert "class Tiles:" in src and "from dataclasses import dataclass" in src and "@dataclass" in src
    assert "class Unused" not in src and "import os" not in src
    assert policy.review(src) == policy.Review("current", [])
