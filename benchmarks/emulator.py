"""Benchmark of the NKI emulator on the official NKIBench kernels.

For every kernel (each in its own process, so peak memory is its own): generate the
reference inputs (`get_inputs()`, global NumPy RNG seeded by 0), trace shape-only, run the
full-data emulation, then time the NumPy reference `forward` and compare (L2 relative error
in float64). Prints one row per kernel and the totals.

    python benchmarks/emulator.py [--suite-dir ../shared/nkibench] [--kernels silu mamba ...]
                                  [--json results.json] [--shape-only] [--repeat N] [--seeds N]

`--shape-only` skips the full-data emulation and the reference (tracing speed only);
`--repeat N` traces N times in the kernel's process and reports the fastest. `--seeds N`
emulates N seeds' inputs in the kernel's process, as an evaluation does (inputs of seed k from
the global NumPy RNG seeded by k), and reports the mean time of the seeds after the first: a
kernel whose kernel-level tensors need a release plan traces shape-only once, in its first
seed; later seeds reuse the plan. Every row
carries a digest of the shape-only trace (all records, tensors and loops), so that a change
meant to leave traces alone (an optimisation) can be checked against the rows of a run
before it.

Targets: emulation <= 10x the reference forward per kernel, all 14 within
5 minutes, shape-only tracing <= 2 s for the largest kernel, peak memory <= 8 GB.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SUITE = REPO.parent / "shared" / "nkibench"


def _reference(suite: Path, name: str):
    summary = json.loads((suite / "summary.json").read_text())
    impl = next(iter(summary[name]["cases"].values()))["impls"][0]
    spec = importlib.util.spec_from_file_location(f"ref_{name}", suite / impl["task"])
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    return ref, suite / impl["kernel"]


def _rel_l2(out, ref, chunk: int = 1 << 22) -> float:
    o, r = np.asarray(out).reshape(-1), np.asarray(ref).reshape(-1)
    num = den = 0.0
    for s in range(0, r.size, chunk):
        a, b = o[s:s + chunk].astype(np.float64), r[s:s + chunk].astype(np.float64)
        num += float(np.sum((a - b) ** 2))
        den += float(np.sum(b * b))
    return float(np.sqrt(num / den))


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def trace_digest(trace) -> str:
    """SHA-256 of a trace's records, tensors and loops (their reprs), in order."""
    h = hashlib.sha256()
    for ins in trace.instrs:
        h.update(repr(ins).encode())
    h.update(repr(trace.tensors).encode())
    h.update(repr(trace.loops).encode())
    return h.hexdigest()


def measure_one(suite: Path, name: str, shape_only: bool = False, repeat: int = 1, seeds: int = 1) -> dict:
    """All measurements of one kernel, in this process."""
    sys.path.insert(0, str(REPO))
    from fitness.simulator import ShapeDtype, run_kernel

    ref, kernel_path = _reference(suite, name)
    src = kernel_path.read_text()
    np.random.seed(0)
    inputs = ref.get_inputs()
    kin = ref.transform_to_nki_inputs(inputs)
    rss_inputs = _rss_mb()

    shapes = [ShapeDtype(a.shape, a.dtype) if isinstance(a, np.ndarray) else a for a in kin]
    shape_s = shape_cpu = float("inf")
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        c0 = time.process_time()
        shape_run = run_kernel(src, shapes, filename=str(kernel_path), shape_only=True)
        shape_s = min(shape_s, time.perf_counter() - t0)
        shape_cpu = min(shape_cpu, time.process_time() - c0)
    n_instrs = len(shape_run.trace.instrs)
    digest = trace_digest(shape_run.trace)
    del shape_run
    row = {"kernel": name, "instructions": n_instrs, "shape_only_s": shape_s, "shape_only_cpu_s": shape_cpu,
           "trace_sha256": digest}
    if shape_only:
        return row

    t0 = time.perf_counter()
    c0 = time.process_time()
    run = run_kernel(src, kin, filename=str(kernel_path))
    emu_s, emu_cpu = time.perf_counter() - t0, time.process_time() - c0
    rss_emu = _rss_mb()

    t0 = time.perf_counter()
    expected = ref.forward(*inputs)
    ref_s = time.perf_counter() - t0
    outs = ref.transform_nki_outputs(run.outputs, expected)
    refs = expected if isinstance(expected, tuple) else (expected,)
    err = max(_rel_l2(o, r) for o, r in zip(outs, refs))
    row.update({"emulation_s": emu_s, "emulation_cpu_s": emu_cpu, "reference_s": ref_s, "ratio": emu_s / ref_s,
                "rel_l2": err, "peak_rss_mb": rss_emu, "rss_after_inputs_mb": rss_inputs})
    if seeds > 1:
        first = run.trace
        del run, outs, expected, refs
        later, later_cpu = [], []
        for k in range(1, seeds):
            np.random.seed(k)
            kin = ref.transform_to_nki_inputs(ref.get_inputs())
            t0 = time.perf_counter()
            c0 = time.process_time()
            again = run_kernel(src, kin, filename=str(kernel_path))
            later.append(time.perf_counter() - t0)
            later_cpu.append(time.process_time() - c0)
            if again.trace != first:
                raise RuntimeError(f"{name}: the trace of seed {k} differs from seed 0's")
            del again, kin
        row.update({"seeds": seeds, "later_seed_s": sum(later) / len(later),
                    "later_seed_cpu_s": sum(later_cpu) / len(later_cpu)})
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite-dir", type=Path, default=DEFAULT_SUITE)
    p.add_argument("--kernels", nargs="*", default=None)
    p.add_argument("--json", type=Path, default=None, help="write the rows to this file")
    p.add_argument("--shape-only", action="store_true", help="time shape-only tracing only")
    p.add_argument("--repeat", type=int, default=1, help="trace N times per kernel, report the fastest")
    p.add_argument("--seeds", type=int, default=1, help="emulate N seeds per kernel, report the later ones' mean")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.one:
        print(json.dumps(measure_one(a.suite_dir, a.one, a.shape_only, a.repeat, a.seeds)))
        return 0
    if not (a.suite_dir / "summary.json").is_file():
        print(f"no NKIBench folder at {a.suite_dir}", file=sys.stderr)
        return 2
    names = a.kernels or list(json.loads((a.suite_dir / "summary.json").read_text()))
    rows = []
    if a.shape_only:
        header = f"{'kernel':24s} {'instrs':>7s} {'shape s':>8s} {'cpu s':>8s}  trace sha256"
    else:
        header = (f"{'kernel':24s} {'instrs':>7s} {'shape s':>8s} {'emul s':>8s} {'ref s':>7s} {'ratio':>6s} "
                  f"{'peak MB':>8s} {'rel L2':>9s}  trace sha256" + ("      later seed s" if a.seeds > 1 else ""))
    print(header, flush=True)
    extra = (["--shape-only"] if a.shape_only else []) + ["--repeat", str(a.repeat), "--seeds", str(a.seeds)]
    for name in names:
        proc = subprocess.run([sys.executable, __file__, "--suite-dir", str(a.suite_dir), "--one", name, *extra],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{name:24s} FAILED\n{proc.stderr[-2000:]}", flush=True)
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append(r)
        if a.shape_only:
            print(f"{name:24s} {r['instructions']:7d} {r['shape_only_s']:8.2f} {r['shape_only_cpu_s']:8.2f}  "
                  f"{r['trace_sha256'][:16]}", flush=True)
        else:
            print(f"{name:24s} {r['instructions']:7d} {r['shape_only_s']:8.2f} {r['emulation_s']:8.2f} "
                  f"{r['reference_s']:7.2f} {r['ratio']:6.2f} {r['peak_rss_mb']:8.0f} {r['rel_l2']:9.2e}  "
                  f"{r['trace_sha256'][:16]}" + (f" {r['later_seed_s']:17.2f}" if 'later_seed_s' in r else ""),
                  flush=True)
    if rows and a.shape_only:
        print(f"max shape-only {max(r['shape_only_s'] for r in rows):.2f} s")
    elif rows:
        print(f"total emulation {sum(r['emulation_s'] for r in rows):.1f} s, reference "
              f"{sum(r['reference_s'] for r in rows):.1f} s, max shape-only {max(r['shape_only_s'] for r in rows):.2f} s, "
              f"max ratio {max(r['ratio'] for r in rows):.2f}, max peak {max(r['peak_rss_mb'] for r in rows):.0f} MB")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
