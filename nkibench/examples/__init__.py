"""Problems for the NKI SDK's example kernels (`../shared/nki-examples/`, current `nki` dialect).

One module per problem, in the layout of `nkibench/problems/` (documented in `silu.py`), with
a baseline kernel of the project's own in `baselines/` (current dialect). They are registered
beside the NKIBench problems (`nkibench.registry.example_names`) but are not NKIBench: `run`
optimizes them only when named. `KERNELS` says which problem and shape judge each example
kernel that has a computable reference (`NOT_JUDGED` names the files that have none); `python -m accelopt_evo eval FILE --problem NAME
--kernel FUNCTION [--shape SHAPE]` evaluates one of them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ExampleKernel:
    """One kernel function of an SDK example file and the problem that judges it."""

    path: str          # relative to the examples folder
    function: str      # the `@nki.jit` function evaluated
    problem: str       # a module of this package
    shape: str         # a named shape of that problem the kernel accepts


_MATMUL = "matrix_multiplication/matrix_multiplication_nki_kernels.py"
_MAMBA = "fused_mamba/mamba_nki_kernels.py"

KERNELS: tuple[ExampleKernel, ...] = (
    ExampleKernel(_MATMUL, "nki_matmul_basic_", "matmul_lhst", "basic"),
    ExampleKernel(_MATMUL, "nki_matmul_tiled_", "matmul_lhst", "small"),
    ExampleKernel(_MATMUL, "nki_matmul_hoist_load_", "matmul_lhst", "small"),
    ExampleKernel(_MATMUL, "nki_matmul_block_free_dimension_", "matmul_lhst", "small"),
    ExampleKernel(_MATMUL, "nki_matmul_fully_optimized_", "matmul_lhst", "paper"),
    ExampleKernel(_MAMBA, "mamba_v1", "fused_mamba", "small"),
    ExampleKernel(_MAMBA, "mamba_v2", "fused_mamba", "small"),
    ExampleKernel(_MAMBA, "mamba_v3", "fused_mamba", "small"),
    ExampleKernel("average_pool2d/average_pool2d_nki_kernels.py", "tensor_avgpool_kernel", "avgpool2d", "paper"),
    ExampleKernel("transpose2d/transpose2d_nki_kernels.py", "tensor_transpose2D_kernel_", "transpose2d", "paper"),
    ExampleKernel("tensor_addition/tensor_addition_nki_kernels.py", "nki_tensor_add", "tensor_add", "paper"),
    ExampleKernel("simulate/nki_simulate_example.py", "add_kernel", "tensor_add", "tiny"),
    ExampleKernel("getting_started_baremetal.py", "nki_tensor_add_kernel", "tensor_add", "tiny"),
    ExampleKernel("getting_started_jax.py", "nki_tensor_add_kernel", "tensor_add", "tiny"),
    ExampleKernel("getting_started_torch.py", "nki_tensor_add_kernel", "tensor_add", "tiny"),
    ExampleKernel("layout-pass.py", "tensor_exp_kernel_", "exp", "tiny"),
    ExampleKernel("index-case-1.py", "tensor_split_kernel_", "split_columns", "paper"),
    ExampleKernel("index-case-3.py", "tensor_maxpool_kernel_", "maxpool2d", "paper"),
)

# The example files' other kernels: documentation fragments with no result to check.
NOT_JUDGED: dict[str, str] = {
    "layout-violation.py": "breaks the partition-size rule on purpose (a 256-row tile) and returns nothing",
    "layout-loop.py": "a fragment: decorated with torch_neuronx's nki_jit and reading an undefined name (i_f)",
    "layout-dynamic-loop.py": "a fragment that does not parse (an unclosed parenthesis)",
}
