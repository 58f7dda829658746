"""Rules of the current dialect: each broken rule raises its own error class, at the kernel
line, with a message naming the current way; what the emulator does not model is refused
in one line naming the construct."""

from __future__ import annotations

import numpy as np
import pytest

from fitness.simulator import errors, run_kernel
from fitness.simulator.dialect import DialectError

HEAD = "import nki\nimport nki.language as nl\nimport nki.isa as nisa\n\n@nki.jit\ndef kernel(x):\n"
X = np.ones((128, 64), dtype=np.float32)


def fails(body: str, err: type, *needles: str, x=X):
    src = HEAD + "".join("    " + line + "\n" for line in body.strip().splitlines())
    with pytest.raises(err) as info:
        run_kernel(src, [x])
    msg = str(info.value)
    assert msg.startswith("kernel.py:"), msg
    for needle in needles:
        assert needle in msg, msg
    return info.value


SB = "t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)\nnisa.dma_copy(dst=t, src=x)\n"


def test_destination_shape_must_match_the_result():
    e = fails(SB + "d = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)\n"
              "nisa.tensor_copy(dst=d, src=t)", errors.ShapeMismatchError, "destination shape [128, 32]",
              "nisa.tensor_copy")
    assert e.line == 10


def test_partition_limit():
    fails("t = nl.ndarray((256, 4), dtype=nl.float32, buffer=nl.sbuf)", errors.PartitionLimitError,
          "number of partitions 256")


def test_psum_capacity_and_bank_addresses():
    fails("p = nl.ndarray((128, 4097), dtype=nl.float32, buffer=nl.psum)", errors.PsumAllocationError,
          "8 banks of 2048 bytes")
    fails("p = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum, address=(0, 1024))",
          errors.PsumAllocationError, "must start at a bank")
    fails("p = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum, address=(0, 14336))",
          errors.PsumAllocationError, "ends past the 16384 bytes")


def test_a_psum_tensor_may_span_banks():
    src = HEAD + "    p = nl.ndarray((128, 2048), dtype=nl.float32, buffer=nl.psum, address=(0, 0))\n    return x\n"
    with pytest.raises(errors.HostOutputError):   # allocation passes; returning an unwritten input does not
        run_kernel(src, [X])


def test_no_dma_from_or_to_psum():
    fails("p = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)\nnisa.dma_copy(dst=p, src=x)",
          errors.UnsupportedMemoryError, "PSUM, which DMA cannot access", "nisa.tensor_copy")


def test_dma_element_counts_must_agree():
    fails("t = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)\nnisa.dma_copy(dst=t, src=x)",
          errors.ShapeMismatchError, "element counts must agree")


def test_engines_are_enum_members_that_can_run_the_instruction():
    fails(SB + "nisa.tensor_copy(dst=t, src=t, engine='vector')", errors.EngineError, "nisa.engine member")
    fails(SB + "nisa.tensor_copy(dst=t, src=t, engine=nisa.engine.tensor)", errors.EngineError,
          "cannot run on nisa.engine.tensor")


def test_matmul_writes_psum():
    fails(SB + "s = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)\n"
          "nisa.nc_matmul(dst=s, stationary=t, moving=t)", errors.UnsupportedMemoryError, "'dst' of 'nisa.nc_matmul'",
          "psum")


def test_compute_destinations_are_on_chip():
    fails(SB + "o = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)\n"
          "nisa.tensor_copy(dst=o, src=t)", errors.UnsupportedMemoryError, "write HBM with nisa.dma_copy")


@pytest.mark.parametrize("body,needle", [
    (SB + "y = nisa.activation(nl.exp, t)", "is its destination"),
    (SB + "nisa.tensor_copy(dst=t, src=t, mask=None)", "no mask="),
    (SB + "nisa.tensor_copy(dst=t, src=t, dtype=nl.float32)", "no dtype="),
    ("t = nl.ndarray((nl.par_dim(128), 64), dtype=nl.float32)", "par_dim"),
    ("i = nl.arange(128)[:, None]", "nl.ds(start, size)"),
    (SB + "p = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)\np += None", "return nothing"),
])
def test_legacy_constructs_name_the_current_way(body, needle):
    fails(body, errors.LegacyConstructError, needle)


def test_out_of_range_slices_are_errors_without_masks():
    fails("t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)\nnisa.dma_copy(dst=t, src=x[0:128, 32:96])",
          errors.OutOfBoundsError, "clip the slice")


def test_ap_patterns_stay_inside_the_tensor_and_its_partitions():
    fails(SB + "v = t.ap([[64, 128], [1, 65]])", errors.IndexNotSupportedError, "only the first pair")
    fails(SB + "v = t.ap([[64, 128], [1, 64]], offset=64)", errors.OutOfBoundsError, "access pattern")


@pytest.mark.parametrize("body,needle", [
    ("nl.while_loop(None, lambda r: r)", "nl.while_loop"),
    ("nl.fori_loop(0, nisa.register_alloc(), lambda i: None)", "bounds held in registers"),
    (SB + "v = t.view(nl.uint8)", "t.view(uint8)"),
])
def test_unsupported_constructs_are_refused_in_one_line(body, needle):
    e = fails(body, errors.UnsupportedApiError, needle)
    assert "\n" not in str(e)


def test_a_two_core_launch_runs_both_programs_and_three_is_refused():
    """kernel[2] (LNC2) runs programs 0 and 1 over the shared output (each adds its index to its
    half); a logical core groups at
    most two physical cores, so kernel[3] is refused."""
    from fitness.simulator import install_nki
    install_nki()
    import nki
    import nki.isa as nisa
    import nki.language as nl

    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        half = x.shape[0] // nl.num_programs(0)
        rows = nl.ds(nl.program_id(0) * half, half)
        t = nl.ndarray((half, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[rows, :])
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=float(nl.program_id(0)))
        nisa.dma_copy(dst=out[rows, :], src=t)
        return out

    x = np.arange(128 * 64, dtype=np.float32).reshape(128, 64) / 8192
    np.testing.assert_array_equal(k[2](x), x + (np.arange(128) >= 64)[:, None])
    with pytest.raises(errors.UnsupportedApiError, match=r"at most 2 physical cores"):
        k[3]


def test_a_source_importing_both_dialects_is_refused():
    with pytest.raises(DialectError):
        run_kernel("import nki\nimport neuronxcc.nki as legacy\n\ndef kernel(x):\n    return x\n", [X])
