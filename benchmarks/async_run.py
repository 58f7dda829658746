"""Asynchronous vs generational evolution against a slow LLM endpoint: wall time to the same
number of evaluated children.

    python benchmarks/async_run.py                 # silu paper shape, 3 generations x 8 offspring, 2 s a call
    python benchmarks/async_run.py --shape small --llm-concurrency 4    # endpoint-bound, fast evaluations
    python benchmarks/async_run.py --repeat 3      # three pairs of runs in alternating order, medians

Both runs use the project's scripted OpenAI-compatible test server (tests/llm_server.py) on
127.0.0.1, made to answer every chat call after `--delay` seconds, the real evaluator (the
simulator, silu at `--shape`), the same configuration and seed; only `run.mode` differs. At most
`--llm-concurrency` calls (`llm.max_concurrency`) are at the endpoint at once in either mode,
and the async run keeps `--slots` requests (`run.max_in_flight`) in flight. Generation 0 (the
initial population) is made the same way by both modes, so the figure compared is the time
from the end of generation 0 to the end of the run (`--gens` generations of `--offspring`
children each); the totals are shown too. Each run has its own folder, so neither finds the
other's replies or evaluations in a cache. At the paper shape an evaluation takes seconds
(what asynchronous runs are for); at small shapes evaluations are nearly free and both modes
are bound by the endpoint alone. Results go to benchmarks/out/async_run.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The scripted server lives with the tests; appended last so that tests/<package> folders never
# shadow the packages of the same name.
sys.path[:0] = [str(REPO)]
sys.path.append(str(REPO / "tests"))

from accelopt_evo.run import config as cfgmod  # noqa: E402
from accelopt_evo.runner import start_run  # noqa: E402

from llm_server import ScriptedLLMServer  # noqa: E402


def one_run(mode: str, args: argparse.Namespace, out: str, run_id: str) -> dict:
    with ScriptedLLMServer(delay_s=args.delay) as server:
        cfg = cfgmod.resolve(sets=[
            f"run.out={json.dumps(out)}", f"run.gens={args.gens}", f"run.shape={args.shape}", "run.report=false",
            f'run.mode="{mode}"', f"run.max_in_flight={args.slots}", f"population.size={args.offspring}",
            f"population.offspring={args.offspring}", f"llm.base_url={json.dumps(server.url)}",
            "llm.model=test-model", "llm.api_key_env=ACCELOPT_BENCH_KEY", f"llm.max_concurrency={args.llm_concurrency}",
            "evaluation.heldout=derived"])
        marks: dict[str, float] = {}

        def log(msg: str) -> None:
            if msg.startswith("gen   0"):
                marks.setdefault("gen0", time.perf_counter())
            print(f"  [{mode}] {msg}", flush=True)

        started = time.perf_counter()
        outcome = start_run(cfg, run_id, progress=False, log=log)
        ended = time.perf_counter()
        calls = server.totals()["calls"]
    ck = json.loads(outcome.folder.checkpoint_path(args.gens).read_text())
    log_entries = ck["logbook"]["silu"]
    children = sum(e["offspring"] for e in log_entries[1:])
    evaluated = sum(e["evals"] for e in log_entries[1:])
    return {"mode": mode, "total_s": round(ended - started, 2), "after_gen0_s": round(ended - marks["gen0"], 2),
            "children": children, "fresh_evaluations": evaluated, "llm_calls": calls,
            "best_speedup": round(outcome.best["silu"]["speedup"], 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--delay", type=float, default=2.0, help="seconds the server takes per chat call")
    ap.add_argument("--gens", type=int, default=3)
    ap.add_argument("--offspring", type=int, default=8, help="population.size and population.offspring")
    ap.add_argument("--slots", type=int, default=8, help="run.max_in_flight (requests in flight, async)")
    ap.add_argument("--llm-concurrency", type=int, default=8, help="llm.max_concurrency (calls at once, both)")
    ap.add_argument("--shape", default="paper", help="silu's shape: paper (evaluations take seconds), small, tiny")
    ap.add_argument("--repeat", type=int, default=1, help="pairs of runs, in alternating order (medians shown)")
    args = ap.parse_args()

    os.environ.setdefault("ACCELOPT_BENCH_KEY", "sk-bench-not-a-real-key")
    rows = []
    with tempfile.TemporaryDirectory() as out:
        for r in range(args.repeat):
            for mode in ("generational", "async")[:: 1 if r % 2 == 0 else -1]:
                rows.append(one_run(mode, args, out, f"{mode}-{r}"))
    load = os.getloadavg()
    print(f"\nsilu {args.shape}, {args.gens} generations x {args.offspring} offspring, LLM {args.delay:g} s a call, "
          f"{args.llm_concurrency} LLM calls at once, {args.slots} slots; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    print("mode           after gen 0 (s)  total (s)  children  fresh evals  LLM calls  best speedup")
    for r in rows:
        print(f"{r['mode']:<13}  {r['after_gen0_s']:15.2f}  {r['total_s']:9.2f}  {r['children']:8d}  "
              f"{r['fresh_evaluations']:11d}  {r['llm_calls']:9d}  {r['best_speedup']:12.4f}")
    medians = {m: statistics.median(r["after_gen0_s"] for r in rows if r["mode"] == m) for m in ("generational", "async")}
    print(f"median after generation 0: generational {medians['generational']:.2f} s, async {medians['async']:.2f} s; "
          f"async / generational {medians['async'] / medians['generational']:.2f}")
    dest = REPO / "benchmarks" / "out"
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "async_run.json").write_text(json.dumps({"args": vars(args), "load_average": load, "runs": rows},
                                                    indent=1))


if __name__ == "__main__":
    main()
