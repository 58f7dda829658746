"""`python -m accelopt_evo` / `accelopt-evo`: run, resume, eval, check, problems, report, serve,
model-check, doctor, measure, calibrate.

Every error a user can cause ends with one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from accelopt_evo.errors import UserError
from accelopt_evo.run import config as config_mod
from accelopt_evo.run.records import figure_label
from fitness.simulator.dialect import IMPORTS as DIALECT_IMPORTS
from nkibench.problem import DIALECT_OF_NAME

EXIT_USAGE = 2
DEFAULT_PORT = 8765


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump) and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(f"{self.prog}: {message}")


def _config_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE.toml", help="TOML file with settings (see README: Configuration)")
    p.add_argument("--preset", default="default", help="shipped preset to start from (default, paper, accelopt)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one setting; repeatable (e.g. --set selection.tournament_size=5)")


def _target_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", choices=config_mod.TARGETS,
                   help="the NeuronCore the performance model estimates for (default: evaluation.target, trn1)")
    p.add_argument("--dialect", choices=config_mod.DIALECT_CHOICES,
                   help="NKI dialect of the problems' baselines (default: auto, the target's: legacy for trn1, "
                        "nki for trn2 and trn3)")


def _target_overrides(args: argparse.Namespace, overrides: dict[str, Any]) -> dict[str, Any]:
    if args.target:
        overrides.setdefault("evaluation", {})["target"] = args.target
    if args.dialect:
        overrides.setdefault("run", {})["dialect"] = args.dialect
    return overrides


def _serve_flags(p: argparse.ArgumentParser, alone: bool) -> None:
    with_serve = "" if alone else " (with --serve)"
    if not alone:
        p.add_argument("--serve", action="store_true",
                       help="follow the run on a local web page while it runs (README: Watch a run)")
    p.add_argument("--host", default="127.0.0.1",
                   help=f"address the page listens on{with_serve} (default 127.0.0.1: this machine only; "
                        f"another address lets anyone who reaches it read the run's kernels)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"port of the page{with_serve} (default {DEFAULT_PORT}; 0 picks a free one)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="accelopt-evo", description="Evolutionary, LLM-driven optimization of Trainium NKI kernels.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    run = sub.add_parser("run", help="start a new run")
    run.add_argument("--gens", type=int, help="generations after the initial population (default: run.gens, 20)")
    run.add_argument("--problem", nargs="+", action="extend", metavar="NAME", help="problem(s) to optimize (default: silu)")
    run.add_argument("--suite", choices=["nkibench"], help="every problem of a suite")
    run.add_argument("--suite-dir", metavar="PATH", help="a folder in the official NKIBench layout")
    run.add_argument("--reference", dest="references", action="append", metavar="REF.py",
                     help="a problem of your own: its NumPy reference module (get_inputs, forward); repeatable, "
                          "paired with --baseline in order (see README: Optimize your own kernel)")
    run.add_argument("--baseline", dest="baselines", action="append", metavar="KERNEL.py",
                     help="the kernel the search of the matching --reference starts from")
    run.add_argument("--function", dest="functions", action="append", metavar="NAME",
                     help="the function of the matching --baseline file (default: its only kernel)")
    run.add_argument("--out", metavar="DIR", help="parent folder of run folders (default: runs)")
    run.add_argument("--run-id", metavar="ID", help="name of the run folder (default: a timestamp)")
    run.add_argument("--seed", type=int, help="random seed of the run (default: 0)")
    run.add_argument("--backend", choices=config_mod.BACKENDS, help="evaluation backend (default: auto)")
    run.add_argument("--operators", choices=config_mod.OPERATOR_KINDS, help="variation operators (default: auto)")
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    _target_flags(run)
    _config_flags(run)
    _serve_flags(run, alone=False)

    resume = sub.add_parser("resume", help="continue a run from its newest checkpoint")
    resume.add_argument("run_dir", metavar="RUN_DIR")
    resume.add_argument("--gens", type=int, help="new total number of generations (default: the run's)")
    resume.add_argument("--no-progress", action="store_true", help="no progress bars")
    resume.add_argument("--trust", action="store_true",
                        help="a folder of your own whose checkpoint does not carry your seal (an earlier release "
                             "wrote it, or another key): continue from it as it is instead of re-judging its "
                             "population, hall of fame and memory")
    _serve_flags(resume, alone=False)

    ev = sub.add_parser("eval", help="evaluate one kernel file")
    ev.add_argument("kernel", metavar="KERNEL.py")
    ev.add_argument("--problem", metavar="NAME", help="the problem to judge it on (or --reference)")
    ev.add_argument("--suite-dir", metavar="PATH", help="a folder in the official NKIBench layout")
    ev.add_argument("--reference", metavar="REF.py", help="judge it against your own NumPy reference module")
    ev.add_argument("--baseline", metavar="KERNEL.py",
                    help="with --reference: the kernel its speedup is measured against (default: none)")
    ev.add_argument("--kernel", "--function", dest="function", metavar="FUNCTION",
                    help="the function of the file to evaluate (default: kernel, else the file's only @nki.jit function), "
                         "e.g. one of an SDK example's")
    ev.add_argument("--shape", metavar="NAME", help="named shape of the problem (default: run.shape, paper)")
    ev.add_argument("--backend", choices=config_mod.BACKENDS)
    ev.add_argument("--json", action="store_true", help="print the EvalResult as one JSON object")
    _target_flags(ev)
    _config_flags(ev)

    chk = sub.add_parser("check", help="whether kernel files load in the emulator (no kernel runs), and the NKI "
                                       "names they use that it lacks")
    chk.add_argument("paths", nargs="+", metavar="PATH", help="kernel files, or folders (every .py under them)")
    chk.add_argument("--target", choices=config_mod.TARGETS,
                     help="the target whose dialects the files must be in; files importing no NKI module take its "
                          "default dialect (default: evaluation.target, trn1)")
    chk.add_argument("--json", action="store_true", help="print a JSON list with an object per file")
    _config_flags(chk)

    probs = sub.add_parser("problems", help="list the benchmark problems")
    probs.add_argument("--suite-dir", metavar="PATH", help="a folder in the official NKIBench layout")
    probs.add_argument("--json", action="store_true", help="print a JSON list")
    probs.add_argument("--simulate", action="store_true", help="also estimate each baseline's latency (slower)")
    _target_flags(probs)

    rep = sub.add_parser("report", help="write RUN_DIR/report.md and RUN_DIR/plots/*.png")
    rep.add_argument("run_dir", metavar="RUN_DIR")

    srv = sub.add_parser("serve", help="a local web page following run folders as they grow (read-only)")
    srv.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run folder(s); several are drawn side by side")
    _serve_flags(srv, alone=True)

    mc = sub.add_parser("model-check", help="compare the performance model with hardware measurements")
    mc.add_argument("--measurements", required=True, metavar="FILE.json",
                    help="NKIBench measurements (cases), kernel variants (points) or a series of versions (p50_us)")
    mc.add_argument("--suite-dir", metavar="PATH",
                    help="NKIBench folder: its kernels (default: beside FILE), variants' references")
    mc.add_argument("--trace-cache", metavar="DIR", help="keep emulator traces in DIR")
    mc.add_argument("--json", action="store_true")

    mc.add_argument("--target", choices=config_mod.TARGETS, default="trn1",
                    help="the target the measurements are of (default trn1)")
    mc.add_argument("--calibration", metavar="FILE",
                    help="a calibration file (calibrate) to check instead of the shipped parameters")

    ms = sub.add_parser("measure", help="on a Trainium host: measure kernels, write a measurements file")
    ms.add_argument("kernels", nargs="+", metavar="KERNEL.py")
    ms.add_argument("--problem", required=True, metavar="NAME", help="an NKIBench problem (its reference judges)")
    ms.add_argument("--shape", metavar="NAME", help="named shape of the problem (default: run.shape, paper)")
    ms.add_argument("--out", default="measurements.json", metavar="FILE",
                    help="measurements file to write (default measurements.json)")
    _config_flags(ms)

    cal = sub.add_parser("calibrate", help="fit the performance model to measurements of a target")
    cal.add_argument("--target", required=True, choices=config_mod.TARGETS)
    cal.add_argument("--measurements", required=True, nargs="+", metavar="FILE",
                     help="measurements files (NKIBench or variants format, e.g. written by measure)")
    cal.add_argument("--suite-dir", metavar="PATH", help="NKIBench folder (kernels, variants' references)")
    cal.add_argument("--out", metavar="FILE", help="calibration file to write (default: the per-user file "
                                                   "of the target, which evaluation.calibration = auto uses)")
    cal.add_argument("--trace-cache", metavar="DIR", help="keep emulator traces in DIR")
    cal.add_argument("--no-loo", action="store_true", help="fit on all cases only (no held-out folds)")
    cal.add_argument("--quick", action="store_true",
                     help="one sweep and one round instead of the full procedure (a rough fit, for trials)")

    doc = sub.add_parser("doctor", help="what this machine can do: SDK, devices, backend, target, LLM endpoint")
    doc.add_argument("--backend", choices=config_mod.BACKENDS, help="the backend to check (default: evaluation.backend)")
    doc.add_argument("--target", choices=config_mod.TARGETS, help="the run's target (default: evaluation.target)")
    _config_flags(doc)
    return parser


# --------------------------------------------------------------------------------------------


def _resolve(args: argparse.Namespace, overrides: dict[str, Any]) -> config_mod.Config:
    return config_mod.resolve(args.preset, args.config, args.sets, overrides)


def cmd_run(args: argparse.Namespace) -> int:
    from accelopt_evo.run.folder import new_run_id
    from accelopt_evo.runner import start_run

    run: dict[str, Any] = {}
    for flag, key in (("gens", "gens"), ("seed", "seed"), ("out", "out"), ("suite", "suite"), ("suite_dir", "suite_dir")):
        if getattr(args, flag) is not None:
            run[key] = getattr(args, flag)
    if args.problem:
        run["problems"] = args.problem
    run.update(_pair_overrides(args))
    if args.references and not args.problem and not args.suite:
        run["problems"] = []     # only the user's problems, not the default one
    overrides: dict[str, Any] = {"run": run}
    if args.backend:
        overrides["evaluation"] = {"backend": args.backend}
    if args.operators:
        overrides["operators"] = {"kind": args.operators}
    cfg = _resolve(args, _target_overrides(args, overrides))
    run_id = args.run_id or new_run_id()
    with _serving(args, Path(cfg.run.out) / run_id):
        _print_outcome(start_run(cfg, run_id, progress=not args.no_progress))
    return 0


def _pair_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """run.references/baselines/functions from repeated --reference/--baseline/--function."""
    refs, bases, functions = args.references or [], args.baselines or [], args.functions or []
    if not refs and not bases and not functions:
        return {}
    if len(refs) != len(bases):
        raise UserError(f"give one --baseline per --reference ({len(refs)} reference(s), {len(bases)} baseline(s))")
    if functions and len(functions) != len(bases):
        raise UserError("give --function for every --baseline or for none ('' for a file's only kernel)")
    out: dict[str, Any] = {"references": refs, "baselines": bases}
    if functions:
        out["functions"] = functions
    return out


def cmd_resume(args: argparse.Namespace) -> int:
    from accelopt_evo.runner import resume_run

    if args.gens is not None and args.gens < 0:
        raise UserError("--gens must be >= 0")
    with _serving(args, args.run_dir):
        _print_outcome(resume_run(args.run_dir, args.gens, progress=not args.no_progress, trust=args.trust))
    return 0


@contextlib.contextmanager
def _serving(args: argparse.Namespace, run_dir: str | Path) -> Iterator[None]:
    """With --serve, the run's page while the body runs, and after it until Ctrl-C."""
    if not args.serve:
        yield
        return
    server = _start_page([run_dir], args, exist=False)
    try:
        yield
        print(f"the run is over; its page stays at {server.url} until Ctrl-C", flush=True)
        _wait_for_interrupt()
    finally:
        server.close()


def _start_page(run_dirs: Sequence[str | Path], args: argparse.Namespace, exist: bool = True) -> Any:
    """The page of the run folders, started; `exist`: they must be run folders already."""
    from accelopt_evo.report.serve.follow import follow
    from accelopt_evo.report.serve.server import start

    if not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port} is not a port (0-65535)")
    server = start(follow(list(run_dirs), exist=exist), args.host, args.port)
    print(f"page: {server.url}", flush=True)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"caution: the page listens on {args.host}: anyone who reaches it can read the run's kernels, plans "
              f"and memory", file=sys.stderr)
    return server


def _wait_for_interrupt() -> None:
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            time.sleep(3600)


def cmd_serve(args: argparse.Namespace) -> int:
    server = _start_page(args.run_dirs, args)
    print("following " + ", ".join(str(p) for p in args.run_dirs) + "; Ctrl-C stops", flush=True)
    try:
        _wait_for_interrupt()
    finally:
        server.close()
    return 0


def _print_outcome(outcome: Any) -> None:
    for name, b in outcome.best.items():
        pct = f"{b['percent_of_peak']:.1f}% of peak" if b["percent_of_peak"] is not None else "% of peak unknown"
        label = figure_label(b["backend"], outcome.target)
        print(f"best {name}: {b['path']}  speedup {b['speedup']:.3f}x over the baseline, {pct} "
              f"({b['latency_ms']:.4f} ms; {label})")
    if getattr(outcome, "rejected", 0):
        print(f"{outcome.rejected} stored result(s) did not verify and were computed again")
    report = getattr(outcome, "report_path", None)
    if report:
        print(f"report: {report}")


def cmd_eval(args: argparse.Namespace) -> int:
    if bool(args.problem) == bool(args.reference):
        raise UserError("eval: give either --problem NAME or --reference REF.py")
    if args.baseline and not args.reference:
        raise UserError("eval: --baseline goes with --reference (a benchmark problem has its own)")
    path = Path(args.kernel)
    try:
        source = path.read_text()
    except OSError as exc:
        raise UserError(f"cannot read kernel file '{path}': {exc.strerror or exc}") from None
    from fitness.sandbox.entry import EntryError, entry_function, select

    function = args.function
    if not function:
        with contextlib.suppress(EntryError):   # none to choose: the evaluation says what is wrong
            function = entry_function(source)
    if function and function != "kernel" or args.function:
        try:
            source = select(source, function)
        except EntryError as exc:
            raise UserError(f"{path}: {exc}") from None
    result = _evaluate(args, source, str(path.resolve()))
    if args.json:
        print(json.dumps(result.to_dict(), sort_keys=True))
    else:
        print(_describe_result(result, has_baseline=not args.reference or bool(args.baseline)))
    return 0


def _evaluate(args: argparse.Namespace, source: str, kernel_file: str = "") -> Any:
    """`eval`'s one evaluation (a reference of the user's staged in a scratch folder) of a kernel
    read from `kernel_file` (a module of the package it lies in)."""
    from accelopt_evo.run.user_problems import scratch
    from accelopt_evo.runner import check_problems, open_evaluator
    from fitness.references import ReferenceError as ReferenceFailure

    overrides: dict[str, Any] = {"run": {"problems": [args.problem] if args.problem else []}}
    if args.reference:
        overrides["run"].update(references=[args.reference], baselines=[args.baseline or ""])
    if args.suite_dir:
        overrides["run"]["suite_dir"] = args.suite_dir
    if args.shape:
        overrides["run"]["shape"] = args.shape
    if args.backend:
        overrides["evaluation"] = {"backend": args.backend}
    cfg = _resolve(args, _target_overrides(args, overrides))
    with scratch(cfg, dialect=_dialect_or_legacy(source) if args.reference else "legacy") as (staged, base):
        (problem,) = check_problems(staged, base)
        with open_evaluator(cfg, None, kernel_file) as evaluator:
            try:
                return evaluator.evaluate(problem.spec, source)
            except ReferenceFailure as exc:
                raise UserError(str(exc)) from None


def _dialect_or_legacy(source: str) -> str:
    """The dialect of an eval'd kernel, for a problem without a baseline; a source that says
    none clearly is judged anyway (its evaluation names what is wrong)."""
    from fitness.simulator.dialect import DialectError, detect

    try:
        return detect(source)
    except (DialectError, SyntaxError, ValueError):
        return "legacy"


def _describe_result(r: Any, has_baseline: bool = True) -> str:
    dialect = f"dialect: {r.dialect} ({DIALECT_IMPORTS[r.dialect]})\n" if r.dialect else ""
    if not r.ok:
        return f"{dialect}{r.status}: {r.error}"
    pct = f", {r.percent_of_peak:.1f}% of peak" if r.percent_of_peak is not None else ", % of peak unknown"
    if r.speedup is not None:
        speedup = f"speedup {r.speedup:.3f}x"
    else:
        speedup = "no speedup (no --baseline)" if not has_baseline else "speedup unknown (the baseline failed)"
    label = figure_label(r.backend, r.target, r.calibration, r.instance_type)
    lines = [f"{dialect}ok: {r.latency_ms:.4f} ms ({label}), {speedup}{pct}"]
    if r.profile.get("bottleneck"):
        lines.append(str(r.profile["bottleneck"]))
    return "\n".join(lines)


def cmd_check(args: argparse.Namespace) -> int:
    """Exit 0 when every file loads, 1 when one does not (its line says why)."""
    from .check import run_check

    overrides: dict[str, Any] = {"evaluation": {"target": args.target}} if args.target else {}
    cfg = _resolve(args, overrides)
    e = cfg.evaluation
    return run_check(args.paths, e.target, e.kernel_paths, e.timeout_s, e.memory_limit_mb, args.json)


def cmd_problems(args: argparse.Namespace) -> int:
    from nkibench.registry import ProblemError

    from .listing import format_problem_table, problem_rows

    target = args.target or config_mod.EvaluationSection().target
    dialects = None if args.dialect in (None, "auto") else (DIALECT_OF_NAME[args.dialect],)
    try:
        rows = problem_rows(args.suite_dir, simulate=args.simulate, target=target, dialects=dialects)
    except ProblemError as exc:
        raise UserError(str(exc)) from None
    print(json.dumps(rows, indent=1) if args.json else format_problem_table(rows))
    if not args.json and not args.suite_dir:
        from nkibench.registry import example_names

        print(f"NKI SDK example problems (current nki dialect, nkibench/examples): {', '.join(example_names())}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from accelopt_evo.run.folder import RunFolder

    folder = RunFolder.open(args.run_dir)
    from accelopt_evo.report.markdown import write_report

    path = write_report(folder)
    print(f"report: {path}")
    return 0


def cmd_model_check(args: argparse.Namespace) -> int:
    path = Path(args.measurements)
    if not path.is_file():
        raise UserError(f"measurements file '{path}' does not exist")
    from fitness.simulator.perf.calibration import read as read_calibration
    from fitness.simulator.perf.check import format_model_check, model_check

    try:
        calibration = read_calibration(args.calibration) if args.calibration else None
        if calibration is not None and calibration.target != args.target:
            raise ValueError(f"calibration file '{args.calibration}' is for {calibration.target}, not --target "
                             f"{args.target}")
        result = model_check(path, args.suite_dir, args.target, args.trace_cache, calibration)
    except (ValueError, KeyError, OSError) as exc:
        raise UserError(f"model-check: {exc}") from None
    print(json.dumps(result, indent=1, sort_keys=True) if args.json else format_model_check(result))
    return 0


def cmd_measure(args: argparse.Namespace, evaluator_factory: Any = None) -> int:
    from .measure import measure

    path = measure(args.kernels, args.problem, args.shape, Path(args.out),
                   lambda overrides: _resolve(args, overrides), evaluator_factory)
    print(f"measurements: {path}")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from fitness.simulator.perf import calibrate as fit_mod, calibration

    for name in args.measurements:
        if not Path(name).is_file():
            raise UserError(f"measurements file '{name}' does not exist")
    quick = dict(sweeps=fit_mod.SWEEPS[:1], rounds=1) if args.quick else {}
    try:
        result = fit_mod.run_fit(args.measurements, args.target, args.suite_dir, args.trace_cache,
                                 not args.no_loo, lambda msg: print(msg, file=sys.stderr, flush=True), **quick)
    except (ValueError, KeyError, OSError) as exc:
        raise UserError(f"calibrate: {exc}") from None
    out = Path(args.out) if args.out else calibration.default_path(args.target)
    written = calibration.write(out, result.calibration(args.target, args.measurements))
    s = result.summary
    print(f"calibration for {args.target}: {written.path} ({len(result.data)} cases; {s['figures']}: median "
          f"|error| {100 * s['median']:.1f}%, max {100 * s['max']:.1f}%, Spearman {s['spearman']:.3f})")
    if not args.out:
        print("the simulator uses it for this target (evaluation.calibration = auto)")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """Exit 0 when a run can start, 1 when it cannot (the screen says why)."""
    from fitness import backends

    from .doctor import diagnose

    overrides: dict[str, Any] = {"evaluation": {}}
    if args.backend:
        overrides["evaluation"]["backend"] = args.backend
    if args.target:
        overrides["evaluation"]["target"] = args.target
    cfg = _resolve(args, overrides)

    def check_llm() -> str:
        from operators import llm

        try:
            llm.check_endpoint(llm.Settings.from_config(cfg).llm)
        except llm.EndpointError as exc:
            return str(exc)
        return ""

    diagnosis = diagnose(cfg, backends.probe_neuron(), check_llm)
    print("\n".join(diagnosis.lines))
    return 0 if diagnosis.can_run else 1


COMMANDS = {"run": cmd_run, "resume": cmd_resume, "eval": cmd_eval, "check": cmd_check, "problems": cmd_problems,
            "report": cmd_report, "serve": cmd_serve, "model-check": cmd_model_check, "doctor": cmd_doctor,
            "measure": cmd_measure, "calibrate": cmd_calibrate}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted; a run can be continued with: python -m accelopt_evo resume RUN_DIR", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
