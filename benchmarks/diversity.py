"""Diversity strategies against one population, at equal evaluation counts.

    python benchmarks/diversity.py [--problems silu swiglu rope_single_freq_apply] [--seeds 0 1 2 3 4]
        [--gens 10] [--budget 48] [--shape small] [--strategies mu_plus_lambda islands map_elites novelty]
        [--jobs 2] [--out runs/diversity-bench] [--json runs/diversity-bench/diversity.json]
        [--set SECTION.KEY=VALUE ...]

For each problem, seed and strategy: a run of the built-in baseline on simulated trn1 with the
offline operators (`--operators tuning`: knob moves and structural rewrites, no LLM), at the
named shape, `--gens` generations of the default population (8 survivors, 8 children), in its
own run folder (`OUT/<problem>/<strategy>-s<seed>`; a folder that already holds the
generations is read, not run again), every child judged in full (`evaluation.cascade =
"full"`: the count of valid kernels does not depend on which verdicts a strategy asked for).
The strategies: `mu_plus_lambda` (the default),
`islands` (4 islands, migration of the best every 3 generations on a ring), `map_elites`
(busiest engine x 4 DMA-share bins) and `novelty` (mu_plus_lambda with `variation.novelty`
= 0.005, about a one-knob move on the larger baselines). Runs share one evaluation cache
(results are deterministic; it only saves time).

Equal evaluation counts: dedupe and novelty make the evaluations of a generation differ by
strategy (a child already known is not evaluated), so every run is scored on its first
`--budget` evaluations (lines of evaluations.jsonl not reused; the baseline's included), and a
run that made fewer in its generations (its children were all known kernels: the search
stalled) on those it made.
Printed per strategy: the mean best speedup (valid kernels, status ok) within those
evaluations, the mean count of distinct valid kernels among them, the mean evaluations scored,
and on how many (problem, seed) pairs it had the best speedup (ties count for all). The JSON
holds every run's figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from accelopt_evo.run import config as config_mod  # noqa: E402
from accelopt_evo.run.records import EvaluationLine, read_evaluations  # noqa: E402
from accelopt_evo.runner import resume_run, start_run  # noqa: E402

STRATEGIES = {
    "mu_plus_lambda": [],
    "islands": ["selection.strategy=\"islands\""],
    "map_elites": ["selection.strategy=\"map_elites\""],
    "novelty": ["variation.novelty=0.005"],
}


def run(job: tuple[str, int, str, argparse.Namespace]) -> Path:
    """Run (or resume, or read) one search; its folder."""
    problem, seed, strategy, args = job
    out = Path(args.out) / problem
    run_id = f"{strategy}-s{seed}"
    folder = out / run_id
    if (folder / "checkpoints" / f"gen-{args.gens:04d}.json").is_file():
        return folder
    quiet = dict(progress=False, log=lambda msg: None)
    if folder.is_dir():
        resume_run(folder, args.gens, **quiet)
        return folder
    sets = [f"run.gens={args.gens}", f"run.problems=[\"{problem}\"]", f"run.seed={seed}", f"run.shape=\"{args.shape}\"",
            f"run.out={json.dumps(str(out))}", "operators.kind=\"tuning\"", "evaluation.target=\"trn1\"",
            "evaluation.cascade=\"full\"", "run.report=false", "evaluation.heldout=\"derived\"",
            f"evaluation.workers={args.workers}",
            f"evaluation.cache_dir={json.dumps(str(Path(args.out).resolve() / 'cache'))}",
            *STRATEGIES[strategy], *args.set]
    start_run(config_mod.resolve(sets=sets), run_id, **quiet)
    return folder


def evaluations(folder: Path) -> list[EvaluationLine]:
    """The run's evaluations in order, reused lines left out."""
    return [e for e in read_evaluations(folder / "evaluations.jsonl").records if not e.reused]


def score(lines: list[EvaluationLine], budget: int) -> dict[str, float]:
    """Best speedup and distinct valid kernels within the first `budget` evaluations."""
    valid = [e for e in lines[:budget] if e.result.status == "ok" and e.result.speedup is not None]
    return {"best_speedup": max((e.result.speedup for e in valid), default=0.0),
            "distinct_valid": len({e.kernel_id for e in valid}), "evaluations": budget}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", nargs="+", default=["silu", "swiglu", "rope_single_freq_apply"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    ap.add_argument("--gens", type=int, default=10)
    ap.add_argument("--budget", type=int, default=48, help="evaluations each run is scored on")
    ap.add_argument("--shape", default="small")
    ap.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=list(STRATEGIES))
    ap.add_argument("--jobs", type=int, default=2, help="runs at once")
    ap.add_argument("--workers", type=int, default=1, help="evaluation.workers of each run")
    ap.add_argument("--out", default=str(REPO / "runs" / "diversity-bench"))
    ap.add_argument("--json", default="")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    args = ap.parse_args(argv)

    jobs = [(p, s, st, args) for p in args.problems for s in args.seeds for st in args.strategies]
    with ProcessPoolExecutor(args.jobs) as pool:
        folders = dict(zip([(p, s, st) for p, s, st, _ in jobs], pool.map(run, jobs)))

    rows = []
    for p in args.problems:
        for s in args.seeds:
            lines = {st: evaluations(folders[(p, s, st)]) for st in args.strategies}
            scores = {st: score(lines[st], min(args.budget, len(lines[st]))) for st in args.strategies}
            top = max(sc["best_speedup"] for sc in scores.values())
            for st, sc in scores.items():
                rows.append({"problem": p, "seed": s, "strategy": st, **sc, "won": sc["best_speedup"] >= top,
                             "evaluations_in_run": len(lines[st]), "folder": str(folders[(p, s, st)])})

    print(f"\n{len(args.problems)} problems x {len(args.seeds)} seeds, {args.gens} generations, shape "
          f"'{args.shape}', simulated trn1, offline operators; scored on the first {args.budget} evaluations")
    print(f"{'strategy':<16} {'problem':<24} {'best speedup':>13} {'distinct valid':>15} {'evaluations':>12} {'wins':>6}")
    summary: dict[str, dict] = {}
    for st in args.strategies:
        for p in [*args.problems, "all"]:
            mine = [r for r in rows if r["strategy"] == st and p in (r["problem"], "all")]
            figures = {"best_speedup": statistics.mean(r["best_speedup"] for r in mine),
                       "distinct_valid": statistics.mean(r["distinct_valid"] for r in mine),
                       "evaluations": statistics.mean(r["evaluations"] for r in mine),
                       "wins": sum(r["won"] for r in mine), "pairs": len(mine)}
            summary.setdefault(st, {})[p] = figures
            print(f"{st:<16} {p:<24} {figures['best_speedup']:>12.3f}x {figures['distinct_valid']:>15.1f} "
                  f"{figures['evaluations']:>12.1f} {figures['wins']:>3}/{figures['pairs']}")
    out = {"problems": args.problems, "seeds": args.seeds, "gens": args.gens, "budget": args.budget,
           "shape": args.shape,
           "target": "trn1", "operators": "tuning", "strategies": {st: STRATEGIES[st] for st in args.strategies},
           "summary": summary, "runs": rows}
    path = Path(args.json) if args.json else Path(args.out) / "diversity.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
