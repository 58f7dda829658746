"""Reference data per (problem, seed): the inputs and the expected outputs, as .npy files.

They are computed once, in a separate trusted process (never in a kernel process), and reused
by every evaluation: kernel processes get read-only access to the input files only, and the
gate in the engine process reads the expected files. Each seed's folder appears atomically
(written aside, then renamed), so a half-written folder is never used.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Sequence

from fitness.correctness import arrays
from fitness.correctness.seeds import Scalar, SeedData
from fitness.sandbox.process import clean_env, python_command
from nkibench.families import DERIVED_NAMES, STANDARD
from nkibench.problem import ProblemSpec, widen

from .cache import code_digest
from .seal import Seal, file_digest

# Bump when the files this module writes change; with a digest of the problems' code it names
# the folder of reference data kept across runs, so that changed problems never serve stale data.
# 2: dtypes of inputs and outputs in meta.json (bfloat16 and fp8 problems); 3: the expected figures
# of a narrow-float problem computed on its inputs widened to float64 (they were widened to float32)
REFERENCE_FORMAT = "3"
SEAL_FILE = "seal.json"   # beside meta.json: the digests of the seed folder's files, sealed


class ReferenceError(RuntimeError):
    """The reference of a problem could not be computed: a problem of the benchmark, not of a kernel."""


def reference_version() -> str:
    """The version of reference data: this module's format and the nkibench sources' digest."""
    return f"{REFERENCE_FORMAT}-{code_digest(('nkibench',))}"


def seed_folder(seed: int, family: str = STANDARD) -> str:
    """Folder name of a seed's data: a digest, so that no path spells out a held-out seed."""
    name = f"seed {seed}" if family == STANDARD else f"seed {seed} family {family}"
    return "seed-" + hashlib.sha256(name.encode()).hexdigest()[:12]


# One drawing of a problem's inputs: a seed and the input family it is drawn from.
Draw = tuple[int, str]


def spec_key(spec: ProblemSpec) -> str:
    """Folder name of a problem instance: readable name plus a digest of its full identity."""
    blob = json.dumps([spec.name, list(spec.params), spec.suite_dir])
    return f"{spec.name}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


class ReferenceStore:
    """Reference files under `root`, computed on first use. With a `seal` (a folder kept across
    evaluators, maybe shared) every seed's folder carries `seal.json`: the digest of each of its
    files and of its meta.json, sealed under the folder's key. A folder whose seal does not
    verify (written elsewhere, edited since, or by a release without seals) is computed again;
    `rejected` counts them."""

    def __init__(self, root: Path, seal: Seal | None = None, timeout_s: float = 1800.0) -> None:
        # one folder per key under a kept root: readers with other keys never remove these files
        self.root = Path(root) / seal.fingerprint if seal is not None else Path(root)
        self.seal = seal
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._known: dict[tuple[ProblemSpec, Draw], SeedData] = {}
        self.rejected = 0

    def seed_dir(self, spec: ProblemSpec, draw: Draw) -> Path:
        return self.root / spec_key(spec) / seed_folder(*draw)

    def ensure(self, spec: ProblemSpec, draws: Sequence[int | Draw]) -> list[SeedData]:
        """The reference files of every draw (a seed, or a seed and an input family),
        computing the missing ones (one process for all)."""
        draws = [(d, STANDARD) if isinstance(d, int) else (int(d[0]), str(d[1])) for d in draws]
        with self._lock:
            missing = []
            for d in dict.fromkeys(draws):
                if (spec, d) in self._known:
                    continue
                data = self._read(spec, d)
                if data is None:
                    missing.append(d)
                else:
                    self._known[(spec, d)] = data
            if missing:
                self._compute(spec, missing)
                for d in missing:
                    data = self._read(spec, d)
                    if data is None:
                        raise ReferenceError(f"the reference data of {spec.label()} in {self.seed_dir(spec, d)} "
                                             "does not verify after it was computed")
                    self._known[(spec, d)] = data
            return [self._known[(spec, d)] for d in draws]

    def _read(self, spec: ProblemSpec, draw: Draw) -> SeedData | None:
        """The draw's data, or None when its folder is missing or was removed because it does
        not verify."""
        folder = self.seed_dir(spec, draw)
        if not (folder / "meta.json").is_file():
            return None
        try:
            meta = json.loads((folder / "meta.json").read_text())
            if self.seal is not None and not self._verifies(folder, meta):
                raise ValueError("its seal does not verify")
            inputs = tuple(str(folder / n) if isinstance(n, str) else Scalar.from_json(n) for n in meta["inputs"])
            return SeedData(draw[0], inputs, tuple(str(folder / n) for n in meta["expected"]), draw[1],
                            tuple(meta["input_dtypes"]), tuple(meta["expected_dtypes"]))
        except (OSError, ValueError, KeyError, TypeError):
            self.rejected += 1
            shutil.rmtree(folder, ignore_errors=True)
            if folder.exists():
                raise ReferenceError(f"the reference data in {folder} does not verify (written elsewhere or edited) "
                                     "and cannot be replaced: remove it, or point evaluation.cache_dir elsewhere") from None
            return None

    def _verifies(self, folder: Path, meta: Any) -> bool:
        """Whether the folder's files are those its seal names, under this store's key."""
        assert self.seal is not None
        record = json.loads((folder / SEAL_FILE).read_text())
        files = record.get("files") if isinstance(record, dict) else None
        if not isinstance(files, dict) or not self.seal.verifies({"files": files, "meta": meta}, record.get("seal")):
            return False
        named = {n for n in meta["inputs"] if isinstance(n, str)} | set(meta["expected"])
        return named <= set(files) and all(file_digest(folder / name) == digest for name, digest in files.items())

    def _seal_folder(self, folder: Path) -> None:
        """Write the folder's seal.json: the digest of every file the reference process wrote."""
        assert self.seal is not None
        meta = json.loads((folder / "meta.json").read_text())
        files = {p.name: file_digest(p) for p in sorted(folder.iterdir()) if p.name != "meta.json"}
        (folder / SEAL_FILE).write_text(json.dumps({"files": files, "seal": self.seal.digest({"files": files,
                                                                                             "meta": meta})}))

    def _compute(self, spec: ProblemSpec, draws: list[Draw]) -> None:
        (self.root / spec_key(spec)).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.root, prefix=".work-") as work:
            request = {"spec": [spec.name, list(spec.params), spec.suite_dir], "draws": draws, "out": work}
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
            for draw in draws:
                made = Path(work, seed_folder(*draw))
                if self.seal is not None:
                    self._seal_folder(made)
                target = self.seed_dir(spec, draw)
                if target.exists():   # another evaluator sharing the folder was faster
                    continue
                made.rename(target)


def compute(spec: ProblemSpec, draws: Sequence[Draw], out: Path) -> None:
    """Write `out/<seed folder>/{in-i.npy, out-j.npy, meta.json}` for every draw, read-only.

    With inputs narrower than float32 (bfloat16, fp8) the reference runs twice: on the inputs
    as drawn, which gives the dtypes a kernel must return, and on the same values widened to
    float64, which gives the figures a kernel is judged against (NumPy would otherwise round
    every intermediate of the reference to the narrow type)."""
    import numpy as np

    from nkibench.registry import load

    problem = load(spec)
    for seed, family in draws:
        folder = out / seed_folder(seed, family)
        folder.mkdir()
        inputs = problem.inputs(seed, family)
        names_in: list[Any] = []
        for i, x in enumerate(inputs):
            scalar = Scalar.of(x)
            if scalar is not None:
                names_in.append(scalar.to_json())
                continue
            arrays.save(folder / f"in-{i}.npy", np.asarray(x))
            names_in.append(f"in-{i}.npy")
        expected = problem.reference(*inputs)
        declared = [arrays.dtype_name(np.asarray(y).dtype) for y in expected]
        wide = widen(inputs)
        if any(w is not x for w, x in zip(wide, inputs)):
            expected = problem.reference(*wide)
        if family in DERIVED_NAMES:
            _check_domain(problem, seed, family, expected)
        names_out = []
        for j, y in enumerate(expected):
            arrays.save(folder / f"out-{j}.npy", np.asarray(y))
            names_out.append(f"out-{j}.npy")
        input_dtypes = [arrays.dtype_name(np.asarray(x).dtype) for x in inputs if Scalar.of(x) is None]
        (folder / "meta.json").write_text(json.dumps({"inputs": names_in, "expected": names_out,
                                                      "input_dtypes": input_dtypes, "expected_dtypes": declared}))
        for name in [n for n in names_in if isinstance(n, str)] + names_out:
            (folder / name).chmod(0o444)


def _nonfinite(outputs: Sequence[Any]) -> int:
    import numpy as np

    return sum(int(np.size(y) - np.count_nonzero(np.isfinite(np.asarray(y, dtype=np.float64)))) for y in outputs)


def _check_domain(problem: Any, seed: int, family: str, expected: Sequence[Any]) -> None:
    """Raise when a derived input family leaves the reference's domain: more non-finite
    outputs than the seed's standard draw gives (such elements would check nothing)."""
    bad = _nonfinite(expected)
    if not bad:
        return
    standard = problem.reference(*widen(problem.inputs(seed)))
    if bad > _nonfinite(standard):
        raise ValueError(f"the derived input family '{family}' gives {bad} non-finite reference output value(s) "
                         f"where the standard inputs give {_nonfinite(standard)}: it is outside the problem's domain; "
                         f"name the derived families that are valid with DERIVED_FAMILIES = (...) in its module "
                         f"(known: {', '.join(DERIVED_NAMES)})")


def main() -> None:
    """Entry point of the reference process: a JSON request on stdin."""
    request = json.loads(sys.stdin.buffer.read())
    name, params, suite_dir = request["spec"]
    spec = ProblemSpec(name, tuple((k, v) for k, v in params), suite_dir)
    compute(spec, [(int(seed), str(family)) for seed, family in request["draws"]], Path(request["out"]))
