"""Behaviour descriptors of a kernel, read from its evaluation's profile (a pure function).

What the simulator's profile (fitness.measures.counters) says about how a kernel spends its time and
bytes, as a few numbers that place it on the MAP-Elites grid (archive.py) and that every line
of evaluations.jsonl records:
- `engine`: the busiest of the tensor, vector, scalar and gpsimd engines and the DMA queues
  (the largest active time; "none" when all are idle, the first of that order on a tie);
- `dma_share`: the DMA's active time over the summed active times of all five (0..1): how
  much of the kernel's work is data movement;
- `spill_share`: spill save and reload bytes over all HBM bytes (0..1);
- `flops_per_byte`: hardware flops over HBM bytes (arithmetic intensity).
The profile holds no SBUF footprint nor instruction count, so those are not descriptors.
A result without engine times (an early failure, a test double) has no descriptors.
"""

from __future__ import annotations

from typing import Any

from fitness.result import EvalResult

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")
NO_ENGINE = "none"
_ACTIVE = {e: f"{e}_engine_active_time_percent" for e in ENGINES[:-1]} | {"dma": "dma_active_time_percent"}


def _number(profile: dict[str, Any], key: str) -> float:
    value = profile.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def descriptors(result: EvalResult | None) -> dict[str, Any]:
    """The descriptors of an evaluation (module docstring); {} when its profile has no engine times."""
    profile = result.profile if result is not None else {}
    if not any(key in profile for key in _ACTIVE.values()):
        return {}
    active = {e: max(0.0, _number(profile, key)) for e, key in _ACTIVE.items()}
    total = sum(active.values())
    busiest = max(ENGINES, key=lambda e: active[e]) if total > 0 else NO_ENGINE   # max keeps the first of equals
    hbm = _number(profile, "hbm_read_bytes") + _number(profile, "hbm_write_bytes")
    spill = _number(profile, "spill_save_bytes") + _number(profile, "spill_reload_bytes")
    return {"engine": busiest,
            "dma_share": round(active["dma"] / total, 4) if total > 0 else 0.0,
            "spill_share": round(min(1.0, spill / hbm), 4) if hbm > 0 else 0.0,
            "flops_per_byte": round(_number(profile, "hardware_flops") / hbm, 4) if hbm > 0 else 0.0}
