"""Latency first against full judgement (`evaluation.cascade`), on the same search.

    python benchmarks/cascade.py [--problems matmul gqa_full] [--gens 20] [--seed 0]
        [--suite-dir ../shared/nkibench | --suite-dir ""] [--out runs/cascade-bench] [--shape paper]
        [--set SECTION.KEY=VALUE ...] [--jobs N]

For each problem (official kernel as baseline, or the built-in one with --suite-dir "",
simulated trn1, offline operators, a fixed seed): one run with `evaluation.cascade = "latency_first"` and one with `"full"`, each in its
own run folder and evaluation cache. Prints whether the survivors, hall of fame and memory of
every generation are identical, the evaluation time of each run (wall time of its generations,
and the summed seconds of its evaluations), and the share of children never judged in full.
A run folder that already holds the generations is read, not run again (delete it to rerun).
`--jobs 2` runs two searches side by side (a problem's two cascades together: both then run
under the same load, and two cores finish in about half the time), each one's output in
`OUT/PROBLEM/CASCADE.log`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from accelopt_evo.report import markdown as report  # noqa: E402
from accelopt_evo.run.folder import RunFolder  # noqa: E402
from fitness.result import NOT_JUDGED  # noqa: E402

DEFAULT_SUITE = REPO.parent / "shared" / "nkibench"
CASCADES = ("latency_first", "full")


def run(problem: str, cascade: str, args: argparse.Namespace) -> Path:
    """Run (or resume) the search of `problem` under `cascade`; its folder."""
    out = Path(args.out) / problem
    folder = out / cascade
    if (folder / "checkpoints" / f"gen-{args.gens:04d}.json").is_file():
        return folder
    if folder.is_dir():
        cmd = [sys.executable, "-m", "accelopt_evo", "resume", str(folder), "--gens", str(args.gens)]
    else:
        suite = ["--suite-dir", str(args.suite_dir)] if str(args.suite_dir) else []
        cmd = [sys.executable, "-m", "accelopt_evo", "run", "--gens", str(args.gens), "--problem", problem,
               *suite, "--operators", "tuning", "--seed", str(args.seed),
               "--out", str(out), "--run-id", cascade, "--no-progress",
               "--set", "evaluation.target=\"trn1\"", "--set", f"run.shape=\"{args.shape}\"",
               "--set", "run.report=false", "--set", "evaluation.heldout=\"derived\"",
               "--set", f"evaluation.cascade=\"{cascade}\""]
        for s in args.set:
            cmd += ["--set", s]
    # One write, line end included (print writes its end apart): runs may print at once.
    sys.stdout.write("$ " + " ".join(cmd) + "\n")
    sys.stdout.flush()
    if args.jobs == 1:
        subprocess.run(cmd, cwd=REPO, check=False)
    else:   # runs side by side: each one's lines in its own file, not interleaved
        out.mkdir(parents=True, exist_ok=True)
        with open(out / f"{cascade}.log", "a") as log:
            subprocess.run(cmd, cwd=REPO, check=False, stdout=log, stderr=subprocess.STDOUT)
    return folder


def decisions(folder: Path) -> list[tuple]:
    """Per checkpointed generation: population ids, hall of fame ids, memory pairs, random state."""
    out = []
    for path in sorted((folder / "checkpoints").glob("gen-*.json")):
        ck = json.loads(path.read_text())
        out.append(({n: [m["id"] for m in v] for n, v in ck["population"].items()},
                    {n: [m["id"] for m in v] for n, v in ck["hall_of_fame"].items()},
                    [(m["parent_id"], m["child_id"]) for m in ck["memory"]], ck["random_state"]))
    return out


def figures(folder: Path) -> dict:
    """Evaluation time and judgement counts of a run folder."""
    data = report.collect(RunFolder(folder))
    fresh = [e for e in data.evaluations if not e.reused]
    children = [e for e in fresh if e.operator != "baseline"]
    not_judged = sum(1 for e in children if e.result.status == NOT_JUDGED)
    logbook = data.checkpoint.logbook if data.checkpoint else {}
    wall = sum(e.get("seconds") or 0.0 for entries in logbook.values() for e in entries)
    return {"children": len(children), "not_judged": not_judged,
            "share_not_judged": not_judged / len(children) if children else 0.0,
            "evaluation_s": round(sum(e.result.seconds for e in fresh), 1),
            "generations_wall_s": round(wall, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", nargs="*", default=["matmul", "gqa_full"])
    ap.add_argument("--gens", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shape", default="paper")
    ap.add_argument("--suite-dir", default=str(DEFAULT_SUITE),
                    help='the official kernels as baselines (paper shapes only); "" for the built-in problems '
                         'and baselines, which have smaller shapes too (--shape small)')
    ap.add_argument("--out", default=str(REPO / "runs" / "cascade-bench"))
    ap.add_argument("--set", action="append", default=[], help="extra --set for both runs")
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--jobs", type=int, default=1, help="searches run at once (each is its own process)")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error("--jobs must be >= 1")
    with ThreadPoolExecutor(args.jobs) as pool:   # threads only wait on the runs' processes
        runs = {(p, c): pool.submit(run, p, c, args) for p in args.problems for c in CASCADES}
    rows = []
    for problem in args.problems:
        folders = {c: runs[problem, c].result() for c in CASCADES}
        same = decisions(folders["latency_first"]) == decisions(folders["full"])
        row = {"problem": problem, "identical_decisions": same,
               **{c: figures(f) for c, f in folders.items()}}
        rows.append(row)
        lf, full = row["latency_first"], row["full"]
        print(f"{problem}: identical survivors, hall of fame and memory every generation: {same}; "
              f"latency_first {lf['generations_wall_s']} s of generations ({lf['evaluation_s']} s evaluating), "
              f"{lf['not_judged']} of {lf['children']} children not judged ({100 * lf['share_not_judged']:.0f}%); "
              f"full {full['generations_wall_s']} s ({full['evaluation_s']} s)", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0 if all(r["identical_decisions"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
