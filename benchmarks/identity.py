"""Verdicts of the evaluation service on fixed kernel sets, dumped to JSON, so that a change
meant to make evaluation cheaper can be checked field by field against the code before it.

    python benchmarks/identity.py --out before.json [--groups official baselines corpus] [--workers N]
    python benchmarks/identity.py --compare before.json after.json

Groups: `official`, the 14 NKIBench kernels at the paper's shapes (`--suite-dir`); `baselines`,
the project's own baselines of every built-in problem in both dialects and of the SDK
examples, at `--baseline-shape` (default small; an example without it at small, tiny or paper); `corpus`, every kernel source of the
evaluation tests (`tests/fitness/eval_kernels.py`, `adversarial_kernels.py`) on silu's tiny
shape with the integrity tests' settings. Held-out seeds are fixed values, so that two dumps
judge the same inputs. Each record has status, error, latency, profile, dialect and the
seconds the evaluation took (the one field expected to differ). Kernels are judged one at a
time: with `--workers 2` each is judged with a worker idle, so its later seeds run in a second
kernel process (the same verdicts are expected as with one worker). With `--pairs` the corpus is
judged two kernels at a time: when the shorter judgement of a pair ends, the other one's seeds
not yet started go to a second process (a split mid-judgement).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "fitness"))

from fitness.service import Evaluator  # noqa: E402
from fitness.settings import EvalSettings  # noqa: E402
from nkibench.registry import baseline_dialects, builtin_names, example_names, load, make_spec, shape_names

DEFAULT_SUITE = REPO.parent / "shared" / "nkibench"
FIELDS = ("status", "error", "latency_ms", "profile", "dialect", "speedup", "percent_of_peak")
# A generous time limit: a timeout depends on the machine's load, not on the code under test.
PAPER_SETTINGS = EvalSettings(backend="simulator", heldout_seeds=(1000, 1001), timeout_s=3600, workers=1)
CORPUS_SETTINGS = EvalSettings(backend="simulator", seeds=(0, 21), heldout_seeds=(90210, 31337), timeout_s=20,
                               memory_limit_mb=2048, workers=1)


def _record(result) -> dict:
    return {**{f: getattr(result, f) for f in FIELDS}, "seconds": result.seconds}


def official(out: dict, suite: str, names: list[str] | None, saved, workers: int = 1) -> None:
    summary = json.loads((Path(suite) / "summary.json").read_text())
    with Evaluator(dataclasses.replace(PAPER_SETTINGS, workers=workers)) as ev:
        for name in names or list(summary):
            spec = make_spec(name, suite_dir=suite)
            out[spec.label()] = _record(ev.evaluate(spec, load(spec).baseline_source))
            saved(f"official {spec.label()}: {out[spec.label()]['status']} {out[spec.label()]['seconds']:.1f} s")


def baselines(out: dict, shape: str, saved, workers: int = 1) -> None:
    with Evaluator(dataclasses.replace(PAPER_SETTINGS, workers=workers)) as ev:
        specs = [make_spec(name, shape, dialect=dialect) for name in builtin_names() for dialect in baseline_dialects(name)]
        specs += [make_spec(name, next(s for s in (shape, "small", "tiny", "paper") if s in shape_names(name)))
                  for name in example_names()]
        for spec in specs:
            out[spec.label()] = _record(ev.evaluate(spec, load(spec).baseline_source))
            saved("")


def corpus(out: dict, saved, workers: int = 1, pairs: bool = False) -> None:
    import adversarial_kernels
    import eval_kernels

    spec = make_spec("silu", "tiny")
    sources = {f"{module.__name__}.{name}": value for module in (eval_kernels, adversarial_kernels)
               for name, value in sorted(vars(module).items())
               if name.isupper() and isinstance(value, str) and "def " in value}
    names = list(sources)
    step = 2 if pairs else 1
    with Evaluator(dataclasses.replace(CORPUS_SETTINGS, workers=workers)) as ev:
        for i in range(0, len(names), step):
            batch = names[i:i + step]
            for name, result in zip(batch, ev.evaluate_many(spec, [sources[n] for n in batch])):
                out[name] = _record(result)
            saved("")


def compare(before: dict, after: dict) -> list[str]:
    """One line per field that differs (seconds aside), per kernel present in either dump."""
    lines = []
    for group in sorted(set(before) | set(after)):
        a, b = before.get(group, {}), after.get(group, {})
        for kernel in sorted(set(a) | set(b)):
            if kernel not in a or kernel not in b:
                lines.append(f"{group} {kernel}: only in {'after' if kernel in b else 'before'}")
                continue
            for field in FIELDS:
                if a[kernel].get(field) != b[kernel].get(field):
                    lines.append(f"{group} {kernel} {field}: {a[kernel].get(field)!r} -> {b[kernel].get(field)!r}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="JSON file to write")
    parser.add_argument("--groups", nargs="+", default=["official", "baselines", "corpus"],
                        choices=["official", "baselines", "corpus"])
    parser.add_argument("--suite-dir", default=str(DEFAULT_SUITE))
    parser.add_argument("--kernels", nargs="+", help="official kernels to judge (default: all)")
    parser.add_argument("--baseline-shape", default="small")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--workers", type=int, default=1,
                        help="evaluator workers (2: each kernel's later seeds run in a second process)")
    parser.add_argument("--pairs", action="store_true",
                        help="judge the corpus two kernels at a time (with --workers 2: splits mid-judgement)")
    args = parser.parse_args()
    if args.compare:
        before, after = (json.loads(Path(p).read_text()) for p in args.compare)
        lines = compare(before, after)
        print("\n".join(lines) if lines else "identical (all fields but seconds)")
        return 1 if lines else 0
    if not args.out:
        parser.error("--out is required unless --compare")
    dump: dict = {}
    started = time.monotonic()

    def saved(line: str) -> None:   # after every kernel: a long dump that is cut short keeps what it has
        Path(args.out).write_text(json.dumps(dump, indent=1, sort_keys=True) + "\n")
        if line:
            print(line, flush=True)

    for group in args.groups:
        out = dump[group] = {}
        if group == "official":
            official(out, args.suite_dir, args.kernels, saved, args.workers)
        elif group == "baselines":
            baselines(out, args.baseline_shape, saved, args.workers)
        else:
            corpus(out, saved, args.workers, args.pairs)
        print(f"{group}: {len(out)} kernels, {time.monotonic() - started:.0f} s so far", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
