"""Evaluation backends: where a kernel runs and how its latency is obtained.

`simulator` (the NKI emulator + the Trainium performance model, target trn1 or trn2) and
`trainium` (neuronx-cc through `nki.baremetal` and `neuron-profile` on a NeuronCore). This
module chooses between them; each backend module has a worker side (a `Runner` used inside
the sandboxed kernel process) and, for trainium, the parent-side device bookkeeping.
"""

from __future__ import annotations

import glob
import importlib.machinery
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from fitness.simulator import dialect as D
from fitness.simulator.perf.hardware import hardware

_SIMULATOR_DIR = str(Path(__file__).resolve().parents[1] / "simulator")
CORES_PER_DEVICE_DEFAULT = 2   # trn1 / inf2 devices have two NeuronCores-v2 each


class BackendError(ValueError):
    """A backend that cannot be used here; the message says why."""


@dataclass(frozen=True)
class NeuronHost:
    """What this machine offers the trainium backend."""

    sdk: str              # where the real neuronxcc package is, "" if not importable
    devices: tuple[str, ...]
    cores: int            # NeuronCores usable by evaluations

    @property
    def usable(self) -> bool:
        return bool(self.sdk) and self.cores > 0


def find_sdk() -> str:
    """Location of the real Neuron compiler package on sys.path. The search bypasses
    sys.modules and import hooks, where the emulator's stand-in `neuronxcc` may live."""
    try:
        spec = importlib.machinery.PathFinder.find_spec("neuronxcc")
    except (ImportError, ValueError):
        return ""
    if spec is None:
        return ""
    locations = list(spec.submodule_search_locations or []) + ([spec.origin] if spec.origin else [])
    real = [loc for loc in locations if loc and not os.path.realpath(loc).startswith(_SIMULATOR_DIR)]
    return real[0] if real else ""


def count_cores(devices: tuple[str, ...]) -> int:
    """NeuronCores on this host: from `neuron-ls --json-output` when available, else
    two per device (trn1)."""
    tool = shutil.which("neuron-ls")
    if tool:
        try:
            out = subprocess.run([tool, "--json-output"], capture_output=True, timeout=30, check=True).stdout
            return cores_from_neuron_ls(json.loads(out))
        except (subprocess.SubprocessError, OSError, ValueError, KeyError, TypeError):
            pass
    return CORES_PER_DEVICE_DEFAULT * len(devices)


def cores_from_neuron_ls(listing: Any) -> int:
    """Sum of `nc_count` over the devices `neuron-ls --json-output` lists."""
    return sum(int(dev["nc_count"]) for dev in listing)


def probe_neuron() -> NeuronHost:
    devices = tuple(sorted(glob.glob("/dev/neuron[0-9]*")))
    sdk = find_sdk()
    cores = count_cores(devices) if sdk and devices else 0
    return NeuronHost(sdk, devices, cores)


def choose(requested: str, host: NeuronHost | None = None) -> tuple[str, str]:
    """(backend name, one-line reason) for the configured `backend`."""
    if requested == "simulator":
        return "simulator", "configured: the NKI simulator"
    host = host or probe_neuron()
    if requested == "trainium":
        if not host.sdk:
            raise BackendError("evaluation.backend = trainium, but the Neuron SDK (neuronxcc) is not importable")
        if not host.devices:
            raise BackendError("evaluation.backend = trainium, but there is no Neuron device (/dev/neuron*)")
        if host.cores < 1:
            raise BackendError("evaluation.backend = trainium, but no NeuronCore was found")
        return "trainium", f"configured: {host.cores} NeuronCore(s) on {len(host.devices)} device(s)"
    if requested != "auto":
        raise BackendError(f"unknown evaluation backend '{requested}' (auto, simulator or trainium)")
    if not host.sdk:
        return "simulator", "auto: no Neuron SDK importable (neuronxcc)"
    if not host.devices:
        return "simulator", "auto: Neuron SDK found but no Neuron device (/dev/neuron*)"
    if host.cores < 1:
        return "simulator", "auto: Neuron SDK and devices found but no NeuronCore"
    return "trainium", f"auto: Neuron SDK and {host.cores} NeuronCore(s) on {len(host.devices)} device(s)"


# The NKI dialects each backend runs (fitness.simulator.dialect); the trainium path for the
# current dialect (nki.jit + neuron-explorer, Neuron >= 2.29) is not written yet.
DIALECTS: dict[str, tuple[str, ...]] = {"simulator": ("legacy", "current"), "trainium": ("legacy",)}


def dialect_refusal(backend: str, dialect: str | None) -> str:
    """Why `backend` cannot run a kernel of `dialect` (one line), or "" when it can."""
    if dialect is None or dialect in DIALECTS.get(backend, (dialect,)):
        return ""
    return (f"the {backend} backend runs legacy-dialect kernels (neuronxcc.nki) only; this kernel is written in "
            f"the {dialect} dialect (import nki), which only the simulator backend runs for now")


def target_refusal(target: str, dialect: str | None) -> str:
    """Why a kernel of `dialect` cannot be judged for `target` (one line), or "" when it can."""
    if dialect is None or dialect in hardware(target).dialects:
        return ""
    return (f"{dialect}-dialect kernels ({D.IMPORTS[dialect]}) never ran on {target}; "
            f"{target} takes kernels in the {' or '.join(hardware(target).dialects)} dialect")


class Runner(Protocol):
    """Worker side of a backend, used inside the sandboxed kernel process."""

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

        return SimulatorRunner(target)
    if name == "trainium":
        from .trainium import TrainiumRunner

        return TrainiumRunner(target, options)
    raise BackendError(f"unknown backend {name!r}")
