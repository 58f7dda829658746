"""Follow a run folder as it grows: each look re-reads only what changed since the last one.

A run appends to evaluations.jsonl and llm_calls.jsonl, replaces memory.json and writes one
checkpoint per generation, each atomically; a resume rewrites evaluations.jsonl whole (a new
file). So a JSONL file is read on from where the last read stopped while it is the same file
and has not shrunk, and from its start otherwise; config.toml, memory.json and the newest
checkpoint are read again when their size or modification time changed. A page polling every
few seconds costs a few `stat` calls per look. Nothing is written into the folder and nothing
of it is executed.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable, Generic, TypeVar

from accelopt_evo.errors import UserError
from accelopt_evo.report.markdown import (
    CALL_INCOMPLETE,
    EVALUATION_INCOMPLETE,
    RunData,
    line_notes,
    progress_notes,
    read_memory,
    read_settings,
)
from accelopt_evo.run.folder import RunFolder
from accelopt_evo.run.records import (
    Checkpoint,
    Lines,
    MemoryEntry,
    RecordError,
    read_checkpoint,
    read_new_evaluations,
    read_new_llm_calls,
)

T = TypeVar("T")
Stamp = tuple[int, int, int, int]     # device, inode, size, modification time (ns)

MIN_INTERVAL_S = 0.5    # looks closer together than this reuse the last one


def stamp(path: Path) -> Stamp | None:
    """What a file looks like now (None when it is absent or unreadable)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class Tail(Generic[T]):
    """The records of an append-only JSONL file, read on from where the last read stopped."""

    def __init__(self, path: Path, read_new: Callable[[Path, int], tuple[Lines[T], int]]) -> None:
        self.path = path
        self._read_new = read_new
        self.lines: Lines[T] = Lines()
        self.offset = 0                  # bytes of whole lines read
        self.error = ""                  # why the file could not be read ("" when it could)
        self._seen: Stamp | None = None

    def refresh(self) -> bool:
        """Read what was appended since the last call; True when the file changed."""
        now = stamp(self.path)
        if now == self._seen:
            return False
        if now is None or self._seen is None or now[:2] != self._seen[:2] or now[2] < self.offset:
            self.lines, self.offset = Lines(), 0        # new, gone, replaced or cut: start over
        self._seen = now
        if now is not None:
            try:
                new, self.offset = self._read_new(self.path, self.offset)
            except OSError as exc:
                self.error = f"{self.path.name} is unreadable ({exc.strerror or exc})"
                self._seen = None                        # try again at the next look
                return True
            self.error = ""
            self.lines.records.extend(new.records)
            self.lines.unreadable += new.unreadable
            self.lines.incomplete += new.incomplete
            self.lines.torn = new.torn
        return True

    def notes(self, incomplete: str) -> list[str]:
        if self.error:
            return [self.error]
        return line_notes(self.lines, self.path.name, incomplete)


class FollowedRun:
    """One run folder as last seen; `version` changes whenever what was read changed.

    Thread-safe: the server's request threads share one per folder."""

    def __init__(self, folder: RunFolder, min_interval_s: float = MIN_INTERVAL_S) -> None:
        self.folder = folder
        self.min_interval_s = min_interval_s
        self.version = 0
        self.evaluations = Tail(folder.evaluations, read_new_evaluations)
        self.calls = Tail(folder.llm_calls, read_new_llm_calls)
        self._settings: dict[str, Any] = {}
        self._settings_notes: list[str] = []
        self._checkpoint: Checkpoint | None = None
        self._checkpoint_gens: list[int] = []
        self._checkpoint_notes: list[str] = []
        self._memory: list[MemoryEntry] = []
        self._memory_notes: list[str] = []
        self._stamps: dict[str, Any] = {}
        self._looked = -float("inf")
        self._lock = threading.RLock()
        self._data: RunData | None = None
        self._views: dict[Any, Any] = {}

    # Looking ----------------------------------------------------------------------------
    def look(self) -> int:
        """Read what changed since the last look (at most once per `min_interval_s`); the version.
        UserError when a file is of a newer schema than this release reads."""
        with self._lock:
            now = time.monotonic()
            if now - self._looked < self.min_interval_s:
                return self.version
            self._looked = now
            changed = self._look_settings()
            checkpoint_changed = self._look_checkpoints()
            changed |= checkpoint_changed | self._look_memory(checkpoint_changed)
            changed |= self.evaluations.refresh()
            changed |= self.calls.refresh()
            if changed:
                self.version += 1
                self._data = None
                self._views.clear()
            return self.version

    def _changed(self, key: str, value: Any) -> bool:
        if self._stamps.get(key, ...) == value:
            return False
        self._stamps[key] = value
        return True

    def _look_settings(self) -> bool:
        if not self._changed("config", stamp(self.folder.config)):
            return False
        self._settings_notes = []
        self._settings = read_settings(self.folder, self._settings_notes)
        return True

    def _look_checkpoints(self) -> bool:
        files = self.folder.checkpoint_files()
        if not self._changed("checkpoints", ([g for g, _ in files], stamp(files[-1][1]) if files else None)):
            return False
        self._checkpoint, self._checkpoint_gens, self._checkpoint_notes = None, [g for g, _ in files], []
        for gen, path in reversed(files):       # the newest that reads whole
            try:
                self._checkpoint = read_checkpoint(path)
                break
            except (OSError, RecordError) as exc:
                self._checkpoint_gens.remove(gen)
                self._checkpoint_notes.append(f"checkpoints/{path.name} is unreadable ({type(exc).__name__})")
        if not files:
            self._checkpoint_notes.append("no checkpoint yet: figures come from evaluations.jsonl alone")
        return True

    def _look_memory(self, checkpoint_changed: bool) -> bool:
        if not self._changed("memory", stamp(self.folder.memory)) and not checkpoint_changed:
            return False
        self._memory_notes = []
        self._memory = read_memory(self.folder, self._checkpoint, self._memory_notes)
        return True

    # What was read ----------------------------------------------------------------------
    def data(self) -> RunData:
        """Everything read so far, as the report reads a folder (a snapshot: later looks do not
        change it)."""
        with self._lock:
            if self._data is None:
                notes = [*self._settings_notes, *self._checkpoint_notes,
                         *self.evaluations.notes(EVALUATION_INCOMPLETE), *self.calls.notes(CALL_INCOMPLETE),
                         *self._memory_notes]
                data = RunData(self.folder, self._settings, self._checkpoint, list(self._checkpoint_gens), {},
                               list(self.evaluations.lines.records), list(self.calls.lines.records),
                               list(self._memory), notes)
                data.notes += progress_notes(data)
                self._data = data
            return self._data

    def view(self, key: Any, make: Callable[[RunData], Any]) -> tuple[int, Any]:
        """The version of the data and `make(data)`, computed once per version."""
        with self._lock:
            if key not in self._views:
                self._views[key] = make(self.data())
            return self.version, self._views[key]


def follow(paths: list[str | Path], exist: bool = True, min_interval_s: float = MIN_INTERVAL_S) -> list[FollowedRun]:
    """The runs to follow, each read once. `exist`: each path must already be a run folder
    (UserError naming it otherwise); `run --serve` follows the folder its run is about to make."""
    runs = []
    for path in paths:
        folder = RunFolder.open(path) if exist else RunFolder(Path(path))
        run = FollowedRun(folder, min_interval_s)
        try:
            run.look()
        except UserError as exc:
            raise UserError(f"run folder '{path}': {exc}") from None
        runs.append(run)
    return runs
