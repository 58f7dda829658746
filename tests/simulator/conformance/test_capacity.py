"""On-chip capacity per target (core.capacity): the per-tile SBUF/PSUM limits, the operands of
one instruction fitting together, and the tiles live at once (spilled by default, as the
compiler does; refused with spills=False), in both dialects."""

from __future__ import annotations

import numpy as np
import pytest

from fitness.simulator import errors, run_kernel
from fitness.simulator.core import capacity as C
from fitness.simulator.perf.hardware import hardware
from fitness.simulator.runner import capacity

TARGETS = ("trn1", "trn2", "trn3")
USABLE = {t: hardware(t).sbuf_usable_bytes_per_partition for t in TARGETS}

LEGACY = """\
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa

@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
"""

CURRENT = """\
import nki
import nki.language as nl
import nki.isa as nisa

@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
"""


def kernel(head: str, body: str) -> str:
    return head + "".join(f"    {line}\n" for line in body.strip("\n").splitlines()) + "    return out\n"


def line_of(src: str, marker: str = "# <-") -> int:
    return next(i for i, text in enumerate(src.splitlines(), 1) if marker in text)


def test_targets_capacity_comes_from_the_hardware_facts():
    assert USABLE == {"trn1": 176 * 1024, "trn2": 208 * 1024, "trn3": 240 * 1024}
    cap = capacity("trn2")
    assert (cap.partitions, cap.psum_bank_bytes, cap.psum_banks) == (128, 2048, 8)
    assert capacity(None) == C.DEFAULT and C.DEFAULT.sbuf_usable_bytes == 176 * 1024


# --- one tile ---------------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("head", [LEGACY, CURRENT], ids=["legacy", "current"])
def test_sbuf_tile_just_under_and_just_over_the_target_limit(target, head):
    n = USABLE[target] // 4
    copy = ("t = nl.load(x)" if head is LEGACY else
            "t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)\nnisa.dma_copy(dst=t, src=x)")
    store = "nl.store(out, value=t)" if head is LEGACY else "nisa.dma_copy(dst=out, src=t)"
    src = kernel(head, f"{copy}\n{store}")
    x = np.random.default_rng(0).standard_normal((2, n), dtype=np.float32)
    np.testing.assert_array_equal(run_kernel(src, [x], target=target).outputs, x)
    with pytest.raises(errors.SbufPartitionOverflowError) as info:
        run_kernel(src, [np.zeros((2, n + 1), np.float32)], target=target)
    msg = str(info.value)
    assert f"{4 * n + 4} bytes per partition" in msg and f"{USABLE[target]} usable bytes" in msg and target in msg


def test_a_200_kib_tile_fits_trn2_not_trn1_and_the_layout_cache_keeps_them_apart():
    # an instruction result (anonymous tile) of 200 KiB per partition
    src = kernel(LEGACY, "t = nl.load(x)\nu = nl.exp(t)\nnl.store(out, value=u)")
    x = np.random.default_rng(1).standard_normal((2, 200 * 1024 // 4), dtype=np.float32)
    np.testing.assert_allclose(run_kernel(src, [x], target="trn2").outputs, np.exp(x), rtol=1e-6)
    with pytest.raises(errors.SbufPartitionOverflowError, match="on trn1"):
        run_kernel(src, [x], target="trn1")


@pytest.mark.parametrize("target", TARGETS)
def test_legacy_psum_tile_is_one_bank_on_every_target(target):
    ok = kernel(LEGACY, "p = nl.zeros((128, 512), dtype=np.float32, buffer=nl.psum)\n"
                        "nl.store(out, value=nl.copy(p))")
    x = np.ones((128, 512), np.float32)
    np.testing.assert_array_equal(run_kernel(ok, [x], target=target).outputs, np.zeros_like(x))
    over = kernel(LEGACY, "p = nl.zeros((128, 513), dtype=np.float32, buffer=nl.psum)  # <-\n"
                          "nl.store(out, value=nl.copy(p))")
    with pytest.raises(errors.PsumBankOverflowError, match="2052 bytes per partition") as info:
        run_kernel(over, [np.ones((128, 513), np.float32)], target=target)
    assert info.value.line == line_of(over)


# --- one instruction ------------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_operands_of_one_instruction_must_fit_together(target):
    """`u = t + s` with t and s used again later needs all three in SBUF at once (no spilling
    an operand while the instruction runs): at the limit it runs, 12 bytes over it is refused."""
    third = USABLE[target] // 12   # fp32 elements of a third of the usable bytes
    src = kernel(LEGACY, "t = nl.load(x[0])\ns = nl.load(x[1])\nu = nl.add(t, s)  # <-\n"
                         "nl.store(out[0], value=u)\nnl.store(out[1], value=t)\nnl.store(out[2], value=s)")
    x = np.random.default_rng(2).standard_normal((3, 4, third), dtype=np.float32)
    np.testing.assert_allclose(run_kernel(src, [x], target=target).outputs, np.stack([x[0] + x[1], x[0], x[1]]),
                               rtol=1e-6)
    with pytest.raises(errors.SbufCapacityError) as info:
        run_kernel(src, [np.zeros((3, 4, third + 1), np.float32)], shape_only=False, target=target)
    e = info.value
    assert e.code == "err_sbuf_capacity" and e.line == line_of(src)
    msg = str(e)
    assert f"need {12 * third + 12} bytes per partition" in msg and f"{USABLE[target]} usable bytes" in msg
    # the operands' allocation sites are named: the loads (lines 9, 10) and the add (line 11)
    for line in (9, 10, 11):
        assert f"kernel.py:{line} sbuf [4, {third + 1}] float32 ({4 * third + 4} B/partition)" in msg, msg


def test_a_result_may_take_the_storage_of_the_operand_it_consumes():
    """`u = exp(t)` where t is not used again: u can be written over t, so two tiles of 60% of
    SBUF fit; when t is still used afterwards they do not."""
    n = USABLE["trn1"] * 6 // 10 // 4
    x = np.random.default_rng(8).standard_normal((2, n), dtype=np.float32)
    consumed = kernel(LEGACY, "t = nl.load(x)\nu = nl.exp(t)\nnl.store(out, value=u)")
    np.testing.assert_allclose(run_kernel(consumed, [x]).outputs, np.exp(x), rtol=1e-6)
    kept = kernel(LEGACY, "t = nl.load(x)\nu = nl.exp(t)  # <-\nnl.store(out, value=u)\nnl.store(out, value=t)")
    with pytest.raises(errors.SbufCapacityError, match="which must be resident together") as info:
        run_kernel(kept, [x], shape_only=False)
    assert info.value.line == line_of(kept)


# --- tiles live at once -----------------------------------------------------------------------------

# Three tiles loaded first and stored in reverse: all three live when the last one arrives,
# while no instruction touches more than one of them.
THREE_LIVE = """
a = nl.load(x[0])
b = nl.load(x[1])
c = nl.load(x[2])  # <-
nl.store(out[2], value=c)
nl.store(out[1], value=b)
nl.store(out[0], value=a)
"""

THREE_LIVE_CURRENT = """
a = nl.ndarray(x.shape[1:], dtype=x.dtype, buffer=nl.sbuf)
b = nl.ndarray(x.shape[1:], dtype=x.dtype, buffer=nl.sbuf)
c = nl.ndarray(x.shape[1:], dtype=x.dtype, buffer=nl.sbuf)  # <-
nisa.dma_copy(dst=a, src=x[0])
nisa.dma_copy(dst=b, src=x[1])
nisa.dma_copy(dst=c, src=x[2])
nisa.dma_copy(dst=out[2], src=c)
nisa.dma_copy(dst=out[1], src=b)
nisa.dma_copy(dst=out[0], src=a)
"""


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("head,body", [(LEGACY, THREE_LIVE), (CURRENT, THREE_LIVE_CURRENT)],
                         ids=["legacy", "current"])
def test_live_sbuf_over_the_target_is_spilled_or_refused(target, head, body):
    src = kernel(head, body)
    third = USABLE[target] // 12   # fp32 elements of a third of the usable bytes
    x = np.random.default_rng(3).standard_normal((3, 2, third), dtype=np.float32)
    want = x
    # just under (at) the limit: runs, also without spilling
    np.testing.assert_array_equal(run_kernel(src, [x], target=target, spills=False).outputs, want)
    y = np.random.default_rng(4).standard_normal((3, 2, third + 1), dtype=np.float32)
    # just over: the compiler spills (the default), and the peak says by how much ...
    run = run_kernel(src, [y], target=target)
    np.testing.assert_array_equal(run.outputs, y)
    peak, _, live = C.live_peak(run.trace, capacity(target), "sbuf")
    assert peak == 3 * 4 * (third + 1) > USABLE[target] and len(live) == 3
    # ... or, without spilling, it is refused, naming the three sites
    with pytest.raises(errors.SbufCapacityError) as info:
        run_kernel(src, [y], target=target, spills=False, shape_only=False)
    e = info.value
    assert e.line == line_of(src)
    msg = str(e)
    assert f"need {3 * 4 * (third + 1)} bytes per partition" in msg and "live at the peak" in msg
    first = line_of(src, "a = nl")
    for k in range(3):
        assert f"kernel.py:{first + k}" in msg and f"[2, {third + 1}] float32 ({4 * (third + 1)} B/partition)" in msg


ROTATING = """
for i in nl.affine_range(6):
    t = nl.load(x[i])
    u = nl.exp(t)
    nl.store(out[i], value=u)
"""

KEPT = """
buf = nl.ndarray((6, nl.par_dim(2), x.shape[2]), dtype=x.dtype, buffer=nl.sbuf)
for i in nl.affine_range(6):
    buf[i, :, :] = nl.load(x[i])
for i in nl.affine_range(6):
    nl.store(out[i], value=buf[i])
"""

KEPT_CURRENT = """
tiles = []
for i in nl.sequential_range(6):
    t = nl.ndarray(x.shape[1:], dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[i])
    tiles.append(t)
for i in nl.sequential_range(6):
    nisa.dma_copy(dst=out[i], src=tiles[i])
"""


def test_a_loop_site_whose_tile_dies_in_the_iteration_counts_once():
    n = USABLE["trn1"] // 8   # two tiles (t and u) fill SBUF; six iterations would need 6x
    src = kernel(LEGACY, ROTATING)
    x = np.random.default_rng(5).standard_normal((6, 2, n), dtype=np.float32)
    run = run_kernel(src, [x], spills=False)
    np.testing.assert_allclose(run.outputs, np.exp(x), rtol=1e-6)
    assert C.live_peak(run.trace, capacity(None), "sbuf")[0] == 2 * 4 * n


@pytest.mark.parametrize("head,body", [(LEGACY, KEPT), (CURRENT, KEPT_CURRENT)], ids=["legacy", "current"])
def test_tiles_kept_across_iterations_count_each(head, body):
    """The blocks of a tensor (legacy) or a list of tiles (current) filled in one loop and read
    in the next are all live in between."""
    n = USABLE["trn1"] // 4 // 6   # six live tiles just fit
    src = kernel(head, body)
    x = np.random.default_rng(6).standard_normal((6, 2, n), dtype=np.float32)
    run = run_kernel(src, [x], spills=False)
    np.testing.assert_array_equal(run.outputs, x)
    assert C.live_peak(run.trace, capacity(None), "sbuf")[0] == 6 * 4 * n
    with pytest.raises(errors.SbufCapacityError, match=r"x 6 tiles = "):
        run_kernel(src, [np.zeros((6, 2, n + 1), np.float32)], spills=False, shape_only=False)


PSUM_LIVE = """
t = nl.load(x[0])
acc = nl.ndarray(({k}, nl.par_dim(128), 512), dtype=np.float32, buffer=nl.psum)
for i in nl.affine_range({k}):
    acc[i, :, :] = nl.exp(t)
for i in nl.affine_range({k}):
    nl.store(out[i], value=nl.copy(acc[i]))
"""


@pytest.mark.parametrize("target", TARGETS)
def test_live_psum_banks_eight_fit_nine_do_not(target):
    x = np.random.default_rng(9).standard_normal((9, 128, 512), dtype=np.float32)
    ok = kernel(LEGACY, PSUM_LIVE.format(k=8))
    run = run_kernel(ok, [x[:8]], target=target, spills=False)
    np.testing.assert_allclose(run.outputs, np.broadcast_to(np.exp(x[0]), (8, 128, 512)), rtol=1e-6)
    over = kernel(LEGACY, PSUM_LIVE.format(k=9))
    assert C.live_peak(run_kernel(over, [x], target=target).trace, capacity(target), "psum")[0] == 9
    with pytest.raises(errors.PsumCapacityError) as info:
        run_kernel(over, [x], target=target, spills=False, shape_only=False)
    msg = str(info.value)
    assert info.value.code == "err_psum_capacity" and "occupy 9 PSUM banks" in msg
    assert f"kernel.py:{line_of(over, 'acc = nl')} psum [128, 512] float32 (1 bank x 9 tiles = 9 banks)" in msg, msg


def test_current_live_psum_tensors_take_whole_banks():
    body = "\n".join(f"p{k} = nl.ndarray((128, 600), dtype=nl.float32, buffer=nl.psum)\n"
                     f"nisa.memset(dst=p{k}, value={k}.0)" for k in range(5))
    body += "\ns = nl.ndarray((128, 600), dtype=nl.float32, buffer=nl.sbuf)\nnisa.memset(dst=s, value=0.0)\n"
    body += "\n".join(f"nisa.tensor_tensor(dst=s, data1=s, data2=p{k}, op=nl.add)" for k in range(5))
    body += "\nnisa.dma_copy(dst=out, src=s)"
    src = kernel(CURRENT, body)   # five tensors of 2400 bytes: two banks each, ten live
    x = np.zeros((128, 600), np.float32)
    run = run_kernel(src, [x], target="trn3")
    np.testing.assert_array_equal(run.outputs, np.full_like(x, 10.0))
    assert C.live_peak(run.trace, capacity("trn3"), "psum")[0] == 10
    with pytest.raises(errors.PsumCapacityError, match="10 PSUM banks"):
        run_kernel(src, [x], target="trn3", spills=False)


def test_direct_allocation_addresses_follow_the_target():
    src = """\
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.compiler as ncc

@nki.compiler.skip_middle_end_transformations
@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=BASE))
    t[...] = nl.load(x)
    nl.store(out, value=t)
    return out
"""
    x = np.random.default_rng(7).standard_normal((128, 1024), dtype=np.float32)   # 4 KiB per partition
    base = USABLE["trn1"]   # past trn1's usable bytes, inside trn2's
    np.testing.assert_array_equal(run_kernel(src.replace("BASE", str(base)), [x], target="trn2").outputs, x)
    with pytest.raises(errors.DirectAllocationError, match="on trn1"):
        run_kernel(src.replace("BASE", str(base)), [x], target="trn1")


@pytest.mark.parametrize("target, usable", [("trn1", 176 * 1024), ("trn2", 208 * 1024), ("trn3", 240 * 1024)])
def test_tile_size_gives_the_running_targets_sbuf(target, usable):
    """`nl.tile_size`'s SBUF figures are those of the target the kernel runs on (kernels size
    their buffers by them: the NKI Library's `total_available_sbuf_size`)."""
    current = ("import nki\nimport nki.language as nl\nimport nki.isa as nisa\n\n@nki.jit\ndef kernel(x):\n"
               "    n = nl.tile_size.total_available_sbuf_size + nl.tile_size.sbuf_fmax_bytes\n"
               "    out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)\n"
               "    t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)\n"
               "    nisa.memset(dst=t, value=n)\n"
               "    nisa.dma_copy(dst=out, src=t)\n"
               "    return out\n")
    legacy = ("import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n\n@nki.jit\ndef kernel(x):\n"
              "    out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)\n"
              "    nl.store(out, value=nl.full((1, 1), nl.tile_size.total_available_sbuf_size // 128, nl.int32))\n"
              "    return out\n")
    x = np.zeros((1, 1), np.float32)
    def value(src):
        return int(np.asarray(run_kernel(src, [x], target=target).outputs).reshape(-1)[0])
    assert value(current) == 2 * usable
    assert value(legacy) == usable
