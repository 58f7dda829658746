"""Hot lines: where a kernel's time goes, by source line and engine.

One record and one text form for both backends, so that a prompt reads the same offline and on
a device:
- the simulator: the performance model's schedule (every op's engine, start and end, and the
  kernel line it came from; `schedule_times`);
- the trainium backend: Neuron Explorer's `Instruction` table, whose `nki_source_location`
  names the kernel line of every instruction when the kernel was compiled with
  `NKI_DEBUG_INFO=True` (fitness/backends/explorer_parquet.py).

A line's time on an engine is the length of the union of the intervals its instructions kept
that engine busy (an engine runs one instruction at a time, so on a compute engine this is the
sum of their durations; DMA transfers of one line overlap, and the union never counts a moment
twice). Its share is that time over the kernel's latency: how much of the kernel's run the line
kept the engine busy, the per-line analogue of the `*_active_time_percent` counters. Shares of
different engines overlap in time and need not add up to 1.

The profile carries them as one string under `HOT_LINES` (profile values are numbers or
strings: fitness/result.py), written by `encode` and read back, checked, by `decode`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

HOT_LINES = "hot_lines"       # the profile key
TOP = 6                       # lines a profile keeps: the prompt's and the report's
MAX_SOURCE_CHARS = 140        # a source line as the text form quotes it
# Engine names as the bottleneck line writes them (fitness.simulator.perf.model.ENGINE_NAMES)
# for the device's `engine` values (the schema page's examples: "tensor"; the analysis page's
# "Tensor", "Vector", "Sync"); other names are kept as the profiler writes them.
DEVICE_ENGINES = {"tensor": "TensorE", "pe": "TensorE", "vector": "VectorE", "dve": "VectorE",
                  "scalar": "ScalarE", "act": "ScalarE", "activation": "ScalarE", "gpsimd": "GpSimdE",
                  "pool": "GpSimdE", "sync": "SyncE", "sp": "SyncE", "dma": "DMA"}


@dataclass(frozen=True)
class HotLine:
    """One kernel line's busy time on one engine."""

    line: int          # 1-based line of the kernel source
    engine: str        # "TensorE", "VectorE", "ScalarE", "GpSimdE", "DMA", ...
    time_ns: float     # union of its instructions' intervals on that engine
    share: float       # time_ns / the kernel's latency


def device_engine(name: str) -> str:
    """The bottleneck line's name of a device engine (`DEVICE_ENGINES`), else `name` itself."""
    return DEVICE_ENGINES.get(name.strip().lower(), name.strip() or "?")


def union_ns(intervals: Iterable[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals."""
    total, cur_s, cur_e = 0.0, 0.0, -math.inf
    for s, e in sorted(intervals):
        if s > cur_e:
            if cur_e > cur_s:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e > cur_s:
        total += cur_e - cur_s
    return total


def line_times(rows: Iterable[tuple[int, str, float, float]]) -> dict[tuple[int, str], float]:
    """(line, engine) -> busy ns from (line, engine, start, end) rows (`union_ns` per key);
    rows of line <= 0 (no source line known) are left out."""
    spans: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for line, engine, start, end in rows:
        if line > 0 and end > start:
            spans.setdefault((line, engine), []).append((start, end))
    return {key: union_ns(iv) for key, iv in spans.items()}


def top(times: Mapping[tuple[int, str], float], latency_ns: float, n: int = TOP) -> list[HotLine]:
    """The `n` largest (line, engine) times as HotLines, largest first (ties by line, engine)."""
    if latency_ns <= 0:
        return []
    order = sorted(times.items(), key=lambda kv: (-kv[1], kv[0]))
    return [HotLine(line, engine, ns, min(ns / latency_ns, 1.0)) for (line, engine), ns in order[:n] if ns > 0]


def schedule_times(ops: Sequence[Any], start: Sequence[float], end: Sequence[float],
                   engine: Sequence[str], engine_names: Mapping[str, str]) -> dict[tuple[int, str], float]:
    """(line, engine) -> busy ns of a performance-model schedule: `ops` are the prepared
    program's (each with `.line` and `.kind`; an op the compiler deleted has no kind and no
    time), `start`/`end`/`engine` the schedule's per-op lists (fitness.simulator.perf.schedule),
    `engine_names` the bottleneck line's name of each engine code (perf.model.ENGINE_NAMES)."""
    rows = ((op.line, engine_names.get(engine[i], engine[i]), start[i], end[i])
            for i, op in enumerate(ops) if op.kind)
    return line_times(rows)


def encode(lines: Sequence[HotLine]) -> str:
    """The profile's string of `lines` (compact JSON: [[line, engine, ns, share], ...])."""
    return json.dumps([[h.line, h.engine, round(h.time_ns, 1), round(h.share, 5)] for h in lines],
                      separators=(",", ":"))


def decode(text: Any) -> list[HotLine]:
    """The HotLines of a profile's `HOT_LINES` value ([] for none); ValueError naming what is
    wrong when it is not `encode`'s form."""
    if text in (None, ""):
        return []
    try:
        rows = json.loads(text) if isinstance(text, str) else None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{HOT_LINES}: not JSON ({exc.msg})") from None
    if not isinstance(rows, list):
        raise ValueError(f"{HOT_LINES}: a list of [line, engine, ns, share] rows")
    out = []
    for row in rows:
        ok = (isinstance(row, list) and len(row) == 4 and isinstance(row[0], int) and row[0] > 0
              and isinstance(row[1], str) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                  and math.isfinite(v) and v >= 0 for v in row[2:]))
        if not ok:
            raise ValueError(f"{HOT_LINES}: bad row {row!r}")
        out.append(HotLine(row[0], row[1], float(row[2]), float(row[3])))
    return out


def _time(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms" if ns >= 1e5 else f"{ns / 1e3:.1f} us"


def format_lines(lines: Sequence[HotLine], source: str = "", label: str = "") -> list[str]:
    """The text form, one line per hot line: "line 30, ScalarE: 36.1% of the latency (0.376 ms):
    `code`", the code quoted from `source` when given. `label` names where the figures come
    from ("simulated trn1", "measured on trn2 hardware"); [] when there are no lines."""
    if not lines:
        return []
    code = source.splitlines()
    out = [f"hot lines ({label}): share of the kernel's latency each line keeps an engine busy"
           if label else "hot lines: share of the kernel's latency each line keeps an engine busy"]
    for h in lines:
        text = f"line {h.line}, {h.engine}: {100 * h.share:.1f}% ({_time(h.time_ns)})"
        if 0 < h.line <= len(code) and code[h.line - 1].strip():
            quoted = code[h.line - 1].strip().replace("`", "'")
            if len(quoted) > MAX_SOURCE_CHARS:
                quoted = quoted[:MAX_SOURCE_CHARS - 3] + "..."
            text += f": `{quoted}`"
        out.append(text)
    return out


def label_of(profile: Mapping[str, Any]) -> str:
    """Where a profile's figures come from, as the bottleneck line names it (the text between
    its parentheses: "simulated trn1", "measured on trn2 hardware"), else ""."""
    line = str(profile.get("bottleneck") or "")
    if "(" in line and ")" in line:
        return line.split("(", 1)[1].split(")", 1)[0].split(":", 1)[0].strip()
    return ""


def describe(text: Any, source: str = "", label: str = "") -> list[str]:
    """`format_lines` of a profile's `HOT_LINES` value; [] when it has none or a damaged record
    (a prompt or a report still shows the rest of the profile)."""
    try:
        return format_lines(decode(text), source, label)
    except ValueError:
        return []
