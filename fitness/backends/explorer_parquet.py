"""Neuron Explorer's Parquet profile: the tables this project reads, checked, as typed records.

Neuron Explorer writes every processed profile as a folder of Parquet tables, one file per
table (`Summary.parquet`, `Instruction.parquet`, ...; a large table split over numbered files,
`Instruction_0.parquet`, `Instruction_1.parquet`), with the layout's version in the `Metadata`
table's `profile_schema_version` (MAJOR.MINOR.PATCH: a new major renames or removes fields).
Table and field names here are those of the SDK's "Profile Parquet Schema Reference"
(tools/neuron-explorer/profile-schema-reference.rst, schema 7.4.0 of Neuron 2.31) and "Analyze
Profile Output" (how-to-analyze-profile-output.rst) pages. What is read:
- `Metadata`: the schema version; a major version other than `KNOWN_MAJORS` is refused;
- `Summary`: its numeric fields (the summary-json's names; `total_time` in seconds);
- `ActiveTime`: per-engine busy time (merged instruction intervals);
- `Instruction`: per-instruction engine, opcode, start and end, and, for a kernel compiled with
  `NKI_DEBUG_INFO=True`, `nki_source_location` ("file.py:42", a list when instructions were
  fused): the kernel's hot lines (fitness/measures/hotlines.py);
- `DmaPacket`: per-packet bytes, queue and queue type, DMA engine, duration.
A table the profile holds no activity of is not written (the analysis page); only `Metadata`
and `Summary` must exist. Every problem is one line (`ProfileTablesError`).

This module lives with the trainium backend because the format is the device profiler's; what
its figures mean for a search (hot lines, counters) is fitness/measures/'s. pyarrow (the
`[trainium]` extra) is imported only when tables are read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fitness.measures import hotlines

SCHEMA_PAGE = "7.4.0"          # the schema reference page these names were checked against
KNOWN_MAJORS = (7,)            # majors whose layout is that page's
PYARROW_HINT = "pip install pyarrow, or the project's [trainium] extra"


class ProfileTablesError(ValueError):
    """A Parquet profile that cannot be read as documented; the message is one line."""


class ParquetUnavailable(ProfileTablesError):
    """pyarrow is not installed."""


@dataclass(frozen=True)
class Table:
    """A table as this module reads it: the fields it needs and those it uses when present."""

    name: str
    required: tuple[str, ...]
    optional: tuple[str, ...] = ()
    must_exist: bool = False     # Metadata and Summary: every profile has them

    @property
    def fields(self) -> tuple[str, ...]:
        return self.required + self.optional


METADATA = Table("Metadata", ("profile_schema_version",), must_exist=True)
SUMMARY = Table("Summary", (), ("total_time",), must_exist=True)   # and every other numeric field
ACTIVE_TIME = Table("ActiveTime", ("start_ts", "end_ts", "engine"))
INSTRUCTION = Table("Instruction", ("start_ts", "end_ts", "engine", "opcode"), ("nki_source_location",))
DMA_PACKET = Table("DmaPacket", ("start_ts", "end_ts", "transfer_bytes", "queue_type"),
                   ("queue_name", "engine_idx"))
TABLES = (METADATA, SUMMARY, ACTIVE_TIME, INSTRUCTION, DMA_PACKET)

# "file.py:42" (one location, or several in a list's text: "['a.py:3', 'a.py:9']")
LOCATION = re.compile(r"([^\s\[\]'\",;]+):(\d+)")


@dataclass(frozen=True, slots=True)
class Instruction:
    """One row of `Instruction`: an instruction of a NeuronCore compute engine."""

    engine: str                 # the profiler's name ("tensor", "Vector", ...)
    opcode: str
    start_ns: int
    end_ns: int
    sources: tuple[tuple[str, int], ...] = ()   # (file, line) of its NKI source locations


@dataclass(frozen=True, slots=True)
class DmaPacket:
    """One row of `DmaPacket`."""

    queue_type: str             # DmaQueueType: instruction, input, output, data, software_dynamic, ...
    queue: str                  # queue_name ("" when absent)
    engine_idx: int | None      # the DMA engine that moved it
    transfer_bytes: int
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class ExplorerProfile:
    """What this project reads of one processed device profile."""

    schema_version: str
    summary: dict[str, float]                 # Summary's numeric fields, under its names
    engine_busy_ns: dict[str, int]            # ActiveTime per engine, else merged Instruction intervals
    instructions: tuple[Instruction, ...]
    dma: tuple[DmaPacket, ...]

    @property
    def total_ns(self) -> float:
        """The execution's length: Summary's total_time, else the span of its events."""
        seconds = self.summary.get("total_time", 0.0)
        if seconds > 0:
            return seconds * 1e9
        spans = [(i.start_ns, i.end_ns) for i in self.instructions] + [(d.start_ns, d.end_ns) for d in self.dma]
        return float(max(e for _, e in spans) - min(s for s, _ in spans)) if spans else 0.0

    def line_times(self, kernel_file: str) -> dict[tuple[int, str], float]:
        """(line of `kernel_file`, engine) -> busy ns (hotlines.line_times), from the
        instructions' NKI source locations in that file (by name: the compiler may record the
        path it compiled); an instruction fused from several lines counts for each."""
        rows = ((line, hotlines.device_engine(i.engine), i.start_ns, i.end_ns)
                for i in self.instructions for file, line in i.sources if Path(file).name == kernel_file)
        return hotlines.line_times(rows)

    def dma_bytes(self) -> dict[str, int]:
        """Bytes moved per DMA queue type."""
        out: dict[str, int] = {}
        for d in self.dma:
            out[d.queue_type or "unknown"] = out.get(d.queue_type or "unknown", 0) + d.transfer_bytes
        return out


def _pyarrow() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ParquetUnavailable(f"reading Neuron Explorer's Parquet profile needs pyarrow ({PYARROW_HINT})") from None
    return pq


def require_pyarrow() -> None:
    """ParquetUnavailable (one line) when pyarrow is not installed."""
    _pyarrow()


def table_files(folder: Path, name: str) -> list[Path]:
    """The files of table `name`: `name.parquet`, or its numbered parts in order."""
    whole = folder / f"{name}.parquet"
    if whole.is_file():
        return [whole]
    parts = [p for p in folder.glob(f"{name}_*.parquet") if p.stem[len(name) + 1:].isdigit()]
    return sorted(parts, key=lambda p: int(p.stem[len(name) + 1:]))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def read_columns(folder: Path, table: Table, extra: bool = False) -> dict[str, list[Any]] | None:
    """Column name -> values of `table` over all its files (None when it is absent and may
    be); with `extra`, every column of the file, not only the table's fields."""
    pq = _pyarrow()
    files = table_files(folder, table.name)
    if not files:
        if table.must_exist:
            raise ProfileTablesError(f"{folder.name} has no {table.name}.parquet: not a Neuron Explorer Parquet profile")
        return None
    out: dict[str, list[Any]] = {}
    rows = 0    # rows read so far (a column absent from one part is None there)
    for path in files:
        try:
            names = pq.read_schema(path).names
            missing = [f for f in table.required if f not in names]
            if missing:
                raise ProfileTablesError(f"{path.name} has no field {missing[0]} (the profile schema "
                                         f"reference {SCHEMA_PAGE} documents it)")
            wanted = list(names) if extra else [f for f in table.fields if f in names]
            columns = pq.read_table(path, columns=wanted).to_pydict()
        except ProfileTablesError:
            raise
        except Exception as exc:   # pyarrow's ArrowInvalid, OSError, ...: truncated or not Parquet
            raise ProfileTablesError(f"{path.name} is unreadable (truncated or not Parquet): {_first_line(exc)}") from None
        here = len(next(iter(columns.values()), []))
        for name in set(out) | set(columns):
            out.setdefault(name, [None] * rows).extend(columns.get(name) or [None] * here)
        rows += here
    return out


def schema_version(folder: Path) -> str:
    """The profile's schema version; ProfileTablesError when its major is not known."""
    meta = read_columns(folder, METADATA) or {}
    values = [v for v in meta.get("profile_schema_version", []) if v]
    if not values:
        raise ProfileTablesError("Metadata.parquet has no profile_schema_version")
    version = str(values[0])
    major = version.split(".", 1)[0]
    if not major.isdigit() or int(major) not in KNOWN_MAJORS:
        known = ", ".join(f"{m}.x" for m in KNOWN_MAJORS)
        raise ProfileTablesError(f"Neuron Explorer profile schema {version} is not supported (this project reads "
                                 f"schema {known}, the profile schema reference of Neuron 2.31)")
    return version


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProfileTablesError(f"{what}: {value!r} is not a number")
    return int(value)


def _sources(value: Any) -> tuple[tuple[str, int], ...]:
    if value is None:
        return ()
    text = " ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    return tuple((file, int(line)) for file, line in LOCATION.findall(text))


def read(folder: str | Path) -> ExplorerProfile:
    """The profile in `folder` (what `neuron-explorer view --output-format parquet
    --output-file FOLDER` wrote); ProfileTablesError (one line) when it cannot be read."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ProfileTablesError(f"the Parquet profile folder {folder.name} was not written")
    version = schema_version(folder)
    summary_cols = read_columns(folder, SUMMARY, extra=True) or {}
    summary = {k: float(v[0]) for k, v in summary_cols.items()
               if v and isinstance(v[0], (int, float)) and not isinstance(v[0], bool)}

    rows = read_columns(folder, INSTRUCTION) or {}
    n = len(rows.get("engine", []))
    locs = rows.get("nki_source_location", [None] * n)
    instructions = tuple(Instruction(str(rows["engine"][k] or ""), str(rows["opcode"][k] or ""),
                                     _int(rows["start_ts"][k], "Instruction.start_ts"),
                                     _int(rows["end_ts"][k], "Instruction.end_ts"), _sources(locs[k]))
                         for k in range(n))

    active = read_columns(folder, ACTIVE_TIME)
    if active is not None:
        busy: dict[str, list[tuple[float, float]]] = {}
        for e, s, t in zip(active["engine"], active["start_ts"], active["end_ts"]):
            busy.setdefault(str(e), []).append((_int(s, "ActiveTime.start_ts"), _int(t, "ActiveTime.end_ts")))
    else:
        busy = {}
        for i in instructions:
            busy.setdefault(i.engine, []).append((i.start_ns, i.end_ns))
    engine_busy = {e: int(hotlines.union_ns(iv)) for e, iv in busy.items()}

    dma_cols = read_columns(folder, DMA_PACKET) or {}
    m = len(dma_cols.get("transfer_bytes", []))
    names, engines = dma_cols.get("queue_name", [None] * m), dma_cols.get("engine_idx", [None] * m)
    dma = tuple(DmaPacket(str(dma_cols["queue_type"][k] or ""), str(names[k] or ""),
                          None if engines[k] is None else _int(engines[k], "DmaPacket.engine_idx"),
                          _int(dma_cols["transfer_bytes"][k], "DmaPacket.transfer_bytes"),
                          _int(dma_cols["start_ts"][k], "DmaPacket.start_ts"),
                          _int(dma_cols["end_ts"][k], "DmaPacket.end_ts"))
                for k in range(m))
    return ExplorerProfile(version, summary, engine_busy, instructions, dma)


# Engine activity counters (the summary-json's names) from ActiveTime's engine names.
ACTIVITY = {"TensorE": "tensor_engine_active_time_percent", "VectorE": "vector_engine_active_time_percent",
            "ScalarE": "scalar_engine_active_time_percent", "GpSimdE": "gpsimd_engine_active_time_percent"}


def profile_fields(p: ExplorerProfile, kernel_file: str) -> dict[str, float | str]:
    """The evaluation profile's fields from the tables: the schema version, the hot lines of
    `kernel_file` (or a note saying why there are none), each engine's activity as a fraction
    of the execution (the summary-json's counter names), and the DMA packets' count, mean
    size and bytes per queue type (`dma_<type>_bytes`)."""
    total = p.total_ns
    out: dict[str, float | str] = {"profile_schema_version": p.schema_version}
    hot = hotlines.top(p.line_times(kernel_file), total)
    if hot:
        out[hotlines.HOT_LINES] = hotlines.encode(hot)
    elif p.instructions:
        out["hot_lines_note"] = (f"the device profile names no line of {kernel_file} "
                                 f"(compile with NKI_DEBUG_INFO=True for NKI source locations)")
    if total > 0:
        for engine, ns in p.engine_busy_ns.items():
            name = ACTIVITY.get(hotlines.device_engine(engine))
            if name:
                out[name] = min(1.0, ns / total)
    if p.dma:
        moved = sum(d.transfer_bytes for d in p.dma)
        out["dma_packet_count"] = len(p.dma)
        out["dma_packet_average_bytes"] = moved / len(p.dma)
        for kind, nbytes in sorted(p.dma_bytes().items()):
            out[f"dma_{kind}_bytes"] = nbytes
    return out
