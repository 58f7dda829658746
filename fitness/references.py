"""Reference data per (problem, seed): the inputs and the expected outputs, as .npy files.

They are computed once, in a separate trusted process (never in a kernel process), and reused
by every evaluation: kernel processes get read-only access to the input files only, and the
gate in the engine process reads the expected files. Each seed's folder appears atomically
(written aside, then renamed), so a half-written folder is never used.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from nkibench.problem import ProblemSpec

from .sandbox import clean_env, python_command


class ReferenceError(RuntimeError):
    """The reference of a problem could not be computed: a problem of the benchmark, not of a kernel."""


@dataclass(frozen=True)
class SeedData:
    seed: int
    inputs: tuple[str, ...]      # .npy paths, in the reference's argument order
    expected: tuple[str, ...]    # .npy paths, one per reference output


def seed_folder(seed: int) -> str:
    """Folder name of a seed's data: a digest, so that no path spells out a held-out seed."""
    return "seed-" + hashlib.sha256(f"seed {seed}".encode()).hexdigest()[:12]


def spec_key(spec: ProblemSpec) -> str:
    """Folder name of a problem instance: readable name plus a digest of its full identity."""
    blob = json.dumps([spec.name, list(spec.params), spec.suite_dir])
    return f"{spec.name}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


class ReferenceStore:
    """Reference files under `root`, computed on first use."""

    def __init__(self, root: Path, timeout_s: float = 1800.0) -> None:
        self.root = Path(root)
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._known: dict[tuple[ProblemSpec, int], SeedData] = {}

    def seed_dir(self, spec: ProblemSpec, seed: int) -> Path:
        return self.root / spec_key(spec) / seed_folder(seed)

    def ensure(self, spec: ProblemSpec, seeds: Sequence[int]) -> list[SeedData]:
        """The reference files of every seed, computing the missing ones (one process for all)."""
        with self._lock:
            missing = [s for s in dict.fromkeys(seeds)
                       if (spec, s) not in self._known and not (self.seed_dir(spec, s) / "meta.json").is_file()]
            if missing:
                self._compute(spec, missing)
            for s in seeds:
                if (spec, s) not in self._known:
                    self._known[(spec, s)] = self._read(spec, s)
            return [self._known[(spec, s)] for s in seeds]

    def _read(self, spec: ProblemSpec, seed: int) -> SeedData:
        folder = self.seed_dir(spec, seed)
        meta = json.loads((folder / "meta.json").read_text())
        return SeedData(seed, tuple(str(folder / n) for n in meta["inputs"]),
                        tuple(str(folder / n) for n in meta["expected"]))

    def _compute(self, spec: ProblemSpec, seeds: list[int]) -> None:
        (self.root / spec_key(spec)).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.root, prefix=".work-") as work:
            request = {"spec": [spec.name, list(spec.params), spec.suite_dir], "seeds": seeds, "out": work}
            try:
                proc = subprocess.run(python_command("fitness.references"), input=json.dumps(request).encode(),
                                      capture_output=True, cwd=work, env=clean_env(Path(work)),
                                      timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                raise ReferenceError(
                    f"computing the reference of {spec.label()} took over {self.timeout_s:.0f} s") from None
            if proc.returncode != 0:
                tail = proc.stderr.decode(errors="replace").strip().splitlines()[-3:]
                raise ReferenceError(f"computing the reference of {spec.label()} failed: {' | '.join(tail)}")
            for seed in seeds:
                target = self.seed_dir(spec, seed)
                if target.exists():   # another evaluator sharing the folder was faster
                    continue
                Path(work, seed_folder(seed)).rename(target)


def compute(spec: ProblemSpec, seeds: Sequence[int], out: Path) -> None:
    """Write `out/<seed folder>/{in-i.npy, out-j.npy, meta.json}` for every seed, read-only."""
    import numpy as np

    from nkibench.registry import load

    problem = load(spec)
    for seed in seeds:
        folder = out / seed_folder(seed)
        folder.mkdir()
        inputs = problem.make_inputs(seed)
        names_in = []
        for i, x in enumerate(inputs):
            np.save(folder / f"in-{i}.npy", np.asarray(x), allow_pickle=False)
            names_in.append(f"in-{i}.npy")
        expected = problem.reference(*inputs)
        names_out = []
        for j, y in enumerate(expected):
            np.save(folder / f"out-{j}.npy", np.asarray(y), allow_pickle=False)
            names_out.append(f"out-{j}.npy")
        (folder / "meta.json").write_text(json.dumps({"inputs": names_in, "expected": names_out}))
        for name in names_in + names_out:
            (folder / name).chmod(0o444)


def main() -> None:
    """Entry point of the reference process: a JSON request on stdin."""
    request = json.loads(sys.stdin.buffer.read())
    name, params, suite_dir = request["spec"]
    spec = ProblemSpec(name, tuple((k, v) for k, v in params), suite_dir)
    compute(spec, request["seeds"], Path(request["out"]))
