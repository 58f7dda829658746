"""A fake Neuron toolchain for tests without hardware: stand-in SDK packages on sys.path
(`sdk.py`: kernels run on the project's emulator, artifacts are written like the SDK's) and
stand-in profiler executables on PATH (`profiler.py`), with a distribution version each so
that the backend's version gate sees the SDK generation a test asks for, and, once a test
configures it (`FakeToolchain.set_device`), a fake device (`device.py`): the model's timing with
noise, drift and failures, profiles as Parquet tables in the schema page's layout.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOTS = ("neuronxcc", "nki")


@dataclass
class FakeToolchain:
    site: Path
    bin: Path
    log: Path
    latencies: Path

    def calls(self) -> list[dict]:
        """The profiler calls so far, in order."""
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []

    def set_latencies(self, values_ms: list[float]) -> None:
        self.latencies.write_text(json.dumps(values_ms))

    @property
    def device(self) -> Path:
        """The fake device's configuration file (device.py); absent: no device."""
        return self.log.with_name("device.json")

    def set_device(self, **config) -> None:
        """Configure the fake device (device.DeviceConfig's fields) and restart its count of
        executions."""
        from .device import DeviceConfig

        self.device.write_text(json.dumps(DeviceConfig(**config).__dict__))
        self.device.with_suffix(".state").unlink(missing_ok=True)


def _package(site: Path, dotted: str, body: str) -> None:
    folder = site.joinpath(*dotted.split("."))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "__init__.py").write_text(body)


def _dist(site: Path, name: str, version: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def make(tmp: Path, *, compiler: str | None = None, nki: str | None = None,
         tools: tuple[str, ...] = ("neuron-profile", "neuron-explorer")) -> FakeToolchain:
    """Write a fake toolchain under `tmp`: neuronx-cc `compiler` and/or nki `nki` (versions;
    None leaves that package out) and the profiler executables `tools`."""
    site, bindir = tmp / "site", tmp / "bin"
    site.mkdir(parents=True)
    bindir.mkdir()
    importer = f"import sys\nsys.path.insert(0, {str(HERE.parent)!r})\n"
    if compiler:
        _package(site, "neuronxcc", '"""Fake neuronxcc (tests)."""\n')
        _package(site, "neuronxcc.nki", importer + "from fake_neuron.sdk import fill_legacy\nfill_legacy(globals())\n")
        _dist(site, "neuronx-cc", compiler)
    if nki:
        _package(site, "nki", importer + "from fake_neuron.sdk import fill_current\nfill_current(globals())\n")
        _dist(site, "nki", nki)
    for tool in tools:
        script = bindir / tool
        script.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(HERE.parent)!r})\n"
                          f"from fake_neuron.profiler import main\nsys.exit(main(sys.argv[1:], {tool!r}))\n")
        script.chmod(0o755)
    toolchain = FakeToolchain(site, bindir, tmp / "profiler-calls.jsonl", tmp / "latencies.json")
    toolchain.set_latencies([1.0])
    return toolchain


def activate(toolchain: FakeToolchain, monkeypatch) -> None:
    """Put the fake toolchain first on sys.path and PATH (undone by monkeypatch), with no
    NKI modules (the emulator's or a fake's) left over in sys.modules."""
    monkeypatch.syspath_prepend(str(toolchain.site))
    monkeypatch.setenv("PATH", f"{toolchain.bin}:{__import__('os').environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_NEURON_LOG", str(toolchain.log))
    monkeypatch.setenv("FAKE_NEURON_LATENCIES", str(toolchain.latencies))
    monkeypatch.setenv("FAKE_NEURON_DEVICE", str(toolchain.device))
    # unset, and unset again afterwards: the trainium runner sets it in the test's process
    monkeypatch.setenv("NKI_DEBUG_INFO", "")
    monkeypatch.delenv("NKI_DEBUG_INFO")
    for name in [n for n in sys.modules if n.split(".")[0] in ROOTS]:
        monkeypatch.delitem(sys.modules, name)
