"""Direct allocation (`ncc.sbuf.mod_alloc` / `alloc`, `ncc.psum.mod_alloc` / `alloc` as `buffer=`):
tensors at explicit addresses share physical bytes as on the hardware, rotate over their
physical tiles, and what the Direct Allocation guide calls errors is refused (NKI Direct
Allocation Developer Guide and the `nki.compiler` API pages, Neuron 2.26)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fitness.simulator import errors, run_kernel
from fitness.simulator.legacy.shim import build_modules
from fitness.simulator.trace import MM, PSUM, SBUF

from .helpers import instrs, nisa, nl, rand, run

ncc = build_modules()["neuronxcc.nki.compiler"]
F32 = np.float32


def test_mod_alloc_follows_the_documented_modulo_formula():
    # the API page's example: (4, par_dim(128), 512) bf16 with num_free_tiles=(2,) alternates 0, 1024
    def kernel(x):
        nl.ndarray((4, nl.par_dim(128), 512), dtype=nl.bfloat16,
                   buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
        nl.ndarray((4, nl.par_dim(128), 512), dtype=np.float32,
                   buffer=ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(2,)))
        nl.ndarray((2, 3, nl.par_dim(128), 128), dtype=np.float32,
                   buffer=ncc.psum.mod_alloc(base_bank=2, num_bank_tiles=(1, 3)))
        out = nl.ndarray((128, 512), dtype=np.float32, buffer=nl.shared_hbm)
        s = nl.ndarray((nl.par_dim(128), 512), dtype=np.float32, buffer=ncc.sbuf.mod_alloc(base_addr=4096))
        s[...] = nl.load(x)
        nl.store(out, value=s)
        return out

    r = run(kernel, rand(128, 512))
    tiles = [p.tiles for p in r.trace.placements.values()]
    assert tiles[0] == {(0,): (0, 0), (1,): (0, 1024), (2,): (0, 0), (3,): (0, 1024)}
    assert tiles[1] == {(0,): (0, 0), (1,): (0, 2048), (2,): (0, 0), (3,): (0, 2048)}        # banks 0 1 0 1
    assert tiles[2] == {(i, j): (0, (2 + j) * 2048) for i in range(2) for j in range(3)}    # banks 2, 3, 4
    assert tiles[3] == {(): (0, 4096)}
    assert [p.memory for p in r.trace.placements.values()] == [SBUF, PSUM, PSUM, SBUF]


def test_rotating_tiles_double_buffer_a_loop():
    # the guide's double buffering: eight logical tiles over two physical ones, each dead
    # before its physical tile comes round again
    x = rand(8, 128, 512, seed=1)

    def kernel(x):
        out = nl.ndarray((8, 128, 512), dtype=np.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((8, nl.par_dim(128), 512), dtype=np.float32,
                       buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
        bias = nl.ndarray((nl.par_dim(128), 1), dtype=np.float32, buffer=ncc.sbuf.mod_alloc(base_addr=4096))
        e = nl.ndarray((8, nl.par_dim(128), 512), dtype=np.float32,
                       buffer=ncc.sbuf.mod_alloc(base_addr=8192, num_free_tiles=(2,)))
        bias[...] = 0.0
        for i in nl.affine_range(8):
            t[i] = nl.load(x[i])
            e[i] = nisa.activation(op=nl.exp, data=t[i], bias=bias)
            nl.store(out[i], value=e[i])
        return out

    r = run(kernel, x)
    np.testing.assert_allclose(r.outputs, np.exp(x), rtol=1e-6)


def test_tensors_placed_on_the_same_bytes_share_them():
    # b is placed where a is and never written: it reads a's data, as the hardware's one copy of
    # those bytes holds it (reading bytes a tile never wrote reads what memory holds)
    x = rand(128, 512, seed=2)

    def kernel(x):
        out = nl.ndarray((128, 512), dtype=np.float32, buffer=nl.shared_hbm)
        a = nl.ndarray((nl.par_dim(128), 512), dtype=np.float32, buffer=ncc.sbuf.mod_alloc(base_addr=1024))
        b = nl.ndarray((nl.par_dim(128), 256), dtype=np.float32, buffer=ncc.sbuf.mod_alloc(base_addr=2048))
        c = nl.ndarray((nl.par_dim(128), 512), dtype=np.float32, buffer=ncc.sbuf.mod_alloc(base_addr=8192))
        a[...] = nl.load(x)
        c[:, 0:256] = nisa.tensor_copy(b)
        c[:, 256:512] = nisa.tensor_copy(a[:, 0:256])
        nl.store(out, value=c)
        return out

    r = run(kernel, x)
    np.testing.assert_array_equal(r.outputs[:, :256], x[:, 256:])   # bytes 2048.. of a are b's
    np.testing.assert_array_equal(r.outputs[:, 256:], x[:, :256])


def test_a_tile_overwritten_while_live_is_a_lifetime_conflict():
    # the guide's first lifetime conflict: t0 at bytes [0:2048) and t1 at [1024:3072), both alive
    def kernel(x, y):
        out = nl.ndarray((128, 256), dtype=np.float32, buffer=nl.shared_hbm)
        t0 = nl.ndarray((nl.par_dim(128), 1024), dtype=nl.bfloat16, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        t1 = nl.ndarray((nl.par_dim(128), 1024), dtype=nl.bfloat16, buffer=ncc.sbuf.mod_alloc(base_addr=1024))
        s = nl.ndarray((nl.par_dim(128), 256), dtype=np.float32, buffer=ncc.sbuf.mod_alloc(base_addr=4096))
        t0[...] = nl.load(x)
        t1[...] = nl.load(y)
        s[...] = nisa.tensor_tensor(t0[:, 512:768], t1[:, 0:256], op=nl.add)
        nl.store(out, value=s)
        return out

    with pytest.raises(errors.LifetimeConflictError, match=r"reads SBUF partitions 0:128, bytes 1024:1536 .* "
                                                          r"overwrote at line \d+ while they were still live"):
        run(kernel, rand(128, 1024), rand(128, 1024))

    # the bytes t1 does not touch stay t0's: reading only those is fine
    def fine(x, y):
        out = nl.ndarray((128, 256), dtype=np.float32, buffer=nl.shared_hbm)
        t0 = nl.ndarray((nl.par_dim(128), 1024), dtype=nl.bfloat16, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        t1 = nl.ndarray((nl.par_dim(128), 1024), dtype=nl.bfloat16, buffer=ncc.sbuf.mod_alloc(base_addr=1024))
        s = nl.ndarray((nl.par_dim(128), 256), dtype=np.float32, buffer=ncc.sbuf.mod_alloc(base_addr=4096))
        t0[...] = nl.load(x)
        t1[...] = nl.load(y)
        s[...] = nisa.tensor_tensor(t0[:, 0:256], t1[:, 0:256], op=nl.add)
        nl.store(out, value=s)
        return out

    x, y = rand(128, 1024, seed=3), rand(128, 1024, seed=4)

    def bf(a):
        return a.astype(ml_dtypes.bfloat16).astype(F32)

    np.testing.assert_array_equal(run(fine, x, y).outputs, bf(bf(x[:, :256]) + bf(y[:, :256])))


def test_more_live_logical_tiles_than_physical_ones_is_a_lifetime_conflict():
    # the guide's second example: eight tiles loaded by one loop, read by the next, two physical tiles
    def kernel(x):
        out = nl.ndarray((8, 128, 512), dtype=np.float32, buffer=nl.shared_hbm)
        t1 = nl.ndarray((8, nl.par_dim(128), 512), dtype=np.float32,
                        buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
        r = nl.ndarray((8, nl.par_dim(128), 512), dtype=np.float32,
                       buffer=ncc.sbuf.mod_alloc(base_addr=8192, num_free_tiles=(2,)))
        for i in nl.affine_range(8):
            t1[i] = nl.load(x[i])
        for i in nl.affine_range(8):
            r[i] = nisa.tensor_copy(t1[i])
            nl.store(out[i], value=r[i])
        return out

    with pytest.raises(errors.LifetimeConflictError, match=r"logical tile \[0\].*logical tile \[2\]"):
        run(kernel, rand(8, 128, 512), shape_only=True)   # the rule needs no data


def test_psum_accumulation_groups_restart_on_a_reused_bank():
    # every row block accumulates in bank 7 (as the tutorial's attn_out_psum does): each group
    # starts with an overwrite, whatever the bank holds from the previous one
    a, b = rand(3, 2, 128, 128, seed=5), rand(2, 128, 256, seed=6)

    def kernel(a, b):
        out = nl.ndarray((3, 128, 256), dtype=np.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((3, nl.par_dim(128), 256), dtype=np.float32,
                         buffer=ncc.psum.mod_alloc(base_bank=7, num_bank_tiles=(1,)))
        sa = nl.ndarray((2, nl.par_dim(128), 128), dtype=np.float32,
                        buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
        sb = nl.ndarray((2, nl.par_dim(128), 256), dtype=np.float32,
                        buffer=ncc.sbuf.mod_alloc(base_addr=1024, num_free_tiles=(2,)))
        o = nl.ndarray((nl.par_dim(128), 256), dtype=np.float32, buffer=ncc.sbuf.mod_alloc(base_addr=4096))
        for k in nl.affine_range(2):
            sb[k] = nl.load(b[k])
        for i in nl.sequential_range(3):
            for k in nl.affine_range(2):
                sa[k] = nl.load(a[i, k])
                acc[i] += nisa.nc_matmul(sa[k], sb[k])
            o[...] = nisa.tensor_copy(acc[i])
            nl.store(out[i], value=o)
        return out

    r = run(kernel, a, b)
    want = np.stack([sum(a[i, k].T @ b[k] for k in range(2)) for i in range(3)])
    np.testing.assert_allclose(r.outputs, want, rtol=1e-4, atol=1e-4)
    assert [i.mm.accumulate for i in instrs(r.trace, MM)] == [True] * 6


def test_interleaved_accumulation_groups_in_one_bank_are_refused():
    def kernel(a, b):
        out = nl.ndarray((2, 128, 256), dtype=np.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((2, nl.par_dim(128), 256), dtype=np.float32,
                         buffer=ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(1,)))
        sa = nl.ndarray((nl.par_dim(128), 128), dtype=np.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        sb = nl.ndarray((nl.par_dim(128), 256), dtype=np.float32, buffer=ncc.sbuf.mod_alloc(base_addr=512))
        o = nl.ndarray((nl.par_dim(128), 256), dtype=np.float32, buffer=ncc.sbuf.mod_alloc(base_addr=4096))
        sa[...] = nl.load(a)
        sb[...] = nl.load(b)
        for k in nl.sequential_range(2):
            for i in nl.sequential_range(2):
                acc[i] += nisa.nc_matmul(sa, sb)
        for i in nl.sequential_range(2):
            o[...] = nisa.tensor_copy(acc[i])
            nl.store(out[i], value=o)
        return out

    with pytest.raises(errors.LifetimeConflictError, match=r"accumulates into PSUM bank 0 .*\[SCH713\] Violation of "
                                                          r"accumulation group interleaving"):
        run(kernel, rand(128, 128), rand(128, 256))


def test_sbuf_and_psum_alloc_take_the_kernels_own_function():
    # the SDK's allocated transpose (test_sbuf_modulo_alloc.py), at 256 x 256
    a = rand(256, 256, seed=7)

    def sbuf_at(addr):
        return ncc.sbuf.alloc(lambda idx, pdim_size, fdim_size: (0, addr))

    def kernel(a_ptr):
        tp = nl.ndarray((256, 256), dtype=np.float32, buffer=nl.shared_hbm)
        identity = nl.shared_constant(np.identity(n=128, dtype=np.int8), dtype=np.float32)
        for n0 in nl.affine_range(2):
            for m0 in nl.affine_range(2):
                a_local = nl.ndarray((nl.par_dim(128), 128), dtype=np.float32, buffer=sbuf_at(1024))
                a_local[...] = nl.load(a_ptr[n0 * 128:(n0 + 1) * 128, m0 * 128:(m0 + 1) * 128])
                identity_load = nl.ndarray((nl.par_dim(128), 128), dtype=np.float32, buffer=sbuf_at(0))
                identity_load[...] = nl.load(identity)
                t_psum = nl.ndarray((nl.par_dim(128), 128), dtype=np.float32,
                                    buffer=ncc.psum.alloc(lambda idx, p, f: (0, 0, 0)))
                t_psum[...] = nisa.nc_matmul(a_local, identity_load)
                t_sbuf = nl.ndarray((nl.par_dim(128), 128), dtype=np.float32, buffer=sbuf_at(2048))
                t_sbuf[...] = nl.copy(t_psum)
                nl.store(tp[m0 * 128:(m0 + 1) * 128, n0 * 128:(n0 + 1) * 128], value=t_sbuf)
        return tp

    np.testing.assert_array_equal(run(kernel, a).outputs, a.T)


@pytest.mark.parametrize("memory, alloc, message", [
    ("sbuf", lambda: ncc.sbuf.mod_alloc(base_addr=176 * 1024 - 1024), r"leaves SBUF: .* the tile ends at 181248"),
    ("sbuf", lambda: ncc.sbuf.mod_alloc(base_addr=0, base_partition=32), r"'base_partition' .* must be 0"),
    ("sbuf", lambda: ncc.sbuf.alloc(lambda idx, p, f: (64, 0)), r"a tile of 128 partitions must start at partition 0"),
    ("sbuf", lambda: ncc.sbuf.alloc(lambda idx, p, f: 0), r"must return \(start partition, byte address\)"),
    ("sbuf", lambda: ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(0,)), r"positive tile counts"),
    ("psum", lambda: ncc.psum.mod_alloc(base_bank=6, num_bank_tiles=(3,)), r"PSUM bank 8; PSUM has banks 0 to 7"),
    ("psum", lambda: ncc.psum.mod_alloc(base_bank=0, base_addr=512), r"'base_addr' .* must be 0"),
    ("psum", lambda: ncc.psum.mod_alloc(base_bank=0, num_free_tiles=(2,)), r"must be empty or all ones"),
    ("psum", lambda: ncc.psum.alloc(lambda idx, p, f: (1, 0, 1024)), r"must start at partition 0 and byte 0 of a bank"),
])
def test_placements_outside_the_hardware_are_refused(memory, alloc, message):
    def kernel(x):
        out = nl.ndarray((128, 512), dtype=np.float32, buffer=nl.shared_hbm)
        shape = (3, nl.par_dim(128), 512) if memory == "psum" else (nl.par_dim(128), 512)
        nl.ndarray(shape, dtype=np.float32, buffer=alloc())
        return out

    with pytest.raises(errors.DirectAllocationError, match=message):
        run(kernel, rand(128, 512))


ALLOCATED = '''
import numpy as np
from neuronxcc import nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.compiler as ncc


@nki.jit
def kernel(x):
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((nl.par_dim(128), 128), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    y = nl.ndarray((nl.par_dim(128), 128), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=512))
    bias = nl.ndarray((nl.par_dim(128), 1), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=1024))
    bias[...] = 0.0
    t[...] = nl.load(x)
    BODY
    nl.store(out, value=y)
    return out
'''


@pytest.mark.parametrize("body, error, message", [
    ("y[...] = nisa.activation(op=nl.exp, data=t, bias=bias)", None, None),
    ("y[...] = nl.exp(nl.load(x))", errors.DirectAllocationError,
     r"kernel.py:17: .*an instruction result in sbuf at line 17 is allocated by the compiler, while the sbuf "
     r"tensor created at line 12 is directly allocated: the current release cannot mix automatic and direct "
     r"allocation"),
    ("s = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)\n    s[...] = nl.copy(t)\n    y[...] = nl.copy(s)",
     errors.DirectAllocationError, r"kernel.py:17: .*a tensor in sbuf at line 17 is allocated by the compiler"),
    ("h = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.hbm)\n    nl.store(h, value=t)\n    y[...] = nl.load(h)",
     errors.DirectAllocationError, r"Non IO HBM tensor is not supported in allocated NKI kernel"),
    ("y[...] = nisa.activation(op=nl.exp, data=t)", errors.AllocatedBiasError,
     r"err_bias_tensor_must_be_specified_in_allocation: Bias tensor of an activation op must be specified"),
    ("p = nl.ndarray((nl.par_dim(128), 128), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))\n"
     "    p[...] = nisa.nc_transpose(t)\n    y[...] = nisa.tensor_copy(p)", errors.AllocatedTransposeError,
     r"err_transpose_on_tensor_engine_not_allowed_in_allocated_kernel: 'nisa.nc_transpose' transposes on TensorE"),
    ("z = nl.zeros((nl.par_dim(128), 128), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=2048))\n"
     "    y[...] = nl.copy(t)", errors.AllocatedInitValueError,
     r"Creating SBUF/PSUM tensor with init value is not supported in allocated NKI kernels"),
])
def test_what_an_allocated_kernel_may_not_do(body, error, message):
    source = ALLOCATED.replace("BODY", body)
    x = rand(128, 128, seed=8)
    if error is None:
        np.testing.assert_allclose(run_kernel(source, [x]).outputs, np.exp(x), rtol=1e-6)
        return
    with pytest.raises(error, match=message):
        run_kernel(source, [x])


def test_the_compilers_memories_as_buffers_are_automatic_allocation():
    assert ncc.sbuf == nl.sbuf and ncc.psum == nl.psum
    assert ncc.sbuf.auto_alloc() == nl.sbuf and ncc.psum.auto_alloc() == nl.psum
    x = rand(128, 64, seed=9)

    def kernel(x):
        out = nl.ndarray((128, 64), dtype=np.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((nl.par_dim(128), 64), dtype=np.float32, buffer=ncc.sbuf)
        t[...] = nl.load(x)
        nl.store(out, value=nl.exp(t))
        return out

    r = run(kernel, x)
    np.testing.assert_allclose(r.outputs, np.exp(x), rtol=1e-6)
    assert r.trace.placements is None


def test_a_group_starts_only_where_the_tile_has_not_written():
    # the left half of the bank tile is accumulated first; the full-width matmul then adds to
    # it there and starts the group (an overwrite) on the right, where only stale data are
    a, b = rand(128, 128, seed=10), rand(128, 512, seed=11)

    def kernel(a, b):
        out = nl.ndarray((128, 512), dtype=np.float32, buffer=nl.shared_hbm)
        stale = nl.ndarray((nl.par_dim(128), 512), dtype=np.float32, buffer=ncc.psum.mod_alloc(base_bank=3))
        acc = nl.ndarray((nl.par_dim(128), 512), dtype=np.float32, buffer=ncc.psum.mod_alloc(base_bank=3))
        sa = nl.ndarray((nl.par_dim(128), 128), dtype=np.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        sb = nl.ndarray((nl.par_dim(128), 512), dtype=np.float32, buffer=ncc.sbuf.mod_alloc(base_addr=512))
        o = nl.ndarray((nl.par_dim(128), 512), dtype=np.float32, buffer=ncc.sbuf.mod_alloc(base_addr=4096))
        sa[...] = nl.load(a)
        sb[...] = nl.load(b)
        stale[...] = nisa.nc_matmul(sa, sb)        # dead before acc starts: no conflict
        acc[:, 0:256] += nisa.nc_matmul(sa, sb[:, 0:256])
        acc[...] += nisa.nc_matmul(sa, sb)
        o[...] = nisa.tensor_copy(acc)
        nl.store(out, value=o)
        return out

    ab = a.T @ b
    want = np.concatenate([2 * ab[:, :256], ab[:, 256:]], axis=1)
    np.testing.assert_allclose(run(kernel, a, b).outputs, want, rtol=1e-4, atol=1e-4)


def test_small_tiles_rotate_over_partitions_with_num_par_tiles():
    # four (32, 64) tiles side by side in partitions 0/32/64/96 at one byte address: all four live at once
    x = rand(4, 32, 64, seed=12)

    def kernel(x):
        out = nl.ndarray((4, 32, 64), dtype=np.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((4, nl.par_dim(32), 64), dtype=np.float32,
                       buffer=ncc.sbuf.mod_alloc(base_addr=256, num_par_tiles=(4,)))
        for i in nl.affine_range(4):
            t[i] = nl.load(x[i])
        for i in nl.affine_range(4):
            nl.store(out[i], value=t[i])
        return out

    r = run(kernel, x)
    np.testing.assert_array_equal(r.outputs, x)
    assert list(r.trace.placements.values())[0].tiles == {(i,): (32 * i, 256) for i in range(4)}
