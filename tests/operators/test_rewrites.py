"""Structural rewrites: each applies where its precondition holds, declines where it does not,
and keeps the kernel's results on the emulator (both dialects)."""

from __future__ import annotations

import numpy as np
import pytest

from fitness.simulator import run_kernel
from nkibench.registry import NKI_BASELINES, baseline_path, load, make_spec
from operators import rewrites
from operators.base import Context
from operators.rewrites.engines import move_engine
from operators.rewrites.fuse import fuse_activation
from operators.rewrites.loops import hoist_invariants, interchange
from operators.tuning import Mutation, mutate, region_crossover

MAMBA_OFFICIAL = "kernels/mamba_M7168_C256_S16_0.py"
SILU_OFFICIAL = "kernels/silu_M4096_N7168_0.py"


def outputs(source: str, problem: str, shape: str = "small") -> np.ndarray:
    p = load(make_spec(problem, shape))
    out = run_kernel(source, p.to_kernel_inputs(p.make_inputs(0))).outputs
    return np.asarray(out[0] if isinstance(out, (tuple, list)) else out)


def same_results(before: str, after: str, problem: str, shape: str = "small") -> None:
    np.testing.assert_allclose(outputs(after, problem, shape), outputs(before, problem, shape), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("path", [baseline_path("silu"), NKI_BASELINES / "silu.py"], ids=["legacy", "nki"])
def test_fuse_activation_makes_silu_one_activation_and_keeps_results(path):
    source = path.read_text()
    by_fn = {a.note.split("activation(")[-1].split(")")[0]: a for a in fuse_activation(source)}
    assert set(by_fn) == {"silu", "sigmoid"}
    silu = by_fn["silu"]
    assert "op=nl.silu" in silu.source and "reciprocal" not in silu.source
    assert "into one activation(silu) on lines" in silu.note
    same_results(source, silu.source, "silu")
    same_results(source, by_fn["sigmoid"].source, "silu")


def test_fuse_activation_reads_the_official_kernels_zero_bias_and_drops_the_buffers(nkibench_dir):
    source = (nkibench_dir / SILU_OFFICIAL).read_text()
    silu = next(a for a in fuse_activation(source) if "activation(silu)" in a.note)
    assert "nisa.activation(op=nl.silu, data=v4[" in silu.source
    for gone in ("v6 =", "v7 =", "v8 =", "nisa.reciprocal"):
        assert gone not in silu.source


@pytest.mark.parametrize("source", [
    # the intermediate is read again after the chain
    "import neuronxcc.nki.isa as nisa\nimport neuronxcc.nki.language as nl\n"
    "def kernel(x):\n    e = nisa.activation(op=nl.exp, data=x, scale=-1.0)\n    d = nl.add(e, 1.0)\n"
    "    r = nisa.reciprocal(d)\n    y = nl.multiply(x, r)\n    z = nl.add(e, y)\n    return z\n",
    # exp(+x), not exp(-x)
    "import neuronxcc.nki.isa as nisa\nimport neuronxcc.nki.language as nl\n"
    "def kernel(x):\n    e = nisa.activation(op=nl.exp, data=x)\n    d = nl.add(e, 1.0)\n"
    "    r = nisa.reciprocal(d)\n    y = nl.multiply(x, r)\n    return y\n",
    # the chain runs under two masks
    "import neuronxcc.nki.isa as nisa\nimport neuronxcc.nki.language as nl\n"
    "def kernel(x, m1, m2):\n    e = nisa.activation(op=nl.exp, data=x, scale=-1.0, mask=m1)\n    d = nl.add(e, 1.0, mask=m2)\n"
    "    r = nisa.reciprocal(d, mask=m1)\n    return r\n",
    # the data is overwritten inside the chain
    "import neuronxcc.nki.isa as nisa\nimport neuronxcc.nki.language as nl\n"
    "def kernel(x):\n    e = nisa.activation(op=nl.exp, data=x, scale=-1.0)\n    x = nl.add(x, 1.0)\n"
    "    d = nl.add(e, 1.0)\n    r = nisa.reciprocal(d)\n    y = nl.multiply(x, r)\n    return y\n",
], ids=["read-again", "wrong-sign", "two-masks", "data-overwritten"])
def test_fuse_activation_declines(source):
    assert [a.note for a in fuse_activation(source) if "silu" in a.note] == []


def test_fuse_activation_declines_where_an_intermediate_is_read_again():
    source = ("import neuronxcc.nki.isa as nisa\nimport neuronxcc.nki.language as nl\n"
              "def kernel(x):\n    e = nisa.activation(op=nl.exp, data=x, scale=-1.0)\n    d = nl.add(e, 1.0)\n"
              "    r = nisa.reciprocal(d)\n    y = nl.multiply(x, r)\n    z = nl.add(e, y)\n    return z\n")
    assert fuse_activation(source) == []


def test_interchange_and_hoist_turn_the_official_mamba_loop_nest_inside_out(nkibench_dir):
    source = (nkibench_dir / MAMBA_OFFICIAL).read_text()
    (swapped,) = interchange(source)
    assert swapped.note == "interchanged the loops over i_state and i_channel_tile (lines 26, 29)"
    same_results(source, swapped.source, "mamba", "tiny")
    hoisted = [a for a in hoist_invariants(swapped.source) if "over i_state" in a.note]
    assert len(hoisted) == 1 and hoisted[0].note.startswith("hoisted channel_start, delta_i, u_i, deltaU")
    same_results(source, hoisted[0].source, "mamba", "tiny")
    (before,) = hoist_invariants(source)           # in the original order only b and c rows are invariant
    assert before.note.startswith("hoisted B_i, B_i_bcast, C_i, C_i_bcast out of the loop over i_channel_tile")
    same_results(source, before.source, "mamba", "tiny")


def test_hoist_keeps_a_current_dialect_allocation_with_the_instruction_that_fills_it():
    source = (NKI_BASELINES / "matmul.py").read_text()
    apps = hoist_invariants(source)
    assert apps
    for a in apps:
        same_results(source, a.source, "matmul", "tiny")


def test_loop_rewrites_decline_without_their_precondition():
    source = ("import neuronxcc.nki.isa as nisa\nimport neuronxcc.nki.language as nl\n"
              "def kernel(x, out):\n    for i in nl.affine_range(4):\n        t = nl.load(x[i])\n"
              "        for j in nl.affine_range(i + 1):\n            nl.store(out[i, j], t)\n"
              "    for k in nl.sequential_range(4):\n        for m in nl.affine_range(2):\n            nl.store(out[k, m], x[k])\n")
    assert interchange(source) == []     # the first nest is not perfect, the second loop is sequential
    assert hoist_invariants(source) == []  # t reads i; the stores write memory


def test_move_engine_offers_each_other_engine_and_the_simulator_keeps_results():
    source = (NKI_BASELINES / "silu.py").read_text()
    notes = [a.note for a in move_engine(source)]
    assert any("tensor_tensor" in n and "to gpsimd engine" in n for n in notes)
    assert not any("from vector to vector" in n for n in notes)
    for a in move_engine(source):
        if "tensor_tensor" in a.note:
            assert "engine=nisa.gpsimd_engine" in a.source
            same_results(source, a.source, "silu")
    assert move_engine("import numpy as np\n") == []


def test_rewrite_weights_and_the_rewrite_list_decide_what_a_mutation_draws():
    source = baseline_path("silu").read_text()
    rng = np.random.default_rng(0)
    ctx = Context("silu", "", 1, rng, dims=frozenset({256, 1024}))
    ops = {mutate(source, ctx, rng, Mutation(knob_weight=0))[1] for _ in range(20)}
    assert ops == {"rewrite_mutation"}
    ops = {mutate(source, ctx, rng, Mutation(rewrite_weight=0))[1] for _ in range(20)}
    assert ops == {"tune_mutation"}
    notes = {mutate(source, ctx, rng, Mutation(knob_weight=0, rewrites=("fuse_activation",)))[2] for _ in range(20)}
    assert notes and all(n.startswith("fused ") for n in notes)
    assert set(rewrites.applications(source)) >= {"fuse_activation", "interchange"}


def test_region_crossover_mixes_differing_regions_of_both_parents():
    a = "A = 1\nx\nB = 2\ny\nC = 3\n"
    b = "A = 5\nx\nB = 6\ny\nC = 7\n"
    rng = np.random.default_rng(0)
    seen = {region_crossover(a, b, rng)[0] for _ in range(60)}
    assert a not in seen and b not in seen and len(seen) == 6        # 2^3 mixes less the two parents
    assert region_crossover(a, a.replace("C = 3", "C = 4"), rng) is None


TWO_PASSES = '''import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa


@nki.jit
def kernel(x):
    M, N = x.shape
    out = nl.ndarray((M, N), dtype=x.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((M // 128, nl.par_dim(128), N), dtype=x.dtype, buffer=nl.sbuf)
    for m in nl.affine_range(M // 128):
        buf[m, :, :] = nl.load(x[m * 128:(m + 1) * 128, 0:N])
    for k in nl.affine_range(M // 128):
        y = nisa.activation(op=nl.silu, data=buf[k, :, :])
        nl.store(out[k * 128:(k + 1) * 128, 0:N], value=y)
    return out
'''


def test_merge_and_split_loops_undo_each_other_and_keep_results():
    from operators.rewrites.loops import merge_loops, split_loop

    (merged,) = merge_loops(TWO_PASSES)
    assert merged.note == "merged the loop over k (line 13) into the loop over m (line 11)"
    assert merged.source.count("for ") == 1 and "buf[m, :, :]" in merged.source and "out[m * 128" in merged.source
    same_results(TWO_PASSES, merged.source, "silu")
    splits = split_loop(merged.source)
    assert [s.note for s in splits] == ["split the loop over m (line 11) before line 13"]  # y is read by the store
    same_results(TWO_PASSES, splits[0].source, "silu")
    assert merge_loops(splits[0].source)[0].source == merged.source


def test_merge_and_split_decline_without_their_precondition():
    from operators.rewrites.loops import merge_loops, split_loop

    other_range = TWO_PASSES.replace("for k in nl.affine_range(M // 128)", "for k in nl.affine_range(M // 64)")
    assert merge_loops(other_range) == []
    assert split_loop(TWO_PASSES) == []     # one-statement body, and the loop whose y the store reads


def test_one_vary_call_does_not_make_the_same_child_twice_when_it_can_help_it():
    from operators.base import MUTATION, Parent, Request
    from operators.tuning import TuningOperators

    source = (NKI_BASELINES / "silu.py").read_text()
    ops = TuningOperators(Mutation(knob_weight=0, rewrites=("fuse_activation",)))   # two children possible
    for seed in range(10):
        ctx = Context("silu", "", 1, np.random.default_rng(seed), dims=frozenset({256, 1024}))
        out = ops.vary([Request(MUTATION, (Parent("p", source),))] * 2, ctx)
        assert len({group[0].source for group in out}) == 2


def test_fuse_activation_reads_an_operand_as_the_statement_that_last_wrote_it():
    source = ("import neuronxcc.nki.isa as nisa\nimport neuronxcc.nki.language as nl\n"
              "def kernel(x):\n    e = nisa.activation(op=nl.exp, data=x, scale=-1.0)\n    e = e * 2.0\n"
              "    d = nl.add(e, 1.0)\n    r = nisa.reciprocal(d)\n    return r\n")
    assert fuse_activation(source) == []     # 1 / (1 + 2 exp(-x)) is no sigmoid
    assert [a.note for a in fuse_activation(source.replace("    e = e * 2.0\n", ""))] == [
        "fused activation/add/reciprocal into one activation(sigmoid) on lines 4-6"]


def test_mutations_draw_kernels_the_run_has_not_tried_while_there_are_any():
    from fitness.correctness.normalize import kernel_id
    from operators.base import MUTATION, Parent, Request
    from operators.tuning import TuningOperators

    source = (NKI_BASELINES / "silu.py").read_text()
    ops = TuningOperators(Mutation(knob_weight=0, rewrites=("fuse_activation",)))
    tried = {a.source for a in fuse_activation(source) if "silu)" in a.note}
    for seed in range(6):
        ctx = Context("silu", "", 1, np.random.default_rng(seed), dims=frozenset({256, 1024}),
                      known=frozenset(kernel_id(s) for s in tried))
        (child,) = ops.vary([Request(MUTATION, (Parent("p", source),))], ctx)[0]
        assert child.source not in tried and "sigmoid" in child.note
    ctx = Context("silu", "", 1, np.random.default_rng(0), dims=frozenset({256, 1024}),
                  known=frozenset(kernel_id(a.source) for a in fuse_activation(source)))
    assert ops.vary([Request(MUTATION, (Parent("p", source),))], ctx)[0][0].source   # all tried: still a child
