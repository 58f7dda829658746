"""Chat messages for every LLM role, built from the templates in operators/prompts/*.md.

Templates use `string.Template` placeholders (`${name}`); this module fills them with the
problem, the NumPy reference, the kernel(s), their profiles, the optimization memory's lessons
and, per role, the plan, the error or the diff. The system message of the code-writing roles
carries the NKI rules and API notes and the `# tune:` knob convention. Everything here is a
pure function of its arguments, so equal inputs give equal messages (the cache relies on it).
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path
from string import Template
from typing import Any, Mapping, Sequence

from fitness.measures import hotlines
from fitness.measures.counters import COUNTERS, INTENSITY, RIDGE, Counter

from .. import base as _base
from ..diff import kernel_diff
from ..base import Context, Lesson, Machine, Parent
from .extract import dialect_of

Message = dict[str, str]

MAX_ERROR_CHARS = 4000
MAX_DIFF_LINES = 120
MAX_LESSON_CHARS = 1500


def prompt_dir() -> Path:
    """operators/prompts/, found next to operators/base.py.

    Not `importlib.resources.files("operators")`: when a test folder of the same name is on
    sys.path ahead of an editable install, "operators" can resolve to a namespace view whose
    first portion is that folder.
    """
    return Path(_base.__file__).resolve().parent / "prompts"


@functools.lru_cache(maxsize=None)
def template(name: str) -> Template:
    """A prompt template shipped in operators/prompts/ (package data)."""
    return Template((prompt_dir() / f"{name}.md").read_text(encoding="utf-8"))


def render(name: str, **values: Any) -> str:
    return template(name).substitute({k: str(v) for k, v in values.items()}).strip() + "\n"


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.4g}"


def _counter_value(counter: Counter, value: float) -> str:
    """A counter's value with its unit; a `*_percent` fraction as a percentage."""
    if counter.percent:
        return f"{100 * value:.1f}%"
    if counter.name == "latency_ms":
        return f"{value:.5g} ms"
    return f"{_number(value)} {counter.unit}"


def format_profile(parent: Parent) -> str:
    """The evaluation's figures for one kernel, one per line: the speedup, % of peak and the
    bottleneck line, then the profile counters (fitness/measures/counters.py) in their declared order with
    their units, then its hot lines; a profile's other fields are not shown. `latency_ms` is the
    judged latency."""
    lines = []
    if parent.speedup is not None:
        lines.append(f"- speedup over the baseline kernel: {parent.speedup:.3f}x")
    if parent.percent_of_peak is not None:
        lines.append(f"- percent of peak throughput (roofline): {parent.percent_of_peak:.1f}%")
    profile = dict(parent.profile or {})
    if profile.get("bottleneck"):
        lines.append(f"- bottleneck: {profile['bottleneck']}")
    if parent.latency_ms is not None:
        profile["latency_ms"] = parent.latency_ms
    for counter in COUNTERS:
        value = profile.get(counter.name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            lines.append(f"- {counter.name}: {_counter_value(counter, value)}")
    lines += _hot_lines(parent)
    return "\n".join(lines) if lines else "(no profile available)"


def _hot_lines(parent: Parent) -> list[str]:
    """The profile's hot lines (fitness/measures/hotlines.py), the same text from the simulator's
    schedule and from a device profile, each quoting its line of the kernel; [] without any
    (or with a damaged record: the rest of the profile still helps)."""
    profile = parent.profile or {}
    text = hotlines.describe(profile.get(hotlines.HOT_LINES), parent.source, hotlines.label_of(profile))
    if not text:
        return []
    head, *rows = text
    return [f"- {head}:", *(f"  - {row}" for row in rows)]


def counter_definitions() -> str:
    """The system message's "Profile counters" section body: each counter of
    fitness/measures/counters.py with its unit and one-line definition, then the memory-bound /
    compute-bound rule and what the bottleneck line says."""
    head = ("Each kernel's profile shows these counters, in this order, under the same names and with the "
            "same meaning whether the simulator estimated them or the profiler measured them on the device "
            "(percent counters are shown as percentages):")
    items = [f"- `{c.name}` ({c.unit}): {c.definition}" for c in COUNTERS]
    rule = (f"If `{INTENSITY}` is below `{RIDGE}` the kernel is memory bound: HBM traffic limits it, so move "
            f"fewer bytes (load each byte once, reuse tiles on chip, avoid spills). Otherwise it is compute "
            f"bound: TensorE work limits it, so remove transposes and redundant matmuls and keep TensorE busy. "
            f"A kernel without matmuls has `{INTENSITY}` 0; the bottleneck line says what limits it: the "
            f"busiest engine or the DMA, from the `*_active_time_percent` counters and "
            f"`dma_bandwidth_utilization_percent`, or latency (dependency stalls and fixed overheads) when "
            f"none is busy half of the time.")
    return "\n".join([head, "", *items, "", rule])


def format_lessons(lessons: Sequence[Lesson]) -> str:
    """The optimization memory as the prompts show it: one section per lesson, in order. The
    heading's figure is the measured speedup the memory records; the rationale under it is the
    summarizer's text quoted as data (`quoted_rationale`), so that nothing in it reads as a
    heading or an instruction of the prompt's own."""
    if not lessons:
        return "(none yet: the optimization memory is empty)"
    parts = []
    for i, lesson in enumerate(lessons, 1):
        if lesson.kind == "regression":
            head = f"### Lesson {i}: what to avoid (made a {lesson.problem} kernel {1 / lesson.speedup:.2f}x slower)"
        else:
            head = f"### Lesson {i}: what worked (made a {lesson.problem} kernel {lesson.speedup:.2f}x faster)"
        parts.append(f"{head}\n\n{quoted_rationale(lesson.rationale)}")
    return "\n\n".join(parts)


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_MARKUP_LEAD = re.compile(r"^\s*(?:[#>]+\s*)+")           # headings and quote markers at a line's start
_RULE = re.compile(r"^\s*([-=_*])(?:\s*\1){2,}\s*$")      # thematic breaks, setext heading underlines
_LESSON = re.compile(r"(?i)\blesson\s*\d+\s*:")                # "Lesson 3:", a heading's words


def quoted_rationale(text: str, limit: int = MAX_LESSON_CHARS) -> str:
    """A rationale as quoted data: control and bidirectional characters removed, heading and
    quote markers at line starts dropped, rule lines (and so setext underlines) dropped, a lesson heading's
    "Lesson N:" made plain, at most `limit` characters, every line behind "> "."""
    lines = []
    for line in _CONTROL.sub(" ", text.replace("\r\n", "\n").replace("\r", "\n")).strip().split("\n"):
        if _RULE.match(line):
            continue
        lines.append(_LESSON.sub("lesson:", _MARKUP_LEAD.sub("", line)).rstrip())
    body = "\n".join(lines).strip()
    if len(body) > limit:
        body = body[:limit].rstrip() + " ..."
    return "\n".join(f"> {line}" if line else ">" for line in (body or "(no rationale)").split("\n"))


# The headings of the memory's section in the prompts, and the summarizer's hint that refers to it.
LESSONS_HEADING = "## Lessons from earlier optimizations (optimization memory)"
SUMMARIZER_LESSONS_HEADING = "## Lessons already in the optimization memory"
REPEAT_HINT = "If a lesson above already says the same, say what this pair adds to it instead of repeating it."


def lessons_section(ctx: Context, role: str, heading: str = LESSONS_HEADING) -> str:
    """The optimization memory's section of a `role` prompt, with the blank line after it; ""
    when the context shows the memory to other roles only (AccelOpt: the planner)."""
    if not ctx.shows_lessons(role):
        return ""
    return f"{heading}\n\n{format_lessons(ctx.lessons)}\n\n"


def make_diff(before: str, after: str, max_lines: int = MAX_DIFF_LINES) -> str:
    """A unified diff of two kernel sources (parent -> child), cut to max_lines."""
    return kernel_diff(before, after, max_lines)


def _inputs(ctx: Context) -> str:
    return ctx.inputs.strip() or "the reference's arguments, in order"


def _common(ctx: Context, role: str) -> dict[str, str]:
    """The placeholders every code-writing `role` prompt shares."""
    return {"problem": ctx.problem, "reference": ctx.reference_source.strip(), "inputs": _inputs(ctx),
            "lessons_section": lessons_section(ctx, role), **_knob_values(ctx)}


def _knob_values(ctx: Context) -> dict[str, str]:
    """The knob wording of the user prompts: present only when a tuner varies knobs (an LLM
    alone told to keep every listed value correct tends to tune knobs instead of optimizing)."""
    if not ctx.tuning:
        return {"knob_values": "", "keep_knobs": "", "and_knobs": ""}
    return {"knob_values": ", knob values", "keep_knobs": " Keep the `# tune:` knob convention.",
            "and_knobs": " and its `# tune:` knobs"}


# The system message of the code-writing roles is the NKI dialect's of the problem (its
# baseline's imports decide): its rules and API notes differ between the two dialects.
SYSTEM = {"legacy": "system", "current": "system_current"}
SUMMARIZER_DIALECT = {"legacy": "the legacy `neuronxcc.nki` dialect", "current": "the current `nki` dialect"}
ENGINES = {"T": "TensorE", "V": "VectorE", "S": "ScalarE", "G": "GpSimdE"}


def _figure(value: float) -> str:
    return f"{value:g}" if value == int(value) or value < 10 else f"{value:.0f}"


def machine_values(m: Machine | None) -> dict[str, str]:
    """The placeholders of the target's figures; without a machine (a test's context) the
    figures of a trn1 NeuronCore-v2 are not invented: each says it is unknown."""
    if m is None:
        names = ("target", "core", "sbuf_mib", "sbuf_kib", "sbuf_usable_kib", "psum_mib", "psum_kib",
                 "psum_banks", "psum_bank_kib", "psum_bank_f32", "dma_engines", "hbm_gbps", "clocks")
        return {n: "?" for n in names} | {"target": "the target", "core": "NeuronCore",
                                          "counter_definitions": counter_definitions()}
    kib, mib = 1024, 1024 * 1024
    return {
        "target": m.target, "core": m.core,
        "sbuf_mib": _figure(m.sbuf_bytes * m.partitions / mib), "sbuf_kib": _figure(m.sbuf_bytes / kib),
        "sbuf_usable_kib": _figure(m.sbuf_usable_bytes / kib),
        "psum_mib": _figure(m.psum_bytes * m.partitions / mib), "psum_kib": _figure(m.psum_bytes / kib),
        "psum_banks": str(m.psum_banks), "psum_bank_kib": _figure(m.psum_bytes / m.psum_banks / kib),
        "psum_bank_f32": str(m.psum_bytes // m.psum_banks // 4), "dma_engines": str(m.dma_engines),
        "hbm_gbps": _figure(m.hbm_bytes_per_s / 1e9),
        "clocks": ", ".join(f"{ENGINES.get(e, e)} {hz / 1e9:g} GHz" for e, hz in m.clocks_hz),
        "counter_definitions": counter_definitions(),
    }


# The knob rules of each dialect's system message (only when tuning operators take part).
KNOBS = {"legacy": "knobs", "current": "knobs_current"}


def precision_rule(precision: str) -> str:
    """The system message's rule on dtypes for a problem whose floor is `precision`."""
    if precision == "float32":
        return ("Keep everything in float32: a kernel that computes in a narrower float type (bfloat16, float16, "
                "fp8) fails as a precision downgrade.")
    return (f"Compute in {precision} or wider (the narrowest type this problem uses; float32 is always allowed): "
            f"a kernel that computes in a narrower float type fails as a precision downgrade. TensorE "
            f"multiplies exactly and accumulates in float32 in PSUM whatever its operands' type; the other "
            f"engines compute in float32 and round once, to the destination's type.")


def _system(ctx: Context) -> str:
    dialect = dialect_of(ctx.baseline_source)
    knobs = template(KNOBS[dialect]).template.strip() if ctx.tuning else ""
    return render(SYSTEM[dialect], knob_rules=knobs, precision_rule=precision_rule(ctx.precision),
                  tolerance=f"{ctx.tolerance:.1g}".replace("e-0", "e-"), **machine_values(ctx.machine))


def _chat(system: str, user: str) -> list[Message]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def planner_messages(parent: Parent, ctx: Context) -> list[Message]:
    user = render("planner", kernel=parent.source.strip(), profile=format_profile(parent), **_common(ctx, "planner"))
    return _chat(_system(ctx), user)


def implementer_messages(parent: Parent, plan: str, ctx: Context) -> list[Message]:
    user = render("implementer", kernel=parent.source.strip(), profile=format_profile(parent), plan=plan.strip(),
                  **_common(ctx, "implementer"))
    return _chat(_system(ctx), user)


def crossover_messages(a: Parent, b: Parent, ctx: Context) -> list[Message]:
    user = render("crossover", kernel_a=a.source.strip(), profile_a=format_profile(a), kernel_b=b.source.strip(),
                  profile_b=format_profile(b), **_common(ctx, "crossover"))
    return _chat(_system(ctx), user)


def repair_messages(source: str, error: str, ctx: Context) -> list[Message]:
    message = error.strip() or "(no error message)"
    if len(message) > MAX_ERROR_CHARS:
        message = message[:MAX_ERROR_CHARS] + "\n... (truncated)"
    user = render("repair", kernel=source.strip(), error=message, **_common(ctx, "repair"))
    return _chat(_system(ctx), user)


def summarizer_messages(parent: Parent, child: Parent, ratio: float, ctx: Context) -> list[Message]:
    faster = ratio >= 1.0
    user = render(
        "summarizer", problem=ctx.problem, ratio=f"{ratio:.3f}",
        direction="is faster than" if faster else "is slower than",
        verdict="an improvement" if faster else "a regression: write a negative lesson",
        negative_title="" if faster else " and saying that it made the kernel slower",
        faster_or_slower="faster" if faster else "slower", up_or_down="down" if faster else "up",
        apply_or_avoid="apply" if faster else "avoid",
        parent=parent.source.strip(), parent_profile=format_profile(parent),
        child=child.source.strip(), child_profile=format_profile(child),
        diff=make_diff(parent.source, child.source),
        lessons_section=lessons_section(ctx, "summarizer", SUMMARIZER_LESSONS_HEADING),
        repeat_hint=f"\n\n{REPEAT_HINT}" if ctx.shows_lessons("summarizer") else "",
    )
    dialect = dialect_of(ctx.baseline_source)
    machine = machine_values(ctx.machine)
    core = f" on a {machine.pop('core')}" if ctx.machine else ""
    machine.pop("core", None)
    return _chat(render("summarizer_system", dialect=SUMMARIZER_DIALECT[dialect], core=core, **machine), user)


def messages_key(messages: Sequence[Mapping[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple((m["role"], m["content"]) for m in messages)
