"""Kernel modules as real NKI code is written: classes, dataclasses, enums, typing, module-level
helpers and constants, relative imports of the kernel's own package and absolute imports of a
kernel library (`evaluation.kernel_paths`), all under the same policy and sandbox. And the
red team of that surface: what a class body, a method, a sibling module or an import may
still not reach."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from eval_kernels import HEADER

from accelopt_evo.cli.main import main
from fitness.sandbox import policy
from fitness.sandbox.modules import KernelModules, KernelPolicyError, Loader
from fitness.service import Evaluator, review
from fitness.settings import EvalSettings
from fitness.simulator import run_kernel
from nkibench.registry import make_spec

CURRENT = "import numpy as np\nimport nki\nimport nki.language as nl\nimport nki.isa as nisa\n"
SPEC = make_spec("silu", "tiny")
X = np.random.default_rng(0).standard_normal((128, 512)).astype(np.float32)

# A kernel library of the NKI Library's shape: a package whose __init__.py is host code (it
# would be refused), helper modules with classes, a dataclass, an enum and private state, and
# kernels importing them relatively.
ALLOC = HEADER + '''
from dataclasses import dataclass
from enum import Enum
from typing import Optional


class Mode(Enum):
    EXP = 1
    NONE = 2


@dataclass(frozen=True)
class Tiling:
    rows: int = 128
    _cols: Optional[int] = None


class Counter:
    def __init__(self):
        self._calls = 0

    def bump(self):
        self._calls += 1
        return self._calls


PMAX = 128


def activation(mode: Mode, dtype: Optional[type] = None):
    return nl.exp if mode is Mode.EXP else None
'''

SILU = HEADER + '''
from ..utils.alloc import PMAX, Counter, Mode, Tiling, activation
from ..utils import alloc

COUNTER = Counter()


@nki.jit
def kernel(x):
    assert COUNTER.bump() == 1          # a fresh load for every run: nothing survives a seed
    assert Tiling()._cols is None and alloc.PMAX == PMAX
    M, N = x.shape
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(PMAX)[:, None]
    i_f = nl.arange(N)[None, :]
    for m in nl.affine_range(M // PMAX):
        xt = nl.load(x[m * PMAX + i_p, i_f])
        e = nisa.activation(op=activation(Mode.EXP), data=xt, scale=-1.0)
        r = nisa.reciprocal(nl.add(e, 1.0))
        nl.store(out[m * PMAX + i_p, i_f], value=nl.multiply(xt, r))
    return out
'''


def with_lines(lines: str, source: str = SILU) -> str:
    """The silu kernel with `lines` at the top of its body."""
    return source.replace("    assert COUNTER.bump() == 1", lines + "\n    assert COUNTER.bump() == 1")


@pytest.fixture
def library(tmp_path) -> Path:
    root = tmp_path / "lib"
    files = {
        "kpkg/__init__.py": "import socket\nLEVEL = socket.gethostname()\n",
        "kpkg/utils/__init__.py": "",
        "kpkg/utils/alloc.py": ALLOC,
        "kpkg/utils/bad_os.py": "import posix\nX = 1\n",
        "kpkg/utils/mods.py": "import numpy as numpy_alias\nimport neuronxcc.nki.language as language\nY = 2\n",
        "kpkg/utils/boxes.py": HEADER + (
            "class Box:\n    def peek(self):\n        return self._b\n\n    def poke(self):\n        self.shape = (1,)\n"),
        "kpkg/kernels/__init__.py": "",
        "kpkg/kernels/silu.py": SILU,
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    os.symlink("/etc/hostname", root / "kpkg/utils/linked.py")
    return root


def load(library: Path, source: str = SILU, **paths) -> dict:
    modules = KernelModules.of_file(library / "kpkg/kernels/silu.py", **paths)
    verdict = policy.review(source, **modules.policy_context())
    assert verdict.violations == [], verdict.violations
    return run_kernel(source, [X], loader=Loader(modules))


def test_a_kernel_of_a_package_is_its_module(library):
    modules = KernelModules.of_file(library / "kpkg/kernels/silu.py")
    assert (modules.name, modules.root, modules.package) == ("kpkg.kernels.silu", str(library), "kpkg.kernels")
    assert modules.readable_dirs() == [str(library / "kpkg")]
    assert KernelModules.of_file(library / "kpkg/utils/bad_os.py").name == "kpkg.utils.bad_os"
    # outside a package, or in one named like a module the evaluation uses: a file of its own
    loose = library / "loose.py"
    loose.write_text("x = 1\n")
    assert KernelModules.of_file(loose).name == ""
    (library / "fitness").mkdir()
    (library / "fitness/__init__.py").write_text("")
    (library / "fitness/k.py").write_text("")
    assert KernelModules.of_file(library / "fitness/k.py").name == ""


def test_classes_dataclasses_enums_and_relative_imports_load_and_run(library):
    run = load(library)
    expected = X / (1 + np.exp(-X))
    assert np.allclose(run.outputs, expected, rtol=1e-5, atol=1e-6)
    # again: a fresh load (the module-level counter starts over)
    assert np.allclose(load(library).outputs, expected, rtol=1e-5, atol=1e-6)


def test_a_package_init_runs_only_when_a_name_of_the_package_itself_is_taken(library):
    load(library)   # kpkg/__init__.py (import socket) never ran: only its modules were imported
    with pytest.raises(KernelPolicyError, match=r"kpkg/__init__.py: line 1: import socket .* 'socket' is not allowed"):
        load(library, with_lines("    from kpkg import LEVEL"))


def test_a_sibling_module_that_imports_os_is_refused_naming_its_file(library):
    source = SILU.replace("from ..utils import alloc", "from ..utils import alloc\nfrom ..utils.bad_os import X")
    with pytest.raises(KernelPolicyError, match=r"kpkg/utils/bad_os.py: line 1: import posix"):
        load(library, source)


def test_a_relative_import_climbing_out_of_the_package_is_refused(library):
    modules = KernelModules.of_file(library / "kpkg/kernels/silu.py")
    found = policy.check(SILU.replace("from ..utils import alloc", "from ... import elsewhere"),
                         **modules.policy_context())
    assert found and "climbs out of the package 'kpkg'" in found[0].what
    # and outside any package, no relative import at all
    assert "only in a module of a package" in policy.check("from . import x\n")[0].what


def test_a_link_out_of_the_package_is_not_read(library):
    source = SILU.replace("from ..utils import alloc", "from ..utils import alloc\nfrom ..utils import linked")
    with pytest.raises(KernelPolicyError, match="must lie inside it"):
        load(library, source)


def test_another_modules_imports_are_out_of_reach(library):
    source = with_lines("    a = mods.numpy_alias.fromfile('/etc/hostname')").replace(
        "from ..utils import alloc", "from ..utils import alloc, mods")
    with pytest.raises(KernelPolicyError, match="'numpy_alias' of the module 'kpkg.utils.mods' is a module it imported"):
        load(library, source)
    source = with_lines("    t = mods.language.tile_size").replace(
        "from ..utils import alloc", "from ..utils import alloc, mods")
    with pytest.raises(KernelPolicyError, match="'language' of the module"):
        load(library, source)


@pytest.mark.parametrize("lines, words", [
    # a method of the kernel's own class called on an emulator tensor: its storage stays out of reach
    ("    b = Box.peek(x)", "access to the private attribute '_b' of a NkiTensor is not allowed"),
    ("    Box.poke(x)", "assigning or deleting the attribute 'shape' of a NkiTensor is not allowed"),
    ("    t = nl.tile_size\n    t.pmax = 512", "assigning or deleting the attribute 'pmax' of a _TileSize"),
    ("    e = nl.exp\n    e._hidden = 1", "assigning or deleting the attribute '_hidden'"),
    # a class of the kernel's may not derive from an emulator class
    ("    class Mine(nl.tile_size):\n        pass", "class Mine derives from _TileSize"),
    # the functional Enum API defines attributes by name, special ones too
    ("    E = Mode('E', [('__eq__', 1)])", "the functional Enum API"),
])
def test_the_run_time_guards_refuse_what_is_not_the_kernels_own(library, lines, words):
    source = SILU.replace("from ..utils import alloc", "from ..utils import alloc\nfrom ..utils.boxes import Box")
    with pytest.raises(KernelPolicyError, match=words.replace("(", r"\(").replace(")", r"\)")):
        load(library, with_lines(lines, source))


@pytest.mark.parametrize("body, words", [
    ("class A:\n    def f(self):\n        return self.f.__globals__\n", "special attribute '__globals__'"),
    ("class A:\n    def f(self):\n        return self.__class__.__subclasses__()\n", "special attribute '__class__'"),
    ("class A(metaclass=type):\n    pass\n", "class keywords"),
    ("class A:\n    def __exit__(self, *exc):\n        return True\n", "special function name '__exit__'"),
    ("class A:\n    def __getattribute__(self, name):\n        return 1\n", "special function name"),
    ("class A:\n    def __set_name__(self, owner, name):\n        pass\n", "special function name"),
    ("class A:\n    x = type(1)\n", "'type' is not allowed"),
    ("import dataclasses\nf = dataclasses.fields\n", "dataclasses.fields"),
    ("from typing import get_type_hints\n", "typing.get_type_hints"),
    ("import functools\nfunctools.x = 1\n", "of the module 'functools'"),
    ("try:\n    import neuronxcc.nki.compiler\nexcept Exception:\n    pass\n", "try/except"),
    ("try:\n    x = nl.load(a)\nexcept ImportError:\n    pass\n", "try/except"),
    ("if False:\n    eval = 1\nx = eval('1')\n", "'eval' is not allowed"),
    ("def f():\n    def g():\n        eval = 1\n    return eval('1')\n", "'eval' is not allowed"),
    ("def f():\n    global eval\n    return eval('1')\n", "'eval' is not allowed"),
    ("x: int = type\n", "'type' is not allowed"),
    ("class A:\n    x: int = object\n", "'object' is not allowed"),
])
def test_the_policy_still_refuses(body, words):
    found = policy.check(HEADER + body)
    assert any(words in v.what for v in found), found


def test_what_real_kernels_write_is_accepted():
    src = "from __future__ import annotations\n" + CURRENT + '''
import math
from dataclasses import dataclass, field
from enum import Enum, auto
from functools import lru_cache, partial
from typing import List, Optional, Tuple

try:
    from nki.collectives import ReplicaGroup
except ImportError:
    ReplicaGroup = None


class Engine(Enum):
    A = auto()


@dataclass
class Cfg:
    sizes: List[int] = field(default_factory=list)

    def __post_init__(self):
        self._n = len(self.sizes)

    @property
    def n(self):
        return self._n

    @staticmethod
    def of(input: int, format: str = "x", type: Optional[type] = None) -> "Cfg":
        return Cfg([input] * math.ceil(1.5))


def __private_helper(x):
    return x


@lru_cache(maxsize=None)
def tiles(n: int) -> Tuple[int, ...]:
    return tuple(range(n))
'''
    assert policy.review(src).violations == []
    # the same source on hardware, where nothing checks at run time: private attributes and
    # attribute assignment only on a method's self or cls
    unguarded = policy.check(src, guarded=False)
    assert unguarded and "'type' is not allowed" in unguarded[0].what
    assert [v.what for v in policy.check(src.replace(", type: Optional[type] = None", ""), guarded=False)] == []
    found = policy.check(CURRENT + "def f(c):\n    return c._n\n", guarded=False)
    assert found and "methods' self and cls" in found[0].what
    found = policy.check(CURRENT + "class A:\n    def f(self, c):\n        c.x = 1\n", guarded=False)
    assert found and "assigning or deleting the attribute 'x' is not allowed here" in found[0].what


def test_a_kernel_library_of_the_kernel_paths_imports_absolutely(library):
    standalone = HEADER + SILU.split(HEADER, 1)[1].replace(
        "from ..utils.alloc import", "from kpkg.utils.alloc import").replace(
        "from ..utils import alloc", "import kpkg.utils.alloc as alloc")
    assert "is not allowed" in policy.check(standalone)[0].what   # without the kernel path
    modules = KernelModules.with_paths([str(library)])
    assert "kpkg" in modules.libraries() and modules.readable_dirs() == [str(library)]
    assert policy.check(standalone, **modules.policy_context()) == []
    run = run_kernel(standalone, [X], loader=Loader(modules))
    assert np.allclose(run.outputs, X / (1 + np.exp(-X)), rtol=1e-5, atol=1e-6)


def test_the_digest_follows_the_files_a_kernel_may_import(library):
    modules = KernelModules.of_file(library / "kpkg/kernels/silu.py")
    before = modules.digest()
    assert modules.digest() == before
    (library / "kpkg/utils/alloc.py").write_text(ALLOC.replace("PMAX = 128", "PMAX = 64"))
    assert modules.digest() != before


def test_kernel_imports_run_on_the_simulator_only(library):
    modules = KernelModules.of_file(library / "kpkg/kernels/silu.py")
    source = HEADER + "from ..utils.alloc import PMAX\n"
    assert review(source, "simulator", "trn1", None, modules) == ("legacy", None)
    _, result = review(source, "trainium", "trn1", None, modules)
    assert result.status == "compile_error" and "run on the simulator backend" in result.error


def test_in_the_sandbox(library):
    """End to end through the evaluator: the package's files are readable by the kernel
    process, and the policy and guards hold there as in this process."""
    settings = EvalSettings(backend="simulator", seeds=(0,), timeout_s=60, memory_limit_mb=2048, workers=1,
                            kernel_file=str(library / "kpkg/kernels/silu.py"))
    bad_os = SILU.replace("from ..utils import alloc", "from ..utils import alloc\nfrom ..utils.bad_os import X")
    peek = with_lines("    b = Box.peek(x)", SILU.replace("from ..utils import alloc",
                                                          "from ..utils import alloc\nfrom ..utils.boxes import Box"))
    with Evaluator(settings) as evaluator:
        honest, refused, guarded = evaluator.evaluate_many(SPEC, [SILU, bad_os, peek])
    assert honest.ok, honest.error
    assert refused.status == "rejected" and "policy: kpkg/utils/bad_os.py: line 1: import posix" in refused.error
    assert guarded.status == "rejected" and "policy: kpkg/utils/boxes.py:7: access to the private attribute '_b' of " \
        "a NkiTensor" in guarded.error


def test_eval_loads_a_kernel_file_of_a_package_as_its_module(library, capsys, tmp_path, monkeypatch):
    import json

    monkeypatch.chdir(tmp_path)
    kernel = library / "kpkg/kernels/silu.py"
    assert main(["eval", str(kernel), "--problem", "silu", "--shape", "tiny", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "ok", result["error"]
    # a file of its own importing the library absolutely, with evaluation.kernel_paths
    loose = tmp_path / "loose.py"
    loose.write_text(SILU.replace("from ..utils.alloc import", "from kpkg.utils.alloc import").replace(
        "from ..utils import alloc", "import kpkg.utils.alloc as alloc"))
    assert main(["eval", str(loose), "--problem", "silu", "--shape", "tiny", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "rejected"
    assert main(["eval", str(loose), "--problem", "silu", "--shape", "tiny", "--json",
                 "--set", f'evaluation.kernel_paths=["{library}"]']) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "ok"


FLASH = Path(__file__).resolve().parents[3].parent / "shared/trn1-variants/flash-attention"


@pytest.mark.skipif(not (FLASH / "attention_kernels.py").is_file(), reason="../shared/trn1-variants is absent")
def test_a_kernel_using_a_class_of_its_module_is_judged(capsys, tmp_path, monkeypatch):
    """The SDK tutorial's attn_fwd_v9 allocates with `class SBufAllocator` of its file."""
    import json

    monkeypatch.chdir(tmp_path)
    assert main(["eval", str(FLASH / "attention_kernels.py"), "--kernel", "attn_fwd_v9", "--reference",
                 str(FLASH / "reference.py"), "--set", "problem.S=512", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "ok", result["error"]


# -- os and sys as host-free stand-ins ----------------------------------------------------------

HOST_HELPERS = CURRENT + '''import os
import sys
import os.path
from dataclasses import dataclass


@dataclass
class View:
    dtype: object
    input: nl.ndarray = None


LEVEL = os.environ.get("HOME", "unset")
KEYS = list(os.environ.keys())
FROM_GETENV = os.getenv("PATH", "none")
NAME = os.path.splitext(os.path.basename("a/b/kernel.py"))[0]
JOINED = os.path.join("a", "b")
WROTE = sys.stderr.write("a warning\\n")
print("to nowhere", file=sys.stdout)
VERSION = sys.version_info.major
VIEW = View(dtype=nl.float32)
try:
    MISSING = {"a": 1}["b"]
except KeyError:
    MISSING = "caught"
'''


def _load_current(source: str) -> dict:
    from fitness.simulator.runner import install

    install("current")
    assert policy.check(source) == []
    return Loader(KernelModules())(source, "kernel.py", "current")


def test_os_and_sys_stand_ins_see_no_host(capsys, monkeypatch):
    monkeypatch.setenv("HOME", "/somewhere")
    ns = _load_current(HOST_HELPERS)
    assert (ns["LEVEL"], ns["KEYS"], ns["FROM_GETENV"]) == ("unset", [], "none")   # no environment at all
    assert (ns["NAME"], ns["JOINED"], ns["WROTE"], ns["VERSION"]) == ("kernel", "a/b", len("a warning\n"), 3)
    assert ns["MISSING"] == "caught" and ns["VIEW"].dtype == np.float32
    out = capsys.readouterr()
    assert "a warning" not in out.err and "to nowhere" not in out.out   # never the real streams


def test_the_stand_ins_hold_nothing_else():
    from fitness.sandbox.modules import STDLIB

    os_, sys_ = STDLIB["os"], STDLIB["sys"]
    for module, names in ((os_, ("system", "open", "fdopen", "popen", "remove", "execv", "fork")),
                          (os_.path, ("exists", "realpath", "expanduser")),
                          (sys_, ("modules", "_getframe", "settrace", "path", "exit", "stdin"))):
        for name in names:
            assert not hasattr(module, name), (module.__name__, name)
    with pytest.raises(TypeError):
        os_.environ["X"] = "y"                       # read-only, whoever holds it
    assert not hasattr(sys_.stderr, "buffer") and not hasattr(sys_.stderr, "fileno")


def test_a_run_time_write_to_the_environment_is_refused():
    src = CURRENT + "from os import environ\nenv = environ\nenv['X'] = 'y'\n"   # out of the policy's sight
    with pytest.raises(TypeError, match="does not support item assignment"):
        _load_current(src)
