"""A fake Neuron device for the fake toolchain (tests): kernels keep the performance model's
timing, measurements get noise, drift and occasional failures, and the fake `neuron-explorer`
writes its Parquet tables in the layout of the SDK's schema page.

Configured by a JSON file named in FAKE_NEURON_DEVICE (`FakeToolchain.set_device` writes it);
without it the toolchain behaves as before (latencies from FAKE_NEURON_LATENCIES, no instruction
tables). Its keys (`DeviceConfig`):
  target           the model's target ("trn1", "trn2", ...)
  scale            true latency = the model's latency x scale (a kernel's "true" device time)
  noise            sigma of the multiplicative log-normal noise of each measured execution
  drift            slow drift: the n-th execution runs (1 + drift x n) times slower
  failure_rate     probability that an execution fails (the capture or baremetal call errs)
  seed             seeds the noise and the failures (the n-th execution draws from seed and n)
  schema_version   Metadata.profile_schema_version of the tables written
  truncate         a table name whose file is cut in half after writing ("" for none)
The executions so far are counted in a state file beside the configuration.

What the device knows of a kernel comes from its NEFF: the fake SDK writes there (`compile_record`)
the model's latency and every scheduled op's engine, start, end, kernel line and DMA bytes, and
whether NKI_DEBUG_INFO=True was set when it compiled (then the Instruction table carries
`nki_source_location`). Table and field names and types come from explorer_schema.json,
generated from the schema page (schema_from_page.py), never from the reader under test.
"""

from __future__ import annotations

import json
import math
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCHEMA_FILE = HERE / "explorer_schema.json"
KERNEL_FILE = "kernel.py"
# The model's engines as the device names them (the schema page's example: "tensor").
DEVICE_NAMES = {"T": "tensor", "V": "vector", "S": "scalar", "G": "gpsimd", "DMA": "dma"}
# DmaQueueType of the model's transfer kinds (fitness.simulator.trace); other transfers: "data"
QUEUE_TYPES = {"DMA_LOAD": "input", "DMA_STORE": "output"}


@dataclass(frozen=True)
class DeviceConfig:
    target: str = "trn1"
    scale: float = 1.0
    noise: float = 0.0
    drift: float = 0.0
    failure_rate: float = 0.0
    seed: int = 0
    schema_version: str = ""
    truncate: str = ""

    @classmethod
    def load(cls) -> "DeviceConfig | None":
        path = os.environ.get("FAKE_NEURON_DEVICE")
        if not path or not Path(path).is_file():
            return None
        return cls(**json.loads(Path(path).read_text()))


def schema() -> dict:
    return json.loads(SCHEMA_FILE.read_text())


def compile_record(kernel: Any, args: tuple, config: DeviceConfig, dialect: str) -> dict:
    """What the fake NEFF of `kernel` (of `dialect`) on `args` holds: the model's latency (ns)
    and schedule, on the shapes of `args`."""
    from fitness.simulator import placeholders, simulate
    from fitness.simulator.perf import estimate

    fn = getattr(kernel, "__wrapped__", kernel)
    trace = simulate(fn, placeholders(list(args)), shape_only=True, dialect=dialect).trace
    ops: list[list] = []

    def observe(prep: Any, sched: Any) -> None:
        for i, op in enumerate(prep.ops):
            if op.kind:
                ops.append([DEVICE_NAMES.get(sched.engine[i], sched.engine[i]), op.kind, sched.start[i],
                            sched.end[i], op.line, op.hbm_read_bytes + op.hbm_write_bytes or op.dma_bytes])

    est = estimate(trace, config.target, observe=observe)
    return {"latency_ns": est.latency_ms * 1e6, "ops": ops,
            "debug_info": os.environ.get("NKI_DEBUG_INFO", "").lower() in ("1", "true")}


def execute(neff: dict, config: DeviceConfig) -> dict:
    """One execution of a compiled kernel: its measured time (true x drift x noise), or
    RuntimeError for a failed one. The n-th execution is counted in the state file."""
    state = Path(os.environ["FAKE_NEURON_DEVICE"]).with_suffix(".state")
    n = int(state.read_text()) if state.is_file() else 0
    state.write_text(str(n + 1))
    rng = random.Random(f"{config.seed}:{n}")
    if rng.random() < config.failure_rate:
        raise RuntimeError(f"NRT execution {n} failed on the fake device (NRT_EXEC_COMPLETED_WITH_ERR)")
    true_ns = neff["latency_ns"] * config.scale
    measured = true_ns * (1 + config.drift * n) * math.exp(rng.gauss(0.0, config.noise) if config.noise else 0.0)
    # factor: how much longer than the model's schedule this execution ran (its tables' times)
    return {"execution": n, "measured_ns": measured, "factor": measured / neff["latency_ns"]}


def activity(neff: dict) -> dict[str, float]:
    """Each engine's busy fraction of the kernel's schedule, under the summary's engine names
    ("vector_engine", ..., "dma"), and its HBM bytes read and written: what summary-json reports
    of an execution of it."""
    from fitness.measures.hotlines import union_ns

    spans: dict[str, list] = {}
    for engine, _kind, start, end, _line, _bytes in neff["ops"]:
        spans.setdefault(engine, []).append((start, end))
    names = {"tensor": "tensor_engine", "vector": "vector_engine", "scalar": "scalar_engine",
             "gpsimd": "gpsimd_engine", "dma": "dma"}
    out: dict[str, float] = {name: union_ns(spans.get(engine, [])) / neff["latency_ns"] for engine, name in names.items()}
    out["hbm_read_bytes"] = sum(op[5] for op in neff["ops"] if op[1] == "DMA_LOAD")
    out["hbm_write_bytes"] = sum(op[5] for op in neff["ops"] if op[1] == "DMA_STORE")
    return out


# -- the Parquet tables -----------------------------------------------------------------------


def _arrow_type(kind: str) -> Any:
    import pyarrow as pa

    base = {"integer (int64)": pa.int64(), "integer (int32)": pa.int32(), "number (float)": pa.float32(),
            "number (double)": pa.float64(), "boolean": pa.bool_()}
    if kind.startswith("array of "):
        inner = _arrow_type(kind[len("array of "):])
        return None if inner is None else pa.list_(inner)
    if kind in base:
        return base[kind]
    return pa.string() if kind.startswith("string") else None   # transient types: never written


def _default(kind: str) -> Any:
    if kind.startswith("array of "):
        return []
    if kind.startswith("integer"):
        return 0
    if kind.startswith("number"):
        return 0.0
    return False if kind == "boolean" else ""


def write_table(folder: Path, name: str, rows: list[dict], tables: dict) -> Path:
    """`folder/name.parquet` with every field the schema page gives table `name`, in its order
    and types: a row's values where it has them, else null (optional fields) or a zero value
    (required ones). A field the page does not document is an error (the fake invents none)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fields = tables[name]
    known = {f[0] for f in fields}
    for row in rows:
        unknown = set(row) - known
        if unknown:
            raise KeyError(f"{name} has no field {sorted(unknown)[0]} on the schema page")
    columns, schema_fields = {}, []
    for field, kind, _unit, required in fields:
        arrow = _arrow_type(kind)
        if arrow is None:
            continue
        schema_fields.append(pa.field(field, arrow, nullable=not required))
        columns[field] = [row.get(field, _default(kind) if required else None) for row in rows]
    path = folder / f"{name}.parquet"
    pq.write_table(pa.table(columns, schema=pa.schema(schema_fields)), path)
    return path


def write_tables(folder: Path, neff: dict, ntff: dict, config: DeviceConfig) -> None:
    """The tables of one captured execution: Metadata, Summary, Instruction, ActiveTime and
    DmaPacket, times scaled by the execution's factor (the model's schedule as the device ran it)."""
    page = schema()
    tables, version = page["tables"], config.schema_version or page["schema_version"]
    folder.mkdir(parents=True, exist_ok=True)
    factor = ntff.get("factor", 1.0)
    total_ns = ntff["measured_ns"]
    instructions, dma, busy = [], [], {}
    for k, (engine, kind, start, end, line, nbytes) in enumerate(neff.get("ops", [])):
        s, e = int(start * factor), int(end * factor)
        if engine == "dma":
            dma.append({"start_ts": s, "end_ts": e, "duration_ns": e - s, "id": k, "packet_idx": 0,
                        "packet_aggregation_id": k, "read_bytes": nbytes, "write_bytes": nbytes,
                        "transfer_bytes": nbytes, "throughput": nbytes / max(e - s, 1) * 1e9,
                        "queue_type": QUEUE_TYPES.get(kind, "data"), "queue_name": f"q{kind}", "crc": 0})
            continue
        row = {"start_ts": s, "end_ts": e, "duration_ns": e - s, "engine": engine, "opcode": kind.upper(),
               "operands": "", "id": k, "pc": k, "bir_id": str(k)}
        if neff.get("debug_info") and line > 0:
            row["nki_source_location"] = f"{KERNEL_FILE}:{line}"
        instructions.append(row)
        busy.setdefault(engine, []).append((s, e))
    active = []
    for engine, spans in busy.items():   # merged intervals per engine, as ActiveTime is made
        spans.sort()
        cur = list(spans[0])
        for s, e in spans[1:] + [(math.inf, math.inf)]:
            if s > cur[1]:
                active.append({"start_ts": cur[0], "end_ts": cur[1], "engine": engine, "pcore_idx": 0,
                               "duration_ns": cur[1] - cur[0]})
                cur = [s, e]
            else:
                cur[1] = max(cur[1], e)
    write_table(folder, "Metadata", [{"profile_schema_version": version, "ntff_version": 5, "num_physical_cores": 1,
                                      "is_simulation": False}], tables)
    write_table(folder, "Summary", [{"total_time": total_ns * 1e-9, "total_exec_time": total_ns * 1e-9}], tables)
    if instructions:   # a table is only written when the profile holds that activity
        write_table(folder, "Instruction", instructions, tables)
        write_table(folder, "ActiveTime", active, tables)
    if dma:
        write_table(folder, "DmaPacket", dma, tables)
    if config.truncate:
        path = folder / f"{config.truncate}.parquet"
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
