"""The static policy: what a kernel may and may not write."""

from __future__ import annotations

import pytest

from fitness.sandbox import policy
from nkibench.registry import load, make_spec

HEADER = "import numpy as np\nimport neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n"


def refused(body: str) -> list[policy.Violation]:
    return policy.check(HEADER + body)


def test_builtin_baseline_is_accepted():
    assert policy.check(load(make_spec("silu", "tiny")).baseline_source) == []


def test_official_baselines_are_accepted(nkibench_dir):
    files = sorted((nkibench_dir / "kernels").glob("*.py"))
    assert files
    for path in files:
        assert policy.check(path.read_text()) == [], path.name


def test_kernel_without_imports_uses_the_conventional_aliases():
    src = ("@nki.jit\ndef kernel(a):\n    x = nl.load(a)\n"
           "    y = nisa.tensor_scalar(x, np.multiply, 2.0)\n    return y\n")
    assert policy.check(src) == []


@pytest.mark.parametrize("body, words", [
    ("import posix\n", "'posix'"),
    ("import os.system\n", "'os.system'"),
    ("import gc\n", "'gc'"),
    ("import subprocess as sp\n", "'subprocess'"),
    ("from socket import socket\n", "'socket'"),
    ("import ctypes\n", "'ctypes'"),
    ("import importlib\n", "'importlib'"),
    ("import builtins\n", "'builtins'"),
    ("import pickle\n", "'pickle'"),
    ("import inspect\n", "'inspect'"),
    ("from sys import modules\n", "sys.modules"),
    ("import json\n", "'json'"),
    ("from . import x\n", "relative"),
    ("from numpy import *\n", "import *"),
    ("from numpy import load\n", "numpy.load"),
])
def test_forbidden_imports(body, words):
    found = refused(body)
    assert found and words in found[0].what, found


@pytest.mark.parametrize("body, words", [
    ("x = open('/etc/passwd').read()\n", "'open'"),
    ("exec('print(1)')\n", "'exec'"),
    ("eval('1+1')\n", "'eval'"),
    ("c = compile('1', 'f', 'eval')\n", "'compile'"),
    ("m = __import__('os')\n", "'__import__'"),
    ("f = getattr(nl, 'lo' + 'ad')\n", "'getattr'"),
    ("g = globals()\n", "'globals'"),
    ("v = vars(nl)\n", "'vars'"),
    ("b = __builtins__\n", "'__builtins__'"),
    ("t = type(nl)\n", "'type'"),
    ("s = ().__class__.__bases__[0].__subclasses__()\n", "'__class__'"),
    ("f = kernel.__globals__\n", "'__globals__'"),
    ("d = nl.__dict__\n", "'__dict__'"),
    ("p = nl._private\n", "private attribute '_private'"),
    ("x = np.load('/tmp/x.npy')\n", "numpy.load"),
    ("x = np.fromfile('/tmp/x')\n", "numpy.fromfile"),
    ("r = np.random.rand(3)\n", "numpy.random"),
    ("x = np.lib.npyio\n", "numpy.lib"),
    ("np.zeros(3).tofile('/tmp/out')\n", "'tofile'"),
    ("a = np.zeros(3).ctypes\n", "'ctypes'"),
    ("x = nl.np.load('f')\n", "'np'"),
    ("s = '{0.__class__}'.format(1)\n", "'format'"),
    ("nl.exp = nl.add\n", "assigning"),
    ("del nl.load\n", "assigning or deleting"),
    ("m = np\n", "may only be used as np.NAME"),
    ("f(nl)\n", "may only be used as nl.NAME"),
    ("class A(metaclass=M):\n    pass\n", "class keywords (metaclass=)"),
    ("class A:\n    def __init_subclass__(cls):\n        pass\n", "special function name '__init_subclass__'"),
    ("class A:\n    def __array_ufunc__(self, *a):\n        pass\n", "special function name '__array_ufunc__'"),
    ("class A:\n    __slots__ = ()\n", "special name '__slots__'"),
    ("try:\n    x = 1\nexcept Exception:\n    pass\n", "try/except"),
    ("def __getattr__(name):\n    return 1\n", "special function name"),
    ("g = (i for i in [1])\nf = g.gi_frame.f_globals\n", "'gi_frame'"),
    ("x = nl.language.something.deeper\n", "not an NKI namespace"),
])
def test_forbidden_constructs(body, words):
    found = refused(body)
    assert any(words in v.what for v in found), found


def test_violation_names_the_offending_line():
    found = refused("x = 1\nimport gc\n")
    assert found[0].line == 5 and found[0].code == "import gc"
    assert str(found[0]).startswith("line 5: import gc -- import of module 'gc'")


def test_nki_namespaces_and_numpy_operators_are_allowed():
    src = HEADER + (
        "import neuronxcc.nki.isa as nisa\nfrom neuronxcc.nki.language import par_dim\nimport math\n"
        "from neuronxcc.nki import trace\n"
        "@nki.jit\ndef kernel(a):\n"
        "    P = nl.tile_size.pmax\n"
        "    e = nki.isa.unknown_engine\n"
        "    t = nki.language.exp\n"
        "    z = np.dtype(np.float32).type(0)\n"
        "    ident = np.identity(128, dtype=np.float32)\n"
        "    k = math.ceil(3 / 2)\n"
        "    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)\n"
        "    return out\n")
    assert policy.check(src) == []


def test_syntax_errors_are_not_policy_matters():
    with pytest.raises(SyntaxError):
        policy.check("def kernel(:\n")


def test_huge_or_deeply_nested_sources_are_refused_not_crashing():
    assert "characters" in policy.check("x = 1\n" * 50_000)[0].what
    deep = "x = " + "(" * 5000 + "1" + ")" * 5000 + "\n"
    try:
        found = policy.check(deep)
    except SyntaxError:
        return   # the parser's own nesting limit: also a clean refusal
    assert found and "nested" in found[0].what


CURRENT_HEADER = "import numpy as np\nimport nki\nimport nki.language as nl\nimport nki.isa as nisa\n"
CURRENT_KERNEL = CURRENT_HEADER + (
    "@nki.jit\ndef kernel(a):\n"
    "    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)\n"
    "    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)\n"
    "    nisa.dma_copy(dst=t, src=a)\n"
    "    nisa.activation(dst=t, op=nl.exp, data=t)\n"
    "    nisa.dma_copy(dst=out, src=t)\n"
    "    return out\n")


def test_the_review_names_each_sources_dialect():
    assert policy.review(CURRENT_KERNEL) == policy.Review("current", [])
    assert policy.review(HEADER + "x = nl.load\n") == policy.Review("legacy", [])
    # no NKI import: the conventional aliases, of the default dialect
    assert policy.review("y = nl.exp\n").dialect == "legacy"
    assert policy.review("y = nl.exp\n", default="current").dialect == "current"


def test_default_aliases_follow_the_dialect():
    assert policy.DEFAULT_ALIASES["current"]["nl"] == "nki.language"
    assert policy.DEFAULT_ALIASES["legacy"]["nisa"] == "neuronxcc.nki.isa"
    # attribute chains of a current-dialect alias are checked like the legacy ones
    found = policy.check(CURRENT_KERNEL + "z = nl.exp.reduce\n")
    assert found and "not an NKI namespace" in found[0].what


def test_a_source_importing_both_dialects_is_refused_with_one_line():
    src = CURRENT_KERNEL + "import neuronxcc.nki.language as nll\nimport os\n"
    verdict = policy.review(src)
    assert verdict.dialect is None and len(verdict.violations) == 1
    v = verdict.violations[0]
    from fitness.simulator.dialect import DialectError, detect

    with pytest.raises(DialectError) as raised:
        detect(src)
    assert v.what == str(raised.value) and "\n" not in str(v)
    assert v.line == 13 and v.code == "import neuronxcc.nki.language as nll"


@pytest.mark.parametrize("header, modules", [(HEADER, "the neuronxcc.nki modules"), (CURRENT_HEADER, "the nki modules")])
def test_forbidden_import_messages_name_the_dialects_modules(header, modules):
    found = policy.check(header + "import json\n")
    assert found and found[0].what.endswith(
        f"a kernel may import only numpy, math, typing, enum, dataclasses, functools, os and sys (host-free "
        f"stand-ins) and {modules})")


# -- os and sys as host-free stand-ins; `object` in annotations ------------------------------------

CURRENT_LIB = "import nki.language as nl\n"


def test_the_os_and_sys_stand_ins_are_accepted_for_what_logging_helpers_use():
    src = CURRENT_LIB + (
        "import os\nimport sys\nimport os.path\nfrom os.path import join\nfrom os import environ, getenv\n"
        "LEVEL = os.environ.get('NKILIB_LOG_LEVEL', 'INFO')\nFOUND = [k for k, v in os.environ.items()]\n"
        "X = os.getenv('X')\nNAME = os.path.splitext(os.path.basename('a/b.py'))[0] + join('a', 'b')\n"
        "print('warning', file=sys.stderr)\nsys.stdout.flush()\nOLD = sys.version_info.major < 3\n"
        "BIG = sys.maxsize\n")
    assert policy.check(src) == []


@pytest.mark.parametrize("body, words", [
    ("import os\nos.system('ls')\n", "os.system (os.system) is not available to kernels"),
    ("import os\nf = os.fdopen(3, 'w')\n", "os.fdopen"),
    ("from os import fdopen\n", "os.fdopen is not available"),
    ("import os\nos.environ['X'] = 'y'\n", "assigning or deleting an item of 'os.environ'"),
    ("import os\ndel os.environ['X']\n", "assigning or deleting an item of 'os.environ'"),
    ("import os\nos.environ.update(X='y')\n", "os.environ.update"),
    ("import os\nos.environ.copy()\n", "(only get, items, keys, values)"),
    ("import os\nos.path.exists('/etc')\n", "os.path.exists"),
    ("from os.path import realpath\n", "os.path.realpath is not available"),
    ("import sys\nm = sys.modules\n", "sys.modules"),
    ("import sys\nf = sys._getframe(0)\n", "private attribute '_getframe'"),
    ("import sys\nb = sys.stderr.buffer\n", "sys.stderr.buffer"),
    ("import sys\nsys.stderr = None\n", "of the module 'sys'"),
    ("import os\nm = os\n", "may only be used as os.NAME"),
    ("import os\ne = os.environ.get.__self__\n", "special attribute '__self__'"),
    ("import posix\n", "'posix'"),
    ("x = nl.os\n", "the attribute 'os' is not allowed"),
])
def test_the_rest_of_os_and_sys_is_refused_with_the_line(body, words):
    found = policy.check(CURRENT_LIB + body)
    assert found and any(words in v.what for v in found), found
    assert found[0].line >= 2 and found[0].code


def test_object_is_allowed_as_an_annotation_only():
    src = CURRENT_LIB + ("from dataclasses import dataclass\n\n@dataclass\nclass View:\n    dtype: object\n"
                         "    input: nl.ndarray = None\n\ndef f(x: object) -> object:\n    y: object = x\n"
                         "    return y\n")
    assert policy.check(src) == []
    for body, line in (("x = object\n", 2), ("class A:\n    d: object = object\n", 3),
                       ("def f(x=object):\n    return x\n", 2), ("y: int = object()\n", 2)):
        found = policy.check(CURRENT_LIB + body)
        assert found and found[0].line == line and "'object' is not allowed" in found[0].what, (body, found)


@pytest.mark.parametrize("body, ok", [
    ("__all__ = ['f']\n", True),
    ("class W:\n    __name__: str = 'kernel'\n", True),
    ("def f():\n    __all__ = 1\n", False),
    ("x = __all__\n", False),
    ("class W:\n    __class__ = int\n", False),
    ("try:\n    x = {}['a']\nexcept KeyError:\n    x = None\n", True),
    ("try:\n    x = 1\nexcept (KeyError, Exception):\n    pass\n", False),
    ("try:\n    x = {}['a']\nexcept KeyError:\n    pass\nfinally:\n    pass\n", False),
    ("try:\n    x = 1\nexcept:\n    pass\n", False),
])
def test_declared_special_names_and_key_lookups(body, ok):
    found = policy.check(CURRENT_LIB + body)
    assert (found == []) == ok, found


def test_a_current_source_may_take_annotation_types_from_the_legacy_typing_module():
    src = CURRENT_LIB + "import neuronxcc.nki.typing as nt\n\ndef k(out: nt.mutable_tensor):\n    return out\n"
    verdict = policy.review(src)
    assert verdict.dialect == "current" and verdict.violations == []
    mixed = CURRENT_LIB + "import neuronxcc.nki.language as old\n"
    assert policy.review(mixed).dialect is None
