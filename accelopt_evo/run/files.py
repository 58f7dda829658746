"""Crash-safe file primitives: atomic replacement and whole-line appends.

A reader never sees a half-written checkpoint (write to a temp file in the same folder, fsync,
rename over the target) and JSONL logs are appended one complete line per write; a reader
skips a torn last line left by a kill mid-append.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_text_atomic(path: Path, text: str, mode: int | None = None) -> None:
    """Replace `path` with `text` in one step (permission bits `mode` when given)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def append_line(path: Path, line: str) -> None:
    """Append one whole line in one write (a reader sees it whole or, after a kill, torn last)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    append_line(path, json.dumps(record, sort_keys=True))
