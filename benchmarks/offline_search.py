"""The offline search on the NKIBench problems, beside AccelOpt's demo run.

    python benchmarks/offline_search.py [--problems silu rope_single_freq_apply mamba ...]
        [--gens 20] [--seed 0] [--suite-dir ../shared/nkibench] [--out runs/offline-bench]
        [--json out.json] [--set SECTION.KEY=VALUE ...]

For each problem, with the official kernel as baseline: `run --gens N --operators tuning` on
simulated trn1 at the paper shape with a fixed seed (knob moves and structural rewrites only,
no LLM), then prints the best speedup and % of peak beside the speedup of AccelOpt's 3-iteration
demo run with gpt-oss-120b measured on trn1 (`trn1_measurements.json` of the suite). Every
evaluation runs the held-out seeds too, so a best kernel with status ok passed them. A problem
whose run folder already holds the generations is read, not run again (delete it to rerun).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from accelopt_evo.report import markdown as report  # noqa: E402
from accelopt_evo.run.folder import RunFolder  # noqa: E402
from nkibench.official import official_names  # noqa: E402

DEFAULT_SUITE = REPO.parent / "shared" / "nkibench"
IMPROVED = 1.01     # a best speedup below this counts as no improvement (estimate noise, rounding)


def demo_speedups(suite: Path) -> dict[str, float]:
    """AccelOpt's demo-run best speedup per problem, measured on trn1."""
    data = json.loads((suite / "trn1_measurements.json").read_text())
    out = {}
    for case in data["cases"].values() if isinstance(data["cases"], dict) else data["cases"]:
        best = case.get("accelopt_best_demo_run") or {}
        if best.get("speedup_vs_baseline"):
            out[case["problem"]] = float(best["speedup_vs_baseline"])
    return out


def run_problem(problem: str, args: argparse.Namespace) -> dict:
    """Run (or read) one problem's search; its best kernel's figures."""
    folder = Path(args.out) / problem
    started = time.perf_counter()
    done = folder.is_dir() and RunFolder(folder).checkpoints.is_dir() and any(
        RunFolder(folder).checkpoints.glob(f"gen-{args.gens:04d}.json"))
    if not done:
        cmd = [sys.executable, "-m", "accelopt_evo", "run", "--gens", str(args.gens), "--problem", problem,
               "--suite-dir", str(args.suite_dir), "--operators", "tuning", "--seed", str(args.seed),
               "--out", str(args.out), "--run-id", problem, "--set", "evaluation.target=\"trn1\"",
               "--set", "run.report=false"]
        for s in args.set:
            cmd += ["--set", s]
        if folder.is_dir():
            cmd = [sys.executable, "-m", "accelopt_evo", "resume", str(folder), "--gens", str(args.gens)]
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, cwd=REPO, check=False)
    data = report.collect(RunFolder(folder))
    best = report.best_kernel(data, problem)
    series = report.best_series(data, problem)
    # every kernel the best descends from, oldest first: what was applied on the way
    chain = sorted(report.lineage(best, report.kernel_index(data))[1], key=lambda k: k.generation) if best else []
    return {"problem": problem, "speedup": best.speedup if best else None,
            "percent_of_peak": best.percent_of_peak if best else None, "status": best.status if best else None,
            "steps": [f"gen {k.generation} {k.operator}: {k.note} ({k.speedup:.3f}x)" for k in chain
                      if k.note and k.speedup],
            "generations": data.last_generation,
            "first_gen_best": series[1][1] if len(series) > 1 else None,
            "seconds": round(time.perf_counter() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", nargs="*", default=None, help="default: the suite's 14 problems")
    ap.add_argument("--gens", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--suite-dir", type=Path, default=DEFAULT_SUITE)
    ap.add_argument("--out", default=str(REPO / "runs" / "offline-bench"))
    ap.add_argument("--json", default=None)
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    args = ap.parse_args(argv)
    problems = args.problems or official_names(args.suite_dir)
    demo = demo_speedups(args.suite_dir)
    rows = [run_problem(p, args) for p in problems]
    print(f"\n{'problem':<22} {'best':>7} {'% peak':>7} {'AccelOpt demo':>13}  gen-1 best")
    for r in rows:
        sp = f"{r['speedup']:.3f}x" if r["speedup"] else "-"
        pk = f"{r['percent_of_peak']:.1f}%" if r["percent_of_peak"] else "-"
        d = f"{demo[r['problem']]:.2f}x" if r["problem"] in demo else "-"
        g1 = f"{r['first_gen_best']:.3f}x" if r["first_gen_best"] else "-"
        print(f"{r['problem']:<22} {sp:>7} {pk:>7} {d:>13}  {g1:>10}")
        for step in r["steps"]:
            print(f"    {step}")
    got = [r["speedup"] for r in rows if r["speedup"]]
    if got:
        gm = math.exp(sum(math.log(s) for s in got) / len(got))
        improved = sum(1 for s in got if s >= IMPROVED)
        gm_demo = [demo[r["problem"]] for r in rows if r["problem"] in demo]
        gd = math.exp(sum(math.log(s) for s in gm_demo) / len(gm_demo)) if gm_demo else float("nan")
        print(f"\nimproved (>= {IMPROVED}x) {improved} of {len(rows)}; geomean best speedup {gm:.3f}x (AccelOpt demo {gd:.3f}x "
              "over the same problems; simulated trn1 here, measured trn1 there)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
