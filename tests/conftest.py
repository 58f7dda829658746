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


# The scripted OpenAI-compatible server (tests/llm_server.py) for every test folder.
from llm_server import ScriptedLLMServer, llm_server  # noqa: E402,F401  (re-exported fixture)


@pytest.fixture
def make_server():
    """Start extra servers (custom responders or options); all are stopped afterwards."""
    started: list[ScriptedLLMServer] = []

    def make(*args, **kwargs) -> ScriptedLLMServer:
        server = ScriptedLLMServer(*args, **kwargs).start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()
