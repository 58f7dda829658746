"""`nki.collectives` of the current dialect with one emulated rank.

The emulator runs one NeuronCore at a time (an LNC2 launch runs its two programs one after the
other, core.launch), so a collective is modelled only over a replica group of one rank, the
running program's (core.dmaops.own_rank): there every documented collective is the identity or
a copy (an all-reduce, all-gather, reduce-scatter or all-to-all of one rank is its own data; a
ring of one sends to itself). A group of more ranks is refused with a clear error naming the
kernel line. Each collective is priced as the DMA copy it amounts to (nisa.dma_copy's record).
"""

from __future__ import annotations

import numpy as np

from .. import errors
from ..core import dmaops as D
from ..core import instr as I
from ..core import ops
from ..core import tensor as T
from ..core.runtime import machine
from ..core.tensor import NkiTensor
from ..emulation import APPROXIMATE, REFUSED, emulation
from ..trace import DMA, DMA_LOAD, DMA_STORE, HBM, SBUF
from .isa import copy_by_dma
from .language import NKIObject

ONE_RANK = ("one emulated rank: the emulator runs one NeuronCore at a time, so only a replica group of one rank "
            "(the running program's) is modelled, where it is {what}; larger groups are refused; priced as a DMA "
            "copy (nisa.dma_copy)")
REDUCE_OPS = ("add", "minimum", "maximum")


@emulation(APPROXIMATE, "a list of rank lists (no rank in two); the emulator models only the rank list of the running "
                        "program, and only when it holds that one rank")
class ReplicaGroup(NKIObject):
    """`ncc.ReplicaGroup([[0, 1], [2, 3]])`: the groups of ranks that take part in a collective
    (checked where the kernel makes it, so that an error names that line)."""

    def __init__(self, groups=None) -> None:
        groups = groups if groups is not None else [[0]]
        if not isinstance(groups, (list, tuple)) or not all(isinstance(g, (list, tuple)) for g in groups):
            raise errors.OperandTypeError(f"ReplicaGroup takes a list of rank lists, got {groups!r}")
        seen: set[int] = set()
        for g in groups:
            for r in g:
                if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or int(r) < 0:
                    raise errors.OperandTypeError(f"ReplicaGroup: ranks are non-negative integers, got {r!r}")
                if int(r) in seen:
                    raise errors.OperandTypeError(f"ReplicaGroup: rank {int(r)} is in two rank lists (they must not "
                                                  f"overlap)")
                seen.add(int(r))
        self.groups = [[int(r) for r in g] for g in groups]

    def __repr__(self) -> str:
        return f"ReplicaGroup({self.groups})"


def _own_group(group, api: str) -> int:
    """This program's rank, once `group` is checked to put it in a rank list of its own."""
    if not isinstance(group, ReplicaGroup):
        raise errors.OperandTypeError(f"'replica_group' of '{api}' must be an ncc.ReplicaGroup, got "
                                      f"{type(group).__name__}")
    me, n = D.own_rank()
    mine = [g for g in group.groups if me in g]
    if not mine:
        raise errors.OperandTypeError(f"'replica_group' of '{api}' does not hold this program's rank {me}")
    if len(mine[0]) != 1:
        raise errors.UnsupportedApiError(
            f"'{api}' over the ranks {mine[0]} is not supported by the emulator, which runs one rank at a time "
            f"(rank {me} of {n}); only a replica group of one rank is modelled", *errors.kernel_location(2))
    return me


def _tensors(xs, what: str, api: str) -> list[NkiTensor]:
    if isinstance(xs, NkiTensor) or not isinstance(xs, (list, tuple)) or not xs:
        raise errors.OperandTypeError(f"'{what}' of '{api}' must be a non-empty list of tensors")
    return [I.tile(x, what, api, (HBM, SBUF)) for x in xs]


def _pairs(api: str, srcs, dsts, hbm_only: bool, single: bool = False) -> list[tuple[NkiTensor, NkiTensor]]:
    """(src, dst) pairs, checked: as many of each, one memory for all (HBM for several, or where
    the collective needs it), the same shapes and data types."""
    s, d = _tensors(srcs, "srcs", api), _tensors(dsts, "dsts", api)
    if len(s) != len(d):
        raise errors.ShapeMismatchError(f"'{api}' has {len(s)} srcs but {len(d)} dsts")
    if single and len(s) != 1:
        raise errors.OperandTypeError(f"'{api}' takes exactly one tensor in each list, got {len(s)}")
    memories = {x._b.memory for x in s + d}
    if len(memories) > 1:
        raise errors.UnsupportedMemoryError(f"the tensors of '{api}' must all be on HBM or all on SBUF, not both")
    if (hbm_only or len(s) > 1) and memories != {HBM}:
        raise errors.UnsupportedMemoryError(
            f"the tensors of '{api}' must be on HBM" + ("" if hbm_only else " (several tensors at once need HBM)"))
    for a, b in zip(s, d):
        if a._shape != b._shape:
            raise errors.ShapeMismatchError(f"'{api}' over one rank writes src{list(a._shape)} to "
                                            f"dst{list(b._shape)}: the shapes must be the same")
        if a._b.dtype != b._b.dtype:
            raise errors.UnsupportedDtypeError(f"'{api}': src ({a._b.dtname}) and dst ({b._b.dtname}) must have the "
                                               f"same data type")
    return list(zip(s, d))


def _dim(collective_dim, api: str, hbm: bool, allowed_sbuf: tuple[int, ...] = (0, 1)) -> None:
    allowed = (0,) if hbm else allowed_sbuf
    if isinstance(collective_dim, bool) or collective_dim not in allowed:
        raise errors.OperandTypeError(f"'collective_dim' of '{api}' must be one of {list(allowed)} for "
                                      f"{'HBM' if hbm else 'SBUF'} tensors, got {collective_dim!r}")


def _op(op, api: str) -> str:
    name = ops.alu_name(op, api, "op")
    if name not in REDUCE_OPS:
        raise errors.UnsupportedOpError(f"'op' of '{api}' must be nl.add, nl.minimum or nl.maximum, got {name}")
    return name


def _copy(api: str, pairs: list[tuple[NkiTensor, NkiTensor]], line: int) -> None:
    for s, d in pairs:
        copy_by_dma(api, d, s, line)


@emulation(APPROXIMATE, ONE_RANK.format(what="dst = src"))
def all_reduce(srcs=None, dsts=None, replica_group=None, op=None, priority=None, name=None) -> None:
    """dst = op over the group's srcs: over one rank, src."""
    line, api = I.where(), "ncc.all_reduce"
    _op(op, api)
    pairs = _pairs(api, srcs, dsts, hbm_only=False)
    _own_group(replica_group, api)
    _copy(api, pairs, line)


@emulation(APPROXIMATE, ONE_RANK.format(what="dst = src (the concatenation of one)"))
def all_gather(srcs=None, dsts=None, replica_group=None, collective_dim=0, priority=None, name=None) -> None:
    """dst = the group's srcs concatenated along collective_dim: over one rank, src."""
    line, api = I.where(), "ncc.all_gather"
    pairs = _pairs(api, srcs, dsts, hbm_only=False)
    _dim(collective_dim, api, pairs[0][0]._b.memory == HBM)
    _own_group(replica_group, api)
    _copy(api, pairs, line)


@emulation(APPROXIMATE, ONE_RANK.format(what="dst = src (the one shard is all of it)"))
def reduce_scatter(srcs=None, dsts=None, replica_group=None, collective_dim=0, op=None, priority=None,
                   name=None) -> None:
    """dst = this rank's shard of op over the group's srcs: over one rank, src."""
    line, api = I.where(), "ncc.reduce_scatter"
    _op(op, api)
    pairs = _pairs(api, srcs, dsts, hbm_only=False)
    _dim(collective_dim, api, True)
    _own_group(replica_group, api)
    _copy(api, pairs, line)


@emulation(APPROXIMATE, ONE_RANK.format(what="dst = src"))
def all_to_all(srcs=None, dsts=None, replica_group=None, collective_dim=0, priority=None, name=None) -> None:
    """Split src along collective_dim, one part per rank, and gather the parts received: over one
    rank, src (HBM only)."""
    line, api = I.where(), "ncc.all_to_all"
    pairs = _pairs(api, srcs, dsts, hbm_only=True)
    _dim(collective_dim, api, True)
    _own_group(replica_group, api)
    _copy(api, pairs, line)


def _variable(api: str, srcs, dsts, replica_group, metadata_tensor, has_rdispls: bool) -> None:
    """The `_v` collectives' operands, checked before they are refused (they need several ranks)."""
    for what, xs in (("srcs", srcs), ("dsts", dsts)):
        ts = _tensors(xs, what, api)
        if len(ts) != 1 or ts[0]._b.memory != HBM:
            raise errors.OperandTypeError(f"'{what}' of '{api}' must hold exactly one HBM tensor")
    if not isinstance(metadata_tensor, NkiTensor):
        raise errors.OperandTypeError(f"'metadata_tensor' of '{api}' must be a uint32 tensor")
    if has_rdispls:
        raise errors.UnsupportedApiError(f"'{api}' with has_rdispls=True is not supported (the documentation lists it "
                                         f"as a current limitation)", *errors.kernel_location(2))
    _own_group(replica_group, api)


@emulation(REFUSED, "the documented rank lists hold 4 ranks (LNC=2), which the emulator's one rank cannot model")
def all_gather_v(srcs=None, dsts=None, replica_group=None, metadata_tensor=None, recv_counts_known=False,
                 has_rdispls=False, priority=None, name=None) -> None:
    """Variable-length all-gather of flat buffers (metadata-driven counts)."""
    api = "ncc.all_gather_v"
    _variable(api, srcs, dsts, replica_group, metadata_tensor, has_rdispls)
    raise errors.UnsupportedApiError(f"'{api}' needs rank lists of 4 ranks (LNC=2), which the emulator's one rank "
                                     f"cannot model", *errors.kernel_location(1))


@emulation(REFUSED, "it needs more than one device, which the emulator's one rank cannot model")
def all_to_all_v(srcs=None, dsts=None, replica_group=None, metadata_tensor=None, recv_counts_known=False,
                 has_rdispls=False, priority=None, name=None) -> None:
    """Variable-length all-to-all of flat buffers (metadata-driven counts)."""
    api = "ncc.all_to_all_v"
    _variable(api, srcs, dsts, replica_group, metadata_tensor, has_rdispls)
    raise errors.UnsupportedApiError(f"'{api}' needs more than one device, which the emulator's one rank cannot "
                                     f"model", *errors.kernel_location(1))


@emulation(APPROXIMATE, ONE_RANK.format(what="a pair (rank, rank) copying src to dst; any other pair is refused"))
def collective_permute(srcs=None, dsts=None, source_target_pairs=None, priority=None, name=None) -> None:
    """Each (source, target) pair sends source's src to target's dst."""
    line, api = I.where(), "ncc.collective_permute"
    pairs = _pairs(api, srcs, dsts, hbm_only=True, single=True)
    me, n = D.own_rank()
    if not isinstance(source_target_pairs, (list, tuple)) or not all(
            isinstance(p, (list, tuple)) and len(p) == 2 for p in source_target_pairs):
        raise errors.OperandTypeError(f"'source_target_pairs' of '{api}' must be a list of (source, target) pairs")
    mine = [tuple(p) for p in source_target_pairs if me in p]
    if any(p != (me, me) for p in mine):
        raise errors.UnsupportedApiError(
            f"'{api}' with the pairs {mine} reaches another rank (this program is rank {me} of {n}), which the "
            f"emulator does not model", *errors.kernel_location(1))
    if mine:
        _copy(api, pairs, line)


def _channels(api: str, lists, what: str, channel_ids) -> list[object]:
    if not isinstance(lists, (list, tuple)) or not all(isinstance(c, (list, tuple)) and len(c) == 1 for c in lists):
        raise errors.OperandTypeError(f"'{what}' of '{api}' must be a list of one-tensor lists (one per channel)")
    if list(channel_ids) != list(range(len(channel_ids))) or len(channel_ids) != len(lists) or not 1 <= len(lists) <= 4:
        raise errors.OperandTypeError(f"'channel_ids' of '{api}' must be 0, 1, ... (at most 4), one per channel of "
                                      f"'{what}', got {list(channel_ids)}")
    return [c[0] for c in lists]


@emulation(APPROXIMATE, ONE_RANK.format(what="a ring of one: each channel's dst = its src"))
def collective_permute_implicit(srcs_by_channel=None, dsts_by_channel=None, replica_group=None, channel_ids=(0,),
                                priority=None, name=None) -> None:
    """Each rank sends to its ring successor and receives from its predecessor, per channel."""
    line, api = I.where(), "ncc.collective_permute_implicit"
    srcs = _channels(api, srcs_by_channel, "srcs_by_channel", channel_ids)
    dsts = _channels(api, dsts_by_channel, "dsts_by_channel", channel_ids)
    pairs = _pairs(api, srcs, dsts, hbm_only=False)
    _own_group(replica_group, api)
    _copy(api, pairs, line)


@emulation(APPROXIMATE, ONE_RANK.format(what="a ring of one: each channel's dst = op(src0, src1), computed in fp32"))
def collective_permute_implicit_reduce(srcs0_by_channel=None, srcs1_by_channel=None, dsts_by_channel=None,
                                       replica_group=None, op=None, channel_ids=(0,), priority=None,
                                       name=None) -> None:
    """Each rank sends op(src0, src1) to its ring successor and receives its predecessor's."""
    line, api = I.where(), "ncc.collective_permute_implicit_reduce"
    opname = _op(op, api)
    s0 = _channels(api, srcs0_by_channel, "srcs0_by_channel", channel_ids)
    s1 = _channels(api, srcs1_by_channel, "srcs1_by_channel", channel_ids)
    d = _channels(api, dsts_by_channel, "dsts_by_channel", channel_ids)
    first, second = _pairs(api, s0, d, hbm_only=False), _pairs(api, s1, d, hbm_only=False)
    _own_group(replica_group, api)
    fn = {"add": np.add, "minimum": np.minimum, "maximum": np.maximum}[opname]
    for (a, dst), (b, _) in zip(first, second):
        _reduce_by_dma(api, dst, a, b, fn, line)


def _reduce_by_dma(api: str, dst: NkiTensor, a: NkiTensor, b: NkiTensor, fn, line: int) -> None:
    """dst = fn(a, b) in fp32, cast to dst's dtype, recorded as one DMA of dst's elements (as
    nisa.dma_copy prices its transfer)."""
    m = machine()
    d2, a2, b2 = T.as_tile_shape(dst), T.as_tile_shape(a), T.as_tile_shape(b)
    n = T.prod(dst._shape)
    if not m.shape_only and n:
        res = fn(T.array(a2).astype(np.float32), T.array(b2).astype(np.float32))
        T.write(d2, res.astype(d2._b.dtype).reshape(d2._shape))
    if n:
        T.mark_written(d2)
    p = d2._shape[0]
    kind = DMA_STORE if dst._b.memory == HBM else DMA_LOAD
    m.emit(kind, api, (DMA,), dst._b.dtname, (a._b.dtname, b._b.dtname), p, n // p if p else 0,
           (T.region(a2), T.region(b2)), (T.region(d2),), line, "", None, I.dma_info(d2, a2, n, p), 0, False)


@emulation(APPROXIMATE, "a ring of one: this program's rank at every iteration, as a Python int (not a register)")
def collective_permute_implicit_current_processing_rank_id(iteration_id=0, replica_group=None, channel_id=0,
                                                           name=None) -> int:
    """The rank whose data the ring step `iteration_id` processes: over one rank, its own."""
    return _own_group(replica_group, "ncc.collective_permute_implicit_current_processing_rank_id")


@emulation(APPROXIMATE, "the running program's rank (nl.program_id(0) of an LNC2 launch, else 0), as a Python int "
                        "(not a register)")
def rank_id(name=None) -> int:
    """This rank's id."""
    return D.own_rank()[0]


EXPORTS = ["ReplicaGroup", "all_reduce", "all_gather", "all_gather_v", "reduce_scatter", "all_to_all",
           "all_to_all_v", "collective_permute", "collective_permute_implicit", "collective_permute_implicit_reduce",
           "collective_permute_implicit_current_processing_rank_id", "rank_id"]
