"""A run killed with SIGKILL mid-generation resumes cleanly from its last checkpoint and ends
where an uninterrupted run ends (the real CLI, evaluator and simulator; silu at its tiny shape)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from fitness import service

pytestmark = pytest.mark.slow

GENS = 5
FLAGS = ["--no-progress", "--set", "run.shape=tiny", "--set", "population.size=4", "--set", "population.offspring=4",
         "--set", "evaluation.seeds=[0, 1]", "--set", "evaluation.heldout_seeds=1", "--set", "run.report=false",
         "--set", "evaluation.heldout=derived"]   # two runs compared: the same held-out seeds


def cli(*args: str, cwd: Path, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "accelopt_evo", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, **kwargs)


def kernel_folders(pid: int) -> list[Path]:
    root = Path(service._work_root() or tempfile.gettempdir())
    return list(root.glob(f"{service.KERNEL_PREFIX}{pid}-*"))


def outcome(folder: Path) -> dict:
    ck = json.loads((folder / "checkpoints" / f"gen-{GENS:04d}.json").read_text())
    return {"population": [m["id"] for m in ck["population"]["silu"]],
            "hall_of_fame": [m["id"] for m in ck["hall_of_fame"]["silu"]],
            "logbook": [{k: v for k, v in e.items() if k != "seconds"} for e in ck["logbook"]["silu"]]}


def test_sigkill_mid_generation_then_resume(tmp_path):
    straight = cli("run", "--gens", str(GENS), "--run-id", "straight", *FLAGS, cwd=tmp_path)
    assert straight.wait(timeout=600) == 0, straight.stdout.read()

    victim = cli("run", "--gens", str(GENS), "--run-id", "killed", *FLAGS, cwd=tmp_path)
    folder = tmp_path / "runs" / "killed"
    deadline = time.monotonic() + 300
    # wait until generation 1 is checkpointed and a kernel of a later generation is being
    # evaluated (its scratch folder, named after the run's process, exists); generations whose
    # offspring are all known kernels evaluate nothing, so the kill may land after generation 2
    while time.monotonic() < deadline:
        if (folder / "checkpoints" / "gen-0001.json").exists() and kernel_folders(victim.pid):
            break
        assert victim.poll() is None, "the run ended before it could be killed"
        time.sleep(0.002)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait(timeout=30)
    assert kernel_folders(victim.pid), "killed while a kernel was being evaluated"
    assert not (folder / "checkpoints" / f"gen-{GENS:04d}.json").exists()
    # nothing half-written: every checkpoint and the memory parse; only a log's last line may be torn
    for path in (folder / "checkpoints").iterdir():
        assert not path.name.endswith(".tmp"), path
        json.loads(path.read_text())

    resumed = cli("resume", str(folder), cwd=tmp_path)
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, out
    assert "resuming" in out
    assert not kernel_folders(victim.pid), "the resumed run sweeps the killed run's scratch folders"
    assert outcome(folder) == outcome(tmp_path / "runs" / "straight")
    # every evaluation of the interrupted generation is logged once
    gens = [json.loads(line)["generation"] for line in (folder / "evaluations.jsonl").read_text().splitlines()]
    straight_gens = [json.loads(line)["generation"]
                     for line in (tmp_path / "runs" / "straight" / "evaluations.jsonl").read_text().splitlines()]
    assert sorted(gens) == sorted(straight_gens)
