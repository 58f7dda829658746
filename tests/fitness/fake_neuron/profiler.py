"""Stand-in `neuron-profile` / `neuron-explorer` executables (tests).

`capture -n NEFF -s PREFIX [--profile-nth-exec=N]` writes PREFIX_exec_N.ntff (`-s` is a prefix);
`view --output-format summary-json -n NEFF -s NTFF` prints a summary in the profiler's layout:
one entry per profiled NEFF, metrics under the names of the profile schema reference
(aws-neuron-sdk tools/neuron-explorer/profile-schema-reference.rst), `total_time` in seconds.
Latencies come, one per view, from the JSON list in FAKE_NEURON_LATENCIES (ms; the last one
repeats), or, with a fake device configured (FAKE_NEURON_DEVICE, device.py), from the execution
the capture (or the legacy SDK's baremetal run) measured and wrote into the NTFF.
`neuron-explorer view --output-format parquet --output-file DIR -n NEFF -s NTFF` writes that
execution's Parquet tables into DIR (device.write_tables). Every call is appended to FAKE_NEURON_LOG with the NeuronCore environment it saw.
Both refuse a missing file the way the real tools do: a message and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from fake_neuron import device

CORE_ENV = ("NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES", "NEURON_LOGICAL_NC_CONFIG")


def _next_latency_ms() -> float:
    path = Path(os.environ["FAKE_NEURON_LATENCIES"])
    values = json.loads(path.read_text())
    value = values[0]
    if len(values) > 1:
        path.write_text(json.dumps(values[1:]))
    return float(value)


def main(argv: list[str], tool: str) -> int:
    ap = argparse.ArgumentParser(prog=tool)
    ap.add_argument("command", choices=["capture", "view"])
    ap.add_argument("-n", dest="neff", required=True)
    ap.add_argument("-s", dest="ntff", required=True)
    ap.add_argument("--output-format", default="")
    ap.add_argument("--output-file", default="")
    ap.add_argument("--profile-nth-exec", type=int, default=1)
    args = ap.parse_args(argv)
    with open(os.environ["FAKE_NEURON_LOG"], "a") as log:
        log.write(json.dumps({"tool": tool, "argv": argv, "env": {k: os.environ.get(k, "") for k in CORE_ENV}})
                  + "\n")
    if not Path(args.neff).is_file():
        print(f"error: cannot open NEFF {args.neff}", file=sys.stderr)
        return 1
    config = device.DeviceConfig.load()
    if args.command == "capture":
        trace: dict = {"fake_ntff": args.neff}
        if config is not None:   # the device runs the NEFF
            try:
                trace.update(device.execute(json.loads(Path(args.neff).read_text()), config))
            except RuntimeError as exc:
                print(f"ERROR: {exc}", file=sys.stderr)
                return 1
        if os.environ.get("FAKE_NEURON_MISSING") != "ntff":
            Path(f"{args.ntff}_exec_{args.profile_nth_exec}.ntff").write_text(json.dumps(trace))
        return 0
    if not Path(args.ntff).is_file():
        print(f"error: cannot open NTFF {args.ntff}", file=sys.stderr)
        return 1
    execution = json.loads(Path(args.ntff).read_text())
    if "measured_ns" not in execution:   # no device configured: the next latency of the list
        execution["measured_ns"] = _next_latency_ms() * 1e6
    if args.output_format == "parquet" and tool == "neuron-explorer":
        if not args.output_file:
            print("error: --output-format parquet needs --output-file DIR", file=sys.stderr)
            return 1
        device.write_tables(Path(args.output_file), json.loads(Path(args.neff).read_text()), execution,
                            config or device.DeviceConfig())
        return 0
    seconds = execution["measured_ns"] * 1e-9
    neff = json.loads(Path(args.neff).read_text())
    print(json.dumps({Path(args.neff).stem: summary(seconds, device.activity(neff) if "ops" in neff else None)}))
    return 0


# Engine activity of the fake kernel: fractions of total_time, as the profiler reports them.
ACTIVE = {"tensor_engine": 0.0, "vector_engine": 0.42, "scalar_engine": 0.11, "gpsimd_engine": 0.0, "dma": 0.63}


def summary(total_s: float, active: dict | None = None) -> dict:
    """One NEFF's metrics: times in seconds, `*_percent` as fractions (0.42 = 42%); engine
    activity `active` (a fake device's kernel: its schedule's), else ACTIVE."""
    out = {"total_time": total_s, "total_exec_time": total_s, "total_active_time": 0.9 * total_s,
           "hbm_read_bytes": 1048576, "hbm_write_bytes": 524288, "spill_save_bytes": 0, "spill_reload_bytes": 0,
           "hardware_flops": 0, "transpose_flops": 0, "mfu_estimated_percent": 0.0}
    if active is not None:   # the kernel's own HBM traffic (its loads read, its stores write)
        out["hbm_read_bytes"], out["hbm_write_bytes"] = active.pop("hbm_read_bytes"), active.pop("hbm_write_bytes")
    for engine, share in (ACTIVE if active is None else active).items():
        out[f"{engine}_active_time"] = share * total_s
        out[f"{engine}_active_time_percent"] = share
    return out
