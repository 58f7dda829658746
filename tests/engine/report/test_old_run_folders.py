"""Run folders written by the release before run records carried a schema (tests/data/run-v1*,
made by that release with its reports beside them) still report and resume as they did."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from accelopt_evo.cli.main import main
from accelopt_evo.report import markdown as report
from accelopt_evo.run.folder import RunFolder
from accelopt_evo.run.records import SCHEMA, read_checkpoint
from accelopt_evo.runner import heldout_seeds, resume_run

from fakes import KnobEvaluator

DATA = Path(__file__).resolve().parents[2] / "data"


def copy(name: str, tmp_path: Path) -> RunFolder:
    shutil.copytree(DATA / name, tmp_path / name)
    return RunFolder(tmp_path / name)


def without_seconds(entries: list[dict]) -> list[dict]:
    return [{k: v for k, v in e.items() if k != "seconds"} for e in entries]


@pytest.mark.parametrize("name", ["run-v1", "run-v1-llm"])
def test_the_report_of_an_old_folder_is_the_one_its_release_wrote(tmp_path, name):
    """But for the memory's rationales, which reports now quote ("> ": the summarizer's words
    are data, not the report's markup); that release wrote no quoted line."""
    folder = copy(name, tmp_path)
    written = report.write_report(folder).read_text()
    assert "\n> " in written
    unquoted = "\n".join("" if line == ">" else line.removeprefix("> ") for line in written.split("\n"))
    assert unquoted == (DATA / f"{name}.report.md").read_text()


def test_an_old_folder_resumes_to_the_same_populations_hall_of_fame_and_logbook(tmp_path):
    """With --trust (the user's own folder, written before checkpoints were sealed)."""
    folder = copy("run-v1", tmp_path)
    recorded = json.loads(folder.checkpoint_path(3).read_text())
    folder.checkpoint_path(3).unlink()
    resume_run(folder.root, None, progress=False, log=lambda _m: None, trust=True,
               evaluator_factory=lambda _cfg, _folder: KnobEvaluator(backend="simulator", failures=True))
    again = json.loads(folder.checkpoint_path(3).read_text())
    assert again["schema"] == SCHEMA and "version" not in again and again["seal"]
    for key in ("population", "hall_of_fame", "memory"):
        assert again[key] == recorded[key]
    assert without_seconds(again["logbook"]["silu"]) == without_seconds(recorded["logbook"]["silu"])
    # its release derived the held-out seeds from run.seed: the resumed run keeps doing so
    cfg_seed, seeds = 2, [0, 21, 42, 63, 84]
    held = json.loads(folder.heldout.read_text())
    assert held["mode"] == "derived" and tuple(held["seeds"]) == heldout_seeds(cfg_seed, 2, seeds)
    # and it goes on past where it stopped, reporting the old and new generations together
    resume_run(folder.root, 4, progress=False, log=lambda _m: None,
               evaluator_factory=lambda _cfg, _folder: KnobEvaluator(backend="simulator", failures=True))
    assert read_checkpoint(folder.checkpoint_path(4)).generation == 4
    text = report.write_report(folder).read_text()
    assert "- Progress: generation 4 checkpointed (resumed beyond run.gens = 3)\n" in text
    assert "Every file of the run folder was read whole." in text


def test_an_old_folder_resumed_without_trust_is_re_judged_and_goes_the_same_way(tmp_path):
    """Unsealed, its checkpoint is re-judged first: the same kernels survive, the same hall of
    fame and memory; only which evaluations count as reused differs (known results outside the
    population, the hall of fame and the memory are not believed)."""
    folder = copy("run-v1", tmp_path)
    recorded = json.loads(folder.checkpoint_path(3).read_text())
    folder.checkpoint_path(3).unlink()
    said: list[str] = []
    resume_run(folder.root, None, progress=False, log=said.append,
               evaluator_factory=lambda _cfg, _folder: KnobEvaluator(backend="simulator", failures=True))
    assert any("does not carry your seal" in line and "re-judged" in line for line in said)
    again = json.loads(folder.checkpoint_path(3).read_text())
    for key in ("population", "hall_of_fame", "memory"):
        assert again[key] == recorded[key]
    counts = ("seconds", "evals", "reused")
    assert ([{k: v for k, v in e.items() if k not in counts} for e in again["logbook"]["silu"]]
            == [{k: v for k, v in e.items() if k not in counts} for e in recorded["logbook"]["silu"]])


@pytest.mark.parametrize("file", ["checkpoints/gen-0003.json", "memory.json", "evaluations.jsonl"])
def test_a_file_of_a_newer_schema_ends_with_one_line_naming_it(tmp_path, capsys, file):
    folder = copy("run-v1", tmp_path)
    path = folder.root / file
    if file.endswith(".jsonl"):
        lines = path.read_text().splitlines()
        lines[-1] = json.dumps({**json.loads(lines[-1]), "schema": SCHEMA + 1})
        path.write_text("\n".join(lines) + "\n")
    else:
        path.write_text(json.dumps({**json.loads(path.read_text()), "schema": SCHEMA + 1}))
    commands = [["report", str(folder.root)]]
    if file != "memory.json":   # a resume reads the memory from the checkpoint
        commands.append(["resume", str(folder.root), "--no-progress"])
    for command in commands:
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and file.split("/")[-1] in err and f"schema {SCHEMA + 1}" in err
