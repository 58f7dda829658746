"""Fixtures of the LLM operator tests: a run folder. The scripted OpenAI-compatible server
fixtures (`llm_server`, `make_server`) come from tests/conftest.py; helpers live in
llm_support.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    return d
