"""Stand-in Neuron SDK packages: `neuronxcc.nki` (legacy) and `nki` (current) whose kernels run
on the project's emulator and which write the artifact files the real SDK writes.

The package files `FakeToolchain` puts on sys.path call `fill_legacy` / `fill_current` with
their namespace. What they write is steered by environment variables, so that a test can
make the toolchain misbehave the way the SDK documents:
  FAKE_NEURON_MISSING   "neff" or "ntff": that artifact is not written
  FAKE_NEURON_DEVICE    a fake device's configuration (device.py): NEFFs carry the model's
                        schedule, and a legacy run saving a trace is an execution on it
The legacy `baremetal` keeps the SDK's known issue: with a trace requested, a NEFF named
anything but `file.neff` gets no trace.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any

from fitness.simulator.current import shim as current_shim
from fitness.simulator.legacy import shim as legacy_shim

from . import device


def _missing() -> str:
    return os.environ.get("FAKE_NEURON_MISSING", "")


def _write_neff(path: Path, kernel: Any, args: tuple = (), dialect: str = "legacy") -> None:
    """The fake NEFF: the kernel's name and, with a fake device configured, what the device
    needs to run it (device.compile_record: the model's latency and schedule)."""
    if _missing() == "neff":
        return
    record: dict[str, Any] = {"fake_neff": getattr(kernel, "__name__", "kernel")}
    config = device.DeviceConfig.load()
    if config is not None:
        record.update(device.compile_record(kernel, args, config, dialect))
    path.write_text(json.dumps(record))


def _register(package: str, modules: dict[str, Any], namespace: dict[str, Any]) -> None:
    """Make the emulator's submodules those of the stand-in package `package`."""
    for name, module in modules.items():
        if name.startswith(package + "."):
            sys.modules[name] = module
            namespace[name[len(package) + 1:]] = module


def fill_legacy(namespace: dict[str, Any]) -> None:
    """The namespace of a stand-in `neuronxcc.nki` package."""
    modules = legacy_shim.build_modules()
    _register("neuronxcc.nki", modules, namespace)
    emulated = modules["neuronxcc.nki"]
    # the package's own names (`from neuronxcc.nki import trace`, as NKIBench kernels write)
    namespace.update({k: v for k, v in vars(emulated).items() if not k.startswith("_") and k not in namespace})
    namespace["jit"] = emulated.jit

    def baremetal(kernel=None, save_neff_name=None, save_trace_name=None, additional_compile_opt="", **_):
        if kernel is None:
            return functools.partial(baremetal, save_neff_name=save_neff_name, save_trace_name=save_trace_name,
                                     additional_compile_opt=additional_compile_opt)

        def run(*args):
            outputs = emulated.baremetal(kernel)(*args)
            if save_neff_name:
                _write_neff(Path(save_neff_name), kernel, args, "legacy")
            if save_trace_name and _missing() != "ntff" and save_neff_name == "file.neff":
                trace: dict[str, Any] = {"fake_ntff": str(save_neff_name), "options": additional_compile_opt}
                config = device.DeviceConfig.load()
                if config is not None and Path(save_neff_name).is_file():   # the device ran it: measured
                    trace.update(device.execute(json.loads(Path(save_neff_name).read_text()), config))
                Path(save_trace_name).write_text(json.dumps(trace))
            return outputs
        return run

    namespace["baremetal"] = baremetal


def fill_current(namespace: dict[str, Any]) -> None:
    """The namespace of a stand-in `nki` package: calling a `@nki.jit` kernel runs it and, with
    runtime inspection on, writes the NEFF into NEURON_RT_INSPECT_OUTPUT_DIR."""
    modules = current_shim.build_modules()
    _register("nki", modules, namespace)
    emulated = modules["nki"]

    def jit(fn=None, **options):
        if fn is None:
            return lambda f: jit(f, **options)
        kernel = emulated.jit(fn, **options)

        @functools.wraps(fn)
        def launch(*args):
            outputs = kernel(*args)
            if os.environ.get("NEURON_RT_INSPECT_ENABLE") == "1":
                folder = Path(os.environ.get("NEURON_RT_INSPECT_OUTPUT_DIR", "output")) / "neff_0"
                folder.mkdir(parents=True, exist_ok=True)
                _write_neff(folder / f"{fn.__name__}.neff", fn, args, "current")
            return outputs
        return launch

    namespace["jit"] = jit
    namespace["simulate"] = emulated.simulate
