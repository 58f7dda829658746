"""Several generations of the stand-in engine with LLM operators and the optimization memory:
lessons reach later prompts, the ledger matches the server, a resumed generation is rebuilt
from the cache without a request, and the token use per generation is measured."""

from __future__ import annotations

import re

import pytest

from llm_support import ENV, MiniEngine, budget, settings
from operators.llm import LLMOperators
from operators.llm.ledger import read_records

MARKER_RE = re.compile(r"LESSON-[0-9a-f]{8}")


def generation_of(exchange) -> int:
    return int(exchange.request.sample.split("/")[0])


def test_three_generations_feed_lessons_into_later_prompts(llm_server, run_dir):
    engine = MiniEngine()
    with LLMOperators(settings(llm_server.url), budget(), run_dir, environ=ENV) as ops:
        logs = [engine.step(ops) for _ in range(3)]
    entries = engine.memory.entries
    assert entries, "no memory entry was admitted"
    assert all(MARKER_RE.search(e.rationale) for e in entries)
    # Every lesson admitted in generation g shows up in every prompt of later generations.
    for entry in entries:
        marker = MARKER_RE.search(entry.rationale).group(0)
        later = [e for e in llm_server.exchanges if generation_of(e) > entry.generation]
        if entry.generation < 3:
            assert later and all(marker in e.request.text for e in later)
    assert any(generation_of(e) > min(x.generation for x in entries) and MARKER_RE.search(e.request.text)
               for e in llm_server.exchanges)
    # The ledger's token totals equal the usage the server reported.
    records = read_records(run_dir / "llm_calls.jsonl")
    billed = [r for r in records if r.status == "ok" and not r.cached]
    totals = llm_server.totals()
    assert len(billed) == totals["calls"]
    assert sum(r.prompt_tokens for r in billed) == totals["prompt_tokens"]
    assert sum(r.completion_tokens for r in billed) == totals["completion_tokens"]
    assert [log.generation for log in logs] == [1, 2, 3]


def test_resuming_from_the_previous_checkpoint_rebuilds_the_generation_from_the_cache(llm_server, run_dir):
    engine = MiniEngine(seed=5)
    with LLMOperators(settings(llm_server.url), budget(), run_dir, environ=ENV) as ops:
        engine.step(ops)
        engine.step(ops)
        before_last = engine.checkpoint()
        last = engine.step(ops)
        final = engine.checkpoint()
    sent = len(llm_server.exchanges)
    # "Delete the last checkpoint": resume from generation 2's state in a fresh process-like setup.
    resumed = MiniEngine(seed=5, state=before_last)
    with LLMOperators(settings(llm_server.url), budget(), run_dir, environ=ENV) as ops:
        again = resumed.step(ops)
    assert len(llm_server.exchanges) == sent, "the resumed generation sent requests"
    assert again == last
    assert resumed.checkpoint() == final
    replayed = [r for r in read_records(run_dir / "llm_calls.jsonl") if r.cached]
    assert replayed and all(r.generation == 3 for r in replayed)


def test_concurrency_leaves_a_whole_run_unchanged(make_server, tmp_path):
    runs = []
    for conc in (1, 4):
        server = make_server()
        engine = MiniEngine(seed=2)
        with LLMOperators(settings(server.url, max_concurrency=conc), budget(), tmp_path / f"r{conc}",
                          environ=ENV) as ops:
            runs.append([engine.step(ops) for _ in range(2)])
    assert runs[0] == runs[1]


def test_call_cap_ends_the_run_cleanly(llm_server, run_dir):
    engine = MiniEngine()
    with LLMOperators(settings(llm_server.url), budget(max_llm_calls=3), run_dir, environ=ENV) as ops:
        log = engine.step(ops)
        reason = ops.stop_reason()
    assert len(llm_server.answered) <= 3
    assert reason.startswith("budget.max_llm_calls=3 reached")
    assert log.generation == 1 and any("not sent" in err for _, _, err in log.children)


@pytest.mark.slow
def test_tokens_per_generation_at_the_paper_shape(llm_server, run_dir, capsys):
    """Measures (and prints) the tokens one generation of the default population uses on silu
    at the paper shape, as the test server counts them."""
    engine = MiniEngine(shape=(4096, 7168))
    per_gen = []
    with LLMOperators(settings(llm_server.url), budget(), run_dir, environ=ENV) as ops:
        for _ in range(6):
            before, seen = llm_server.totals(), len(llm_server.answered)
            engine.step(ops)
            after = llm_server.totals()
            chars = sum(len(e.request.text) for e in llm_server.answered[seen:])
            per_gen.append({k: after[k] - before[k] for k in after} | {"prompt_chars": chars,
                                                                      "lessons": len(engine.memory.entries)})
    with capsys.disabled():
        print("\ngeneration  calls  prompt_chars  prompt_tokens  completion_tokens  lessons_after")
        for g, row in enumerate(per_gen, 1):
            print(f"{g:10d}  {row['calls']:5d}  {row['prompt_chars']:12d}  {row['prompt_tokens']:13d}"
                  f"  {row['completion_tokens']:17d}  {row['lessons']:13d}")
    assert all(row["calls"] >= 8 for row in per_gen)
    records = read_records(run_dir / "llm_calls.jsonl")
    assert sum(r.prompt_tokens for r in records) == llm_server.totals()["prompt_tokens"]
