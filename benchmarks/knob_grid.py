"""How the performance model ranks the offline search space: every knob setting of a baseline.

    python benchmarks/knob_grid.py [--problems silu mamba rmsnorm_matmul] [--shape paper]
                                   [--target trn1] [--dialect legacy|nki] [--json out.json]

The offline operators move a baseline's `# tune:` knobs between their listed values, so the
space they search is the product of those values. For every setting this traces the kernel
shape-only at the problem's shape and estimates its latency (no correctness run: a setting
the evaluation would reject still gets a figure), then prints the settings fastest first with
their speedup over the baseline's own setting. Run it on two checkouts and compare the JSON
to see how a change of the model changes what a search keeps (the search-level check of
fitness/simulator/perf/README.md).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fitness.simulator import placeholders, run_kernel  # noqa: E402
from fitness.simulator.perf import estimate  # noqa: E402
from nkibench.registry import baseline_path, load, make_spec  # noqa: E402
from operators.knobs import find_knobs, set_knobs  # noqa: E402

MAX_SETTINGS = 256


def grid(problem: str, shape: str, target: str, dialect: str) -> list[dict]:
    """One row per knob setting: its values, the estimate (or the error), and tracing time."""
    source = baseline_path(problem, dialect).read_text()
    p = load(make_spec(problem, shape))
    args = placeholders(p.to_kernel_inputs(p.make_inputs(0)))
    knobs = find_knobs(source)
    settings = list(itertools.product(*[k.choices for k in knobs.values()]))
    if len(settings) > MAX_SETTINGS:
        raise SystemExit(f"error: {problem} has {len(settings)} knob settings, more than {MAX_SETTINGS}")
    rows = []
    for combo in settings:
        values = dict(zip(knobs, combo))
        t0 = time.perf_counter()
        try:
            trace = run_kernel(set_knobs(source, values), args, shape_only=True).trace
            row = {"knobs": values, "latency_ms": estimate(trace, target).latency_ms}
        except Exception as exc:  # a setting the emulator refuses: say why, go on
            row = {"knobs": values, "error": f"{type(exc).__name__}: {exc}"[:200]}
        row["seconds"] = round(time.perf_counter() - t0, 2)
        row["baseline"] = all(values[k] == knobs[k].value for k in knobs)
        rows.append(row)
    return rows


def format_grid(problem: str, rows: list[dict]) -> str:
    base = next((r.get("latency_ms") for r in rows if r["baseline"]), None)
    lines = [f"{problem}: {len(rows)} knob settings"]
    ok = sorted((r for r in rows if "latency_ms" in r), key=lambda r: r["latency_ms"])
    for rank, r in enumerate(ok, 1):
        speedup = f"{base / r['latency_ms']:6.3f}x" if base else "      "
        mark = "  (baseline)" if r["baseline"] else ""
        knobs = ", ".join(f"{k}={v}" for k, v in r["knobs"].items())
        lines.append(f"  {rank:3d}  {r['latency_ms']:9.4f} ms  {speedup}  {knobs}{mark}")
    for r in rows:
        if "error" in r:
            lines.append(f"    -  {r['error']}  ({r['knobs']})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", nargs="+", default=["silu", "mamba", "rmsnorm_matmul"])
    ap.add_argument("--shape", default="paper")
    ap.add_argument("--target", default="trn1")
    ap.add_argument("--dialect", default="", help="baseline dialect (default: the problem's own)")
    ap.add_argument("--json", default=None, help="write the rows to this file")
    args = ap.parse_args(argv)
    out = {}
    for problem in args.problems:
        out[problem] = grid(problem, args.shape, args.target, args.dialect)
        print(format_grid(problem, out[problem]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"target": args.target, "shape": args.shape, "grids": out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
