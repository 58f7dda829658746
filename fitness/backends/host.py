"""What this machine offers the trainium backend: Neuron SDK generation and version, devices,
NeuronCores, instance type and target, profiler tool, all detected from the host.

SDK generations (aws-neuron-sdk `release-notes/components/nki.rst`, `nki/migration/index.rst`):
the legacy compiler package `neuronxcc` (its `neuronxcc.nki` dialect runs on trn1 and trn2 up
to Neuron 2.29) and the standalone `nki` package (NKI >= 0.3, Neuron >= 2.29, trn2 and trn3).
From NKI 0.4 (Neuron 2.30) `neuronxcc.nki` inside a kernel is a compile error and the
`neuron-profile` tool is replaced by Neuron Explorer (`neuron-explorer`).
"""

from __future__ import annotations

import glob
import importlib.machinery
import importlib.metadata
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fitness.simulator import dialect as D

_SIMULATOR_DIR = str(Path(__file__).resolve().parents[1] / "simulator")
DMI_PRODUCT = "/sys/devices/virtual/dmi/id/product_name"   # the EC2 instance type on Nitro hosts
# Instance family -> the performance model's target (NeuronCore generation): inf2 has trn1's
# NeuronCore-v2 (about-neuron/arch/neuron-hardware/*.rst).
FAMILY_TARGETS = {"trn1": "trn1", "trn1n": "trn1", "inf2": "trn1", "trn2": "trn2", "trn2u": "trn2", "trn3": "trn3"}
CORES_PER_DEVICE_DEFAULT = 2    # trn1 / inf2 devices have two NeuronCores-v2 each
# Logical NeuronCore configuration the runtime uses unless NEURON_LOGICAL_NC_CONFIG says
# otherwise: 2 physical cores per logical core on trn2 and trn3, 1 on trn1
# (about-neuron/arch/neuron-features/logical-neuroncore-config.rst).
DEFAULT_LNC = {"trn1": 1, "trn2": 2, "trn3": 2}
NKI_LEGACY_REMOVED = (0, 4)     # NKI 0.4 = Neuron 2.30: legacy kernels no longer compile


@dataclass(frozen=True)
class NeuronHost:
    """The host as the trainium backend sees it ("" / 0 where something is absent)."""

    sdk: str = ""                    # location of the real `neuronxcc` package
    devices: tuple[str, ...] = ()
    cores: int = 0                   # NeuronCores usable at logical-core configuration 1
    nki: str = ""                    # location of the real standalone `nki` package
    compiler_version: str = ""       # neuronx-cc distribution version
    nki_version: str = ""            # nki distribution version
    instance_type: str = ""          # e.g. trn1.2xlarge
    profiler: str = ""               # neuron-explorer or neuron-profile (path)

    @property
    def target(self) -> str:
        """The NeuronCore generation of this instance ("" when unknown)."""
        return target_of_instance(self.instance_type)

    @property
    def dialects(self) -> tuple[D.Dialect, ...]:
        """NKI dialects the installed SDK compiles for this chip: NKI >= 0.3 kernels do not run
        on trn1 / inf2 (release-notes/components/nxd-inference.rst)."""
        out: list[D.Dialect] = []
        if self.sdk and not (self.nki and version_tuple(self.nki_version) >= NKI_LEGACY_REMOVED):
            out.append("legacy")
        if self.nki and self.target != "trn1":
            out.append("current")
        return tuple(out)

    @property
    def sdk_version(self) -> str:
        """The SDK as results and cache keys name it, e.g. 'neuronx-cc 2.21.1; nki 0.6.0'."""
        parts = []
        if self.sdk:
            parts.append(f"neuronx-cc {self.compiler_version or 'unknown'}")
        if self.nki:
            parts.append(f"nki {self.nki_version or 'unknown'}")
        return "; ".join(parts)

    @property
    def usable(self) -> bool:
        return bool(self.dialects) and bool(self.devices) and self.cores > 0 and bool(self.target)


def version_tuple(version: str) -> tuple[int, ...]:
    """'0.6.0.dev1' -> (0, 6, 0); unparsable parts end the tuple."""
    out = []
    for part in version.split("."):
        digits = "".join(ch for ch in part if ch.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def target_of_instance(instance_type: str) -> str:
    return FAMILY_TARGETS.get(instance_type.split(".")[0].strip().lower(), "")


def find_package(name: str) -> str:
    """Location of the real package `name` on sys.path. The search bypasses sys.modules and
    import hooks, where the emulator's stand-in `neuronxcc` / `nki` may live."""
    try:
        spec = importlib.machinery.PathFinder.find_spec(name)
    except (ImportError, ValueError):
        return ""
    if spec is None:
        return ""
    locations = list(spec.submodule_search_locations or []) + ([spec.origin] if spec.origin else [])
    real = [loc for loc in locations if loc and not os.path.realpath(loc).startswith(_SIMULATOR_DIR)]
    return real[0] if real else ""


def find_sdk() -> str:
    """Location of the real Neuron compiler package (`neuronxcc`), "" when absent."""
    return find_package("neuronxcc")


def distribution_version(package_dir: str, names: tuple[str, ...]) -> str:
    """Version of the distribution that installed the package at `package_dir`."""
    root = str(Path(package_dir).parent)
    for dist in importlib.metadata.distributions(path=[root]):
        if dist.metadata["Name"] and dist.metadata["Name"].lower() in names:
            return str(dist.version)
    return ""


def read_instance_type(path: str = DMI_PRODUCT) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def logical_nc_config(target: str, env: dict[str, str] | None = None) -> int:
    """The logical-core configuration the runtime applies (NEURON_LOGICAL_NC_CONFIG)."""
    value = (os.environ if env is None else env).get("NEURON_LOGICAL_NC_CONFIG", "")
    return int(value) if value.isdigit() and int(value) > 0 else DEFAULT_LNC.get(target, 1)


def cores_from_neuron_ls(listing: Any, lnc: int = 1) -> int:
    """Physical NeuronCores from `neuron-ls --json-output`: its `nc_count` counts logical cores
    of the configuration in effect (`lnc` physical cores each); the backend runs every kernel at
    configuration 1 (`--logical-nc-config=1`), one physical core each."""
    return sum(int(dev["nc_count"]) for dev in listing) * lnc


def count_cores(devices: tuple[str, ...], target: str) -> int:
    """NeuronCores usable at logical-core configuration 1: from `neuron-ls --json-output` when
    available, else two per device (trn1)."""
    tool = shutil.which("neuron-ls")
    if tool:
        try:
            out = subprocess.run([tool, "--json-output"], capture_output=True, timeout=30, check=True).stdout
            return cores_from_neuron_ls(json.loads(out), logical_nc_config(target))
        except (subprocess.SubprocessError, OSError, ValueError, KeyError, TypeError):
            pass
    return CORES_PER_DEVICE_DEFAULT * len(devices)


def find_profiler() -> str:
    """Neuron Explorer where installed (the only profiler from Neuron 2.30), else neuron-profile
    (tools/neuron-explorer/migration-faq.rst: the same `capture` / `view` arguments)."""
    return shutil.which("neuron-explorer") or shutil.which("neuron-profile") or ""


DEVICES = "/dev/neuron[0-9]*"


def probe(devices_glob: str = DEVICES, dmi_product: str = DMI_PRODUCT) -> NeuronHost:
    """Detect everything the trainium backend needs (cheap: no compilation, no device use)."""
    sdk, nki = find_sdk(), find_package("nki")
    compiler_version = distribution_version(sdk, ("neuronx-cc",)) if sdk else ""
    nki_version = distribution_version(nki, ("nki", "neuronx-nki")) if nki else ""
    devices = tuple(sorted(glob.glob(devices_glob)))
    instance = read_instance_type(dmi_product)
    cores = count_cores(devices, target_of_instance(instance)) if (sdk or nki) and devices else 0
    return NeuronHost(sdk, devices, cores, nki, compiler_version, nki_version, instance, find_profiler())
