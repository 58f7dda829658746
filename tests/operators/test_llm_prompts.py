"""Prompt construction: every role's messages carry what the role needs."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from llm_support import BASELINE, REFERENCE, baseline_parent, context, knob, with_knob
from operators.base import Lesson, Parent
from operators.llm import prompts

REPO = Path(__file__).resolve().parents[2]

LESSONS = (Lesson("silu", "improvement", 1.31, "LESSON-good: load 2048 columns per DMA", "diff"),
           Lesson("rmsnorm", "regression", 1 / 1.4, "LESSON-bad: splitting the reduction added a pass", "diff"))
LOAD_N = knob(BASELINE, "LOAD_N")
NEW_LOAD_N = 4096 if LOAD_N != 4096 else 2048
CHILD = Parent("c" * 64, with_knob(BASELINE, "LOAD_N", NEW_LOAD_N), 1.2, 0.8, 12.0, {"latency_ms": 0.8})


def all_messages():
    ctx = context(lessons=LESSONS)
    p = baseline_parent()
    return {
        "planner": prompts.planner_messages(p, ctx),
        "implementer": prompts.implementer_messages(p, "Plan: set LOAD_N from 512 to 2048.", ctx),
        "crossover": prompts.crossover_messages(p, CHILD, ctx),
        "repair": prompts.repair_messages(BASELINE, "compile_error: line 30: err_num_partition_mismatch", ctx),
        "summarizer": prompts.summarizer_messages(p, CHILD, 1.25, ctx),
    }


@pytest.mark.parametrize("role", ["planner", "implementer", "crossover", "repair", "summarizer"])
def test_every_prompt_carries_the_lessons_and_the_kernel(role):
    system, user = all_messages()[role]
    assert system["role"] == "system" and user["role"] == "user"
    assert "LESSON-good: load 2048 columns per DMA" in user["content"]
    assert "LESSON-bad: splitting the reduction added a pass" in user["content"]
    if role != "summarizer":
        assert REFERENCE.strip() in user["content"] and "x: float32[256, 1024]" in user["content"]
        assert "# tune:" in system["content"] and "nl.affine_range" in system["content"]
    assert "def kernel(x):" in user["content"]
    assert not re.search(r"\$\{[a-z_]+\}", user["content"] + system["content"])


def test_lessons_say_what_worked_and_what_to_avoid():
    text = prompts.format_lessons(LESSONS)
    assert "Lesson 1: what worked (made a silu kernel 1.31x faster)" in text
    assert "Lesson 2: what to avoid (made a rmsnorm kernel 1.40x slower)" in text
    assert "memory is empty" in prompts.format_lessons(())


def test_profile_lists_the_summary_and_metrics():
    profile = {"latency_ms": 0.25, "bottleneck": "VectorE bound", "hbm_read_bytes": 4194304,
               "vector_engine_active_time_percent": 0.875}
    p = Parent("p", BASELINE, 1.5, 0.25, 33.3, profile)
    text = prompts.format_profile(p)
    lines = text.splitlines()
    assert lines[0] == "- speedup over the baseline kernel: 1.500x"
    assert "- bottleneck: VectorE bound" in lines
    assert "- hbm_read_bytes: 4,194,304 bytes" in lines and "- vector_engine_active_time_percent: 87.5%" in lines


def test_mutation_plan_crossover_parents_and_repair_error_are_shown():
    msgs = all_messages()
    assert "Plan: set LOAD_N from 512 to 2048." in msgs["implementer"][1]["content"]
    cross = msgs["crossover"][1]["content"]
    assert f"LOAD_N = {LOAD_N}  # tune" in cross and f"LOAD_N = {NEW_LOAD_N}  # tune" in cross
    assert "speedup over the baseline kernel: 1.200x" in cross
    assert "compile_error: line 30: err_num_partition_mismatch" in msgs["repair"][1]["content"]


def test_summarizer_asks_for_a_negative_lesson_on_a_regression():
    ctx = context()
    good = prompts.summarizer_messages(baseline_parent(), CHILD, 1.25, ctx)[1]["content"]
    bad = prompts.summarizer_messages(baseline_parent(), CHILD, 0.7, ctx)[1]["content"]
    assert "an improvement" in good and "before/after snippet" in good
    assert "a regression: write a negative lesson" in bad and "When to avoid it" in bad
    assert f"-LOAD_N = {LOAD_N}" in good and f"+LOAD_N = {NEW_LOAD_N}" in good       # the diff


def test_messages_are_a_pure_function_of_their_inputs():
    assert all_messages() == all_messages()


def test_templates_ship_as_package_data():
    names = {p.name for p in prompts.prompt_dir().iterdir()}
    assert {"system.md", "planner.md", "implementer.md", "crossover.md", "repair.md", "summarizer.md",
            "summarizer_system.md"} <= names


def test_long_errors_and_diffs_are_cut():
    ctx = context()
    user = prompts.repair_messages(BASELINE, "x" * 10_000, ctx)[1]["content"]
    assert "... (truncated)" in user and len(user) < 10_000
    diff = prompts.make_diff("\n".join(map(str, range(100))), "\n".join(f"y{i}" for i in range(100)), max_lines=10)
    assert diff.splitlines()[-1].startswith("... (")


def test_prompts_of_a_current_dialect_problem_teach_that_dialect():
    import dataclasses

    from nkibench.registry import load, make_spec

    current = load(make_spec("tensor_add", "tiny")).baseline_source
    ctx = dataclasses.replace(context(), baseline_source=current)
    parent = Parent("p" * 64, current, 1.0, 0.1, 5.0, {})
    for system, _ in (prompts.planner_messages(parent, ctx), prompts.repair_messages(current, "error", ctx)):
        text = system["content"]
        assert "current `nki` dialect" in text and "nisa.dma_copy(dst=" in text and "Never import `neuronxcc`" in text
        assert "import neuronxcc.nki as nki" not in text and "mask=" not in text
    summarizer_system = prompts.summarizer_messages(parent, parent, 1.1, ctx)[0]["content"]
    assert "written in NKI (the current `nki` dialect) on a NeuronCore-v2. You study" in summarizer_system
    legacy_system = all_messages()["summarizer"][0]["content"]
    assert "(the legacy `neuronxcc.nki` dialect) on a NeuronCore-v2. You study" in legacy_system


def test_system_prompts_show_the_targets_documented_figures():
    """Machine numbers come from the target's hardware entry; trn1 legacy text is unchanged."""
    current = (REPO / "nkibench" / "baselines" / "nki" / "silu.py").read_text()
    for target, sbuf, hbm, core in (("trn1", "24 MiB", "410 GB/s", "NeuronCore-v2"),
                                    ("trn2", "28 MiB", "375 GB/s", "NeuronCore-v3"),
                                    ("trn3", "32 MiB", "588 GB/s", "NeuronCore-v4")):
        ctx = context(target=target)
        for c in (ctx, dataclasses.replace(ctx, baseline_source=current)):
            text = prompts.planner_messages(baseline_parent(), c)[0]["content"]
            assert f"SBUF (the working memory) is {sbuf}" in text and f"about {hbm} of HBM" in text
            assert f"for a {core} ({target})" in text
    text = prompts.planner_messages(baseline_parent(), dataclasses.replace(context(target="trn3"),
                                                                            baseline_source=current))[0]["content"]
    assert "VectorE 1.2 GHz" in text and "TensorE 2.4 GHz" in text


@pytest.mark.parametrize("tuning", [True, False])
def test_knob_rules_only_when_a_tuner_varies_knobs(tuning):
    """An LLM told to keep every listed knob value correct, with no tuner in the run, tends to
    tune knobs instead of optimizing: the knob wording appears only when tuning takes part."""
    ctx = dataclasses.replace(context(lessons=LESSONS), tuning=tuning)
    p = baseline_parent()
    messages = {
        "planner": prompts.planner_messages(p, ctx),
        "implementer": prompts.implementer_messages(p, "Plan: fuse the activation.", ctx),
        "crossover": prompts.crossover_messages(p, CHILD, ctx),
        "repair": prompts.repair_messages(BASELINE, "compile_error: line 30", ctx),
    }
    for role, (system, user) in messages.items():
        text = system["content"] + user["content"].replace(p.source.strip(), "").replace(CHILD.source.strip(), "")
        assert ("## Tunable knobs" in system["content"]) == tuning, role
        assert ("# tune:" in text or "knob values" in text) == tuning, role
        assert not re.search(r"\$\{[a-z_]+\}", text), role


def test_the_system_message_states_the_precision_rule_of_the_problem():
    p = baseline_parent()
    (fp32, _user) = prompts.planner_messages(p, context())
    assert "Keep everything in float32: a kernel that computes in a narrower float type" in fp32["content"]
    (bf16, _user) = prompts.planner_messages(p, dataclasses.replace(context(), precision="bfloat16"))
    assert "Compute in bfloat16 or wider" in bf16["content"] and "Keep everything in float32" not in bf16["content"]
    assert "relative L2 error of about 2e-5 " in fp32["content"]
    (loose, _user) = prompts.planner_messages(p, dataclasses.replace(context(), tolerance=0.0238))
    assert "relative L2 error of about 0.02 " in loose["content"]
