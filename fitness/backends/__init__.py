"""Evaluation backends: where a kernel runs and how its latency is obtained.

`simulator` (the NKI emulator + the Trainium performance model, target trn1, trn2 or trn3) and
`trainium` (the Neuron SDK on a NeuronCore: legacy `nki.baremetal` + `neuron-profile`, or
current `nki` + `neuron-explorer`; see `trainium.py`). `host.py` detects what the machine has;
this module chooses between them; each backend module has a worker side (a `Runner` used inside
the sandboxed kernel process) and, for trainium, the parent-side device bookkeeping.
"""

from __future__ import annotations

from typing import Any, Protocol

from fitness.simulator import dialect as D
from fitness.simulator.perf.hardware import hardware

from .host import NeuronHost, cores_from_neuron_ls, find_sdk, probe

probe_neuron = probe   # the name the evaluator and its tests use

__all__ = ["BackendError", "NeuronHost", "cores_from_neuron_ls", "find_sdk", "probe_neuron", "choose",
           "dialect_refusal", "target_refusal", "load_runner"]


class BackendError(ValueError):
    """A backend that cannot be used here; the message says why."""


def _hardware_gap(host: NeuronHost, target: str) -> str:
    """Why the trainium backend cannot evaluate for `target` on this host ("" when it can)."""
    if not host.sdk and not host.nki:
        return "no Neuron SDK importable (neuronxcc or nki)"
    if not host.devices:
        return "Neuron SDK found but no Neuron device (/dev/neuron*)"
    if host.cores < 1:
        return "Neuron SDK and devices found but no NeuronCore"
    if not host.target:
        return f"unknown instance type {host.instance_type or '(none)'}: no NeuronCore generation for it"
    if host.target != target:
        return f"this host is {host.target} ({host.instance_type}), but evaluation.target is {target}"
    if not any(d in host.dialects for d in hardware(target).dialects):
        return f"the installed Neuron SDK ({host.sdk_version}) compiles no NKI dialect {target} runs"
    return ""


def choose(requested: str, host: NeuronHost | None = None, target: str = "trn1") -> tuple[str, str]:
    """(backend name, one-line reason) for the configured `backend` and the run's `target`."""
    if requested == "simulator":
        return "simulator", "configured: the NKI simulator"
    if requested not in ("auto", "trainium"):
        raise BackendError(f"unknown evaluation backend '{requested}' (auto, simulator or trainium)")
    host = host or probe()
    gap = _hardware_gap(host, target)
    if requested == "trainium":
        if gap:
            raise BackendError(f"evaluation.backend = trainium, but {gap}")
        return "trainium", (f"configured: {host.cores} NeuronCore(s) on {len(host.devices)} {host.target} "
                            f"device(s), {host.sdk_version}")
    if gap:
        return "simulator", f"auto: {gap}"
    return "trainium", (f"auto: {host.sdk_version} and {host.cores} NeuronCore(s) on {len(host.devices)} "
                        f"{host.target} device(s)")


def dialect_refusal(backend: str, dialect: str | None, host: NeuronHost | None = None) -> str:
    """Why `backend` cannot run a kernel of `dialect` here (one line), or "" when it can. The
    simulator runs both dialects; the trainium backend what the installed SDK compiles."""
    if dialect is None or backend != "trainium" or host is None or dialect in host.dialects:
        return ""
    if dialect == "current" and host.nki and host.target == "trn1":
        return f"current-dialect kernels ({D.IMPORTS['current']}, NKI >= 0.3) do not run on trn1"
    if dialect == "legacy" and host.sdk:
        return (f"legacy-dialect kernels ({D.IMPORTS['legacy']}) are a compile error from Neuron 2.30 "
                f"(NKI 0.4); this host has {host.sdk_version}")
    return (f"the installed Neuron SDK ({host.sdk_version or 'none'}) does not compile {dialect}-dialect kernels "
            f"({D.IMPORTS[dialect]})")


def target_refusal(target: str, dialect: str | None) -> str:
    """Why a kernel of `dialect` cannot be judged for `target` (one line), or "" when it can."""
    if dialect is None or dialect in hardware(target).dialects:
        return ""
    return (f"{dialect}-dialect kernels ({D.IMPORTS[dialect]}) never ran on {target}; "
            f"{target} takes kernels in the {' or '.join(hardware(target).dialects)} dialect")


class Runner(Protocol):
    """Worker side of a backend, used inside the sandboxed kernel process. A backend that can
    trace a kernel without data (the simulator) also has `trace(source, args) -> trace`: the
    worker then times the shape-only trace before any seed runs (fitness.sandbox.worker)."""

    allow_exec: bool      # the backend itself starts processes (the Neuron compiler, profiler)

    def run(self, source: str, args: list[Any]) -> tuple[Any, Any]:
        """Run the kernel once: (raw outputs as NumPy arrays, trace or None)."""

    def measure(self, source: str, args: list[Any], trace: Any) -> tuple[float, dict[str, Any]]:
        """(latency in ms, profile with neuron-profile names) of a kernel that ran correctly."""

    def structure_dtypes(self, trace: Any) -> list[Any]:
        """Float dtypes the kernel's structure uses (precision.DtypeUse)."""


def load_runner(name: str, target: str, options: dict[str, Any]) -> Runner:
    """The worker side of backend `name` (imported here, inside the kernel process)."""
    if name == "simulator":
        from .simulator import SimulatorRunner

        return SimulatorRunner(target, options)
    if name == "trainium":
        from .trainium import TrainiumRunner

        return TrainiumRunner(target, options)
    raise BackendError(f"unknown backend {name!r}")
