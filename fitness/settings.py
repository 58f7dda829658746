"""EvalSettings: what the evaluation service needs to know, as one immutable value.

The engine builds it from the `[evaluation]` config section (fitness never imports the engine);
`heldout_seeds` carries the actual held-out seed values, which the engine derives from the run
seed so that no prompt ever shows them.
"""

from __future__ import annotations

from dataclasses import dataclass

from fitness.simulator.perf.hardware import TARGETS

# Bump when a change of the evaluation service changes results; it is part of every cache key
# (together with a digest of the fitness and nkibench sources, see fitness.cache).
EVALUATOR_VERSION = "1"

BACKENDS = ("auto", "simulator", "trainium")
EXECUTORS = ("local", "ray")
# TARGETS (re-exported): the performance model's targets, declared once in its hardware table.
__all__ = ["BACKENDS", "EVALUATOR_VERSION", "EXECUTORS", "TARGETS", "EvalSettings"]


@dataclass(frozen=True)
class EvalSettings:
    backend: str = "auto"                       # auto | simulator | trainium
    target: str = "trn1"                        # trn1 | trn2 | trn3 (the simulator's performance model)
    seeds: tuple[int, ...] = (0, 21, 42, 63, 84)
    heldout_seeds: tuple[int, ...] = ()         # extra seeds no prompt shows (values, not a count)
    rel_tol: float = 0.0                        # 0 = the problem's own tolerance
    timeout_s: float = 300.0                    # wall clock per evaluation
    memory_limit_mb: int = 8192                 # address space of the kernel process
    workers: int = 2                            # concurrent evaluations (trainium: one per NeuronCore instead)
    cache_dir: str = ""                         # optional evaluation cache shared between runs
    # The key file whose key seals the entries of `cache_dir` (a team shares one); "" = the
    # user's own key (fitness.seal). Run folders are always sealed with the user's own.
    cache_key_file: str = ""
    # Simulator parameters: "auto" (a per-user calibration of the target when there is one, else
    # the shipped ones), "shipped", or a calibration file (`calibrate`; fitness.simulator.perf.calibration)
    calibration: str = "auto"
    # Where evaluations run: "local" (a process pool on this machine) or "ray" (tasks on a Ray
    # cluster; fitness.executor). ray_address: "" starts a local Ray instance, "auto" or
    # "ray://host:port" joins a running cluster.
    executor: str = "local"
    ray_address: str = ""
    # Folders a kernel may import kernel libraries from: their packages and top-level modules
    # (`import nkilib.core.utils.allocator` with the folder holding nkilib/), run by the kernel
    # process under the same policy (fitness.sandbox.modules); relative to the current folder.
    kernel_paths: tuple[str, ...] = ()
    # The file the evaluated kernels were read from (`eval`, not a configuration setting): a
    # kernel file inside a package is that package's module, so that its relative imports
    # resolve ("" = none).
    kernel_file: str = ""

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"evaluation backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.executor not in EXECUTORS:
            raise ValueError(f"evaluation executor must be one of {', '.join(EXECUTORS)}, got {self.executor!r}")
        if self.target not in TARGETS:
            raise ValueError(f"evaluation target must be one of {', '.join(TARGETS)}, got {self.target!r}")
        if not self.seeds:
            raise ValueError("evaluation needs at least one seed")
        if self.timeout_s <= 0 or self.memory_limit_mb < 256 or self.workers < 1 or self.rel_tol < 0:
            raise ValueError("evaluation limits must be positive (memory_limit_mb >= 256, workers >= 1)")
        object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
        object.__setattr__(self, "heldout_seeds", tuple(int(s) for s in self.heldout_seeds))
        object.__setattr__(self, "kernel_paths", tuple(str(p) for p in self.kernel_paths))
