"""DMA rewrites (operators/rewrites/dma.py): each applies where its precondition holds (on
small kernels and on official NKIBench kernels), declines where it does not, and keeps the
kernel's results on the emulator in both dialects."""

from __future__ import annotations

import ast

import numpy as np
import pytest

from fitness.simulator import run_kernel
from nkibench.registry import load, make_spec
from operators import rewrites
from operators.rewrites.dma import PARTITION_BUDGET, coalesce_loads, merge_adjacent_loads, privatize_buffer

SILU_OFFICIAL = "kernels/silu_M4096_N7168_0.py"
BMM_OFFICIAL = "kernels/bmm_B16_M4096_K64_N4096_0.py"
MATMUL_OFFICIAL = "kernels/matmul_M4096_N12288_K5120_0.py"
ADAMW_OFFICIAL = "kernels/adamw_M10944_N2048_0.py"

LEGACY = '''import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa


@nki.jit
def kernel(v1):
    v2 = nl.ndarray((128, 512), dtype=np.float32, buffer=nl.shared_hbm)
'''
CURRENT = '''import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def kernel(x):
    M, N = x.shape
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
'''

# silu at the tiny shape (128 x 512): four column tiles loaded by a loop, then computed.
BLOCKS = LEGACY + '''    v3 = nl.ndarray((4, nl.par_dim(128), 128), dtype=np.float32, buffer=nl.sbuf)
    for i0 in nl.affine_range(4):
        v3[i0, nl.arange(128)[:, None], nl.arange(128)[None, :]] = nl.load(v1[nl.arange(128)[:, None], 128 * i0 + nl.arange(128)[None, :]], dtype=np.float32, mask=None)
        ' end loop i0 '
    for i1 in nl.affine_range(4):
        v4 = nisa.activation(op=nl.silu, data=v3[i1, nl.arange(128)[:, None], nl.arange(128)[None, :]])
        nl.store(v2[nl.arange(128)[:, None], 128 * i1 + nl.arange(128)[None, :]], value=v4)
    return v2
'''
# the same with the tile's column offsets on its free dimension, loaded in the computing loop
OFFSETS = LEGACY + '''    v3 = nl.ndarray((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
    for i0 in nl.affine_range(4):
        v3[nl.arange(128)[:, None], 128 * i0 + nl.arange(128)[None, :]] = nl.load(v1[nl.arange(128)[:, None], 128 * i0 + nl.arange(128)[None, :]])
        v4 = nisa.activation(op=nl.silu, data=v3[nl.arange(128)[:, None], 128 * i0 + nl.arange(128)[None, :]])
        nl.store(v2[nl.arange(128)[:, None], 128 * i0 + nl.arange(128)[None, :]], value=v4)
    return v2
'''
SLICES = CURRENT + '''    buf = nl.ndarray((128, N), dtype=x.dtype, buffer=nl.sbuf)
    for n in nl.affine_range(N // 128):
        nisa.dma_copy(dst=buf[0:128, n * 128:(n + 1) * 128], src=x[0:128, n * 128:(n + 1) * 128])
        y = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.sbuf)
        nisa.activation(dst=y, op=nl.silu, data=buf[0:128, n * 128:(n + 1) * 128])
        nisa.dma_copy(dst=out[0:128, n * 128:(n + 1) * 128], src=y)
    return out
'''


def outputs(source: str, problem: str = "silu", shape: str = "tiny") -> np.ndarray:
    p = load(make_spec(problem, shape))
    out = run_kernel(source, p.to_kernel_inputs(p.make_inputs(0))).outputs
    return np.asarray(out[0] if isinstance(out, (tuple, list)) else out)


def same_results(before: str, after: str) -> None:
    np.testing.assert_array_equal(outputs(after), outputs(before))


def test_coalesce_folds_the_block_dimension_and_keeps_results():
    (app,) = coalesce_loads(BLOCKS)
    assert app.note == ("coalesced 4 loads of v1 in the i0 loop (line 11) into one load; "
                        "the block dimension 0 of v3 folded into its free dimensions")
    assert "for i0" not in app.source and "nl.ndarray((nl.par_dim(128), 512)" in app.source
    assert "128 * nl.arange(4)[None, :, None] + nl.arange(128)[None, None, :]" in app.source
    assert "data=v3[nl.arange(128)[:, None], 128 * i1 + nl.arange(128)[None, :]]" in app.source
    same_results(BLOCKS, app.source)


def test_coalesce_folds_a_block_dimension_indexed_by_slices_and_keeps_results():
    source = LEGACY + """    v3 = nl.ndarray((4, nl.par_dim(128), 128), dtype=np.float32, buffer=nl.sbuf)
    for i0 in nl.affine_range(4):
        v3[i0, 0:128, 0:128] = nl.load(v1[0:128, i0 * 128:(i0 + 1) * 128])
    for i1 in nl.affine_range(4):
        v4 = nisa.activation(op=nl.silu, data=v3[i1, 0:128, 0:128])
        nl.store(v2[0:128, i1 * 128:(i1 + 1) * 128], value=v4)
    return v2
"""
    (app,) = coalesce_loads(source)
    assert "    v3[0:128, 0:512] = nl.load(v1[0:128, 0:512])\n" in app.source
    assert "data=v3[0:128, 128 * i1:128 * i1 + 128]" in app.source
    same_results(source, app.source)


def test_coalesce_of_free_dimension_offsets_keeps_the_loop_and_results():
    (app,) = coalesce_loads(OFFSETS)
    assert app.note == "coalesced 4 loads of v1 in the i0 loop (line 11) into one load"
    tree = ast.parse(app.source)
    loop = next(n for n in ast.walk(tree) if isinstance(n, ast.For))
    body = tree.body[-1].body
    assert len(loop.body) == 2 and "nl.load" in ast.unparse(body[body.index(loop) - 1])   # right before the loop
    same_results(OFFSETS, app.source)


def test_coalesce_of_current_dialect_slices_keeps_results():
    (app,) = coalesce_loads(SLICES)
    assert app.note == "coalesced N // 128 loads of x in the n loop (line 11) into one load"
    assert "nisa.dma_copy(dst=buf[0:128, 0:N // 128 * 128], src=x[0:128, 0:N // 128 * 128])" in app.source
    same_results(SLICES, app.source)
    # an integer index of the tile's free dim and of the source's: a slice of both
    ints = SLICES.replace("buf = nl.ndarray((128, N)", "buf = nl.ndarray((128, N // 128, 128)").replace(
        "dst=buf[0:128, n * 128:(n + 1) * 128], src=x[0:128, n * 128:(n + 1) * 128]",
        "dst=buf[0:128, n, 0:128], src=x.reshape((128, N // 128, 128))[0:128, n, 0:128]")
    assert coalesce_loads(ints) == []     # the source is no tensor's name (a view)


def test_coalesce_applies_to_official_nkibench_kernels(nkibench_dir):
    silu = (nkibench_dir / SILU_OFFICIAL).read_text()
    (app,) = coalesce_loads(silu)
    assert app.note.startswith("coalesced 7 loads of v1 in the i1 loop (line 27) into one load")
    assert "v4 = nl.ndarray((32, nl.par_dim(128), 7168)" in app.source
    assert "v4[i0, nl.arange(128)[:, None], 1024 * i1 + 512 * i2 + nl.arange(512)[None, :]]" in app.source
    bmm = (nkibench_dir / BMM_OFFICIAL).read_text()
    notes = sorted(a.note.split(";")[0] for a in coalesce_loads(bmm))
    assert notes == ["coalesced 4 loads of v2 in the i1 loop (line 29) into one load",
                     "coalesced 8 loads of v1 in the i3 loop (line 32) into one load"]
    matmul = (nkibench_dir / MATMUL_OFFICIAL).read_text()
    first = next(a for a in coalesce_loads(matmul) if "in the i2 loop" in a.note)
    assert first.note.startswith("coalesced 8 loads of v2 in the i2 loop (line 30) into one load")
    # the coalesced load now depends on i1 alone: coalescing again folds a second block dim
    again = [a.note for a in coalesce_loads(first.source) if "in the i1 loop" in a.note]
    assert again == ["coalesced 5 loads of v2 in the i1 loop (line 29) into one load; "
                     "the block dimension 1 of v6 folded into its free dimensions"]
    assert coalesce_loads((nkibench_dir / ADAMW_OFFICIAL).read_text()) == []    # every load is masked


def _swap(source: str, old: str, new: str) -> str:
    assert old in source
    return source.replace(old, new)


@pytest.mark.parametrize("source", [
    _swap(BLOCKS, "dtype=np.float32, mask=None)", "mask=(nl.arange(128)[:, None] < 100))"),
    _swap(BLOCKS, "' end loop i0 '", "nl.store(v1[nl.arange(128)[:, None], nl.arange(128)[None, :]], value=v3[0, "
                                    "nl.arange(128)[:, None], nl.arange(128)[None, :]])"),
    _swap(SLICES, "        nisa.dma_copy(dst=buf[0:128, n * 128:(n + 1) * 128], src=x[0:128, n * 128:(n + 1) * 128])",
          "        c = n * 128\n        nisa.dma_copy(dst=buf[0:128, c:c + 128], src=x[0:128, c:c + 128])"),
    _swap(OFFSETS, "v3[nl.arange(128)[:, None], 128 * i0 + nl.arange(128)[None, :]] = ",
          "v3[nl.arange(128)[:, None], nl.arange(128)[None, :]] = "),
    _swap(OFFSETS, "v3[nl.arange(128)[:, None], 128 * i0 + nl.arange(128)[None, :]] = ",
          "v3[nl.arange(128)[:, None], 64 * i0 + nl.arange(128)[None, :]] = "),
    _swap(SLICES, "src=x[0:128, n * 128:(n + 1) * 128]", "src=x[0:128, n * 128:n * 128 + 64]"),
    _swap(SLICES, "src=x[0:128, n * 128:(n + 1) * 128]", "src=x[0:128, n * 256:n * 256 + 128]")
    .replace("buf[0:128, n * 128:(n + 1) * 128]", "buf[0:128, n * 64:n * 64 + 128]", 1),
    _swap(BLOCKS, "nl.ndarray((4, nl.par_dim(128), 128)", "nl.ndarray((4, nl.par_dim(128), 12 * 1024)")
    .replace("nl.arange(128)[None, :]] = nl.load", "nl.arange(12 * 1024)[None, :]] = nl.load"),
], ids=["masked", "loop-writes-source", "reads-what-the-loop-writes", "same-destination-each-iteration",
        "overlapping-destinations", "source-not-the-union", "destination-not-the-union", "over-the-partition-budget"])
def test_coalesce_declines(source):
    assert coalesce_loads(source) == []


def test_the_partition_budget_is_the_performance_models_usable_sbuf():
    from fitness.simulator.perf import TRN1

    assert PARTITION_BUDGET == TRN1.sbuf_usable_bytes_per_partition


ADJACENT_LEGACY = LEGACY + '''    v3 = nl.ndarray((nl.par_dim(128), 512), dtype=np.float32, buffer=nl.sbuf)
    v3[nl.arange(128)[:, None], nl.arange(256)[None, :]] = nl.load(v1[nl.arange(128)[:, None], nl.arange(256)[None, :]])
    v3[nl.arange(128)[:, None], 256 + nl.arange(256)[None, :]] = nl.load(v1[nl.arange(128)[:, None], 256 + nl.arange(256)[None, :]])
    v4 = nisa.activation(op=nl.silu, data=v3)
    nl.store(v2, value=v4)
    return v2
'''
ADJACENT_CURRENT = CURRENT + '''    t = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[0:M, 0:N // 2], src=x[0:M, 0:N // 2])
    y = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[0:M, N // 2:N], src=x[0:M, N // 2:N])
    nisa.activation(dst=y, op=nl.silu, data=t)
    nisa.dma_copy(dst=out, src=y)
    return out
'''


@pytest.mark.parametrize("source, merged", [
    (ADJACENT_LEGACY, "v3[nl.arange(128)[:, None], nl.arange(512)[None, :]] = nl.load(v1[nl.arange(128)[:, None], "
                      "nl.arange(512)[None, :]])"),
    (ADJACENT_CURRENT, "nisa.dma_copy(dst=t[0:M, 0:N], src=x[0:M, 0:N])"),
], ids=["legacy", "current"])
def test_merge_adjacent_loads_makes_one_load_and_keeps_results(source, merged):
    (app,) = merge_adjacent_loads(source)
    assert merged in app.source and app.source.count("load(") + app.source.count("dma_copy(") == \
        source.count("load(") + source.count("dma_copy(") - 1
    assert app.note.startswith("merged the loads of ") and "(adjacent along dimension 1) into one load" in app.note
    same_results(source, app.source)


@pytest.mark.parametrize("source", [
    _swap(ADJACENT_CURRENT, "src=x[0:M, N // 2:N]", "src=x[0:M, N // 2 + 1:N + 1]"),       # a gap in the source
    _swap(ADJACENT_CURRENT, "dst=t[0:M, N // 2:N]", "dst=t[0:M, N // 2 + 1:N + 1]"),       # ... in the destination
    _swap(ADJACENT_CURRENT, "y = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.sbuf)\n",
          "y = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.sbuf)\n    nisa.dma_copy(dst=x[0:M, 0:N], src=y)\n"),
    _swap(ADJACENT_CURRENT, "y = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.sbuf)\n",
          "y = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.sbuf)\n    nisa.tensor_copy(dst=y, src=t)\n"),
    _swap(ADJACENT_LEGACY, "256 + nl.arange(256)[None, :]])\n",
          "256 + nl.arange(256)[None, :]], mask=(nl.arange(128)[:, None] < 100))\n"),
    _swap(ADJACENT_LEGACY, "nl.load(v1[nl.arange(128)[:, None], 256 +", "nl.load(v1[nl.arange(128)[:, None], 128 +"),
], ids=["source-gap", "destination-gap", "source-written-between", "destination-read-between", "masked",
        "not-adjacent"])
def test_merge_adjacent_loads_declines(source):
    assert merge_adjacent_loads(source) == []


def test_merge_adjacent_loads_finds_nothing_to_merge_in_the_official_kernels(nkibench_dir):
    # NKIBench's compiler-written kernels issue one load per region already
    for name in (SILU_OFFICIAL, BMM_OFFICIAL):
        assert merge_adjacent_loads((nkibench_dir / name).read_text()) == []


REUSED_CURRENT = CURRENT + '''    buf = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.sbuf)
    for n in nl.affine_range(N // 128):
        nisa.dma_copy(dst=buf, src=x[0:128, n * 128:(n + 1) * 128])
        y = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.sbuf)
        nisa.activation(dst=y, op=nl.silu, data=buf)
        nisa.dma_copy(dst=out[0:128, n * 128:(n + 1) * 128], src=y)
    return out
'''
REUSED_LEGACY = LEGACY + '''    v3 = nl.ndarray((nl.par_dim(128), 128), dtype=np.float32, buffer=nl.sbuf)
    for i0 in nl.sequential_range(4):
        v3[...] = nl.load(v1[nl.arange(128)[:, None], 128 * i0 + nl.arange(128)[None, :]])
        v4 = nisa.activation(op=nl.silu, data=v3)
        nl.store(v2[nl.arange(128)[:, None], 128 * i0 + nl.arange(128)[None, :]], value=v4)
    return v2
'''


@pytest.mark.parametrize("source, name, loop", [(REUSED_CURRENT, "buf", "n"), (REUSED_LEGACY, "v3", "i0")],
                         ids=["current", "legacy"])
def test_privatize_buffer_allocates_in_the_loop_and_keeps_results(source, name, loop):
    (app,) = privatize_buffer(source)
    assert app.note == (f"allocated {name} (line 10) in each iteration of the {loop} loop (line 11) so that "
                        f"its buffers can rotate")
    body = next(n for n in ast.walk(ast.parse(app.source)) if isinstance(n, ast.For)).body
    assert ast.unparse(body[0]).startswith(f"{name} = nl.ndarray(")
    same_results(source, app.source)


@pytest.mark.parametrize("source", [
    _swap(REUSED_CURRENT, "nisa.dma_copy(dst=buf, src=", "nisa.dma_copy(dst=buf[0:64, 0:128], src="),   # not whole
    _swap(REUSED_CURRENT, "    return out\n", "    nisa.dma_copy(dst=out[0:128, 0:128], src=buf)\n    return out\n"),
    _swap(REUSED_CURRENT, "nisa.dma_copy(dst=buf, src=x[0:128, n * 128:(n + 1) * 128])",
          "nisa.tensor_tensor(dst=buf, data1=buf, data2=buf, op=nl.add)"),                       # reads it first
    _swap(REUSED_CURRENT, "nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.sbuf)\n    for",
          "nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.shared_hbm)\n    for"),                 # not on chip
    _swap(REUSED_CURRENT, "nisa.dma_copy(dst=buf, src=x[0:128, n * 128:(n + 1) * 128])",
          "nisa.nc_matmul(dst=buf, stationary=y, moving=y)"),                                     # accumulates
], ids=["partial-write", "used-after-the-loop", "read-before-written", "hbm", "accumulating"])
def test_privatize_buffer_declines(source):
    assert privatize_buffer(source) == []


def test_privatize_buffer_finds_no_reused_tile_in_the_official_kernels(nkibench_dir):
    for name in (SILU_OFFICIAL, BMM_OFFICIAL, MATMUL_OFFICIAL):
        assert privatize_buffer((nkibench_dir / name).read_text()) == []


def test_the_dma_rewrites_are_registered_and_parse():
    for source, name in ((BLOCKS, "coalesce_loads"), (ADJACENT_CURRENT, "merge_adjacent_loads"),
                         (REUSED_CURRENT, "privatize_buffer")):
        found = rewrites.applications(source)
        assert name in found and all(rewrites.parses(a) for apps in found.values() for a in apps)
