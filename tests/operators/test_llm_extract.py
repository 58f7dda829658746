"""Kernel extraction from LLM replies of every shape."""

from __future__ import annotations

import ast

import pytest

from operators.llm.extract import extract_kernel, extract_text, fenced_blocks, strip_reasoning

KERNEL = """import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

TILE = 512  # tune: 256, 512


@nki.jit
def kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_f = nl.arange(TILE)[None, :]
    return out
"""


def defines_kernel(source: str) -> bool:
    return any(isinstance(n, ast.FunctionDef) and n.name == "kernel" for n in ast.parse(source).body)


@pytest.mark.parametrize("reply", [
    f"```python\n{KERNEL}```",
    f"```\n{KERNEL}```",
    f"```py\n{KERNEL}```\n",
    f"~~~python\n{KERNEL}~~~",
    f"Here is the optimized kernel:\n\n```python\n{KERNEL}```\n\nIt is faster because the tiles are larger.",
    f"Sure.\n```python\n{KERNEL}",                      # unclosed fence at the end
    f"<think>Maybe ```python\ndef kernel(): pass\n``` would do.</think>\n```python\n{KERNEL}```",
])
def test_fenced_variants_give_the_kernel(reply):
    found = extract_kernel(reply)
    assert found is not None
    assert found.source.strip() == KERNEL.strip()


def test_the_last_block_defining_kernel_wins_over_snippets_and_earlier_drafts():
    draft = KERNEL.replace("TILE = 512", "TILE = 256")
    reply = (f"Before:\n```python\nTILE = 512\n```\nA first draft:\n```python\n{draft}```\n"
             f"Final version:\n```python\n{KERNEL}```\nDone.")
    assert extract_kernel(reply).source.strip() == KERNEL.strip()


def test_constants_and_kernel_in_separate_blocks_are_joined():
    head, body = KERNEL.split("\n\n\n", 1)
    reply = (f"Knobs:\n```python\n{head}\n```\nAn unrelated note:\n```python\nOTHER = 3\n```\n"
             f"Kernel:\n```python\n{body}```")
    found = extract_kernel(reply)
    assert found is not None and found.how == "fenced-joined"
    assert "TILE = 512  # tune: 256, 512" in found.source and "OTHER" not in found.source
    assert defines_kernel(found.source)


def test_missing_fences_with_prose_before_and_after():
    reply = f"The new kernel follows.\n\n{KERNEL}\nThis version halves the DMA count.\nHope it helps!"
    found = extract_kernel(reply)
    assert found is not None and found.how == "unfenced"
    assert found.source.strip() == KERNEL.strip()


def test_non_python_blocks_are_ignored():
    reply = f"```text\ndef kernel(x): this is not code\n```\n```python\n{KERNEL}```"
    assert extract_kernel(reply).source.strip() == KERNEL.strip()


def test_missing_standard_imports_are_added():
    reply = "```python\n@nki.jit\ndef kernel(x):\n    return nl.exp(x)\n```"
    source = extract_kernel(reply).source
    assert source.startswith("import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n")
    assert defines_kernel(source)


@pytest.mark.parametrize("reply", [
    "",
    "I cannot help with that.",
    "```python\nx = 1\n```",                              # code without a kernel
    "```python\ndef kernel(x:\n    return x\n```",        # does not parse
    "<think>```python\ndef kernel(x):\n    return x\n```</think>Sorry, no answer.",
    "```bash\npip install neuronx-cc\n```",
])
def test_replies_without_a_usable_kernel_give_none(reply):
    assert extract_kernel(reply) is None


def test_reasoning_blocks_are_stripped_from_text_replies():
    assert strip_reasoning("<think>hmm</think>  Use bigger tiles.") == "Use bigger tiles."
    # A server that drops the opening tag still ends the reasoning with the closing one.
    assert strip_reasoning("hmm, let me think</think>Use bigger tiles.") == "Use bigger tiles."
    assert extract_text("a" * 50, max_chars=10) == "a" * 10 + " ..."


def test_fenced_blocks_reports_tags_in_order():
    assert fenced_blocks("```python\na\n```\n```\nb\n```") == [("python", "a\n"), ("", "b\n")]


def test_missing_imports_follow_the_dialect_of_the_kernel_being_changed():
    from fitness.sandbox import policy

    bare = "```python\n@nki.jit\ndef kernel(x):\n    t = nl.load(x)\n    return nisa.activation(op=nl.exp, data=t)\n```"
    current = extract_kernel(bare, "current").source
    assert current.startswith("import nki\nimport nki.language as nl\nimport nki.isa as nisa\n")
    assert policy.review(current).dialect == "current"
    # a reply importing part of one dialect gets the rest in that dialect, whatever the parent's
    partial = "```python\nimport nki.language as nl\n@nki.jit\ndef kernel(x):\n    return nl.exp(x)\n```"
    for parent in ("legacy", "current"):
        source = extract_kernel(partial, parent).source
        assert source.startswith("import nki\n\nimport nki.language as nl\n"), source
        assert policy.review(source) == policy.Review("current", [])
    legacy_partial = partial.replace("import nki.language", "import neuronxcc.nki.language")
    assert extract_kernel(legacy_partial, "current").source.startswith("import neuronxcc.nki as nki\n")


def test_llm_operators_parse_replies_in_the_parents_dialect():
    import numpy as np

    from operators.base import Context
    from operators.llm.extract import dialect_of
    from operators.llm.operators import kernel_parser

    current_parent = "import nki\nimport nki.language as nl\n@nki.jit\ndef kernel(x):\n    return x\n"
    reply = "```python\n@nki.jit\ndef kernel(x):\n    return nl.exp(x)\n```"
    ctx = Context("p", "", 1, np.random.default_rng(0), baseline_source=KERNEL)
    assert dialect_of(KERNEL) == "legacy" and dialect_of(current_parent) == "current"
    assert dialect_of("import nki\nimport neuronxcc.nki\n", "current") == "current"   # both: the default
    assert kernel_parser(current_parent, ctx)(reply)[0].startswith("import nki\n")
    assert kernel_parser(KERNEL, ctx)(reply)[0].startswith("import neuronxcc.nki as nki\n")
    # a parent importing nothing (a fragment) takes the problem's dialect, from its baseline
    bare_ctx = Context("p", "", 1, np.random.default_rng(0), baseline_source=current_parent)
    assert kernel_parser("def kernel(x):\n    return x\n", bare_ctx)(reply)[0].startswith("import nki\n")
