"""`doctor`: one screen saying what this machine can do, and why.

Python and package versions, the Neuron SDK and the NKI dialects it compiles here, devices and
NeuronCores (with the logical-core configuration), the profiler tool, the backend and target a
run would use and why, where evaluations run (the local pool or Ray, and whether Ray is
installed), which calibration the simulator uses, and whether the configured LLM endpoint
answers (one GET /models; the key is never printed).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
from dataclasses import dataclass
from typing import Callable

from accelopt_evo.run.config import Config
from fitness import backends
from fitness.backends.host import NeuronHost, logical_nc_config
from fitness.simulator.perf.hardware import hardware

PACKAGES = ("accelopt-evo", "numpy", "scipy", "deap", "openai", "ray")


@dataclass(frozen=True)
class Diagnosis:
    lines: list[str]
    can_run: bool          # a run can start with this configuration


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _executor_line(cfg: Config) -> tuple[str, bool]:
    """Where evaluations would run, and whether they can (Ray is an optional extra)."""
    e = cfg.evaluation
    installed = importlib.util.find_spec("ray") is not None
    if e.executor != "ray":
        ray = f"Ray {_version('ray')} is installed" if installed else "Ray is not installed: pip install -e '.[ray]'"
        return f"executor    local process pool (for evaluation.executor = \"ray\": {ray})", True
    if not installed:
        return "executor    ray, but Ray is not installed: pip install -e '.[ray]'", False
    where = f"joins the cluster at {e.ray_address!r}" if e.ray_address else "starts a local instance"
    return f"executor    ray {_version('ray')}: {where}", True


def diagnose(cfg: Config, host: NeuronHost, check_llm: Callable[[], str],
             calibration: str = "") -> Diagnosis:
    """The doctor's screen for `cfg` on `host`. `check_llm()` returns "" when the endpoint
    answers, else why not; `calibration` names a user calibration in use ("" = shipped)."""
    e = cfg.evaluation
    lines = [f"python      {platform.python_version()} ({platform.machine()})",
             "packages    " + ", ".join(f"{p} {_version(p)}" for p in PACKAGES)]
    if host.sdk or host.nki:
        dialects = ", ".join(host.dialects) if host.dialects else "none on this chip"
        lines.append(f"neuron sdk  {host.sdk_version}; NKI dialects it compiles here: {dialects}")
    else:
        lines.append("neuron sdk  none (neither neuronxcc nor nki is importable)")
    if host.devices:
        lnc = logical_nc_config(host.target)
        lines.append(f"devices     {len(host.devices)} ({host.instance_type or 'unknown instance type'}); "
                     f"{host.cores} NeuronCore(s) at logical-core configuration 1 (runtime default here: {lnc})")
    else:
        lines.append("devices     none (/dev/neuron*)")
    lines.append(f"profiler    {host.profiler or 'none (neuron-explorer / neuron-profile not on PATH)'}")
    can_run = True
    try:
        name, why = backends.choose(e.backend, host, e.target)
    except backends.BackendError as exc:
        name, why, can_run = "", str(exc), False
    if name == "trainium":
        lines.append(f"backend     trainium, target {host.target}: {why}")
    elif name:
        calibrated = "calibrated" if hardware(e.target).calibrated else "uncalibrated"
        cal = f"user calibration {calibration}" if calibration else f"shipped parameters, {calibrated}"
        lines.append(f"backend     simulator, target {e.target} ({cal}): {why}")
    else:
        lines.append(f"backend     cannot start: {why}")
    line, ok = _executor_line(cfg)
    lines.append(line)
    can_run = can_run and ok
    if cfg.llm.base_url:
        problem = check_llm()
        lines.append(f"llm         {cfg.llm.base_url} " + (f"does not answer: {problem}" if problem else "answers"))
        if problem and cfg.operators.kind != "tuning":   # auto and llm need the endpoint
            can_run = False
    else:
        lines.append("llm         no endpoint configured (llm.base_url): offline operators (knobs found in the kernel, structural rewrites)")
    lines.append("verdict     " + ("a run can start" if can_run else "a run cannot start with this configuration"))
    return Diagnosis(lines, can_run)
