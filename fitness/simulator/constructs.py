"""The construct table: every name the NKI documentation lists, in both dialects, and what the
emulator does with it, read from the emulator's own modules.

A name is
- exact: the emulator implements its documented semantics (arithmetic in fp32 as the engines
  compute, NumPy's functions where the hardware uses its own tables);
- approximate: it runs, and differs from the documentation in a way the note says (an object
  carries `__nki_emulation__ = ("approximate", how)`, set with fitness.simulator.emulation's
  `emulation`, or the note is in NOTES below);
- refused: the emulator has it and refuses its use as the device does, with the documented
  message (`emulation("refused", message)`);
- unsupported: the emulator lacks it (a kernel using it ends `emu_unsupported_api`).

`python -m fitness.simulator.constructs --write` writes docs/nki-constructs.md from this module;
tests/simulator/test_constructs.py fails when the committed page and the code disagree.

The names are those of the API reference's listings (autosummary entries, the data types of
"Supported Data Types" and, current only, the `tile_size` attributes) of the AWS Neuron SDK
documentation (github.com/aws-neuron/aws-neuron-sdk): for the current dialect `nki/api/*.rst` at
commit 81ce03a (NKI 0.6, Neuron 2.32/2.33), for the legacy dialect `general/nki/api/*.rst` at
commit 0521004 (Neuron 2.26, the last release documenting `neuronxcc.nki`).
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .dialect import ROOTS
from .emulation import APPROXIMATE, ATTRIBUTE, EXACT, REFUSED, UNSUPPORTED
from .runner import install

# The emulator's package of the documentation's `nki` in each dialect.
PACKAGE = {"current": ROOTS["current"], "legacy": f"{ROOTS['legacy']}.nki"}

RUNS = (EXACT, APPROXIMATE)          # what the coverage figures count

SOURCES = {
    "current": "NKI 0.6 (Neuron 2.32/2.33): aws-neuron-sdk nki/api/*.rst at 81ce03a",
    "legacy": "neuronxcc.nki (Neuron 2.26): aws-neuron-sdk general/nki/api/*.rst at 0521004",
}

# The documented names, by dialect and documented module (identifiers only, as the listings give them).
DOCUMENTED: dict[str, dict[str, tuple[str, ...]]] = {
    "current": {
        "nki": ("jit", "simulate"),
        "nki.language": (
            "NkiTensor", "abs", "abs_max", "abs_min", "add", "affine_range", "all", "arctan", "bfloat16",
            "bitwise_and", "bitwise_or", "bitwise_xor", "bool_", "broadcast_to", "bypass", "ceil", "copy",
            "cos", "device_print", "dropout", "ds", "dynamic_range", "empty_like", "equal", "erf", "erf_dx",
            "exp", "expand_dims", "float16", "float32", "float4_e2m1fn_x4", "float8_e4m3", "float8_e4m3fn",
            "float8_e4m3fn_x4", "float8_e5m2", "float8_e5m2_x4", "float8_e8m0fnu", "fori_loop", "full",
            "gather_flattened", "gelu", "gelu_apprx_sigmoid", "gelu_apprx_sigmoid_dx", "gelu_apprx_tanh",
            "gelu_dx", "greater", "greater_equal", "hbm", "int16", "int32", "int8", "invert", "is_hbm",
            "is_on_chip", "is_psum", "is_sbuf", "left_shift", "less", "less_equal", "load", "load_transpose2d",
            "log", "logical_and", "logical_not", "logical_or", "logical_xor", "matmul", "max", "maximum",
            "mean", "min", "minimum", "mish", "multiply", "ndarray", "no_reorder", "not_equal", "num_programs",
            "ones", "power", "prelu", "private_hbm", "prod", "program_id", "program_ndim", "psum", "rand",
            "random_seed", "reciprocal", "relu", "right_shift", "rms_norm", "rsqrt", "sbuf", "sequential_range",
            "shared_constant", "shared_hbm", "shared_identity_matrix", "sigmoid", "sign", "silu", "silu_dx",
            "sin", "softmax", "softplus", "sqrt", "square", "static_range", "store", "subtract", "sum", "tanh",
            "tfloat32", "tile_size.bn_stats_fmax", "tile_size.gemm_moving_fmax",
            "tile_size.gemm_stationary_fmax", "tile_size.pmax", "tile_size.psum_bank_fmax",
            "tile_size.psum_bank_fmax_bytes", "tile_size.psum_fmax", "tile_size.psum_min_align",
            "tile_size.psum_num_banks", "tile_size.sbuf_fmax", "tile_size.sbuf_fmax_bytes",
            "tile_size.sbuf_min_align", "tile_size.sbuf_size_bytes", "tile_size.total_available_sbuf_size",
            "transpose", "uint16", "uint32", "uint8", "var", "where", "while_loop", "zeros", "zeros_like",
        ),
        "nki.isa": (
            "NkiInstruction", "VirtualRegister", "activate2", "activation", "activation_reduce",
            "affine_select", "bn_aggr", "bn_stats", "core_barrier", "dge_mode", "dma_compute", "dma_copy",
            "dma_engine", "dma_transpose", "dropout", "engine", "exponential", "get_nc_version", "iota",
            "local_gather", "matmul_perf_mode", "max8", "memset", "nc_find_index8", "nc_match_replace8",
            "nc_matmul", "nc_matmul_mx", "nc_n_gather", "nc_stream_shuffle", "nc_transpose", "nc_version",
            "nonzero_with_count", "oob_mode", "quantize_mx", "rand2", "rand_get_state", "rand_set_state",
            "range_select", "reciprocal", "reduce_cmd", "register_alloc", "register_load", "register_move",
            "register_store", "rng", "scalar_tensor_tensor", "select_reduce", "sendrecv", "sequence_bounds",
            "set_rng_seed", "tensor_copy", "tensor_copy_predicated", "tensor_partition_reduce", "tensor_reduce",
            "tensor_scalar", "tensor_scalar_cumulative", "tensor_scalar_reduce", "tensor_tensor",
            "tensor_tensor_scan", "topk",
        ),
        "nki.collectives": (
            "ReplicaGroup", "all_gather", "all_gather_v", "all_reduce", "all_to_all", "all_to_all_v",
            "collective_permute", "collective_permute_implicit",
            "collective_permute_implicit_current_processing_rank_id", "collective_permute_implicit_reduce",
            "rank_id", "reduce_scatter",
        ),
    },
    "legacy": {
        "nki": ("baremetal", "benchmark", "jit", "profile", "simulate_kernel", "tensor"),
        "nki.language": (
            "abs", "add", "affine_range", "all", "all_reduce", "arange", "arctan", "atomic_rmw", "bfloat16",
            "bitwise_and", "bitwise_or", "bitwise_xor", "bool_", "broadcast_to", "ceil", "copy", "cos",
            "device_print", "divide", "dropout", "ds", "empty_like", "equal", "erf", "erf_dx", "exp",
            "expand_dims", "float16", "float32", "float8_e4m3", "float8_e5m2", "floor", "fmod", "fp32", "full",
            "gather_flattened", "gelu", "gelu_apprx_sigmoid", "gelu_apprx_tanh", "gelu_dx", "greater",
            "greater_equal", "hbm", "int16", "int32", "int8", "invert", "left_shift", "less", "less_equal",
            "load", "load_transpose2d", "log", "logical_and", "logical_not", "logical_or", "logical_xor",
            "loop_reduce", "matmul", "max", "maximum", "mean", "mgrid", "min", "minimum", "mish", "mod",
            "multiply", "nc", "ndarray", "negative", "not_equal", "num_programs", "ones", "par_dim", "power",
            "private_hbm", "prod", "program_id", "program_ndim", "psum", "rand", "random_seed", "reciprocal",
            "relu", "right_shift", "rms_norm", "rsqrt", "sbuf", "sequential_range", "shared_constant",
            "shared_hbm", "shared_identity_matrix", "sigmoid", "sign", "silu", "silu_dx", "sin", "softmax",
            "softplus", "spmd_dim", "sqrt", "square", "static_range", "store", "subtract", "sum", "tan", "tanh",
            "tfloat32", "tile_size", "transpose", "trunc", "uint16", "uint32", "uint8", "var", "where", "zeros",
            "zeros_like",
        ),
        "nki.isa": (
            "activation", "activation_reduce", "affine_select", "bn_aggr", "bn_stats", "dge_mode", "dma_copy",
            "dma_transpose", "dropout", "engine", "get_nc_version", "iota", "local_gather", "max8", "memset",
            "nc_find_index8", "nc_match_replace8", "nc_matmul", "nc_stream_shuffle", "nc_transpose",
            "nc_version", "range_select", "reciprocal", "reduce_cmd", "scalar_tensor_tensor", "select_reduce",
            "sequence_bounds", "tensor_copy", "tensor_copy_dynamic_dst", "tensor_copy_dynamic_src",
            "tensor_copy_predicated", "tensor_partition_reduce", "tensor_reduce", "tensor_scalar",
            "tensor_scalar_reduce", "tensor_tensor", "tensor_tensor_scan",
        ),
        "nki.compiler": (
            "enable_stack_allocator", "force_auto_alloc", "psum.alloc", "psum.auto_alloc", "psum.mod_alloc",
            "sbuf.alloc", "sbuf.auto_alloc", "sbuf.mod_alloc", "skip_middle_end_transformations",
        ),
    },
}

# Notes of names whose emulator objects cannot carry `__nki_emulation__` (numbers, dtypes, shared
# objects): (dialect, documented qualified name) -> (status, how).
NOTES: dict[tuple[str, str], tuple[str, str]] = {
    ("legacy", "nki.isa.reduce_cmd"): (
        APPROXIMATE, "ScalarE's per-partition accumulator registers with idle/reset/reduce/reset_reduce; "
                     "`reset` with a reduce op other than add starts at that op's identity (the docs say zero); "
                     "a masked activation with a reduce_cmd is refused (the docs do not say what it does)"),
    ("legacy", "nki.isa.tensor_scalar_reduce"): (
        APPROXIMATE, "VectorE, one arithmetic op0, all free axes reduced; reduce_op=subtract and masks are refused "
                     "(their order and starting value are not documented), reverse0 is refused as the docs say"),
    ("legacy", "nki.compiler.sbuf.mod_alloc"): (
        APPROXIMATE, "placed tensors alias real SBUF bytes and rotate over their tiles; sbuf_min_align (undocumented) "
                     "is not enforced; a lifetime conflict the hardware would compute wrongly is refused"),
    ("legacy", "nki.baremetal"): (
        APPROXIMATE, "runs the kernel once on the emulator and returns its outputs; there is no device, so no NEFF or "
                     "artifacts are written (save_neff_name, save_trace_name, additional_compile_opt are accepted and "
                     "ignored)"),
    ("legacy", "nki.benchmark"): (
        APPROXIMATE, "runs the kernel once on the emulator (warmup and iters are not repeated); its latency is the "
                     "performance model's estimate of the trace, not a timed run"),
    ("legacy", "nki.profile"): (
        APPROXIMATE, "runs the kernel once on the emulator; no profile files are written: the performance model's "
                     "estimate of the trace is the profile (what model-check compares with neuron-profile)"),
    ("legacy", "nki.simulate_kernel"): (
        EXACT, "runs the kernel on the emulator, as the SDK runs it on its CPU simulator; the emulator also checks the "
               "engine and memory rules the SDK's simulator leaves to the compiler"),
    ("legacy", "nki.compiler.sbuf.alloc"): (
        APPROXIMATE, "as sbuf.mod_alloc, with the allocation function the kernel gives"),
    ("legacy", "nki.compiler.psum.mod_alloc"): (
        APPROXIMATE, "placed tiles are views of PSUM banks; an accumulation group starts with an overwrite where its "
                     "own tile has not written yet; interleaved groups are refused ([SCH713])"),
    ("legacy", "nki.compiler.psum.alloc"): (
        APPROXIMATE, "as psum.mod_alloc, with the allocation function the kernel gives"),
}

@dataclass(frozen=True)
class Row:
    dialect: str
    name: str          # the documented qualified name, e.g. "nki.isa.bn_stats"
    status: str
    note: str = ""

    @property
    def module(self) -> str:
        """The documented module the name is listed under (DOCUMENTED's key)."""
        return next(m for m, names in DOCUMENTED[self.dialect].items() if self.name[len(m) + 1:] in names
                    and self.name.startswith(m + "."))


def _lookup(dialect: str, qualified: str) -> tuple[bool, Any]:
    """(found, object) of a documented name in the installed emulator modules of `dialect`."""
    install(dialect)   # the emulator's stand-in modules
    root = PACKAGE[dialect]
    parts = qualified.split(".")[1:]
    for split in range(len(parts), -1, -1):     # the longest importable module prefix
        name = ".".join([root, *parts[:split]])
        try:
            obj = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a stand-in refuses unknown submodules in its own way
            continue
        for attr in parts[split:]:
            try:
                obj = getattr(obj, attr)
            except Exception:  # noqa: BLE001 - the stand-ins raise their own errors for unknown names
                return False, None
        return True, obj
    return False, None


def status(dialect: str, qualified: str) -> Row:
    """The table's row of one documented name (`nki.isa.bn_stats`, in the documentation's spelling)."""
    found, obj = _lookup(dialect, qualified)
    if not found:
        return Row(dialect, qualified, UNSUPPORTED, "emu_unsupported_api: not supported by the NKI emulator")
    note = NOTES.get((dialect, qualified)) or getattr(obj, ATTRIBUTE, None)
    if note is not None:
        return Row(dialect, qualified, note[0], note[1])
    return Row(dialect, qualified, EXACT)


def rows(dialect: str | None = None) -> list[Row]:
    """Every documented name of `dialect` (both when None), in the documentation's order of modules."""
    out = []
    for d in ([dialect] if dialect else list(DOCUMENTED)):
        for module, names in DOCUMENTED[d].items():
            out += [status(d, f"{module}.{n}") for n in names]
    return out


def coverage(table: list[Row]) -> dict[tuple[str, str], tuple[int, int]]:
    """(runs, documented) per (dialect, module), and per (dialect, "all")."""
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for row in table:
        for key in ((row.dialect, row.module), (row.dialect, "all")):
            runs, total = out.get(key, (0, 0))
            out[key] = (runs + (row.status in RUNS), total + 1)
    return out


def lookup(dialect: str, names: list[str]) -> tuple[list[str], list[str]]:
    """(unsupported, approximate) among `names` (documented spellings, `nki.isa.x`): what a user's
    kernel uses that the emulator lacks or only approximates (the `check` command)."""
    unsupported, approximate = [], []
    for name in names:
        row = status(dialect, name)
        if row.status == UNSUPPORTED:
            unsupported.append(name)
        elif row.status == APPROXIMATE:
            approximate.append(name)
    return unsupported, approximate


def markdown() -> str:
    """docs/nki-constructs.md."""
    table = rows()
    cov = coverage(table)
    lines = ["# NKI constructs in the emulator", "",
             "Generated by `python -m fitness.simulator.constructs --write` from the emulator's modules "
             "(fitness/simulator/constructs.py); `tests/simulator/test_constructs.py` fails when this page and "
             "the code disagree. Statuses: **exact** (the documented semantics, in fp32 as the engines compute), "
             "**approximate** (it runs; the note says how it differs), **refused** (the device refuses it, and so "
             "does the emulator, with the message given), **unsupported** (the emulator lacks it).", "",
             "## Coverage", "", "| dialect | module | exact or approximate | documented |", "|---|---|---|---|"]
    for (dialect, module), (runs, total) in sorted(cov.items(), key=lambda kv: (kv[0][0], kv[0][1] == "all", kv[0][1])):
        lines.append(f"| {dialect} | {module} | {runs} ({100 * runs / total:.0f}%) | {total} |")
    for dialect in DOCUMENTED:
        lines += ["", f"## {dialect.capitalize()} dialect", "", f"Names from {SOURCES[dialect]}.", "",
                  "| name | status | note |", "|---|---|---|"]
        for row in table:
            if row.dialect == dialect:
                lines.append(f"| `{row.name}` | {row.status} | {row.note.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


PAGE = Path(__file__).resolve().parents[2] / "docs" / "nki-constructs.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fitness.simulator.constructs",
                                     description="The table of NKI constructs the emulator runs.")
    parser.add_argument("--write", action="store_true", help=f"write {PAGE.relative_to(PAGE.parents[1])}")
    args = parser.parse_args(argv)
    text = markdown()
    if args.write:
        PAGE.write_text(text)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
