"""Tokens per generation of a run with LLM operators, measured against the project's scripted
OpenAI-compatible test server (tests/llm_server.py) on 127.0.0.1.

    python benchmarks/llm_tokens.py                    # silu at the paper shape, default population
    python benchmarks/llm_tokens.py --shape small --gens 3

Prompt sizes are what a real endpoint bills, so they are real here: the prompts are the ones a
run sends (reference, kernels, simulated profiles, lessons). Completion sizes are the scripted
replies' and say nothing about a real model. The server counts tokens as word and punctuation
pieces, not with a model's tokenizer, so prompt characters are reported too. Results go to
benchmarks/out/llm_tokens.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The scripted server lives with the tests; appended last so that tests/<package> folders never
# shadow the packages of the same name.
sys.path[:0] = [str(REPO)]
sys.path.append(str(REPO / "tests"))

from accelopt_evo.run import config as cfgmod  # noqa: E402
from accelopt_evo.runner import start_run  # noqa: E402

from llm_server import ScriptedLLMServer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="paper")
    ap.add_argument("--gens", type=int, default=4)
    args = ap.parse_args()

    os.environ.setdefault("ACCELOPT_BENCH_KEY", "sk-bench-not-a-real-key")
    with ScriptedLLMServer() as server, tempfile.TemporaryDirectory() as out:
        cfg = cfgmod.resolve(sets=[f"run.out={json.dumps(out)}", f"run.gens={args.gens}", f"run.shape={args.shape}",
                                   "run.report=false", f"llm.base_url={json.dumps(server.url)}",
                                   "llm.model=test-model", "llm.api_key_env=ACCELOPT_BENCH_KEY"])
        outcome = start_run(cfg, "bench", progress=False, log=lambda msg: print(msg, flush=True))
        records = [json.loads(line) for line in outcome.folder.llm_calls.read_text().splitlines()]
        chars = defaultdict(int)
        for ex in server.answered:
            chars[int(ex.request.sample.split("/")[0])] += len(ex.request.text)
        memory = json.loads(outcome.folder.memory.read_text())["entries"]

    per_gen: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in records:
        if r["cached"] or r["status"] != "ok":
            continue
        row = per_gen[r["generation"]]
        row["calls"] += 1
        row["prompt_tokens"] += r["prompt_tokens"]
        row["completion_tokens"] += r["completion_tokens"]
        row[f"calls_{r['role']}"] += 1
    print(f"\nsilu at shape {args.shape}, population {cfg.population.size}, offspring {cfg.population.offspring}")
    print("generation  calls  prompt_chars  prompt_tokens  completion_tokens  tokens/call")
    for g in sorted(per_gen):
        row = per_gen[g]
        print(f"{g:10d}  {row['calls']:5d}  {chars[g]:12d}  {row['prompt_tokens']:13d}  {row['completion_tokens']:17d}"
              f"  {row['prompt_tokens'] // max(1, row['calls']):11d}")
    print(f"memory entries at the end: {len(memory)}")
    dest = REPO / "benchmarks" / "out"
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "llm_tokens.json").write_text(json.dumps({"shape": args.shape, "per_generation": per_gen,
                                                       "prompt_chars": chars}, indent=1))


if __name__ == "__main__":
    main()
