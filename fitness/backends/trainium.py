"""Trainium backend: the Neuron SDK compiles and runs the kernel, its profiler times it.

Two paths, chosen by the kernel's dialect (the host must have the matching SDK, host.py):
- legacy (`neuronxcc.nki`, Neuron <= 2.29, trn1/trn2), as AccelOpt measured trn1
  (trainium-perf-model.md §5): `nki.baremetal(kernel, save_neff_name=..., save_trace_name=...,
  additional_compile_opt=...)` runs it and saves NEFF and NTFF; the SDK's known issue
  (legacy `nki/api/generated/nki.baremetal.rst`) wants `save_neff_name='file.neff'` when a
  trace is saved, so every timed run gets a fresh folder of its own and its files are then
  renamed; `neuron-profile view --output-format summary-json -n NEFF -s NTFF` reads it.
- current (`import nki`, NKI >= 0.3, Neuron >= 2.29, trn2/trn3): calling the `@nki.jit` kernel
  with arrays compiles and runs it (`nki/api/nki/__init__.py`); with runtime inspection on
  (`NEURON_RT_INSPECT_ENABLE`, `_DEVICE_PROFILE`, `_OUTPUT_DIR`, tools/neuron-explorer/
  how-to-profile-workload.rst) the runtime writes the NEFF it ran. Each timed run is then
  `neuron-explorer capture -n NEFF -s PREFIX --profile-nth-exec=2` (a warm execution; `-s`
  is a file-name prefix) and `neuron-explorer view --output-format summary-json`.
Both keep AccelOpt's protocol: compile options `--disable-dge --logical-nc-config=1`,
`NEURON_CC_FLAGS=--auto-cast=none`, one NeuronCore (`NEURON_RT_NUM_CORES=1`, pinned with
`NEURON_RT_VISIBLE_CORES`, at logical-core configuration 1 on trn2/trn3:
`NEURON_LOGICAL_NC_CONFIG=1`, about-neuron/arch/neuron-features/logical-neuroncore-config.rst);
2 warm-up runs, then 10 timed runs, each with fresh artifact names checked to exist before
profiling; the latency is the mean `total_time`; the whole series is repeated (a bounded
number of times) while its max/min spread exceeds 1 %, keeping the tightest series.
The profile holds the counters of fitness/measures/counters.py (the simulator's names; `hardware_counters`),
the simulator's bottleneck line derived from them and labelled as measured, and the series'
figures (min_ms, max_ms, rel_diffs, series_spreads). With Neuron Explorer as the profiler, the
newest timed run is also viewed as Parquet tables (`neuron-explorer view --output-format parquet
--output-file DIR`, explorer_parquet.py): the kernel's hot lines (kernels compile with
`NKI_DEBUG_INFO=True`, so that every instruction names its NKI source line), engine activity the
summary lacks, DMA packet sizes and queues. summary-json stays the per-run latency and the
fallback (neuron-profile, or no pyarrow); an unreadable Parquet profile fails the measurement.

Parent side: `CoreLeases` hands each evaluation a NeuronCore of its own, so that a core runs
one timed measurement at a time while other evaluations compile on other cores.
Worker side: `TrainiumRunner`, inside the sandboxed kernel process.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from fitness.measures.counters import NAMES as COUNTER_NAMES
from fitness.simulator import dialect as D
from fitness.simulator.perf import model as perf_model
from fitness.simulator.perf.hardware import HARDWARE

from . import explorer_parquet

COMPILE_OPTIONS = "--disable-dge --logical-nc-config=1"
WARMUP_RUNS = 2
TIMED_RUNS = 10
MAX_SPREAD = 0.01        # (max - min) / min of one series
MAX_SERIES = 3           # the first series and at most two retries
PROFILE_TIMEOUT_S = 300.0
PROFILED_EXECUTION = 2   # capture the 2nd execution of the NEFF: a warm one
LEGACY_NEFF = "file.neff"   # the only NEFF name the legacy SDK accepts with a trace (known issue)
INSPECT_DIR = "inspect"     # where the runtime writes the NEFFs it ran (current path)
TABLES_DIR = "profile-tables"   # where Neuron Explorer writes the Parquet tables of the newest timed run
KERNEL_FILE = "kernel.py"   # the kernel's source file, as the NKI source locations name it


class ArtifactError(RuntimeError):
    """A NEFF or NTFF the toolchain should have written is missing."""


class ProfilerError(RuntimeError):
    """The profiler failed; the message is one line with its exit status and last output."""


def run_tool(command: list[str]) -> bytes:
    """stdout of a toolchain command, or ProfilerError naming it."""
    try:
        done = subprocess.run(command, capture_output=True, timeout=PROFILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ProfilerError(f"{Path(command[0]).name} {command[1]} took over {PROFILE_TIMEOUT_S:g} s") from None
    except OSError as exc:
        raise ProfilerError(f"cannot run {command[0]}: {exc.strerror or exc}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()[-1:]
        raise ProfilerError(f"{Path(command[0]).name} {command[1]} failed (exit {done.returncode})"
                            + (f": {tail[0][:300]}" if tail else ""))
    return done.stdout


def core_env(core: int, target: str = "trn1") -> dict[str, str]:
    """Environment of a kernel process pinned to one NeuronCore; on trn2/trn3 the runtime's
    logical-core configuration is set to 1 to match the compile option."""
    env = {"NEURON_RT_VISIBLE_CORES": str(core), "NEURON_RT_NUM_CORES": "1",
           "NEURON_CC_FLAGS": "--auto-cast=none"}
    if target != "trn1":
        env["NEURON_LOGICAL_NC_CONFIG"] = "1"
    return env


def profile_view_command(neff: str | Path, ntff: str | Path, tool: str = "neuron-profile") -> list[str]:
    """The command printing the profile summary of one captured execution as JSON."""
    return [tool, "view", "--output-format", "summary-json", "-n", str(neff), "-s", str(ntff)]


def parquet_view_command(neff: str | Path, ntff: str | Path, folder: str | Path,
                         tool: str = "neuron-explorer") -> list[str]:
    """The command writing the Parquet tables of one captured execution into `folder`."""
    return [tool, "view", "--output-format", "parquet", "--output-file", str(folder), "-n", str(neff), "-s", str(ntff)]


def capture_command(neff: str | Path, prefix: str | Path, tool: str = "neuron-explorer") -> list[str]:
    """The command running a NEFF on the device and capturing the trace of a warm execution."""
    return [tool, "capture", "-n", str(neff), "-s", str(prefix), f"--profile-nth-exec={PROFILED_EXECUTION}"]


def existing(path: Path, what: str) -> Path:
    """`path` when it is a non-empty file, else ArtifactError naming it."""
    if not path.is_file() or path.stat().st_size == 0:
        raise ArtifactError(f"the {what} {path.name} was not written")
    return path


def captured_trace(folder: Path, prefix: str) -> Path:
    """The NTFF a capture wrote for `prefix` (the profiler may append the execution number)."""
    exact = folder / f"{prefix}.ntff"
    if exact.is_file():
        return existing(exact, "trace")
    found = sorted(folder.glob(f"{prefix}*.ntff"))
    if not found:
        raise ArtifactError(f"the trace {prefix}.ntff was not written")
    return existing(found[-1], "trace")


def parse_summary(summary: dict[str, Any]) -> tuple[float, dict[str, float]]:
    """(latency in ms, profile) from a summary-json document.

    The document maps one entry (the profiled NEFF) to its metrics; `total_time` is in
    seconds. Every numeric metric is kept under the profiler's own name, which is also the
    name the simulator's performance model uses.
    """
    if not isinstance(summary, dict) or not summary:
        raise ValueError("the profile summary is empty")
    entry = summary[next(iter(summary))]
    if not isinstance(entry, dict) or "total_time" not in entry:
        raise ValueError("the profile summary has no total_time")
    profile = {k: float(v) for k, v in entry.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return float(entry["total_time"]) * 1e3, profile


# The counters the simulator's bottleneck rule reads (`perf_model.utilisation`, `summary`).
ACTIVITY = ("tensor_engine_active_time_percent", "vector_engine_active_time_percent",
            "scalar_engine_active_time_percent", "gpsimd_engine_active_time_percent",
            "dma_bandwidth_utilization_percent")
SPILLS = ("spill_save_bytes", "spill_reload_bytes")


def hardware_counters(summary: dict[str, float], latency_ms: float, target: str) -> dict[str, float]:
    """The profile counters of fitness/measures/counters.py from one run's summary (`parse_summary`),
    under the simulator's names, in their declared order: `latency_ms` is the mean of the timed
    runs (the figure judged), the rest the profiler's own values where it reports them, and
    otherwise derived from its counters and the target's documented figures (the simulator's
    hardware table) with the simulator's definitions:
    - `mm_arithmetic_intensity` = (hardware_flops - transpose_flops) / HBM bytes;
    - `peak_flops_bandwidth_ratio` = TensorE peak flops / HBM bandwidth of one core;
    - `hfu_estimated_percent` = hardware_flops / (TensorE peak flops x total_time);
    - `dma_bandwidth_utilization_percent`, which the profiler does not report: its
      `dma_packet_time` (packet time summed over DMA engines) / (engines x total_time), as the
      simulator counts its DMA engines' busy time; a profiler without `dma_packet_time` gives
      the HBM bytes / (total_time x the core's documented DMA rate) instead. At most 1.
    The summary's other fields (times in seconds, MFU, DMA queue statistics, ...) are left out;
    the NEFF and NTFF kept as artifacts reproduce them."""
    out = {name: float(summary[name]) for name in COUNTER_NAMES if name in summary}
    out["latency_ms"] = float(latency_ms)
    seconds = float(summary.get("total_time", 0.0))
    traffic = (summary["hbm_read_bytes"] + summary["hbm_write_bytes"]
               if "hbm_read_bytes" in summary and "hbm_write_bytes" in summary else None)
    flops = summary.get("hardware_flops")
    if "mm_arithmetic_intensity" not in out and traffic is not None and flops is not None:
        out["mm_arithmetic_intensity"] = (flops - summary.get("transpose_flops", 0.0)) / traffic if traffic else 0.0
    hw = HARDWARE.get(target)
    if hw is not None:
        out.setdefault("peak_flops_bandwidth_ratio", hw.peak_flops_bandwidth_ratio)
        if "hfu_estimated_percent" not in out and flops is not None and seconds > 0:
            out["hfu_estimated_percent"] = flops / (hw.tensor_peak_flops * seconds)
        busy = None
        if seconds > 0 and "dma_packet_time" in summary:
            busy = summary["dma_packet_time"] / (hw.dma_engines * seconds)
        elif seconds > 0 and traffic is not None:
            busy = traffic / (min(hw.dma_engines * hw.dma_engine_bytes_per_ns * 1e9, hw.hbm_bytes_per_s) * seconds)
        if busy is not None:
            out["dma_bandwidth_utilization_percent"] = min(1.0, float(busy))
    return {name: out[name] for name in COUNTER_NAMES if name in out}


def bottleneck_line(counters: dict[str, float], target: str) -> str:
    """The simulator's bottleneck line (`perf_model.summary`: the same rule and wording) for
    measured counters, labelled as measured; an activity counter the profiler did not report
    counts as idle. "" when it reported none."""
    if not any(name in counters for name in ACTIVITY):
        return ""
    return perf_model.summary({**dict.fromkeys(ACTIVITY + SPILLS, 0.0), **counters},
                              f"measured on {target} hardware")


@dataclass
class Series:
    latencies_ms: list[float]
    profile: dict[str, float] = field(default_factory=dict)   # of the last timed run

    @property
    def spread(self) -> float:
        lo = min(self.latencies_ms)
        return (max(self.latencies_ms) - lo) / lo if lo > 0 else float("inf")

    @property
    def mean_ms(self) -> float:
        return statistics.fmean(self.latencies_ms)


def timed_series(run_once: Callable[[bool, int], tuple[float, dict[str, float]] | None], *,
                 warmup: int = WARMUP_RUNS, iters: int = TIMED_RUNS, max_spread: float = MAX_SPREAD,
                 max_series: int = MAX_SERIES, pause_s: float = 1.0,
                 sleep: Callable[[float], None] = time.sleep) -> tuple[Series, list[float]]:
    """Warm up, time `iters` runs, repeat while the spread is above `max_spread` (at most
    `max_series` series); returns the tightest series and the spread of every series.

    `run_once(timed, index)` runs the kernel once; when `timed` it returns (latency, profile).
    """
    series: list[Series] = []
    while len(series) < max_series:
        if series:
            sleep(pause_s)
        for i in range(warmup):
            run_once(False, i)
        s = Series([])
        for i in range(iters):
            latency, s.profile = run_once(True, i)  # type: ignore[misc]
            s.latencies_ms.append(latency)
        series.append(s)
        if s.spread <= max_spread:
            break
    best = min(series, key=lambda s: s.spread)
    return best, [s.spread for s in series]


class CoreLeases:
    """Parent side: each evaluation holds one NeuronCore for as long as it runs."""

    def __init__(self, cores: int) -> None:
        self._free: queue.Queue[int] = queue.Queue()
        for core in range(cores):
            self._free.put(core)

    @contextlib.contextmanager
    def lease(self) -> Iterator[int]:
        core = self._free.get()
        try:
            yield core
        finally:
            self._free.put(core)


def _load_kernel(source: str, workdir: Path) -> Any:
    """The `kernel` function of `source`, imported from a file (the SDK reads its source)."""
    path = workdir / KERNEL_FILE
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("kernel", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["kernel"] = module
    spec.loader.exec_module(module)
    return module.kernel


class TrainiumRunner:
    """Worker side: runs the kernel with the Neuron SDK on the core the parent pinned."""

    allow_exec = True   # the compiler and the profiler are separate programs

    def __init__(self, target: str, options: dict[str, Any]) -> None:
        self.target = target
        self.options = options
        self.workdir = Path.cwd()
        self._kernel: Any = None
        self._dialect: str = ""
        self.artifacts: list[str] = []
        self._runs = 0          # timed runs so far: every one gets fresh artifact names

    @property
    def profiler(self) -> str:
        return str(self.options.get("profiler") or
                   ("neuron-profile" if self._dialect == "legacy" else "neuron-explorer"))

    def _kernel_fn(self, source: str) -> Any:
        if self._kernel is None:
            self._dialect = D.detect(source)
            # NKI source locations in the NEFF (the profile's `nki_source_location`: hot
            # lines), read when the kernel compiles (tools/neuron-explorer/environment-variables.rst)
            os.environ.setdefault("NKI_DEBUG_INFO", "True")
            if self._dialect == "current":
                # the runtime reads these when it starts, i.e. on the first kernel call
                os.environ.update(NEURON_RT_INSPECT_ENABLE="1", NEURON_RT_INSPECT_DEVICE_PROFILE="1",
                                  NEURON_RT_INSPECT_OUTPUT_DIR=str(self.workdir / INSPECT_DIR))
            self._nki = importlib.import_module("neuronxcc.nki" if self._dialect == "legacy" else "nki")
            self._kernel = _load_kernel(source, self.workdir)
        return self._kernel

    def run(self, source: str, args: list[Any]) -> tuple[Any, Any]:
        fn = self._kernel_fn(source)
        if self._dialect == "legacy":
            return self._nki.baremetal(fn, additional_compile_opt=COMPILE_OPTIONS)(*args), None
        return fn(*args), None

    def _legacy_timed(self, fn: Any, args: list[Any]) -> tuple[Path, Path]:
        """One legacy timed run in a fresh folder; (NEFF, NTFF) under fresh names."""
        self._runs += 1
        folder = self.workdir / f"run-{self._runs:03d}"
        folder.mkdir()
        here = Path.cwd()
        os.chdir(folder)
        try:
            self._nki.baremetal(fn, save_neff_name=LEGACY_NEFF, save_trace_name="profile.ntff",
                                additional_compile_opt=COMPILE_OPTIONS)(*args)
        finally:
            os.chdir(here)
        neff = existing(folder / LEGACY_NEFF, "NEFF").rename(self.workdir / f"kernel-{self._runs:03d}.neff")
        ntff = existing(folder / "profile.ntff", "trace").rename(self.workdir / f"kernel-{self._runs:03d}.ntff")
        folder.rmdir()
        return neff, ntff

    def _current_neff(self) -> Path:
        """The NEFF the runtime wrote for this kernel while it ran on the seeds."""
        found = sorted((self.workdir / INSPECT_DIR).rglob("*.neff"))
        if not found:
            raise ArtifactError("the runtime wrote no NEFF of the kernel (NEURON_RT_INSPECT_OUTPUT_DIR)")
        neff = self.workdir / "kernel.neff"
        if not neff.exists():
            existing(found[-1], "NEFF").replace(neff)
        return neff

    def _current_timed(self, neff: Path) -> tuple[Path, Path]:
        self._runs += 1
        prefix = f"kernel-{self._runs:03d}"
        run_tool(capture_command(neff, self.workdir / prefix, self.profiler))
        return neff, captured_trace(self.workdir, prefix)

    def _keep_only(self, neff: Path, ntff: Path) -> None:
        """The artifacts of the newest timed run are kept (the run folder takes them); earlier
        ones are removed, so that a retried series does not fill the disk."""
        for name in set(self.artifacts) - {neff.name, ntff.name}:
            (self.workdir / name).unlink(missing_ok=True)
        self.artifacts = [neff.name, ntff.name]

    def _tables(self) -> dict[str, Any]:
        """The profile's fields from Neuron Explorer's Parquet tables of the newest timed run
        (explorer_parquet.profile_fields: hot lines, engine activity, DMA packets); {} when
        the profiler is not Neuron Explorer, a note when pyarrow is missing (summary-json
        alone then). A profile that is there but unreadable is a ProfilerError (one line)."""
        tool = self.profiler
        if Path(tool).name != "neuron-explorer":
            return {}
        try:
            explorer_parquet.require_pyarrow()
        except explorer_parquet.ParquetUnavailable as exc:
            return {"profile_tables": f"summary-json only: {exc}"}
        neff, ntff = (self.workdir / name for name in self.artifacts)
        folder = self.workdir / TABLES_DIR
        shutil.rmtree(folder, ignore_errors=True)
        run_tool(parquet_view_command(existing(neff, "NEFF"), existing(ntff, "trace"), folder, tool))
        try:
            return explorer_parquet.profile_fields(explorer_parquet.read(folder), KERNEL_FILE)
        except explorer_parquet.ProfileTablesError as exc:
            raise ProfilerError(f"{Path(tool).name} view --output-format parquet: {exc}") from None

    def measure(self, source: str, args: list[Any], trace: Any) -> tuple[float, dict[str, Any]]:
        fn = self._kernel_fn(source)
        neff0 = self._current_neff() if self._dialect == "current" else None

        def run_once(timed: bool, index: int) -> tuple[float, dict[str, float]] | None:
            if not timed:
                self.run(source, args)
                return None
            neff, ntff = self._legacy_timed(fn, args) if neff0 is None else self._current_timed(neff0)
            out = run_tool(profile_view_command(neff, ntff, self.profiler))
            self._keep_only(neff, ntff)
            try:
                return parse_summary(json.loads(out))
            except (ValueError, TypeError, AttributeError) as exc:
                raise ProfilerError(f"{Path(self.profiler).name} view printed no usable summary: {exc}") from None

        best, spreads = timed_series(run_once)
        profile: dict[str, Any] = dict(hardware_counters(best.profile, best.mean_ms, self.target))
        for name, value in self._tables().items():   # the summary's own counters come first
            profile.setdefault(name, value)
        line = bottleneck_line(profile, self.target)
        if line:
            profile["bottleneck"] = line
        profile.update(target=self.target, min_ms=min(best.latencies_ms), max_ms=max(best.latencies_ms),
                       rel_diffs=best.spread, series_spreads=spreads,
                       device_core=os.environ.get("NEURON_RT_VISIBLE_CORES", ""), sdk_path=self._dialect)
        return best.mean_ms, profile

    def structure_dtypes(self, trace: Any) -> list[Any]:
        return []   # no trace on hardware; the parent checks the source's dtype references
