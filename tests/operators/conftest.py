"""Fixtures of the LLM operator tests: the scripted OpenAI-compatible server (`llm_server`,
from tests/llm_server.py, which pytest puts on sys.path through tests/conftest.py), extra
servers with custom responders, and a run folder. Helpers live in llm_support.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from llm_server import ScriptedLLMServer, llm_server  # noqa: F401  (re-exported fixture)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    return d


@pytest.fixture
def make_server():
    """Start extra servers (custom responders or options); all are stopped afterwards."""
    started: list[ScriptedLLMServer] = []

    def make(*args: Any, **kwargs: Any) -> ScriptedLLMServer:
        server = ScriptedLLMServer(*args, **kwargs).start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()
