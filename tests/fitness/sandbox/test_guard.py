"""The audit-hook guard of the kernel process."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from fitness.sandbox import process

HERE = str(Path(__file__).resolve().parent)


def probe(tmp_path: Path, probes: list[tuple[str, str]], files=(), dirs=(), allow_exec=False,
          preimport=(), **extra: list[str]) -> list[str]:
    """Results of `probes` in a guarded process; `extra`: in_memory, sys_path, provided."""
    work = tmp_path / "work"
    work.mkdir()
    got: list[dict] = []
    outcome = process.run("guard_target", {"probes": probes, "files": list(files), "dirs": list(dirs),
                                           "allow_exec": allow_exec, "preimport": list(preimport), **extra},
                          process.Limits(30, 2048), work, lambda m: got.append(m) is None, path=[HERE])
    assert outcome.returncode == 0, outcome.stderr
    return got[0]["results"]


def test_reads_outside_the_allowed_places_are_refused(tmp_path):
    secret = tmp_path / "expected.npy"
    secret.write_bytes(b"answers")
    allowed = tmp_path / "input.npy"
    allowed.write_bytes(b"inputs")
    res = probe(tmp_path, [("read", str(secret)), ("read", str(allowed)), ("read", "/etc/hostname"),
                           ("read", os.__file__), ("listdir", str(tmp_path))],
                files=[str(allowed)])
    assert res[0].startswith("refused: sandbox: reading")
    assert res[1] == "allowed"
    assert res[2].startswith("refused")
    assert res[3] == "allowed"
    assert res[4].startswith("refused: sandbox: listing")


def test_writes_only_in_the_working_directory(tmp_path):
    outside = tmp_path / "outside.txt"
    res = probe(tmp_path, [("write", str(outside)), ("write", "inside.txt"), ("remove", str(outside)),
                           ("numpy_save", str(tmp_path / "x.npy")), ("numpy_save", "y.npy")])
    assert res[0].startswith("refused: sandbox: writing")
    assert res[1] == "allowed"
    assert res[2].startswith("refused")
    assert res[3].startswith("refused") and res[4] == "allowed"
    assert not outside.exists() and not (tmp_path / "x.npy").exists()


def test_processes_sockets_signals_and_risky_imports_are_refused(tmp_path):
    res = probe(tmp_path, [("exec", ""), ("socket", ""), ("kill", ""), ("ctypes", ""),
                           ("import", "multiprocessing"), ("import", "json"), ("open_fd", "1")])
    assert res[0].startswith("refused: sandbox: starting a process")
    assert res[1].startswith("refused")
    assert res[2].startswith("refused: sandbox: os.kill")
    assert res[3].startswith("refused: sandbox: ctypes.")
    assert res[4].startswith("refused: sandbox: importing 'multiprocessing'")
    assert res[5] == "allowed"
    assert res[6].startswith("refused: sandbox: opening file descriptor 1")


def test_trainium_mode_lets_the_sdk_run_programs_but_still_keeps_writes_in(tmp_path):
    res = probe(tmp_path, [("exec", ""), ("read", "/etc/hostname"), ("write", str(tmp_path / "out.txt")),
                           ("write", "inside.txt")], allow_exec=True)
    assert res[0] == "allowed" and res[1] in ("allowed", "oserror: [Errno 2] No such file or directory: "
                                                         "'/etc/hostname'")
    assert res[2].startswith("refused: sandbox: writing") and res[3] == "allowed"


def test_sqlite_is_refused_whether_or_not_it_was_imported_before_the_guard(tmp_path):
    outside = tmp_path / "db.sqlite"
    fresh = probe(tmp_path, [("sqlite", str(outside))])
    assert fresh[0].startswith("refused: sandbox: importing 'sqlite3'")
    (tmp_path / "work").rmdir()
    loaded = probe(tmp_path, [("sqlite", str(outside)), ("sqlite", ":memory:")], preimport=["sqlite3"])
    assert all(r.startswith("refused: sandbox: sqlite3.") for r in loaded), loaded
    assert not outside.exists()


def test_an_already_imported_fork_exec_cannot_start_a_process(tmp_path):
    # the worker imports subprocess (and with it _posixsubprocess) before the guard goes on
    res = probe(tmp_path, [("fork_exec", ""), ("subprocess_alias", "")], preimport=["subprocess"])
    assert res[0] == "refused: sandbox: _posixsubprocess.fork_exec is not allowed"
    assert res[1] == "refused: sandbox: _posixsubprocess.fork_exec is not allowed"


def test_nki_modules_come_from_the_simulator_never_from_disk(tmp_path):
    """A placeholder `nki` package (PyPI's) or a real SDK on the path is what a kernel would
    import if the emulator's modules were missing; the guard refuses it instead."""
    site = tmp_path / "site"
    for package in ("nki", "neuronxcc"):
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text("PLACEHOLDER = True\n")
    imports = [("import", "nki"), ("import", "neuronxcc"), ("import", "nki.language"), ("import", "json")]
    guarded = probe(tmp_path, imports, dirs=[str(site)], sys_path=[str(site)], provided=["nki", "neuronxcc"],
                    in_memory=["neuronxcc"])
    assert guarded[0] == ("refused: sandbox: importing 'nki' from disk is not allowed (the simulator provides the "
                          "nki modules a kernel may use)")
    assert guarded[1] == "allowed"     # the in-memory module, no import from disk
    assert guarded[2].startswith("refused: sandbox: importing 'nki")
    assert guarded[3] == "allowed"
    shutil.rmtree(tmp_path / "work")
    unguarded = probe(tmp_path, imports[:1], dirs=[str(site)], sys_path=[str(site)])
    assert unguarded == ["allowed"]    # what the rule prevents: the placeholder imports fine
