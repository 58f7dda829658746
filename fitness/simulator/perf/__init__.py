"""Trainium performance model: latency and neuron-profile counters from an emulator trace.

    estimate(trace, target="trn1") -> PerfEstimate(latency_ms, profile, bottleneck)

Every number it produces is an estimate for the named target (`profile["estimate"]` is
"simulated"); trn1 is calibrated on real measurements, trn2 and trn3 are not
(`Hardware.calibrated`, `label(target)`).
"""

from .hardware import HARDWARE, TARGETS, TRN1, TRN2, TRN3, Hardware, hardware, label
from .model import PerfEstimate, estimate

__all__ = ["HARDWARE", "TARGETS", "TRN1", "TRN2", "TRN3", "Hardware", "PerfEstimate", "estimate",
           "hardware", "label"]
