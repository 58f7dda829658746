"""Stand-in `neuron-profile` / `neuron-explorer` executables (tests).

`capture -n NEFF -s PREFIX [--profile-nth-exec=N]` writes PREFIX_exec_N.ntff (`-s` is a prefix);
`view --output-format summary-json -n NEFF -s NTFF` prints a summary in the profiler's layout:
one entry per profiled NEFF, metrics under the names of the profile schema reference
(aws-neuron-sdk tools/neuron-explorer/profile-schema-reference.rst), `total_time` in seconds.
Latencies come, one per view, from the JSON list in FAKE_NEURON_LATENCIES (ms; the last one
repeats). Every call is appended to FAKE_NEURON_LOG with the NeuronCore environment it saw.
Both refuse a missing file the way the real tools do: a message and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

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
    ap.add_argument("--profile-nth-exec", type=int, default=1)
    args = ap.parse_args(argv)
    with open(os.environ["FAKE_NEURON_LOG"], "a") as log:
        log.write(json.dumps({"tool": tool, "argv": argv, "env": {k: os.environ.get(k, "") for k in CORE_ENV}})
                  + "\n")
    if not Path(args.neff).is_file():
        print(f"error: cannot open NEFF {args.neff}", file=sys.stderr)
        return 1
    if args.command == "capture":
        if os.environ.get("FAKE_NEURON_MISSING") != "ntff":
            Path(f"{args.ntff}_exec_{args.profile_nth_exec}.ntff").write_text("fake ntff")
        return 0
    if not Path(args.ntff).is_file():
        print(f"error: cannot open NTFF {args.ntff}", file=sys.stderr)
        return 1
    print(json.dumps({Path(args.neff).stem: summary(_next_latency_ms() * 1e-3)}))
    return 0


# Engine activity of the fake kernel: fractions of total_time, as the profiler reports them.
ACTIVE = {"tensor_engine": 0.0, "vector_engine": 0.42, "scalar_engine": 0.11, "gpsimd_engine": 0.0, "dma": 0.63}


def summary(total_s: float) -> dict:
    """One NEFF's metrics: times in seconds, `*_percent` as fractions (0.42 = 42%)."""
    out = {"total_time": total_s, "total_exec_time": total_s, "total_active_time": 0.9 * total_s,
           "hbm_read_bytes": 1048576, "hbm_write_bytes": 524288, "spill_save_bytes": 0, "spill_reload_bytes": 0,
           "hardware_flops": 0, "transpose_flops": 0, "mfu_estimated_percent": 0.0}
    for engine, share in ACTIVE.items():
        out[f"{engine}_active_time"] = share * total_s
        out[f"{engine}_active_time_percent"] = share
    return out
