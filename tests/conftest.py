"""Shared test fixtures: where the reference data beside the checkout lives."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
NKIBENCH_DIR = SHARED / "nkibench"


@pytest.fixture(scope="session")
def nkibench_dir() -> Path:
    """The official NKIBench release (../shared/nkibench); tests needing it skip without it."""
    if not (NKIBENCH_DIR / "summary.json").is_file():
        pytest.skip(f"the official NKIBench folder is absent ({NKIBENCH_DIR} has no summary.json)")
    return NKIBENCH_DIR
