"""A run folder written by the code just before it moved into role folders (tests/data/run-v3:
silu at its small shape, seed 3, two generations, offline operators, on the simulator; its
evaluation cache, report and plots left out) resumes with today's code and reaches the kernel
that the same run continued on that release reached (its checkpoint is sealed with that
release's key, not the test's: it is re-judged first)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from accelopt_evo.cli.main import main

DATA = Path(__file__).resolve().parents[2] / "data"
# `resume RUN --gens 5` on the release that wrote the folder, with its key and with another one
BEST_AT_5 = ("dec830ac1ef12c3c", 1.1597749098175694)


def test_the_folder_resumes_to_the_kernel_its_release_reached(tmp_path, capsys):
    folder = tmp_path / "run-v3"
    shutil.copytree(DATA / "run-v3", folder)
    assert main(["resume", str(folder), "--gens", "5", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "does not carry your seal" in out
    best = json.loads((folder / "checkpoints" / "gen-0005.json").read_text())["hall_of_fame"]["silu"][0]
    assert (best["id"], round(best["result"]["speedup"], 9)) == (BEST_AT_5[0], round(BEST_AT_5[1], 9))
    assert (folder / "best" / "silu.py").read_text() == (folder / "kernels" / f"{best['id']}.py").read_text()
    assert main(["report", str(folder)]) == 0
