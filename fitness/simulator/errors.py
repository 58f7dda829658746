"""Errors the emulator raises for kernels that break an NKI rule.

Each rule has its own exception class whose `code` is the name of the NKI error
(`err_*`, as listed in the NKI error reference) so that a message reads like the
compiler's. Codes starting with `emu_` name conditions that NKI has no code for
(an API the emulator does not implement, host code reaching into a kernel tensor).

Every error carries the kernel source location (`filename`, `line`): the innermost
stack frame that is not part of the emulator, i.e. the kernel line that made the call.
"""

from __future__ import annotations

import os
import sys

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def is_emulator_file(filename: str) -> bool:
    """True for source files of this package (frames to skip when locating kernel lines)."""
    return filename.startswith(PACKAGE_DIR)


def kernel_frame(depth: int = 1):
    """The innermost caller frame outside the emulator package (the kernel code), or None."""
    frame = sys._getframe(depth)
    while frame is not None and frame.f_code.co_filename.startswith(PACKAGE_DIR):
        frame = frame.f_back
    return frame


def kernel_location(depth: int = 1) -> tuple[str, int]:
    """(filename, line) of the innermost caller frame outside the emulator package."""
    frame = kernel_frame(depth + 1)
    if frame is None:
        return "<unknown>", 0
    return frame.f_code.co_filename, frame_line(frame)


# Line of (code object, instruction offset). `frame.f_lineno` scans the code's line table
# from its start, which is slow for the long generated kernels; a kernel's call sites are
# few and revisited in every loop iteration. Keyed by the code object's id (hashing a code
# object hashes its contents) and holding the code object, so that the id stays its own;
# bounded, since it keeps code objects alive.
LINES: dict[tuple[int, int], tuple[object, int]] = {}
LINES_MAX = 50_000


def frame_line(frame) -> int:
    """`frame.f_lineno`, cached by code object and instruction offset."""
    code = frame.f_code
    key = (id(code), frame.f_lasti)
    hit = LINES.get(key)
    if hit is None:
        if len(LINES) >= LINES_MAX:
            LINES.clear()
        hit = LINES[key] = (code, frame.f_lineno)
    return hit[1]


class NkiError(Exception):
    """A kernel broke an NKI rule. Message: "<file>:<line>: <code>: <what was wrong>"."""

    code = "err_nki"

    def __init__(self, what: str, filename: str | None = None, line: int | None = None):
        if filename is None or line is None:
            filename, line = kernel_location(1)
        self.what = what
        self.filename = filename
        self.line = line
        super().__init__(f"{filename}:{line}: {self.code}: {what}")

    def __reduce__(self):
        # Keep the location when the error crosses a process boundary (pickling).
        return (type(self), (self.what, self.filename, self.line))


# --- architecture limits ----------------------------------------------------------------

class PartitionLimitError(NkiError):
    """A tile or tensor has more than 128 partitions."""

    code = "err_num_partition_exceed_arch_limit"


class PartitionMismatchError(NkiError):
    """Operands of one instruction have different partition counts."""

    code = "err_num_partition_mismatch"


class DimensionLimitError(NkiError):
    """A dimension exceeds an instruction limit (matmul K/M > 128, N > 512, transpose > 128)."""

    code = "err_size_of_dimension_exceed_arch_limit"


class PsumBankOverflowError(NkiError):
    """A PSUM tile needs more than one 2 KiB bank per partition."""

    code = "err_size_of_dimension_exceed_arch_limit"


class SbufPartitionOverflowError(NkiError):
    """One SBUF tile (block) needs more bytes per partition than SBUF has usable."""

    code = "err_stack_overflow_sbuf"


class SbufCapacityError(NkiError):
    """The SBUF tiles a kernel keeps live at once need more bytes per partition than the
    target's SBUF leaves to kernels: the compiler's allocator cannot place them."""

    code = "err_sbuf_capacity"


class PsumCapacityError(NkiError):
    """The PSUM tiles a kernel keeps live at once need more banks than the target's PSUM has
    (8 banks of 2 KiB per partition: at most 8 accumulation tiles at a time)."""

    code = "err_psum_capacity"


class MaxDimensionError(NkiError):
    """A parameter has more dimensions than the API supports."""

    code = "err_exceed_max_supported_dimension"


# --- memories ------------------------------------------------------------------------------

class UnsupportedMemoryError(NkiError):
    """An operand lives in the wrong memory (load from SBUF, store from PSUM, matmul into SBUF...)."""

    code = "err_unsupported_memory"


class ImmutableParameterError(NkiError):
    """A kernel wrote into an input parameter not annotated `nt.mutable_tensor`."""

    code = "err_cannot_update_immutable_parameter"


class SharedHbmScopeError(NkiError):
    """A `shared_hbm` tensor was created inside a loop or a helper function."""

    code = "err_shared_hbm_must_in_kernel_level"


class HbmInitValueError(NkiError):
    """An HBM tensor was created with an initial value (`nl.zeros(..., buffer=nl.hbm)`)."""

    code = "err_hbm_tensor_with_init_value_not_supported"


class OutputNotWrittenError(NkiError):
    """A kernel output (or part of it) was never written."""

    code = "err_tensor_output_not_written_to"


# --- shapes --------------------------------------------------------------------------------

class TileInferenceError(NkiError):
    """A compute API got a tensor whose first dimension is not the partition dimension."""

    code = "err_failed_to_infer_tile_from_local_tensor"


class ShapeMismatchError(NkiError):
    """Operand shapes that must be equal are not."""

    code = "err_param_shape_mismatch"


class BroadcastError(NkiError):
    """Operand shapes cannot be broadcast together."""

    code = "err_param_shape_incompatible_with_numpy"


class MatmulShapeError(NkiError):
    """Matmul operands have different contraction sizes."""

    code = "err_param_shape_incompatible_with_matmul"


class AssignShapeError(NkiError):
    """An assignment destination is smaller than its source."""

    code = "err_store_dst_shape_smaller_than_other_shape"


# --- indexing -------------------------------------------------------------------------------

class MixedIndexingError(NkiError):
    """A subscript mixes slices (basic) with `nl.arange` expressions (advanced)."""

    code = "err_unsupported_mixing_basic_advanced_tensor_indexing"


class OneDimArangeError(NkiError):
    """A 1-D `nl.arange` was used as an index (it needs `[:, None]` or `[None, :]`)."""

    code = "err_1d_arange_not_supported"


class OutOfBoundsError(NkiError):
    """An access reaches outside a tensor dimension and no mask excludes it."""

    code = "err_tensor_access_out_of_bound"


class IndexNotSupportedError(NkiError):
    """An index the hardware cannot express (partition striding, a slice on a block dim...)."""

    code = "err_tensor_index_not_supported"


class AssignToIndexError(NkiError):
    """An index expression (`nl.arange`, `nl.mgrid`) was assigned to."""

    code = "err_cannot_assign_to_index"


class MaskExpressionError(NkiError):
    """A mask that is not a conjunction of affine comparisons."""

    code = "err_unsupported_expression_in_mask"


class MaskNotEqualError(NkiError):
    """`!=` used to build a mask."""

    code = "err_mask_not_equal_not_supported"


# --- loops, scopes, control flow ------------------------------------------------------------

class OutputDependencyError(NkiError):
    """Different iterations of one `affine_range` loop wrote the same elements."""

    code = "err_unexpected_output_dependencies"


class ScopeError(NkiError):
    """A tensor created inside a loop body was used outside that iteration."""

    code = "err_local_variable_used_out_of_scope"


class DynamicControlFlowError(NkiError):
    """Python control flow (`if`, `bool()`) on the value of a tile."""

    code = "err_dynamic_control_flow_not_supported"


class ArangeControlFlowError(NkiError):
    """Python control flow on an `nl.arange`/`nl.mgrid` expression or a mask."""

    code = "err_control_flow_condition_depending_on_arange"


# --- instruction arguments ------------------------------------------------------------------

class ActivationScaleTypeError(NkiError):
    code = "err_activation_scale_invalid_type"


class ActivationScaleShapeError(NkiError):
    code = "err_activation_scale_scalar_or_vector"


class ActivationBiasTypeError(NkiError):
    code = "err_activation_bias_invalid_type"


class UnsupportedOpError(NkiError):
    """An ALU/activation operator the instruction does not support."""

    code = "err_instruction_unsupported_op"


class ReduceAxisError(NkiError):
    """A reduction over the partition axis (axis 0), which Vector/Scalar engines cannot do."""

    code = "emu_partition_axis_reduction"


class UnsupportedDtypeError(NkiError):
    code = "err_unsupported_dtype_value"


class OperandTypeError(NkiError):
    """An operand of the wrong kind (a Python object where a tile is needed, ...)."""

    code = "err_unexpected_type_of_operand"


class ApiOutsideKernelError(NkiError):
    """An `nl`/`nisa` call made while no kernel runs."""

    code = "err_nki_api_outside_of_nki_kernel"


# --- direct allocation (ncc.sbuf / ncc.psum alloc and mod_alloc) ---------------------------

class DirectAllocationError(NkiError):
    """A direct allocation the compiler refuses: an address outside SBUF's usable bytes or
    PSUM's banks, a start partition the ISA does not allow, parameters the current release
    fixes (PSUM `base_addr`, `base_partition`), automatic and direct allocation mixed in one
    kernel, or a non-IO HBM tensor in an allocated kernel (NKI Direct Allocation Developer
    Guide, "Common Errors" and "Known Limitations")."""

    code = "err_direct_allocation"


class LifetimeConflictError(NkiError):
    """A logical tile of a directly allocated tensor was read (or accumulated into) after
    another tile placed on the same SBUF/PSUM bytes overwrote them: on hardware the kernel
    computes on the other tile's data ("Lifetime Conflicts" in the Direct Allocation guide;
    for PSUM accumulation the compiler's "[SCH713] Violation of accumulation group
    interleaving")."""

    code = "err_lifetime_conflict"


class AllocatedInitValueError(NkiError):
    """`nl.zeros`/`nl.full`/... with a direct allocation."""

    code = "err_tensor_creation_on_scratchpad_with_init_value_not_supported"


class AllocatedBiasError(NkiError):
    """An activation without a bias tensor (or an nl function lowered to one) in an allocated
    kernel."""

    code = "err_bias_tensor_must_be_specified_in_allocation"


class AllocatedTransposeError(NkiError):
    """`nisa.nc_transpose` on TensorE or `nl.matmul` without `transpose_x=True` in an
    allocated kernel: both need an identity matrix the compiler allocates itself."""

    code = "err_transpose_on_tensor_engine_not_allowed_in_allocated_kernel"


class AccumulatorStateError(NkiError):
    """An instruction reads or continues the state of an engine's accumulator registers
    (`reduce_cmd=idle` with `reduce_res`, or `reduce_cmd=reduce`) that no earlier instruction
    of the kernel has reset: the registers hold whatever an earlier program left there."""

    code = "err_accumulator_not_initialized"


# --- the current (`import nki`) dialect ------------------------------------------------------

class LegacyConstructError(NkiError):
    """A current-dialect kernel used a construct only the legacy dialect has (masks, `par_dim`,
    an ISA call without a destination, ...); the message names the current way."""

    code = "err_legacy_construct"


class PsumAllocationError(NkiError):
    """A PSUM tensor does not fit the 8 banks of 2 KiB per partition, or its address does not
    start at a bank."""

    code = "err_psum_allocation"


class EngineError(NkiError):
    """An instruction was given an engine that is not an `nisa.engine` member, or one that
    cannot run it."""

    code = "err_invalid_engine"


class DeviceUnsupportedError(NkiError):
    """A construct the documentation says fails on the device (the NKI release notes' known
    limitations: `nl.divide`, `nl.power` with a scalar exponent, `nl.copy` across buffers); the
    message is the documented one, with its workaround."""

    code = "err_unsupported_on_device"


# --- emulator-specific --------------------------------------------------------------------

class UnsupportedApiError(NkiError):
    """An NKI name the emulator does not implement."""

    code = "emu_unsupported_api"


class OpaqueTensorError(NkiError):
    """Host code tried to read a kernel tensor's data directly (np.asarray, NumPy arithmetic)."""

    code = "emu_opaque_tensor"


class NestedLaunchError(NkiError):
    """A kernel launched a kernel (simulate_kernel, baremetal, benchmark, profile): that runs a
    separate program whose results reach the host, outside the caller's instruction trace."""

    code = "emu_nested_launch"


class HostOutputError(NkiError):
    """A kernel returned something that is not a fresh output tensor: a host value, a constant,
    an input or a scratch tensor (or a view of one)."""

    code = "emu_host_output"


class FalseHintError(NkiError):
    """A performance hint that the data contradicts (e.g. `is_stationary_onezero=True` on a
    stationary holding values other than 0 and 1): the hint would buy a cheaper price for a
    result the hardware does not compute with it."""

    code = "emu_false_hint"
