"""Benchmark of the simulator's trn2 latency estimates against AWS's measured bf16 GEMMs.

Measures how far the performance model (`fitness.simulator.perf.estimate(trace, "trn2")`,
uncalibrated for trn2) is from the 20 public trn2 GEMM measurements of AWS's NKI autotuner
(`../shared/trn2-measurements/measurements.json`, key `gemm_autotune.points`: families
`lhs_rhs` = lhs @ rhs and `lhsT_rhs` = lhsT.T @ rhs, square M=K=N 512-5120, best loop order
and tiles per block per shape, minimum latency).

For every point this script generates a current-dialect NKI kernel of the autotuner's
structure (`kernel_source`: blocks of 128x128 (K, M) and 128x512 (K, N) tiles, three block
loops in the point's order, operand loads at a chosen loop depth, fp32 PSUM accumulation per
K block, a bf16 SBUF accumulator across K blocks, TensorE transposes of lhs blocks for
`lhs_rhs`), checks the generator against NumPy on small shapes with real data, traces each
point shape-only with the emulator and times the trace with the model. The autotuner also
tuned where the two operands are loaded (`lhs_position`, `rhs_position`, 0-2 each), which the
scoreboard does not report; by default every placement that fits in SBUF is estimated and the
fastest is kept, as the autotuner kept the fastest configuration (`--positions 2,2` fixes one).

Prints a table (family, shape, loop order, tiles, chosen placement, measured ms, predicted ms,
error %, and the TensorE floor: 2MNK at the model's bf16 peak plus its launch cost), then
median and max |error|, Spearman rank correlation over the points, whether the model orders
the two families at each shape as measured, whether it orders the shapes within each family
as measured, and what a partial calibration could do, the model left as it is: one scale
factor, one launch cost (`launch_us`), both, and each `--variant` (parameters changed only for
this report; default `buffer_share=0.5`, the SBUF share per allocation site that decides how
many rotating copies a block gets).

    python benchmarks/trn2_gemm.py --json trn2_gemm.json      # all 20 points, about 3 minutes
    python benchmarks/trn2_gemm.py --points 4 --no-check      # a quick trial
    options: --positions search|L,R  --dma-per-tile  --variant NAME=VALUE[,...] | none
             --out-dtype bfloat16|float32  --measurements FILE

The generated kernels take bf16 inputs and return a bf16 result, as AWS's kernel does (its
HBM result and its SBUF accumulator take the input dtype), so the store's DMA bytes and the
VectorE accumulation are those of the measured kernel. Their DMAs move a row of tiles at once
(one 128-partition DMA per block row); `--dma-per-tile` issues one per tile as AWS's kernel
writes them (256-byte rows for 128x128 bf16 tiles, which the model's DMA efficiency curve
prices at 10%). No SBUF memset precedes the operand loads (AWS zeroes each block for padding;
these shapes need none).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fitness.simulator.perf.check import spearman

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MEASUREMENTS = REPO.parent / "shared" / "trn2-measurements" / "measurements.json"
TILE = {"K": 128, "M": 128, "N": 512}   # partition (contraction), stationary free, moving free
FAMILIES = ("lhs_rhs", "lhsT_rhs")
SBUF_USABLE_BYTES = 208 * 1024          # trn2: 224 KiB per partition less the 16 KiB reserve


# --- configurations -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class GemmConfig:
    """One kernel of the autotuner's space: family, shape, loop order (outer to inner), tiles
    per block per axis, and the depth of the two operand loads (AWS's relative positions:
    0 = before all loops, 1 = inside the outer loop of the operand's two axes, 2 = inside
    both)."""

    family: str
    M: int
    K: int
    N: int
    loop_order: str
    tiles_per_block: dict[str, int]
    lhs_position: int = 2
    rhs_position: int = 2
    out_dtype: str = "bfloat16"
    dma_per_tile: bool = False     # one DMA per tile (AWS's granularity) instead of per row of tiles

    def tiles_in(self, axis: str) -> int:
        """Tiles along `axis`."""
        return getattr(self, axis) // TILE[axis]

    def blocks(self, axis: str) -> int:
        """Blocks along `axis`."""
        return self.tiles_in(axis) // self.tiles_per_block[axis]

    def validate(self) -> None:
        """Raise ValueError for a configuration the generator cannot build."""
        if self.family not in FAMILIES:
            raise ValueError(f"unknown family {self.family!r}")
        if sorted(self.loop_order) != ["K", "M", "N"]:
            raise ValueError(f"loop order {self.loop_order!r} is not a permutation of MNK")
        for axis in "KMN":
            size, tpb = getattr(self, axis), self.tiles_per_block[axis]
            if size % TILE[axis]:
                raise ValueError(f"{axis}={size} is not a multiple of its tile {TILE[axis]}")
            if tpb < 1 or self.tiles_in(axis) % tpb:
                raise ValueError(f"{tpb} tiles per block do not divide the {self.tiles_in(axis)} tiles of {axis}")
        if self.lhs_position not in (0, 1, 2) or self.rhs_position not in (0, 1, 2):
            raise ValueError("operand positions are 0, 1 or 2")


OPERAND_AXES = {"lhs": ("M", "K"), "rhs": ("K", "N"), "result": ("M", "N")}


@dataclass(frozen=True)
class Structure:
    """Where each operation of a configuration sits: absolute depth 0-3 (0 = before the
    outer loop, 3 = inside the inner one), the trip count of each loop (a loop no deeper
    operation depends on runs once), and per operand and axis whether it holds one block
    (the enclosing loop's) or the whole axis."""

    depth: dict[str, int]
    trips: tuple[int, int, int]
    blocked: dict[str, dict[str, bool]]


def structure(cfg: GemmConfig) -> Structure:
    """The loop nest of `cfg` (the autotuner's placement rules, rewritten)."""
    pos = {axis: i for i, axis in enumerate(cfg.loop_order)}

    def absolute(relative: int, axes: tuple[str, str]) -> int:
        inner = sorted(pos[a] for a in axes)
        return 0 if relative == 0 else inner[relative - 1] + 1

    depth = {"lhs": absolute(cfg.lhs_position, OPERAND_AXES["lhs"]),
             "rhs": absolute(cfg.rhs_position, OPERAND_AXES["rhs"]),
             "result": pos["K"]}     # the accumulator is created and stored around the K loop
    trips = []
    for i, axis in enumerate(cfg.loop_order):
        used = any(d > i and axis in OPERAND_AXES[op] for op, d in depth.items())
        trips.append(cfg.blocks(axis) if used else 1)
    blocked = {op: {a: pos[a] < d for a in OPERAND_AXES[op]} for op, d in depth.items()}
    return Structure(depth, (trips[0], trips[1], trips[2]), blocked)


def sbuf_bytes(cfg: GemmConfig) -> int:
    """Bytes per partition of one copy of each SBUF block (lhs, rhs, accumulator)."""
    st = structure(cfg)

    def tiles(op: str, axis: str) -> int:
        return cfg.tiles_per_block[axis] if st.blocked[op][axis] else cfg.tiles_in(axis)

    out_size = 4 if cfg.out_dtype == "float32" else 2
    lhs = tiles("lhs", "M") * tiles("lhs", "K") * TILE["K"] * 2
    rhs = tiles("rhs", "K") * tiles("rhs", "N") * TILE["N"] * 2
    res = tiles("result", "M") * tiles("result", "N") * TILE["N"] * out_size
    return lhs + rhs + res


# --- kernel generator ---------------------------------------------------------------------------------

_HELPERS = '''
TK, TM, TN = 128, 128, 512


def load_lhs(src, m0, nm, k0, nk):
    """lhs tiles m0..m0+nm-1 (M) x k0..k0+nk-1 (K)."""
{load_lhs}


def stationary(blk, i, j):
    """The (K, M) tile of an lhs block: M tile i, K tile j (block-local)."""
{stationary}


def load_rhs(src, k0, nk, n0, nn):
    """rhs tiles k0..k0+nk-1 x n0..n0+nn-1 as [TK, nk, nn * TN]."""
{load_rhs}


def new_accumulator(nm, nn):
    """A zeroed {out} accumulator of nm x nn result tiles, [TM, nm, nn * TN]."""
    acc = nl.ndarray((TM, nm, nn * TN), dtype=nl.{out}, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    return acc


def multiply(lblk, lm, lk, rblk, rk, rn, acc, am, an, nm, nn, nk):
    """acc[am + i, an + j] += sum over kk of lhs[lm + i, lk + kk] @ rhs[rk + kk, rn + j]:
    one PSUM tile per result tile, accumulated over the K tiles, then added into acc."""
    for i in nl.affine_range(nm):
        for j in nl.affine_range(nn):
            ps = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for kk in nl.affine_range(nk):
                nisa.nc_matmul(dst=ps, stationary=stationary(lblk, lm + i, lk + kk),
                               moving=rblk[0:TK, rk + kk, (rn + j) * TN:(rn + j + 1) * TN],
                               accumulate=kk > 0)
            tile = acc[0:TM, am + i, (an + j) * TN:(an + j + 1) * TN]
            nisa.tensor_tensor(dst=tile, data1=tile, data2=ps, op=nl.add)


def store(result, acc, m0, nm, n0, nn):
    """acc (nm x nn tiles from tile (m0, n0)) to HBM."""
{store}
'''

_LOAD_LHST = '''    blk = nl.ndarray((TK, nk, nm * TM), dtype=src.dtype, buffer=nl.sbuf)   # src is lhsT (K, M)
    for kt in nl.affine_range(nk):
{dma}
    return blk'''

_STATIONARY_LHST = '''    return blk[0:TK, j, i * TM:(i + 1) * TM]'''

_LOAD_LHS = '''    blk = nl.ndarray((TM, nm, nk * TK), dtype=src.dtype, buffer=nl.sbuf)   # src is lhs (M, K)
    for mt in nl.affine_range(nm):
{dma}
    # Transpose every 128x128 tile in place (TensorE into PSUM, copied back): tile (mt, kt)
    # then holds lhsT's (K, M) tile.
    for mt in nl.affine_range(nm):
        for kt in nl.affine_range(nk):
            tp = nl.ndarray((TK, TM), dtype=src.dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=tp, data=blk[0:TM, mt, kt * TK:(kt + 1) * TK], engine=nisa.tensor_engine)
            nisa.tensor_copy(dst=blk[0:TM, mt, kt * TK:(kt + 1) * TK], src=tp)
    return blk'''

_STATIONARY_LHS = '''    return blk[0:TK, i, j * TK:(j + 1) * TK]'''

# One DMA per row of tiles (a block's free extent at once, the SDK tutorial's advice), or one
# per tile as AWS's kernel issues them (`GemmConfig.dma_per_tile`).
_DMA_ROWS = {
    "lhsT": """        nisa.dma_copy(dst=blk[0:TK, kt, 0:nm * TM],
                      src=src[(k0 + kt) * TK:(k0 + kt + 1) * TK, m0 * TM:(m0 + nm) * TM])""",
    "lhs": """        nisa.dma_copy(dst=blk[0:TM, mt, 0:nk * TK],
                      src=src[(m0 + mt) * TM:(m0 + mt + 1) * TM, k0 * TK:(k0 + nk) * TK])""",
    "rhs": """        nisa.dma_copy(dst=blk[0:TK, kt, 0:nn * TN],
                      src=src[(k0 + kt) * TK:(k0 + kt + 1) * TK, n0 * TN:(n0 + nn) * TN])""",
    "store": """        nisa.dma_copy(dst=result[(m0 + i) * TM:(m0 + i + 1) * TM, n0 * TN:(n0 + nn) * TN],
                      src=acc[0:TM, i, 0:nn * TN])""",
}
_DMA_TILES = {
    "lhsT": """        for mt in nl.affine_range(nm):
            nisa.dma_copy(dst=blk[0:TK, kt, mt * TM:(mt + 1) * TM],
                          src=src[(k0 + kt) * TK:(k0 + kt + 1) * TK, (m0 + mt) * TM:(m0 + mt + 1) * TM])""",
    "lhs": """        for kt in nl.affine_range(nk):
            nisa.dma_copy(dst=blk[0:TM, mt, kt * TK:(kt + 1) * TK],
                          src=src[(m0 + mt) * TM:(m0 + mt + 1) * TM, (k0 + kt) * TK:(k0 + kt + 1) * TK])""",
    "rhs": """        for nt in nl.affine_range(nn):
            nisa.dma_copy(dst=blk[0:TK, kt, nt * TN:(nt + 1) * TN],
                          src=src[(k0 + kt) * TK:(k0 + kt + 1) * TK, (n0 + nt) * TN:(n0 + nt + 1) * TN])""",
    "store": """        for j in nl.affine_range(nn):
            nisa.dma_copy(dst=result[(m0 + i) * TM:(m0 + i + 1) * TM, (n0 + j) * TN:(n0 + j + 1) * TN],
                          src=acc[0:TM, i, j * TN:(j + 1) * TN])""",
}


def kernel_source(cfg: GemmConfig) -> str:
    """Source of a current-dialect NKI kernel `kernel(lhs, rhs)` for `cfg` (lhs is (M, K) for
    `lhs_rhs`, (K, M) for `lhsT_rhs`; rhs (K, N); bf16 inputs; result (M, N) in
    `cfg.out_dtype`)."""
    cfg.validate()
    st = structure(cfg)
    tpb = cfg.tiles_per_block
    transposed = cfg.family == "lhsT_rhs"
    dma = _DMA_TILES if cfg.dma_per_tile else _DMA_ROWS
    load_lhs = (_LOAD_LHST if transposed else _LOAD_LHS).replace("{dma}", dma["lhsT" if transposed else "lhs"])
    load_rhs = ("    blk = nl.ndarray((TK, nk, nn * TN), dtype=src.dtype, buffer=nl.sbuf)\n"
                "    for kt in nl.affine_range(nk):\n" + dma["rhs"] + "\n    return blk")
    store = "    for i in nl.affine_range(nm):\n" + dma["store"]
    helpers = _HELPERS.format(load_lhs=load_lhs, stationary=_STATIONARY_LHST if transposed else _STATIONARY_LHS,
                              load_rhs=load_rhs, store=store, out=cfg.out_dtype)

    def extent(op: str, axis: str) -> tuple[str, int]:
        """(first tile expression, tile count) of `op` along `axis`."""
        if st.blocked[op][axis]:
            return f"b{axis} * {tpb[axis]}", tpb[axis]
        return "0", cfg.tiles_in(axis)

    def load(op: str) -> str:
        if op == "lhs":
            (m0, nm), (k0, nk) = extent("lhs", "M"), extent("lhs", "K")
            return f"lhs_blk = load_lhs(lhs, {m0}, {nm}, {k0}, {nk})"
        if op == "rhs":
            (k0, nk), (n0, nn) = extent("rhs", "K"), extent("rhs", "N")
            return f"rhs_blk = load_rhs(rhs, {k0}, {nk}, {n0}, {nn})"
        (_, nm), (_, nn) = extent("result", "M"), extent("result", "N")
        return f"acc = new_accumulator({nm}, {nn})"

    def overlap(axis: str, a: str, b: str) -> tuple[str, int, str, str]:
        """Tiles of `axis` both operands hold: start, count, and the start local to each."""
        if st.blocked[a][axis] or st.blocked[b][axis]:
            start, count = f"b{axis} * {tpb[axis]}", tpb[axis]
        else:
            start, count = "0", cfg.tiles_in(axis)
        return (start, count, "0" if st.blocked[a][axis] else start, "0" if st.blocked[b][axis] else start)

    _, cm, lm, am = overlap("M", "lhs", "result")
    _, cn, rn, an = overlap("N", "rhs", "result")
    _, ck, lk, rk = overlap("K", "lhs", "rhs")
    mult = f"multiply(lhs_blk, {lm}, {lk}, rhs_blk, {rk}, {rn}, acc, {am}, {an}, {cm}, {cn}, {ck})"
    (m0, nm), (n0, nn) = extent("result", "M"), extent("result", "N")
    save = f"store(result, acc, {m0}, {nm}, {n0}, {nn})"

    body: list[str] = []
    ind = "    "
    for depth in range(4):
        pad = ind * (depth + 1)
        for op in ("lhs", "rhs", "result"):
            if st.depth[op] == depth:
                body.append(pad + load(op))
        if depth == 3:
            body.append(pad + mult)
            break
        axis = cfg.loop_order[depth]
        # the K block loop carries the accumulation into `acc`
        kind = "sequential_range" if axis == "K" else "affine_range"
        body.append(f"{pad}for b{axis} in nl.{kind}({st.trips[depth]}):")
    # the store follows the K loop, at the accumulator's depth
    # after the K loop's body: a sibling of its `for`, at the accumulator's depth
    body.append(ind * (st.depth["result"] + 1) + save)

    header = (f'"""{cfg.family} GEMM {cfg.M}x{cfg.K}x{cfg.N}, loop order {cfg.loop_order} (outer to inner), '
              f'tiles per block K={tpb["K"]} M={tpb["M"]} N={tpb["N"]}, lhs/rhs positions '
              f'{cfg.lhs_position}/{cfg.rhs_position}; generated by benchmarks/trn2_gemm.py."""\n\n'
              "import nki\nimport nki.isa as nisa\nimport nki.language as nl\n")
    shape_lhs = f"({cfg.K}, {cfg.M})" if transposed else f"({cfg.M}, {cfg.K})"
    kernel = ["", "", "@nki.jit", "def kernel(lhs, rhs):",
              f'    """lhs {shape_lhs}, rhs ({cfg.K}, {cfg.N}), both bf16 -> result ({cfg.M}, {cfg.N})."""',
              f"    result = nl.ndarray(({cfg.M}, {cfg.N}), dtype=nl.{cfg.out_dtype}, buffer=nl.shared_hbm)",
              *body, "    return result", ""]
    return header + helpers + "\n".join(kernel)


# --- running ------------------------------------------------------------------------------------------

def inputs(cfg: GemmConfig, seed: int = 0) -> tuple[Any, Any]:
    """Random bf16 operands in the kernel's layout."""
    import ml_dtypes
    import numpy as np

    rng = np.random.default_rng(seed)
    lhs_shape = (cfg.K, cfg.M) if cfg.family == "lhsT_rhs" else (cfg.M, cfg.K)
    lhs = rng.standard_normal(lhs_shape, dtype=np.float32).astype(ml_dtypes.bfloat16)
    rhs = rng.standard_normal((cfg.K, cfg.N), dtype=np.float32).astype(ml_dtypes.bfloat16)
    return lhs, rhs


def check(cfg: GemmConfig) -> float:
    """Run `cfg` with real data; return max |out - ref| / max |ref| against NumPy (fp32 math
    on the bf16 inputs)."""
    import numpy as np

    from fitness.simulator import run_kernel

    lhs, rhs = inputs(cfg)
    out = run_kernel(kernel_source(cfg), [lhs, rhs]).outputs
    a = lhs.astype(np.float32)
    ref = (a.T if cfg.family == "lhsT_rhs" else a) @ rhs.astype(np.float32)
    return float(np.max(np.abs(np.asarray(out, dtype=np.float32) - ref)) / np.max(np.abs(ref)))


@dataclass
class Estimate:
    """The model's figures for one kernel (shipped parameters), and its latency under each
    parameter variant (the model's code and shipped values unchanged)."""

    latency_ms: float
    bottleneck: str
    instructions: int
    trace_s: float
    model_s: float
    profile: dict[str, Any] = field(default_factory=dict)
    variants: dict[str, float] = field(default_factory=dict)


def parse_variant(text: str) -> dict[str, float]:
    """"name=value[,name=value]" -> parameter changes (`fitness.simulator.perf.params.Params`)."""
    out: dict[str, float] = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        out[name.strip()] = float(value)
    return out


def estimate(cfg: GemmConfig, target: str = "trn2", variants: tuple[str, ...] = ()) -> Estimate:
    """Trace `cfg` shape-only and time it with the model for `target`; also re-time the same
    trace with the shipped parameters changed as each of `variants` says."""
    import ml_dtypes
    import numpy as np

    from fitness.simulator import ShapeDtype, run_kernel
    from fitness.simulator.perf import estimate as perf_estimate
    from fitness.simulator.perf import hardware
    from fitness.simulator.perf.model import estimate_with
    from fitness.simulator.perf.params import for_target

    lhs_shape = (cfg.K, cfg.M) if cfg.family == "lhsT_rhs" else (cfg.M, cfg.K)
    bf16 = np.dtype(ml_dtypes.bfloat16)
    args = [ShapeDtype(lhs_shape, bf16), ShapeDtype((cfg.K, cfg.N), bf16)]
    t0 = time.perf_counter()
    trace = run_kernel(kernel_source(cfg), args, shape_only=True).trace
    t1 = time.perf_counter()
    est = perf_estimate(trace, target)
    t2 = time.perf_counter()
    shipped = for_target(target)
    other = {v: estimate_with(trace, hardware(target), shipped.replace(**parse_variant(v))).latency_ms
             for v in variants}
    keep = ("hbm_read_bytes", "hbm_write_bytes", "hardware_flops", "transpose_flops",
            "tensor_engine_active_time_percent", "vector_engine_active_time_percent",
            "scalar_engine_active_time_percent", "dma_active_time_percent")
    return Estimate(est.latency_ms, est.bottleneck, len(trace.instrs), t1 - t0, t2 - t1,
                    {k: est.profile[k] for k in keep if k in est.profile}, other)


# --- measurements ---------------------------------------------------------------------------------------

@dataclass
class Point:
    """One measured point and the configuration the benchmark builds for it."""

    family: str
    size: int
    loop_order: str
    tiles: dict[str, int]          # as measured
    measured_ms: float
    used_tiles: dict[str, int]     # as built (see `load_points`)
    note: str = ""


def load_points(path: Path) -> list[Point]:
    """The `gemm_autotune` points. A tiles-per-block figure larger than the axis's tile
    count (lhs_rhs at 512 reports M=6 of 4 tiles) is built as one block over the axis."""
    data = json.loads(path.read_text())["gemm_autotune"]["points"]
    points = []
    for p in data:
        shape = p["shape"]
        if not shape["M"] == shape["K"] == shape["N"]:
            raise ValueError(f"non-square point {shape}")
        size = shape["M"]
        tiles = {a: int(p["tiles_per_block"][a]) for a in "KMN"}
        used, notes = dict(tiles), []
        for axis in "KMN":
            total = size // TILE[axis]
            if tiles[axis] > total:
                used[axis] = total
                notes.append(f"{axis} tiles {tiles[axis]} > {total} in the axis: built as {total}")
        points.append(Point(p["kernel_family"], size, p["loop_order"], tiles, float(p["min_latency_ms"]), used,
                            "; ".join(notes)))
    return points


def placements(positions: str) -> list[tuple[int, int]]:
    """The (lhs, rhs) positions to try: all nine for "search", else the one given as "L,R"."""
    if positions == "search":
        return list(itertools.product((0, 1, 2), repeat=2))
    left, right = (int(x) for x in positions.split(","))
    return [(left, right)]


def configs_for(point: Point, positions: str, out_dtype: str, dma_per_tile: bool) -> list[GemmConfig]:
    """Distinct configurations of `point` (placements that give the same loop nest are
    built once) that fit in SBUF with one copy of each block."""
    seen: set = set()
    out = []
    for lp, rp in placements(positions):
        cfg = GemmConfig(point.family, point.size, point.size, point.size, point.loop_order, point.used_tiles,
                         lp, rp, out_dtype, dma_per_tile)
        cfg.validate()
        st = structure(cfg)
        key = (tuple(sorted(st.depth.items())), st.trips)
        if key in seen or sbuf_bytes(cfg) > SBUF_USABLE_BYTES:
            continue
        seen.add(key)
        out.append(cfg)
    return out


# --- statistics ---------------------------------------------------------------------------------------

def abs_errors(measured: list[float], predicted: list[float]) -> tuple[float, float]:
    """(median, max) |predicted / measured - 1|."""
    errs = [abs(p / m - 1) for m, p in zip(measured, predicted)]
    return statistics.median(errs), max(errs)


def best_scale(measured: list[float], predicted: list[float]) -> tuple[float, float]:
    """Scale factors s for predicted*s: (the one minimising the median |relative error|,
    the geometric mean of measured/predicted, i.e. least squares in log space)."""
    a = [p / m for m, p in zip(measured, predicted)]
    # each |s*a_i - 1| is V-shaped: the median's minimum is at a kink 1/a_i or where two
    # branches of opposite slope cross, 2/(a_i + a_j)
    cands = [1 / x for x in a] + [2 / (x + y) for x, y in itertools.combinations(a, 2)]
    best = min(cands, key=lambda c: abs_errors(measured, [c * p for p in predicted])[0])
    geo = math.exp(statistics.fmean(-math.log(x) for x in a))
    return best, geo


def best_shift(measured: list[float], predicted: list[float]) -> float:
    """The fixed time d (ms) added to every prediction that minimises the median |relative
    error|: a change of `launch_us` alone (the model adds it to every latency)."""
    b = [1 / m for m in measured]
    c = [p / m - 1 for m, p in zip(measured, predicted)]
    # |d*b_i + c_i|: kinks at -c_i/b_i, crossings of two branches of opposite or equal sign
    cands = [-ci / bi for bi, ci in zip(b, c)]
    for i, j in itertools.combinations(range(len(b)), 2):
        cands.append(-(c[i] + c[j]) / (b[i] + b[j]))
        if b[i] != b[j]:
            cands.append((c[j] - c[i]) / (b[i] - b[j]))
    return min(cands, key=lambda d: abs_errors(measured, [p + d for p in predicted])[0])


def fit_scale_and_shift(measured: list[float], predicted: list[float], fixed: float) -> tuple[float, float]:
    """(s, L) minimising sum ((s * (p - fixed) + L) / m - 1)^2: the model's schedule scaled
    by s and its fixed launch cost `fixed` (ms) replaced by L."""
    xs = [(p - fixed) / m for m, p in zip(measured, predicted)]
    ys = [1 / m for m in measured]
    sxx, sxy, syy = sum(x * x for x in xs), sum(x * y for x, y in zip(xs, ys)), sum(y * y for y in ys)
    sx, sy = sum(xs), sum(ys)
    det = sxx * syy - sxy * sxy
    return (sx * syy - sy * sxy) / det, (sy * sxx - sx * sxy) / det


# --- main ---------------------------------------------------------------------------------------------

CHECKS = (
    # (family, size, loop order, tiles per block, lhs pos, rhs pos): the measured 512 configs,
    # plus blocked K (bf16 accumulation across K blocks) and other operand depths at 1024
    ("lhs_rhs", 512, "NKM", {"K": 2, "M": 4, "N": 1}, 2, 2),
    ("lhsT_rhs", 512, "KNM", {"K": 4, "M": 1, "N": 1}, 2, 2),
    ("lhs_rhs", 1024, "MNK", {"K": 2, "M": 2, "N": 1}, 1, 0),
    ("lhsT_rhs", 1024, "NKM", {"K": 4, "M": 4, "N": 1}, 0, 1),
)
CHECK_TOLERANCE = 2e-2   # bf16 result (8-bit mantissa) and bf16 accumulation across K blocks
DEFAULT_VARIANTS = ("buffer_share=0.5",)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measurements", default=str(DEFAULT_MEASUREMENTS))
    ap.add_argument("--points", type=int, default=None, help="only the first N points")
    ap.add_argument("--positions", default="search",
                    help='"search" (every operand placement that fits, fastest kept) or "L,R"')
    ap.add_argument("--out-dtype", default="bfloat16", choices=("bfloat16", "float32"))
    ap.add_argument("--dma-per-tile", action="store_true",
                    help="one DMA per 128x128 / 128x512 tile, as AWS's kernel writes them (default: per row of tiles)")
    ap.add_argument("--variant", action="append", default=None, metavar="NAME=VALUE[,NAME=VALUE]",
                    help="also re-time every trace with these parameters changed (default: "
                         f"{' '.join(DEFAULT_VARIANTS)}); 'none' for no variant")
    ap.add_argument("--target", default="trn2")
    ap.add_argument("--no-check", action="store_true", help="skip the correctness runs")
    ap.add_argument("--json", default=None, help="write the rows and summary here")
    args = ap.parse_args(argv)
    variants = tuple(v for v in (args.variant or DEFAULT_VARIANTS) if v != "none")
    sys.path.insert(0, str(REPO))
    t_start = time.perf_counter()

    if not args.no_check:
        for fam, size, order, tiles, lp, rp in CHECKS:
            cfg = GemmConfig(fam, size, size, size, order, tiles, lp, rp, args.out_dtype, args.dma_per_tile)
            t0 = time.perf_counter()
            err = check(cfg)
            ok = err <= CHECK_TOLERANCE
            print(f"check {fam:<8} {size:>5} {order} K{tiles['K']} M{tiles['M']} N{tiles['N']} pos {lp},{rp}: "
                  f"max |err| / max |ref| = {err:.1e} {'ok' if ok else 'FAILED'} ({time.perf_counter() - t0:.1f} s)",
                  flush=True)
            if not ok:
                return 1

    points = load_points(Path(args.measurements))
    if args.points is not None:
        points = points[:args.points]
    rows: list[dict[str, Any]] = []
    from fitness.simulator.perf import hardware
    from fitness.simulator.perf.params import for_target

    peak, launch_ms = hardware(args.target).tensor_peak_flops, for_target(args.target).launch_us * 1e-3
    head = (f"{'family':<9} {'shape':>5} {'order':>5} {'tiles K/M/N':>11} {'pos':>3} {'measured':>8} "
            f"{'predicted':>9} {'error':>7} {'floor':>6}  {'instrs':>6} {'s':>5}  bottleneck (chosen placement)")
    print(f"\n{head}\n{'-' * len(head)}")
    for pt in points:
        t0 = time.perf_counter()
        tried = [(cfg, estimate(cfg, args.target, variants))
                 for cfg in configs_for(pt, args.positions, args.out_dtype, args.dma_per_tile)]
        if not tried:
            print(f"{pt.family:<9} {pt.size:>5} {pt.loop_order:>5}  no placement fits in SBUF", flush=True)
            continue
        cfg, est = min(tried, key=lambda ce: ce[1].latency_ms)
        err = est.latency_ms / pt.measured_ms - 1
        secs = time.perf_counter() - t0
        tiles = "/".join(str(pt.tiles[a]) for a in "KMN")
        floor = 2 * pt.size ** 3 / peak * 1e3 + launch_ms   # matmuls alone at TensorE's peak, plus launch
        rows.append({
            "family": pt.family, "size": pt.size, "loop_order": pt.loop_order, "tiles": pt.tiles,
            "used_tiles": pt.used_tiles, "note": pt.note, "measured_ms": pt.measured_ms,
            "predicted_ms": est.latency_ms, "error": err, "lhs_position": cfg.lhs_position,
            "rhs_position": cfg.rhs_position, "bottleneck": est.bottleneck, "instructions": est.instructions,
            "seconds": secs, "tensore_floor_ms": floor, "profile": est.profile,
            "placements": [{"lhs_position": c.lhs_position, "rhs_position": c.rhs_position,
                            "predicted_ms": e.latency_ms, "variants": e.variants} for c, e in tried],
            "variants": {v: min(e.variants[v] for _, e in tried) for v in variants},
        })
        print(f"{pt.family:<9} {pt.size:>5} {pt.loop_order:>5} {tiles + ('*' if pt.note else ''):>11} "
              f"{cfg.lhs_position},{cfg.rhs_position} {pt.measured_ms:>8.3f} {est.latency_ms:>9.3f} "
              f"{100 * err:>+6.1f}% {floor:>6.3f}  {est.instructions:>6} {secs:>5.1f}  {est.bottleneck}", flush=True)
    for row in rows:
        if row["note"]:
            print(f"* {row['family']} {row['size']}: {row['note']}")

    summary = summarize(rows, variants, args.target)
    print_summary(summary)
    wall = time.perf_counter() - t_start
    print(f"\nwall time {wall:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "target": args.target, "positions": args.positions, "out_dtype": args.out_dtype,
            "dma_per_tile": args.dma_per_tile, "rows": rows, "summary": summary, "wall_s": wall}, indent=1))
    return 0


def summarize(rows: list[dict[str, Any]], variants: tuple[str, ...] = (), target: str = "trn2") -> dict[str, Any]:
    """Error, rank and ordering figures; what one scale factor, one fixed shift (launch_us)
    or both, fitted to these points, would do; the same figures under each variant."""
    if not rows:
        return {}
    from fitness.simulator.perf.params import for_target

    meas = [r["measured_ms"] for r in rows]
    pred = [r["predicted_ms"] for r in rows]
    med, mx = abs_errors(meas, pred)
    out: dict[str, Any] = {"points": len(rows), "median_abs_error": med, "max_abs_error": mx,
                           "spearman": spearman(meas, pred) if len(rows) > 1 else None}
    fam_order = []
    for size in sorted({r["size"] for r in rows}):
        pair = {r["family"]: r for r in rows if r["size"] == size}
        if len(pair) < 2:
            continue
        a, b = pair["lhs_rhs"], pair["lhsT_rhs"]
        m_faster = "lhsT_rhs" if b["measured_ms"] < a["measured_ms"] else "lhs_rhs"
        p_faster = "lhsT_rhs" if b["predicted_ms"] < a["predicted_ms"] else "lhs_rhs"
        fam_order.append({"size": size, "measured_faster": m_faster, "predicted_faster": p_faster,
                          "measured_ratio": a["measured_ms"] / b["measured_ms"],
                          "predicted_ratio": a["predicted_ms"] / b["predicted_ms"], "same": m_faster == p_faster})
    out["family_order"] = fam_order
    shape_order = {}
    for fam in FAMILIES:
        fr = sorted((r for r in rows if r["family"] == fam), key=lambda r: r["size"])
        if len(fr) < 2:
            continue
        inverted = [(x["size"], y["size"]) for x, y in itertools.combinations(fr, 2)
                    if (x["measured_ms"] < y["measured_ms"]) != (x["predicted_ms"] < y["predicted_ms"])]
        shape_order[fam] = {"pairs": len(fr) * (len(fr) - 1) // 2, "inverted": inverted,
                            "spearman": spearman([r["measured_ms"] for r in fr], [r["predicted_ms"] for r in fr])}
    out["shape_order"] = shape_order

    over_floor = [r["measured_ms"] / r["tensore_floor_ms"] for r in rows if r["size"] >= 2048]
    if over_floor:
        out["measured_over_floor_ge2048"] = (min(over_floor), max(over_floor))
    launch_ms = for_target(target).launch_us * 1e-3
    s_med, s_geo = best_scale(meas, pred)
    d = best_shift(meas, pred)
    s2, l2 = fit_scale_and_shift(meas, pred, launch_ms)
    fit = {"scale_median_optimal": s_med, "after_scale_median_optimal": abs_errors(meas, [s_med * p for p in pred]),
           "scale_geometric": s_geo, "after_scale_geometric": abs_errors(meas, [s_geo * p for p in pred]),
           "launch_shift_ms": d, "launch_us_shipped": launch_ms * 1e3,
           "after_launch_shift": abs_errors(meas, [p + d for p in pred]),
           "scale_with_launch": s2, "launch_us_with_scale": l2 * 1e3,
           "after_scale_with_launch": abs_errors(meas, [s2 * (p - launch_ms) + l2 for p in pred])}
    big = [i for i, r in enumerate(rows) if r["size"] >= 2048]
    if 2 <= len(big) < len(rows):
        mb, pb = [meas[i] for i in big], [pred[i] for i in big]
        s_big = best_scale(mb, pb)[1]
        fit.update({"scale_geometric_ge2048": s_big, "after_scale_ge2048_on_those": abs_errors(mb, [s_big * p for p in pb]),
                    "after_scale_ge2048_on_all": abs_errors(meas, [s_big * p for p in pred])})
    out["fits"] = fit
    out["variants"] = {}
    for v in variants:
        pv = [r["variants"][v] for r in rows]
        vm, vx = abs_errors(meas, pv)
        dv = best_shift(meas, pv)
        out["variants"][v] = {"median_abs_error": vm, "max_abs_error": vx, "launch_shift_ms": dv,
                              "after_launch_shift": abs_errors(meas, [p + dv for p in pv]),
                              "spearman": spearman(meas, pv) if len(rows) > 1 else None,
                              "errors": {f"{r['family']} {r['size']}": p / r["measured_ms"] - 1 for r, p in zip(rows, pv)}}
    return out


def pct(x: float) -> str:
    """A fraction as a percentage."""
    return f"{100 * x:.1f}%"


def print_summary(s: dict[str, Any]) -> None:
    """Print what `summarize` computed."""
    if not s:
        return
    rho = "n/a" if s["spearman"] is None else f"{s['spearman']:.3f}"
    print(f"\npoints {s['points']}: median |error| {pct(s['median_abs_error'])}, max {pct(s['max_abs_error'])}, "
          f"Spearman {rho}")
    if s["family_order"]:
        ok = sum(f["same"] for f in s["family_order"])
        print(f"faster family per shape as measured: {ok}/{len(s['family_order'])} shapes "
              "(ratio = lhs_rhs / lhsT_rhs latency)")
        for f in s["family_order"]:
            print(f"  {f['size']:>5}: measured {f['measured_faster']:<8} {f['measured_ratio']:.3f}, "
                  f"predicted {f['predicted_faster']:<8} {f['predicted_ratio']:.3f}  {'ok' if f['same'] else 'WRONG'}")
    for fam, so in s["shape_order"].items():
        inv = ", ".join(f"{a} vs {b}" for a, b in so["inverted"]) or "none"
        print(f"shapes within {fam}: {so['pairs'] - len(so['inverted'])}/{so['pairs']} pairs ordered as measured "
              f"(Spearman {so['spearman']:.3f}); inverted: {inv}")
    if "measured_over_floor_ge2048" in s:
        lo, hi = s["measured_over_floor_ge2048"]
        print(f"measured / TensorE floor (2MNK at the model's bf16 peak + launch_us) at >= 2048: {lo:.3f} .. {hi:.3f}")
    f = s["fits"]
    print("\nfitted to these points (the model unchanged; what a partial calibration could do):")
    print(f"  one scale, median-optimal   x{f['scale_median_optimal']:.3f}: median "
          f"{pct(f['after_scale_median_optimal'][0])}, max {pct(f['after_scale_median_optimal'][1])}")
    print(f"  one scale, geometric mean   x{f['scale_geometric']:.3f}: median "
          f"{pct(f['after_scale_geometric'][0])}, max {pct(f['after_scale_geometric'][1])}")
    print(f"  launch_us alone             {f['launch_us_shipped']:.1f} -> {f['launch_us_shipped'] + 1e3 * f['launch_shift_ms']:.1f} us: "
          f"median {pct(f['after_launch_shift'][0])}, max {pct(f['after_launch_shift'][1])}")
    print(f"  scale + launch_us (LSQ)     x{f['scale_with_launch']:.3f}, {f['launch_us_with_scale']:.1f} us: median "
          f"{pct(f['after_scale_with_launch'][0])}, max {pct(f['after_scale_with_launch'][1])}")
    if "scale_geometric_ge2048" in f:
        print(f"  scale fitted on >= 2048     x{f['scale_geometric_ge2048']:.3f}: those median "
              f"{pct(f['after_scale_ge2048_on_those'][0])}, max {pct(f['after_scale_ge2048_on_those'][1])}; all "
              f"median {pct(f['after_scale_ge2048_on_all'][0])}, max {pct(f['after_scale_ge2048_on_all'][1])}")
    for v, fv in s["variants"].items():
        worst = max(fv["errors"].items(), key=lambda kv: abs(kv[1]))
        rho = "n/a" if fv["spearman"] is None else f"{fv['spearman']:.3f}"
        print(f"  variant {v} (re-timed, placements searched again): median {pct(fv['median_abs_error'])}, "
              f"max {pct(fv['max_abs_error'])} ({worst[0]} {100 * worst[1]:+.1f}%), Spearman {rho}")
        print(f"    and launch_us {f['launch_us_shipped'] + 1e3 * fv['launch_shift_ms']:.1f} us: median "
              f"{pct(fv['after_launch_shift'][0])}, max {pct(fv['after_launch_shift'][1])}")


if __name__ == "__main__":
    sys.exit(main())
