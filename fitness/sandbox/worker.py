"""The kernel process: runs one untrusted kernel on every seed's inputs, inside the sandbox.

Started by fitness.sandbox.process with a JSON request on stdin. It lowers its own limits, checks the
policy again, imports the backend, installs the guard, and only then executes the kernel:
for each seed it loads the inputs (read-only files; it never sees the expected outputs),
runs the kernel, writes the raw outputs into its working directory and reports them, so that
the engine judges seed k while seed k+1 runs.

On a backend that traces without data (the simulator) the kernel is first traced shape-only
on the first seed's shapes and timed from that trace ("traced": latency, profile and the dtypes
it computes in, judged before any value); every seed's trace must then equal the shape-only
one (a kernel whose instructions depend on its inputs' values is refused), so the latency a
search ranks by before judging is the latency of every judged seed. A request with
`"stage": "latency"` stops there (no seed runs). Elsewhere every seed's trace must equal the
first's and the latency is measured once after the last seed. Messages go to a private pipe
as JSON lines:
  {"event": "ready"}                                   (imports done, guard installed)
  {"event": "traced", "latency_ms": ..., "profile": {...}, "dtypes": [...]}   (tracing backends)
  {"event": "outputs", "case": k, "files": [...], "single": bool[, "dtypes": [...]]}  (dtypes: first seed, others)
  {"event": "failed", "status": ..., "message": ...}
  {"event": "done", "latency_ms": ..., "profile": {...}, "artifacts": [...]}
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from .process import apply_limits, raise_cpu_limit

_REPO = Path(__file__).resolve().parents[2]
MAX_MESSAGE = 1200
# Stages of a judgement (the request's "stage"): the whole gate, or the shape-only trace alone.
FULL, LATENCY = "full", "latency"
# Room the time budget leaves over the expected cost of the seeds (a busy machine runs slower).
BUDGET_MARGIN = 2.0


def time_budget(elapsed_s: float, seed_s: float, seeds: int) -> float:
    """Seconds this evaluation may take once its kernel was traced: what it took so far and
    the expected cost of every seed's full-data run, with BUDGET_MARGIN to spare."""
    return BUDGET_MARGIN * (elapsed_s + seeds * seed_s)
Send = Callable[..., None]


def main() -> None:
    started = time.monotonic()
    request = json.loads(sys.stdin.buffer.read())
    apply_limits(request["limits"])
    channel = os.fdopen(int(request["channel_fd"]), "w")

    def send(**message: Any) -> None:
        channel.write(json.dumps(message) + "\n")
        channel.flush()

    try:
        evaluate(request, send, started)
    except BaseException as exc:  # report everything; the parent maps a silent death to `crashed`
        status, message = classify(exc, request.get("limits", {}).get("memory_mb"))
        if status == "compile_error":   # not raised by the kernel: an internal failure
            status = "crashed"
            message = f"internal error of the kernel process: {message}"
        send(event="failed", status=status, message=message)
    finally:
        channel.close()


def evaluate(request: dict[str, Any], send: Send, started: float) -> None:
    from . import guard, policy
    from .modules import KernelModules, Loader

    source = request["source"]
    modules = KernelModules.from_json(request.get("modules"))
    try:
        violations = policy.check(source, guarded=request["backend"] == "simulator", **modules.policy_context())
    except SyntaxError as exc:
        send(event="failed", status="compile_error", message=policy.syntax_error_message(exc))
        return
    if violations:
        send(event="failed", status="rejected", message=f"policy: {violations[0]}")
        return

    from fitness.backends import load_runner
    from fitness.correctness.seeds import load_input
    from nkibench.problem import ProblemSpec
    from nkibench.registry import kernel_inputs

    name, params, suite_dir = request["problem"]
    to_kernel_inputs = kernel_inputs(ProblemSpec(name, tuple((k, v) for k, v in params), suite_dir))
    runner = load_runner(request["backend"], request["target"], request.get("options", {}))
    cases = request["cases"]
    if hasattr(runner, "loader"):   # the simulator: the kernel's modules, loaded with the run-time guards
        runner.loader = Loader(modules)
    # the kernel's own package folder and the kernel paths, which its imports read
    readable_dirs = guard.python_roots() + [str(_REPO / "fitness"), str(_REPO / "nkibench")] + modules.readable_dirs()
    if suite_dir:
        readable_dirs.append(suite_dir)
    guard.install([p for case in cases for p in case["inputs"] if isinstance(p, str)], readable_dirs, Path.cwd(),
                  allow_exec=runner.allow_exec, provided=_emulated_roots(request["backend"]))

    expected = request.get("outputs", [])
    if expected and not runner.allow_exec:
        # no file of this process may be larger than the largest output (plus the .npy header)
        limit_file_size(max(_nbytes(e) for e in expected) + (64 << 10))
    send(event="ready")
    memory_mb = request["limits"]["memory_mb"]

    def fail(exc: BaseException) -> None:
        status, message = classify(exc, memory_mb)
        send(event="failed", status=status, message=message)

    first: tuple[Any, Any] | None = None
    measured: tuple[float, dict[str, Any]] | None = None
    if hasattr(runner, "trace"):
        inputs = [load_input(entry) for entry in cases[0]["inputs"]]
        args = to_kernel_inputs(inputs)
        del inputs
        try:
            tracing = time.monotonic()
            shape_trace = runner.trace(source, args)
            seed_s = runner.seed_seconds(shape_trace, time.monotonic() - tracing)
            dtypes = [[u.dtype, u.line, u.what] for u in runner.structure_dtypes(shape_trace)]
        except BaseException as exc:
            fail(exc)
            return
        measured = _measure(runner, source, args, shape_trace, memory_mb, send)
        if measured is None:
            return
        first = (None, shape_trace)
        budget = time_budget(time.monotonic() - started, seed_s, len(cases))
        if request.get("stage") != LATENCY:
            raise_cpu_limit(budget + 5)   # the sandbox stretches its deadline to the same budget
        send(event="traced", latency_ms=measured[0], profile=measured[1], dtypes=dtypes, budget_s=budget)
        if request.get("stage") == LATENCY:
            send(event="done", latency_ms=measured[0], profile=measured[1], artifacts=[])
            return
        del args
    elif request.get("stage") == LATENCY:
        send(event="failed", status="crashed", message="internal error: this backend cannot trace a kernel shape-only")
        return
    for k, case in enumerate(cases):
        inputs = [load_input(entry) for entry in case["inputs"]]
        args = to_kernel_inputs(inputs)
        try:
            raw, trace = runner.run(source, args)
        except BaseException as exc:
            fail(exc)
            return
        del inputs
        divergence = stream_divergence(first[1], trace, case["label"], measured is not None) if first is not None else ""
        if divergence:
            send(event="failed", status="compile_error", message=divergence)
            return
        try:
            files, single = save_outputs(raw, k, expected)
        except (TypeError, ValueError) as exc:
            send(event="failed", status="incorrect", message=f"{case['label']}: {exc}")
            return
        except BaseException as exc:   # e.g. the emulator refusing to hand out a kernel tensor
            fail(exc)
            return
        if first is None:   # the dtypes it computes in go first: precision is judged before values
            first = (args, trace)
            try:
                dtypes = [[u.dtype, u.line, u.what] for u in runner.structure_dtypes(trace)]
            except BaseException as exc:
                fail(exc)
                return
            send(event="outputs", case=k, files=files, single=single, dtypes=dtypes)
        else:
            send(event="outputs", case=k, files=files, single=single)
        del raw, args
    assert first is not None
    if measured is None:
        measured = _measure(runner, source, first[0], first[1], memory_mb, send)
        if measured is None:
            return
    send(event="done", latency_ms=measured[0], profile=measured[1],
         artifacts=list(getattr(runner, "artifacts", [])))


def _measure(runner: Any, source: str, args: Any, trace: Any, memory_mb: int | None,
             send: Send) -> tuple[float, dict[str, Any]] | None:
    """(latency, profile) of the kernel, or None once its failure has been sent."""
    try:
        return runner.measure(source, args, trace)
    except BaseException as exc:
        status, message = classify(exc, memory_mb)
        if status == "compile_error" and not _is_nki_error(exc):
            status, message = "crashed", f"measuring the latency failed: {message}"
        send(event="failed", status=status, message=message)
        return None


def stream_divergence(first: Any, trace: Any, label: str, shape_only: bool = False) -> str:
    """Why a seed's trace is not the one the latency is measured on (`first`: the shape-only
    trace, or the first seed's), or "". That trace stands for every seed only because NKI fixes
    a kernel's instructions when it is traced: a stream that depends on the inputs' values is
    refused."""
    if trace == first:   # backends without a trace (hardware) give None for every seed
        return ""
    against = "the shape-only trace's" if shape_only else "the first seed's"
    return _short(f"{label}: the kernel's instruction stream differs from {against} "
                  f"({first.difference(trace)}); NKI control flow and instruction choice must not "
                  "depend on the inputs' values")


def _emulated_roots(backend: str) -> tuple[str, ...]:
    """The NKI packages the simulator puts in sys.modules (both dialects'); none elsewhere."""
    if backend != "simulator":
        return ()
    from fitness.simulator.dialect import ROOTS

    return tuple(ROOTS.values())


def save_outputs(raw: Any, case: int, expected: list[dict[str, Any]] | None = None) -> tuple[list[str], bool]:
    """Write the kernel's return value as .npy files; (file names, returned a single array).

    The outputs are checked against the reference's (`expected`: shape and dtype of each) before
    anything is written: the working folder is in shared memory, and a kernel returning more,
    larger or wider arrays than the reference could otherwise fill it."""
    import numpy as np

    from fitness.correctness import arrays

    single = not isinstance(raw, (tuple, list))
    outs = [raw] if single else list(raw)
    for j, value in enumerate(outs):
        if not isinstance(value, np.ndarray) or value.dtype.hasobject:
            raise TypeError(f"output {j} is not a numeric array ({type(value).__name__})")
    if expected:
        problem = _layout_mismatch(outs, expected)
        if problem:
            raise ValueError(problem)
    files = []
    for j, arr in enumerate(outs):
        name = f"case{case}-out{j}.npy"
        arrays.save(name, arr)
        files.append(name)
    return files, single


def _layout_mismatch(outs: list[Any], expected: list[dict[str, Any]]) -> str:
    """Why the outputs cannot be the reference's (count, element count, dtype width), or ""."""
    from fitness.correctness import arrays

    if len(outs) != len(expected):
        return f"the kernel returned {len(outs)} output(s), the reference has {len(expected)}"
    for j, (arr, e) in enumerate(zip(outs, expected)):
        size = math.prod(e["shape"])
        if arr.size != size:
            return (f"output {j} has {arr.size} elements (shape {list(arr.shape)}), the reference's has {size} "
                    f"(shape {list(e['shape'])})")
        if arr.dtype.itemsize > arrays.dtype_of(e["dtype"]).itemsize:
            return f"output {j} has dtype {arr.dtype}, wider than the reference's {e['dtype']}"
    return ""


def _nbytes(e: dict[str, Any]) -> int:
    from fitness.correctness import arrays

    return math.prod(e["shape"]) * arrays.dtype_of(e["dtype"]).itemsize


def limit_file_size(nbytes: int) -> None:
    """Lower this process's file-size limit (never raises it); a larger write fails with EFBIG."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft == resource.RLIM_INFINITY or nbytes < soft:
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes if hard == resource.RLIM_INFINITY else min(nbytes, hard)))


def classify(exc: BaseException, memory_mb: int | None = None) -> tuple[str, str]:
    """(status, message) of an exception raised while a kernel ran."""
    from .guard import SandboxViolation

    chain = _chain(exc)
    for e in chain:
        if isinstance(e, SandboxViolation):
            return "rejected", str(e)
    refused = getattr(sys.modules.get("fitness.sandbox.modules"), "KernelPolicyError", ())
    for e in chain:
        if isinstance(e, refused):   # what the policy refuses in a module of the kernel, or at run time
            return "rejected", _short(f"policy: {e}")
    for e in chain:
        if isinstance(e, MemoryError):
            limit = f" (limit {memory_mb} MB)" if memory_mb else ""
            detail = f": {e}" if str(e) else ""
            return "memory_exceeded", _short(f"the kernel process ran out of memory{limit}{detail}")
    if _is_nki_error(exc):
        return "compile_error", _short(str(exc))
    line = _kernel_line(exc)
    where = f"kernel.py:{line}: " if line else ""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return "compile_error", _short(where + text)


def _is_nki_error(exc: BaseException) -> bool:
    errors = sys.modules.get("fitness.simulator.errors")
    return errors is not None and isinstance(exc, errors.NkiError)


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in seen:
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


def _kernel_line(exc: BaseException) -> int:
    """The innermost line of the kernel's own source in the traceback (0 if none)."""
    line = 0
    for frame in traceback.extract_tb(exc.__traceback__):
        if os.path.basename(frame.filename) == "kernel.py":
            line = frame.lineno or 0
    return line


def _short(text: str) -> str:
    text = " ".join(text.split()) if "\n" in text else text
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."
