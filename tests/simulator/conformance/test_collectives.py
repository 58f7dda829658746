"""`nki.collectives` with one emulated rank: over a replica group of one rank each collective is
the identity or a copy (all_reduce / all_gather / reduce_scatter / all_to_all of one rank, a ring
of one, a permutation pair (r, r)), checked against NumPy; larger groups, other ranks and the
documented operand rules are refused at the kernel line; every record is priced as a DMA."""

from __future__ import annotations

import numpy as np
import pytest

from fitness.simulator import errors, run_kernel
from fitness.simulator.perf import estimate

HEAD = ("import nki\nimport nki.language as nl\nimport nki.isa as nisa\nimport nki.collectives as ncc\n"
        "import numpy as np\n\n")
RNG = np.random.default_rng(12)


def kernel(call: str, memory: str = "nl.shared_hbm", setup: str = "") -> str:
    """x in HBM (or copied to an SBUF tile), `call` writes `y`, returned."""
    if memory == "nl.sbuf":
        prep = ("    s = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)\n    nisa.dma_copy(dst=s, src=x)\n"
                "    d = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)\n")
        tail = "    nisa.dma_copy(dst=out, src=d)\n"
    else:
        prep = "    s = x\n    d = out\n"
        tail = ""
    return (HEAD + "@nki.jit\ndef kernel(x, x2):\n    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
            + prep + setup + f"    {call}\n" + tail + "    return out\n")


def run(body: str, *args):
    x = RNG.standard_normal((16, 32)).astype(np.float32)
    x2 = RNG.standard_normal((16, 32)).astype(np.float32)
    return run_kernel(body, [x, x2] if not args else list(args)), x, x2


ONE = "ncc.ReplicaGroup([[0]])"


@pytest.mark.parametrize("call, memory", [
    (f"ncc.all_reduce(srcs=[s], dsts=[d], replica_group={ONE}, op=nl.add)", "nl.shared_hbm"),
    (f"ncc.all_reduce(srcs=[s], dsts=[d], replica_group={ONE}, op=nl.maximum)", "nl.sbuf"),
    (f"ncc.all_gather(srcs=[s], dsts=[d], replica_group={ONE}, collective_dim=0)", "nl.shared_hbm"),
    (f"ncc.all_gather(srcs=[s], dsts=[d], replica_group={ONE}, collective_dim=1)", "nl.sbuf"),
    (f"ncc.reduce_scatter(srcs=[s], dsts=[d], replica_group={ONE}, collective_dim=0, op=nl.minimum)", "nl.sbuf"),
    (f"ncc.all_to_all(srcs=[s], dsts=[d], replica_group={ONE}, collective_dim=0)", "nl.shared_hbm"),
    ("ncc.collective_permute(srcs=[s], dsts=[d], source_target_pairs=[(0, 0)])", "nl.shared_hbm"),
    (f"ncc.collective_permute_implicit(srcs_by_channel=[[s]], dsts_by_channel=[[d]], replica_group={ONE})",
     "nl.sbuf"),
])
def test_a_collective_over_one_rank_is_a_copy_priced_as_a_dma(call, memory):
    result, x, _ = run(kernel(call, memory))
    np.testing.assert_array_equal(result.outputs, x)
    assert estimate(result.trace).latency_ms > 0
    assert call.split("(")[0] in [i.op for i in result.trace.instrs]


@pytest.mark.parametrize("op, fn", [("nl.add", np.add), ("nl.maximum", np.maximum), ("nl.minimum", np.minimum)])
def test_a_ring_of_one_reduces_its_own_sources(op, fn):
    setup = "    s2 = x2\n"
    call = (f"ncc.collective_permute_implicit_reduce(srcs0_by_channel=[[s]], srcs1_by_channel=[[s2]], "
            f"dsts_by_channel=[[d]], replica_group={ONE}, op={op})")
    result, x, x2 = run(kernel(call, setup=setup))
    np.testing.assert_allclose(result.outputs, fn(x, x2), rtol=1e-6)
    assert estimate(result.trace).latency_ms > 0


def test_rank_ids_are_the_running_programs():
    body = (HEAD + "@nki.jit\ndef kernel(x, x2):\n    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
            f"    r = ncc.rank_id() + ncc.collective_permute_implicit_current_processing_rank_id(3, {ONE})\n"
            "    nisa.dma_copy(dst=out, src=x)\n    t = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)\n"
            "    nisa.memset(dst=t, value=float(r) + 5.0)\n    nisa.dma_copy(dst=out[0:1, 0:1], src=t)\n"
            "    return out\n")
    result, x, _ = run(body)
    assert result.outputs[0, 0] == 5.0 and np.array_equal(result.outputs[1:], x[1:])


@pytest.mark.parametrize("call, err, words", [
    ("ncc.all_reduce(srcs=[s], dsts=[d], replica_group=ncc.ReplicaGroup([[0, 1]]), op=nl.add)",
     errors.UnsupportedApiError, "over the ranks [0, 1] is not supported"),
    (f"ncc.all_reduce(srcs=[s], dsts=[d], replica_group={ONE}, op=nl.multiply)",
     errors.UnsupportedOpError, "must be nl.add, nl.minimum or nl.maximum"),
    (f"ncc.all_gather(srcs=[s], dsts=[d], replica_group={ONE}, collective_dim=1)",
     errors.OperandTypeError, "'collective_dim' of 'ncc.all_gather' must be one of [0] for HBM"),
    ("ncc.collective_permute(srcs=[s], dsts=[d], source_target_pairs=[(0, 1)])",
     errors.UnsupportedApiError, "reaches another rank"),
    (f"ncc.all_reduce(srcs=[s], dsts=[d2], replica_group={ONE}, op=nl.add)",
     errors.ShapeMismatchError, "the shapes must be the same"),
    (f"ncc.all_gather_v(srcs=[s], dsts=[d], replica_group={ONE}, metadata_tensor=s)",
     errors.UnsupportedApiError, "needs rank lists of 4 ranks"),
    ("ncc.all_reduce(srcs=[s], dsts=[d], replica_group=ncc.ReplicaGroup([[0], [0]]), op=nl.add)",
     errors.OperandTypeError, "rank 0 is in two rank lists"),
])
def test_what_one_rank_cannot_model_and_the_documented_rules_are_refused_at_the_line(call, err, words):
    setup = "    d2 = nl.ndarray((8, 32), dtype=x.dtype, buffer=nl.shared_hbm)\n"
    with pytest.raises(err) as info:
        run(kernel(call, setup=setup))
    assert str(info.value).startswith("kernel.py:") and words in str(info.value), str(info.value)


def test_a_collective_mixing_hbm_and_sbuf_is_refused():
    setup = "    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)\n"
    with pytest.raises(errors.UnsupportedMemoryError, match="must all be on HBM or all on SBUF, not both"):
        run(kernel(f"ncc.all_reduce(srcs=[s], dsts=[t], replica_group={ONE}, op=nl.add)", setup=setup))


def test_constants_and_dtype_of_the_nki_namespace():
    body = (HEAD + "from nki.isa.constants import oob_mode, dge_mode\nfrom nki.isa import constants as c\n\n"
            "@nki.jit\ndef kernel(x, x2, dtype: nki.dtype = nl.float32):\n"
            "    assert c.dge_mode is nisa.dge_mode and oob_mode is nisa.oob_mode\n"
            "    out = nl.ndarray(x.shape, dtype=dtype, buffer=nl.shared_hbm)\n"
            "    nisa.dma_copy(dst=out, src=x)\n    return out\n")
    result, x, _ = run(body)
    np.testing.assert_array_equal(result.outputs, x)


def test_nl_bypass_skips_a_stage_and_is_no_function():
    body = (HEAD + "@nki.jit\ndef kernel(x, x2):\n    s = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)\n"
            "    nisa.dma_copy(dst=s, src=x)\n    r = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)\n"
            "    nisa.activate2(dst=r, op=nl.exp, data=s, imm0=2.0, imm1=0.0, op0=nl.multiply, op1=nl.bypass)\n"
            "    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)\n"
            "    nisa.dma_copy(dst=out, src=r)\n    return out\n")
    result, x, _ = run(body)
    np.testing.assert_allclose(result.outputs, np.exp(2.0 * x), rtol=2e-3)
    with pytest.raises(errors.OperandTypeError, match="nl.bypass is an operator"):
        run(body.replace("    nisa.activate2(", "    y = nl.bypass(s)\n    nisa.activate2("))
