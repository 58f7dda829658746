"""The evaluation cache: an EvalResult per (kernel, problem, backend, target, gate, evaluator).

Keyed by the kernel's syntax tree with its lines (`normalize.judged_form`: the performance model
tells allocation sites apart by their source lines, so two layouts of one kernel may price
differently and each keeps its own; comments and formatting within a line do not matter), the problem
and its shape, the backend and target, the gate settings (seeds, held-out seeds, tolerance)
and the evaluator's version, which includes a digest of the fitness and nkibench sources so
that a changed simulator or problem never serves stale results. Entries are JSON files
written atomically, in the run folder and optionally in a cache folder shared between runs, each
sealed under its folder's key (fitness.seal): an entry that was written elsewhere or edited is
recomputed, never believed.
Only outcomes that do not depend on the sandbox limits are stored (not timeouts, memory
exhaustion or crashes); a latency stage's timing (not_judged) is, so that the full judgement
that follows it in another process can be compared with it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from fitness.correctness.normalize import judged_form
from nkibench.problem import ProblemSpec

from .result import COMPILE_ERROR, INCORRECT, NOT_JUDGED, OK, REJECTED, EvalResult
from .seal import Seal
from .settings import EVALUATOR_VERSION

CACHEABLE = frozenset({OK, REJECTED, COMPILE_ERROR, INCORRECT, NOT_JUDGED})
_PACKAGES = ("fitness", "nkibench")


@functools.lru_cache(maxsize=4)
def code_digest(packages: tuple[str, ...] = _PACKAGES) -> str:
    """Digest of the sources that decide a result: the fitness and nkibench packages."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def evaluator_version() -> str:
    return f"{EVALUATOR_VERSION}-{code_digest()}"


def cache_key(source: str, spec: ProblemSpec, backend: str, target: str, gate: Sequence[Any],
              version: str, context: Sequence[str] | None = None) -> str:
    """`context` is what else decides a figure: [SDK version, instance type] for hardware
    results (so that SDKs and chips never mix), a user calibration's digest for the simulator;
    None (the simulator with its shipped parameters) keeps the keys of earlier releases."""
    problem = [spec.name, list(spec.params), spec.suite_dir]
    if spec.dialect:   # the baseline's dialect decides speedups; "" keeps earlier keys
        problem.append(spec.dialect)
    fields = {"source": judged_form(source), "problem": problem,
              "backend": backend, "target": target, "gate": list(gate), "version": version}
    if context is not None:
        fields["context"] = list(context)
    blob = json.dumps(fields, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class CacheFolder:
    """One folder of cache entries and the seal its entries carry (fitness.seal)."""

    path: Path
    seal: Seal


class EvalCache:
    """Results by key: in memory, then in each folder (the first one is the run's own).

    An entry is used only when it is whole and believed: its seal verifies under the folder's
    key, it is the entry of the key asked for, and its result passes every check a fresh one
    does (`EvalResult.from_dict`; a stored result is raw: no speedup, no percent of peak, a
    status worth caching). Any other entry is a miss, counted in `rejected`, and the result
    computed instead replaces it."""

    def __init__(self, folders: Sequence[CacheFolder]) -> None:
        self.folders = list(folders)
        self._memory: dict[str, EvalResult] = {}
        self._lock = threading.Lock()
        self._rejected: set[Path] = set()

    @property
    def rejected(self) -> int:
        """How many stored entries were not believed (each file once)."""
        with self._lock:
            return len(self._rejected)

    def _path(self, folder: CacheFolder, key: str) -> Path:
        return folder.path / key[:2] / f"{key}.json"

    def get(self, key: str) -> EvalResult | None:
        """A copy of the stored result (marked cached), or None."""
        with self._lock:
            hit = self._memory.get(key)
        if hit is None:
            for folder in self.folders:
                path = self._path(folder, key)
                try:
                    text = path.read_text()
                except OSError:
                    continue
                hit = self._believed(folder, key, text)
                if hit is None:
                    with self._lock:
                        self._rejected.add(path)
                    continue
                with self._lock:
                    self._memory[key] = hit
                if folder != self.folders[0]:
                    self._write_all(key, hit, only=self.folders[:1])
                break
        if hit is None:
            return None
        return EvalResult.from_dict({**hit.to_dict(placement=False), "cached": True})

    @staticmethod
    def _believed(folder: CacheFolder, key: str, text: str) -> EvalResult | None:
        """The result of an entry's text, or None when it is not whole, not sealed by the
        folder's key, not this key's, or not a result this cache would have stored."""
        try:
            entry = json.loads(text)
        except ValueError:
            return None
        if not isinstance(entry, dict) or entry.get("key") != key or "result" not in entry:
            return None
        if not folder.seal.verifies({"key": key, "result": entry["result"]}, entry.get("seal")):
            return None
        try:
            result = EvalResult.from_dict(entry["result"])
        except ValueError:
            return None
        if result.status not in CACHEABLE or result.speedup is not None or result.percent_of_peak is not None:
            return None
        return result

    def reject(self, key: str) -> None:
        """Forget a believed entry that its reader found inconsistent (counted as rejected)."""
        with self._lock:
            self._memory.pop(key, None)
            self._rejected.add(self._path(self.folders[0], key) if self.folders else Path(key))

    def put(self, key: str, result: EvalResult) -> None:
        if result.status not in CACHEABLE:
            return
        with self._lock:
            self._memory[key] = result
        self._write_all(key, result, only=self.folders)

    def _write_all(self, key: str, result: EvalResult, only: Sequence[CacheFolder]) -> None:
        stored = {**result.to_dict(placement=False), "cached": False, "speedup": None, "percent_of_peak": None}
        for folder in only:
            text = json.dumps({"key": key, "result": stored,
                               "seal": folder.seal.digest({"key": key, "result": stored})}, sort_keys=True)
            path = self._path(folder, key)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
                with os.fdopen(fd, "w") as f:
                    f.write(text)
                os.replace(tmp, path)
            except OSError:
                continue   # a read-only shared cache must not stop a run
