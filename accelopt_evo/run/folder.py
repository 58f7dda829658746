"""The run folder (DESIGN.md "Run folder"): where a run keeps everything it produces."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from accelopt_evo.errors import UserError
from fitness.correctness.normalize import kernel_id as content_id

from .files import write_text_atomic
from .records import KERNEL_ID

_CHECKPOINT = re.compile(r"^gen-(\d{4,})\.json$")


def new_run_id(now: datetime | None = None) -> str:
    return (now or datetime.now()).strftime("%Y%m%d-%H%M%S")


@dataclass(frozen=True)
class RunFolder:
    root: Path

    # Layout ---------------------------------------------------------------------------
    @property
    def config(self) -> Path:
        return self.root / "config.toml"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def kernels(self) -> Path:
        return self.root / "kernels"

    @property
    def best(self) -> Path:
        return self.root / "best"

    @property
    def evaluations(self) -> Path:
        return self.root / "evaluations.jsonl"

    @property
    def llm_calls(self) -> Path:
        return self.root / "llm_calls.jsonl"

    @property
    def memory(self) -> Path:
        return self.root / "memory.json"

    @property
    def heldout(self) -> Path:
        """The run's held-out seeds (records.HeldoutSeeds): the owner's eyes only."""
        return self.root / "heldout.json"

    @property
    def report(self) -> Path:
        return self.root / "report.md"

    @property
    def plots(self) -> Path:
        return self.root / "plots"

    # Creation -------------------------------------------------------------------------
    @classmethod
    def create(cls, out: str | Path, run_id: str) -> "RunFolder":
        if not run_id or "/" in run_id or run_id in (".", ".."):
            raise UserError(f"invalid run id '{run_id}'")
        root = Path(out) / run_id
        if root.exists() and any(root.iterdir()):
            raise UserError(f"run folder '{root}' already exists; pick another --run-id or resume it")
        try:
            for sub in ("checkpoints", "kernels", "best"):
                (root / sub).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"cannot create run folder '{root}': {exc.strerror or exc}") from None
        return cls(root)

    @classmethod
    def open(cls, path: str | Path) -> "RunFolder":
        folder = cls(Path(path))
        if not folder.root.is_dir():
            raise UserError(f"run folder '{path}' does not exist")
        if not folder.config.is_file():
            raise UserError(f"'{path}' is not a run folder (no config.toml)")
        return folder

    # Contents -------------------------------------------------------------------------
    def kernel_path(self, kernel_id: str) -> Path:
        if not KERNEL_ID.match(kernel_id):   # an id is a file name: nothing else may reach the disk
            raise UserError(f"'{kernel_id[:40]}' is not a kernel id (16 hex digits)")
        return self.kernels / f"{kernel_id}.py"

    def write_kernel(self, kernel_id: str, source: str) -> Path:
        """Store a kernel under its content address (once)."""
        path = self.kernel_path(kernel_id)
        if not path.exists():
            write_text_atomic(path, source)
        return path

    def read_kernel(self, kernel_id: str) -> str:
        """The source stored under `kernel_id`; a UserError naming the file when it is missing
        or its content is not that kernel's (the id is the hash of the normalized source:
        a file edited since it was written is refused, never used as that kernel)."""
        path = self.kernel_path(kernel_id)
        try:
            source = path.read_text()
        except (OSError, UnicodeDecodeError):
            raise UserError(f"run folder '{self.root}' lacks kernels/{kernel_id}.py") from None
        if content_id(source) != kernel_id:
            raise UserError(f"run folder '{self.root}': kernels/{kernel_id}.py holds another kernel (its content "
                            f"hashes to {content_id(source)}): the file was edited since it was written; restore it")
        return source

    def checkpoint_path(self, generation: int) -> Path:
        return self.checkpoints / f"gen-{generation:04d}.json"

    def checkpoint_files(self) -> list[tuple[int, Path]]:
        """(generation, path) of every checkpoint, oldest first."""
        found = []
        if self.checkpoints.is_dir():
            for p in self.checkpoints.iterdir():
                m = _CHECKPOINT.match(p.name)
                if m:
                    found.append((int(m.group(1)), p))
        return sorted(found)
