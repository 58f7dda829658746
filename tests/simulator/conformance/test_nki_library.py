"""The NKI Library (../shared/nki-library, AWS's kernels in the current dialect) loads as `eval`
would load it: at least 34 of its 38 `@nki.jit` modules load, and each one that does not fails
for a reason the emulator states (a file that does not parse, an NKI name it lacks, or host
access the policy refuses by design), never on library-standard Python (classes, dataclasses,
enums, typing, its logging helpers' os/sys, the package's imports)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from fitness.sandbox.check import check_files
from fitness.sandbox.modules import KernelModules

pytestmark = pytest.mark.slow   # one check process over 38 modules: about 10 s

LIBRARY = Path(__file__).resolve().parents[3].parent / "shared" / "nki-library"   # beside the checkout
MIN_LOADING = 34

# What a module that does not load may fail on: its own file, or one it imports, does not parse;
# an NKI name the emulator lacks; or the policy's refusal of host access or by-name lookups
# (tempfile and logging modules, getattr), which no kernel may do.
ACCEPTED = (
    re.compile(r"SyntaxError: .* \(the file does not parse\)"),
    re.compile(r"emu_unsupported_api"),
    re.compile(r"policy: .*import of module '(logging|tempfile)' is not allowed"),
    re.compile(r"policy: .*'getattr' is not allowed"),
)


def _kernel_files() -> list[Path]:
    if not (LIBRARY / "nkilib" / "__init__.py").is_file():
        pytest.skip(f"the NKI Library is absent ({LIBRARY} has no nkilib/__init__.py)")
    return sorted(p for p in (LIBRARY / "nkilib").rglob("*.py") if "@nki.jit" in p.read_text())


@pytest.fixture(scope="module")
def results() -> list[dict]:
    files = _kernel_files()
    return check_files([(str(p), p.read_text(), KernelModules.of_file(p)) for p in files], "trn2")


def test_at_least_34_of_the_librarys_kernel_modules_load(results):
    assert len(results) == 38
    loading = [r["path"] for r in results if r["loads"]]
    failing = {r["path"]: r["error"] for r in results if not r["loads"]}
    assert len(loading) >= MIN_LOADING, failing
    assert all(r["dialect"] == "current" for r in results if r["loads"])


def test_a_module_that_does_not_load_fails_for_a_stated_reason(results):
    for r in results:
        if r["loads"]:
            continue
        error = r["error"] or ""
        assert any(p.search(error) for p in ACCEPTED), (r["path"], error)
        assert "No module named" not in error and "internal error" not in error, (r["path"], error)


def test_a_library_module_that_does_not_parse_is_named_as_such(results):
    """transformer_tkg imports mlp.py, whose text has a stray indented block: the error names
    mlp.py and its line, not the kernel file."""
    mlp = LIBRARY / "nkilib" / "core" / "mlp" / "mlp.py"
    try:
        ast.parse(mlp.read_text(), str(mlp))
        pytest.skip("mlp.py parses in this copy of the library: nothing to name")
    except SyntaxError:
        pass
    by_name = {Path(r["path"]).name: r for r in results}
    assert not by_name["transformer_tkg.py"]["loads"]
    error = by_name["transformer_tkg.py"]["error"]
    assert re.match(r"nkilib/core/mlp/mlp\.py:\d+: (SyntaxError|IndentationError): ", error), error


REFERENCES = Path(__file__).resolve().parents[2] / "data" / "nki-library"


@pytest.mark.parametrize("kernel, function, reference", [
    ("nkilib/core/cumsum/cumsum.py", "cumsum", "cumsum_reference.py"),
    ("nkilib/core/max/cascaded_max.py", "cascaded_max", "cascaded_max_reference.py"),
])
def test_two_library_kernels_are_judged_ok_against_numpy_references(kernel, function, reference, capsys, tmp_path,
                                                                     monkeypatch):
    """`eval KERNEL --kernel F --reference REF`: the library file runs unmodified, through its own
    relative imports (nkilib.core.utils, cascaded_max_utils), and matches the reference."""
    import json

    from accelopt_evo.cli.main import main

    _kernel_files()   # skips without the library
    monkeypatch.chdir(tmp_path)
    code = main(["eval", str(LIBRARY / kernel), "--kernel", function, "--reference", str(REFERENCES / reference),
                 "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["status"] == "ok", result["error"]
    assert result["dialect"] == "current" and result["latency_ms"] > 0
