"""A snapshot of the performance model's figures for every kernel the project knows, and a diff.

    python benchmarks/latency_snapshot.py --out FILE.json [--targets trn1 trn2 trn3] [--shape paper]
                                          [--only SUBSTRING] [--shared ../shared]
    python benchmarks/latency_snapshot.py --compare BEFORE.json AFTER.json [--rel 1e-9]

Every kernel is traced shape-only with the emulator and estimated by
`fitness.simulator.perf.estimate` for each target (shipped parameters). Per kernel the file
records the trace's instruction count and, per target, latency_ms, hbm_read_bytes,
hbm_write_bytes, hardware_flops, the bottleneck, and bound_ms: the least latency a correct
kernel can have (`fitness.measures.roofline.lower_bound`: the problem's HBM bytes and matmul flops and
the kernel's own HBM bytes at the target's peaks); an estimate below it would be recorded as
a model error, and the run prints every such kernel. A kernel that fails to trace (or to
estimate) gets its error instead. Kernels, keyed `group/name/dialect`:
* `baseline`: the 14 NKIBench problems' own baselines, legacy and nki dialect, at --shape;
* `example`: the NKI SDK example problems' baselines (nki dialect), at --shape;
* `nkibench`: the official NKIBench kernels (`../shared/nkibench/trn1_measurements.json`);
* `variants`: the Mamba variants and the RoPE kernels of `../shared/trn1-variants/`.
The file holds no timings, so two runs of one checkout write the same bytes.

To check a change of the emulator or the model, snapshot the committed code and the change
and compare: `--compare` prints a row per (kernel, target) whose latency or HBM counters
moved by more than --rel (before -> after and the ratio), then "N of M unchanged".
Tracing takes minutes; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SHARED = REPO.parent / "shared"
FIGURES = ("latency_ms", "hbm_read_bytes", "hbm_write_bytes", "hardware_flops")
COMPARED = ("latency_ms", "hbm_read_bytes", "hbm_write_bytes")


def one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


def corpora(shared: Path, shape: str) -> dict[str, tuple[Callable[[], Any], Any]]:
    """{group/name/dialect: (a function that returns its shape-only trace, the spec of the
    built-in problem it computes)}, sorted by key."""
    from fitness.simulator import dialect, placeholders, run_kernel
    from fitness.simulator.perf.check import load_cases, trace_case
    from nkibench.problem import DIALECT_NAMES
    from nkibench.registry import baseline_dialects, builtin_names, example_names, load, make_spec

    def baseline(name: str, dial: str) -> Callable[[], Any]:
        def trace():
            problem = load(make_spec(name, shape, dialect=dial))
            args = placeholders(problem.to_kernel_inputs(problem.make_inputs(0)))
            return run_kernel(problem.baseline_source, args, filename=str(problem.baseline_path),
                              shape_only=True).trace
        return trace

    def dialect_of(path: Path) -> str:
        try:
            return DIALECT_NAMES[dialect.detect(path.read_text())]
        except Exception:  # unreadable or mixed: tracing it will say why
            return "unknown"

    out: dict[str, tuple[Callable[[], Any], Any]] = {}
    for group, names in (("baseline", builtin_names()), ("example", example_names())):
        for name in names:
            for dial in baseline_dialects(name):
                out[f"{group}/{name}/{DIALECT_NAMES[dial]}"] = (baseline(name, dial), make_spec(name, shape))
    suite = shared / "nkibench"
    for group, path in (("nkibench", suite / "trn1_measurements.json"),
                        ("variants", shared / "trn1-variants" / "measurements.json"),
                        ("variants", shared / "trn1-variants" / "rope-measurements.json")):
        for case in load_cases(path, suite):
            # official cases are at the paper shape; variants name theirs
            spec = make_spec(case.problem, params=case.shape) if case.problem in builtin_names() else None
            out[f"{group}/{case.name}/{dialect_of(case.kernel)}"] = (lambda case=case: trace_case(case), spec)
    return dict(sorted(out.items()))


def snapshot(traces: dict[str, tuple[Callable[[], Any], Any]], targets: list[str]) -> dict[str, dict]:
    from tqdm import tqdm

    from fitness.measures.roofline import lower_bound
    from fitness.simulator.perf import estimate
    from fitness.simulator.perf.model import ENGINE_NAMES, bottleneck_engine
    from nkibench.registry import load

    kernels: dict[str, dict] = {}
    bar = tqdm(traces.items(), file=sys.stderr, unit="kernel")
    for key, (make_trace, spec) in bar:
        counts = load(spec).counts if spec is not None else None
        bar.set_postfix_str(key)
        try:
            trace = make_trace()
        except Exception as exc:  # a kernel the emulator refuses: say why, go on
            kernels[key] = {"error": one_line(exc)}
            continue
        row: dict[str, Any] = {"instructions": len(trace.instrs), "targets": {}}
        for target in targets:
            try:
                est = estimate(trace, target)
            except Exception as exc:
                row["targets"][target] = {"error": one_line(exc)}
                continue
            fig = {k: float(est.latency_ms if k == "latency_ms" else est.profile.get(k, 0)) for k in FIGURES}
            b = bottleneck_engine(est.profile)
            row["targets"][target] = {**fig, "bottleneck": ENGINE_NAMES.get(b, b)}
            if counts is not None:
                own = fig["hbm_read_bytes"] + fig["hbm_write_bytes"]
                row["targets"][target]["bound_ms"] = lower_bound(counts, own, target).latency_ms
        kernels[key] = row
        del trace
    return kernels


def shown(figures: dict) -> str:
    return figures.get("error") or f"latency_ms {figures['latency_ms']:.6g}"


def changes(before: dict, after: dict, rel: float) -> tuple[list[str], int]:
    """Rows for the (kernel, target) pairs that differ, and how many pairs there are."""
    rows, total = [], 0
    keys = sorted(before["kernels"].keys() | after["kernels"].keys())
    width = max(map(len, keys), default=0)
    for key in keys:
        b_k, a_k = before["kernels"].get(key, {}), after["kernels"].get(key, {})
        for target in sorted(set(before["targets"]) | set(after["targets"])):
            total += 1
            b = b_k.get("targets", {}).get(target) or {"error": b_k.get("error", "absent")}
            a = a_k.get("targets", {}).get(target) or {"error": a_k.get("error", "absent")}
            if "error" in b or "error" in a:
                if b != a:
                    rows.append(f"{key:<{width}} {target:<5} {shown(b)} -> {shown(a)}")
                continue
            moved = [f"{k} {b[k]:.6g} -> {a[k]:.6g} ({a[k] / b[k] if b[k] else math.inf:.6f}x)"
                     for k in COMPARED if not math.isclose(b[k], a[k], rel_tol=rel)]
            if moved:
                rows.append(f"{key:<{width}} {target:<5} " + "  ".join(moved))
    return rows, total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the snapshot to this JSON file")
    ap.add_argument("--targets", nargs="+", default=["trn1", "trn2", "trn3"])
    ap.add_argument("--shape", default="paper", help="shape of the built-in problems' baselines")
    ap.add_argument("--only", default="", help="only kernels whose key contains this")
    ap.add_argument("--shared", default=str(DEFAULT_SHARED), help="the reference data folder")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--rel", type=float, default=1e-9, help="relative change that counts (--compare)")
    args = ap.parse_args(argv)
    if args.compare:
        before, after = (json.loads(Path(p).read_text()) for p in args.compare)
        rows, total = changes(before, after, args.rel)
        print("\n".join(rows + [f"{total - len(rows)} of {total} unchanged"]))
        return 0
    if not args.out:
        ap.error("give --out FILE.json or --compare BEFORE.json AFTER.json")
    sys.path.insert(0, str(REPO))
    t0 = time.perf_counter()
    traces = {k: f for k, f in corpora(Path(args.shared), args.shape).items() if args.only in k}
    kernels = snapshot(traces, args.targets)
    doc = {"targets": args.targets, "shape": args.shape, "kernels": kernels}
    Path(args.out).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    failed = [k for k, r in kernels.items() if "error" in r]
    ratios = {(k, t): f["bound_ms"] / f["latency_ms"] for k, r in kernels.items()
              for t, f in r.get("targets", {}).items() if "bound_ms" in f}
    for (k, t), ratio in sorted(ratios.items()):
        if ratio > 1:
            print(f"BELOW THE ROOFLINE BOUND: {k} {t}: bound / estimate = {ratio:.3f}")
    if ratios:
        (k, t), top = max(ratios.items(), key=lambda kv: kv[1])
        print(f"{sum(r > 1 for r in ratios.values())} of {len(ratios)} estimates below their roofline bound; "
              f"the closest is {k} on {t} at {top:.1%} of it")
    print(f"{len(kernels)} kernels x {len(args.targets)} targets in {time.perf_counter() - t0:.0f} s, "
          f"{len(failed)} failed to trace{': ' + ', '.join(failed) if failed else ''}; wrote {args.out}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
