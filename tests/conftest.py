"""Shared test fixtures: where the reference data beside the checkout lives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
NKIBENCH_DIR = SHARED / "nkibench"
NKI_EXAMPLES_DIR = SHARED / "nki-examples"


def _shared(folder: Path, marker: str, what: str) -> Path:
    if not (folder / marker).is_file():
        pytest.skip(f"{what} is absent ({folder} has no {marker})")
    return folder


@pytest.fixture(scope="session", autouse=True)
def user_config_home(tmp_path_factory) -> Path:
    """The user's configuration folder of the whole session (its subprocesses too): the seal key
    (fitness.seal) is made there, never in the real home of whoever runs the tests."""
    home = tmp_path_factory.mktemp("config-home")
    saved = os.environ.get("XDG_CONFIG_HOME")
    os.environ["XDG_CONFIG_HOME"] = str(home)
    yield home
    if saved is None:
        os.environ.pop("XDG_CONFIG_HOME", None)
    else:
        os.environ["XDG_CONFIG_HOME"] = saved


@pytest.fixture(scope="session")
def nkibench_dir() -> Path:
    """The official NKIBench release (../shared/nkibench); tests needing it skip without it."""
    return _shared(NKIBENCH_DIR, "summary.json", "the official NKIBench folder")


@pytest.fixture(scope="session")
def nki_examples_dir() -> Path:
    """The NKI SDK's current-dialect examples (../shared/nki-examples); tests needing them skip
    without them."""
    return _shared(NKI_EXAMPLES_DIR, "README.md", "the NKI SDK examples folder")


@pytest.fixture(scope="session")
def trace_cache(tmp_path_factory) -> Path:
    """One folder of shape-only emulator traces for the whole test session, shared by the
    pytest-xdist workers (the parent of a worker's base folder is the session's), so that the
    model checks and the refit trace each measured kernel once. Never kept across sessions:
    its keys do not cover the emulator's own code."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "trace-cache"


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
