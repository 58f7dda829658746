"""`check PATH...`: whether kernel files load (policy, dialect, their package's imports, their
module-level code with the emulator's NKI modules), without running a kernel."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from accelopt_evo.cli.main import main
from fitness.sandbox.check import construct_status, nki_names

HEADER = "import numpy as np\nimport nki\nimport nki.language as nl\nimport nki.isa as nisa\n"
NKILIB = Path(__file__).resolve().parents[3].parent / "shared" / "nki-library" / "nkilib"


@pytest.fixture
def files(tmp_path) -> Path:
    root = tmp_path / "kernels"
    (root / "kpkg" / "utils").mkdir(parents=True)
    (root / "kpkg" / "__init__.py").write_text("import os\n")        # never runs: only its modules are imported
    (root / "kpkg" / "utils" / "__init__.py").write_text("")
    (root / "kpkg" / "utils" / "shapes.py").write_text(HEADER + "from dataclasses import dataclass\n\n\n"
                                                       "@dataclass\nclass Tile:\n    rows: int = nl.tile_size.pmax\n")
    (root / "kpkg" / "good.py").write_text(HEADER + "from .utils.shapes import Tile\n\nT = Tile()\n\n\n"
                                           "@nki.jit\ndef kernel(x):\n    e = nisa.no_such_instruction\n"
                                           "    return nl.exp(x)\n")
    (root / "kpkg" / "host.py").write_text(HEADER + "from .utils import shapes\nimport subprocess\n")
    (root / "kpkg" / "broken.py").write_text("def kernel(:\n")
    (root / "kpkg" / "early.py").write_text(HEADER + "K = nl.not_in_the_emulator\n")
    return root


def test_each_file_says_whether_it_loads_its_first_error_and_the_names_it_lacks(files, capsys):
    assert main(["check", str(files), "--json"]) == 1
    results = {Path(r["path"]).name: r for r in json.loads(capsys.readouterr().out)}
    assert set(results) == {"__init__.py", "shapes.py", "good.py", "host.py", "broken.py", "early.py"}
    for r in results.values():
        assert set(r) == {"path", "dialect", "loads", "error", "missing", "approximate"}
    good = results["good.py"]
    assert good["loads"] and good["error"] is None and good["dialect"] == "current"
    assert good["missing"] == ["nki.isa.no_such_instruction"] and good["approximate"] == []
    assert results["shapes.py"]["loads"]
    assert "policy:" in results["host.py"]["error"] and "import subprocess" in results["host.py"]["error"]
    assert "SyntaxError" in results["broken.py"]["error"] and results["broken.py"]["dialect"] is None
    early = results["early.py"]
    assert not early["loads"] and "early.py:5" in early["error"] and "emu_unsupported_api" in early["error"]
    assert early["missing"] == ["nki.language.not_in_the_emulator"]


def test_text_output_is_one_line_per_file(files, capsys):
    good, host = files / "kpkg" / "good.py", files / "kpkg" / "host.py"
    assert main(["check", str(good)]) == 0
    assert capsys.readouterr().out == f"{good}: loads (current); missing: nki.isa.no_such_instruction\n"
    assert main(["check", str(good), str(host), "--target", "trn2"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[1].startswith(f"{host}: does not load (current): policy:")


def test_a_legacy_kernel_for_a_target_without_the_legacy_dialect(files, capsys):
    legacy = files / "legacy.py"
    legacy.write_text("import neuronxcc.nki.language as nl\nX = nl.tile_size.pmax\n")
    assert main(["check", str(legacy), "--target", "trn3"]) == 1
    assert "never ran on trn3" in capsys.readouterr().out
    assert main(["check", str(legacy)]) == 0


@pytest.mark.parametrize("argv, needle", [
    (["check", "no/such/file.py"], "is not a file or folder"),
    (["check"], "PATH"),
])
def test_user_errors_are_one_line_and_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err


def test_an_empty_folder_is_a_user_error(tmp_path, capsys):
    assert main(["check", str(tmp_path)]) == 2
    assert "holds no .py file" in capsys.readouterr().err


def test_the_names_a_source_uses_and_the_lookup_the_construct_table_plugs_into():
    src = (HEADER + "from nki.isa.constants import oob_mode\nfrom nki.language import NKIObject\n"
           "a = nl.tile_size.pmax\nb = nisa.dge_mode.none\nc = nki.isa.nc_version.gen3\nd = nl.exp(x).sum\n"
           "e = nl._private\n")
    names = nki_names(src, "current")
    assert names == ["nki.isa.constants.oob_mode", "nki.isa.dge_mode.none", "nki.isa.nc_version.gen3",
                     "nki.language.NKIObject", "nki.language.exp", "nki.language.tile_size.pmax"]
    missing, approximate = construct_status("current", ["nki.language.exp", "nki.language.tile_size.pmax",
                                                        "nki.isa.constants.oob_mode", "nki.language.no_such_name"])
    assert missing == ["nki.language.no_such_name"] and approximate == []   # nki.isa.constants: nki.isa's enums
    legacy = "import neuronxcc.nki.language as nl\nfrom neuronxcc import nki\nx = nl.exp\ny = nki.isa.nc_matmul\n"
    assert nki_names(legacy, "legacy") == ["nki.isa.nc_matmul", "nki.language.exp"]
    assert construct_status("legacy", ["nki.language.exp", "nki.language.no_such_name"]) == (
        ["nki.language.no_such_name"], [])


@pytest.mark.skipif(not (NKILIB / "__init__.py").is_file(), reason="the NKI Library (../shared/nki-library) is absent")
def test_the_nki_librarys_kernels_fail_only_on_what_the_emulator_lacks_or_host_access():
    """Every module of the NKI Library with an @nki.jit kernel loads, or fails on an NKI name
    the emulator lacks, on a file that does not parse, or on host access the policy refuses
    (tempfile and logging, by-name lookups): never on classes, dataclasses, enums, typing or the
    package's imports."""
    kernels = sorted(str(p) for p in NKILIB.rglob("*.py") if "@nki.jit" in p.read_text())
    assert len(kernels) >= 30
    out = subprocess.run([sys.executable, "-m", "accelopt_evo", "check", "--json", *kernels], capture_output=True,
                         text=True, timeout=300)
    results = json.loads(out.stdout)
    assert len(results) == len(kernels) and any(r["loads"] for r in results)
    for r in results:
        error = r["error"] or ""
        host = any(w in error for w in ("'logging' is not allowed", "'getattr' is not allowed"))
        assert (r["loads"] or "emu_unsupported_api" in error or "SyntaxError" in error or host), (r["path"], error)
        assert "No module named" not in error and "KernelModule" not in error, (r["path"], error)
