"""Problems of the user's own in a run: reference/baseline pairs read, checked and kept.

`run --reference REF.py --baseline KERNEL.py` names a problem by its reference file (its stem)
and starts the search from the baseline's kernel function. Before a run folder exists, the
pairs are staged in a scratch folder so that a bad file stops the run in one line; then the
run folder keeps both files under `problems/` (nkibench.user.store) and its config.toml names
those copies, relative to the folder, so that resume and report need nothing else.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from accelopt_evo.errors import UserError
from fitness.sandbox.entry import EntryError, entry_function, select
from fitness.simulator.dialect import DialectError, detect
from nkibench import user

from .config import Config

PROBLEMS_DIR = "problems"     # a run folder's copies of its reference and baseline files


@dataclass(frozen=True)
class Pair:
    """One problem of the user's: reference module, baseline kernel file, its function ("": the
    file's only kernel)."""

    reference: Path
    baseline: Path | None       # None: none (`eval --reference` without --baseline)
    function: str = ""

    @property
    def stored(self) -> Path | None:
        """The problem folder this pair already is (a run folder's copy), else None."""
        folder = self.reference.parent
        if self.reference.name == user.REFERENCE_FILE and user.is_problem_folder(folder):
            return folder
        return None


def pairs(cfg: Config, base: Path | None = None) -> list[Pair]:
    """The run's pairs, relative paths taken from `base` (a run folder) when given."""
    run = cfg.run
    functions = run.functions or [""] * len(run.references)

    def at(name: str) -> Path:
        path = Path(name).expanduser()
        return base / path if base is not None and not path.is_absolute() else path

    return [Pair(at(r), at(b) if b else None, f) for r, b, f in zip(run.references, run.baselines, functions)]


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise UserError(f"cannot read {what} '{path}': {exc.strerror or exc}") from None


def stage(pair: Pair, root: Path, dialect: str = "legacy") -> Path:
    """The problem folder of `pair` under `root` (or the one it already is): the reference as
    written, the baseline reduced to its kernel function, the baseline's dialect (`dialect`
    for a pair without a baseline)."""
    if pair.stored is not None:
        return pair.stored
    reference = _read(pair.reference, "reference module")
    baseline = ""
    if pair.baseline is not None:
        try:
            baseline = _read(pair.baseline, "baseline kernel")
            baseline = select(baseline, pair.function or entry_function(baseline))
            dialect = detect(baseline)
        except (EntryError, DialectError) as exc:
            raise UserError(f"baseline kernel {pair.baseline}: {exc}") from None
    try:
        user.shape_constants(reference, str(pair.reference))   # parses
    except user.UserProblemError as exc:
        raise UserError(str(exc)) from None
    return user.store(root, user.problem_name(pair.reference), reference, baseline, dialect)


def stage_config(cfg: Config, root: Path, base: Path, dialect: str = "legacy") -> Config:
    """`cfg` with its pairs staged under `root` and named relative to `base` (functions
    dropped: a stored baseline is its kernel alone; `dialect`: see `stage`)."""
    if not cfg.run.references:
        return cfg
    folders = [stage(p, root, dialect) for p in pairs(cfg)]
    refs = [os.path.relpath(f / user.REFERENCE_FILE, base) for f in folders]
    bases = [os.path.relpath(f / user.BASELINE_FILE, base) for f in folders]
    run = dataclasses.replace(cfg.run, references=refs, baselines=bases, functions=[])
    return dataclasses.replace(cfg, run=run)


def folders(cfg: Config, base: Path | None = None) -> list[Path]:
    """The problem folders of a staged config (stage_config)."""
    found = []
    for pair in pairs(cfg, base):
        if pair.stored is None:
            raise UserError(f"'{pair.reference}' is not a stored reference module (a run folder's "
                            f"{PROBLEMS_DIR}/NAME-DIGEST/{user.REFERENCE_FILE})")
        found.append(pair.stored)
    return found


@contextlib.contextmanager
def scratch(cfg: Config, dialect: str = "legacy") -> Iterator[tuple[Config, Path]]:
    """(`cfg` staged in a scratch folder, that folder) for checks before a run folder exists
    and for `eval`; a UserError raised meanwhile names the user's files, not their copies."""
    with tempfile.TemporaryDirectory(prefix="accelopt-evo-problems-") as tmp:
        root = Path(tmp).resolve()
        staged = stage_config(cfg, root, root, dialect)
        with naming_originals(cfg, staged, root):
            yield staged, root


@contextlib.contextmanager
def naming_originals(cfg: Config, staged: Config, base: Path) -> Iterator[None]:
    """A UserError raised inside names the files of `cfg`'s pairs where it named their copies
    (`staged`, relative to `base`): the user knows the files they gave."""
    try:
        yield
    except UserError as exc:
        message = str(exc)
        for pair, copy in zip(pairs(cfg), pairs(staged, base)):
            message = message.replace(str(copy.reference.resolve()), str(pair.reference))
            if pair.baseline is not None and copy.baseline is not None:
                message = message.replace(str(copy.baseline.resolve()), str(pair.baseline))
        raise UserError(message) from None
