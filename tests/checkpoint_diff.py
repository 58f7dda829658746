"""Checkpoints of two runs, compared: `comparable` drops what legitimately differs between runs
that should agree (timings, the cache flag, when it was written, the configuration hash, which
covers settings such as run.out or evaluation.executor that differ by design)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def comparable(path: Path) -> dict[str, Any]:
    data = json.loads(Path(path).read_text())
    for entries in data["logbook"].values():
        for e in entries:
            e.pop("seconds")
    for key in ("written", "config_hash", "seal"):   # the seal covers `written`
        data.pop(key, None)
    for r in results(data):
        r.pop("seconds")
        r.pop("cached")
    return data


def results(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Every evaluation result a checkpoint holds (population, hall of fame, known kernels)."""
    found = [m["result"] for pop in [*data["population"].values(), *data["hall_of_fame"].values()] for m in pop]
    return found + [r for p in data["problems"].values() for r in p["known"].values()]
