"""Knobs found in any kernel: named constants, literal groups, loop splits, candidate values."""

from __future__ import annotations

import numpy as np

from operators import found_knobs as F
from operators.base import Context, Machine
from operators.tuning import Mutation, mutate
SILU_OFFICIAL = "kernels/silu_M4096_N7168_0.py"
ROPE_OFFICIAL = "kernels/rope_single_freq_apply_B1_H64_N4096_D128_0.py"

KERNEL = """import neuronxcc.nki.language as nl

TILE = 512

def kernel(x):
    out = nl.ndarray((128, 4096), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(8):
        t = nl.load(x[nl.arange(128)[:, None], 512 * i + nl.arange(512)[None, :]])
        nl.store(out[nl.arange(128)[:, None], 512 * i + nl.arange(512)[None, :]], t)
    y = x.shape[1] // 2
    return out
"""


def test_named_constants_literals_and_splits_are_found():
    knobs, splits = F.find(KERNEL)
    by = {(k.name, k.value): k for k in knobs}
    assert ("TILE", 512) in by and len(by[("TILE", 512)].sites) == 1
    lit = by[(F.LITERAL, 512)]
    assert len(lit.sites) == 4 and not lit.trip             # 512 * i and arange(512), twice
    assert by[(F.LITERAL, 8)].trip
    assert (F.LITERAL, 2) not in by                         # `// 2` is not a tiling position
    assert [(s.trip.value, s.tile.value) for s in splits] == [(8, 512)]


def test_a_split_keeps_the_product_and_changes_every_site_together():
    moves = F.moves(KERNEL, frozenset({128, 4096}), 128)
    split = next(m for m in moves if {k.value for k, _ in m.values} == {8, 512} and dict(
        (k.value, v) for k, v in m.values)[8] == 16)
    child = F.apply(KERNEL, split)
    assert "nl.affine_range(16)" in child and "256 * i + nl.arange(256)" in child
    assert "TILE = 512" in child                            # the named constant is its own knob
    assert "literal 8 -> 16 and literal 512 -> 256" in split.note


def test_a_loop_scaled_by_a_named_constant_splits_with_it():
    source = """
TILE_N = 512
def kernel(w):
    for n in nl.affine_range(4):  # 2048 / 512
        t = nl.load(w[0:128, n * TILE_N:(n + 1) * TILE_N])
"""
    knobs, splits = F.find(source)
    assert [(s.trip.value, s.tile.name, s.tile.value) for s in splits] == [(4, "TILE_N", 512)]
    move = next(m for m in F.moves(source, frozenset({128, 2048}), 128) if len(m.values) == 2
                and dict((k.name, v) for k, v in m.values)["TILE_N"] == 256)
    child = F.apply(source, move)
    assert "TILE_N = 256" in child and "nl.affine_range(8)" in child
    assert move.note == "literal 4 -> 8 and TILE_N 512 -> 256 (lines 2, 4)"


def test_data_sizes_and_the_partition_tile_move_only_in_splits():
    moves = F.moves(KERNEL, frozenset({128, 4096}), 128)
    single = {(m.values[0][0].name, m.values[0][0].value) for m in moves if len(m.values) == 1}
    assert (F.LITERAL, 128) not in single and (F.LITERAL, 4096) not in single
    assert (F.LITERAL, 8) not in single                     # a trip count alone would cover the data wrongly
    assert ("TILE", 512) in single


def test_candidates_stay_within_the_limit():
    assert F.candidates(512, 4096) == [128, 256, 1024, 2048]
    assert F.candidates(512, 1024) == [128, 256, 1024]
    assert F.candidates(7168, 8192) == [1792, 3584, 4096, 8192]
    assert F.candidates(3, 8192) == [2, 4, 6, 12]


def test_the_official_kernels_tile_sizes_are_knobs(nkibench_dir):
    rope = (nkibench_dir / ROPE_OFFICIAL).read_text()
    notes = [m.note for m in F.moves(rope, frozenset({64, 128, 4096}), 128)]
    assert "tile_size_S 512 -> 1024 (line 31)" in notes and "tile_size_S 512 -> 2048 (line 31)" in notes
    silu = (nkibench_dir / SILU_OFFICIAL).read_text()
    split = [m for m in F.moves(silu, frozenset({4096, 7168}), 128) if len(m.values) == 2]
    assert any("literal 7 -> 14 and literal 1024 -> 512" in m.note for m in split)


def test_mutation_draws_found_knobs_for_a_kernel_without_declared_ones():
    rng = np.random.default_rng(0)
    ctx = Context("p", "", 1, rng, dims=frozenset({128, 4096}))
    notes = {mutate(KERNEL, ctx, rng, Mutation(rewrite_weight=0))[2] for _ in range(40)}
    assert any(n.startswith("TILE 512 ->") for n in notes) and any("literal 512" in n for n in notes)
    assert mutate("X = 1\n", ctx, rng) is None


def test_the_partition_count_comes_from_the_target():
    ctx = Context("p", "", 1, np.random.default_rng(0), dims=frozenset({64}),
                  machine=Machine("t", "c", 256, 1, 1, 1, 1, 1, 1.0, ()))
    moves = F.moves(KERNEL, ctx.dims, ctx.machine.partitions)
    assert max(v for m in moves for _, v in m.values) <= 2048


LIMITED = """import neuronxcc.nki.language as nl
TILE_M = 128
TILE_K = 64
TILE_N = 256
WIDE = 256

def kernel(a, b):
    out = nl.ndarray((1024, 2048), dtype=a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
    half = nl.zeros((nl.par_dim(32), WIDE), dtype=nl.bfloat16, buffer=nl.psum)
    t = nl.load(b[nl.arange(TILE_K)[:, None], nl.arange(512)[None, :]])
    s = nl.ndarray((48, 8), dtype=nl.float32, buffer=nl.sbuf)
    return out
"""


def test_partition_and_psum_sizes_stay_within_the_hardware_limits():
    moves = F.moves(LIMITED, frozenset({1024, 2048}), 128)
    values: dict[tuple[str, int], set[int]] = {}
    for m in moves:
        for k, v in m.values:
            values.setdefault((k.name, k.value), set()).add(v)
    assert values[("TILE_K", 64)] == {16, 32, 128}            # nl.arange(TILE_K)[:, None]: a partition size
    assert values[("TILE_M", 128)] == {32, 64}                # the first dimension of a PSUM tile
    assert values[("TILE_N", 256)] == {64, 128, 512}          # fp32 PSUM free size: one 2 KiB bank
    assert values[("WIDE", 256)] == {64, 128, 512, 1024}      # bf16: 1024 elements in a bank
    assert values[(F.LITERAL, 32)] == {8, 16, 64, 128}        # par_dim(32)
    assert values[(F.LITERAL, 48)] == {12, 24, 32, 64, 96}    # first dimension of an SBUF tile
    assert max(values[(F.LITERAL, 512)]) == 2048              # a free size: up to the largest input dimension


def test_a_split_never_grows_a_tile_past_its_limit():
    source = """
TILE_N = 256
def kernel(w):
    for n in nl.affine_range(8):
        acc = nl.zeros((128, TILE_N), nl.float32, buffer=nl.psum)
        t = nl.load(w[0:128, n * TILE_N:(n + 1) * TILE_N])
"""
    grown = {dict((k.name, v) for k, v in m.values)["TILE_N"] for m in F.moves(source, frozenset({128, 2048}), 128)
             if len(m.values) == 2}
    assert grown == {64, 128, 512}
