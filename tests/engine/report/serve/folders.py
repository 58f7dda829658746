"""Run folders for the tests of `serve`: a kernel whose text is markup, and a finished run
rewound to an earlier generation (to be written again, as a live run writes it)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from accelopt_evo.run.folder import RunFolder
from accelopt_evo.run.records import (
    EvaluationLine,
    MemoryEntry,
    MemoryFile,
    append_evaluation,
    read_evaluations,
    read_memory_file,
    write_memory_file,
)
from fitness.correctness.normalize import kernel_id
from fitness.result import INCORRECT, EvalResult

# What an LLM might write to break out of a page that put its text into markup; each sets a
# flag the browser test looks for, and alerts (which WebDriver would report).
SCRIPT = "</script><script>window.__xss = 1; alert(1)</script>"
IMG = "<img src=x onerror=\"window.__xss = 2; alert(1)\">"
PAYLOAD = f"{SCRIPT} {IMG}"


def add_markup_kernel(folder: RunFolder, problem: str = "silu") -> str:
    """Add to a run folder a child of the problem's baseline whose source, plan, error and memory
    rationale hold markup; its kernel id."""
    lines = read_evaluations(folder.evaluations).records
    base = next(e for e in lines if e.problem == problem and e.operator == "baseline")
    source = folder.read_kernel(base.kernel_id) + f"\nBANNER = {json.dumps(PAYLOAD)}\n# {SCRIPT}\n# {IMG}\n"
    kid = kernel_id(source)
    folder.write_kernel(kid, source)
    result = EvalResult(INCORRECT, error=f"output 0 (seed 0) differs: {PAYLOAD}", backend="simulator",
                        target="trn1", kernel_id=kid, problem=problem, profile={"bottleneck": f"bound by {IMG}"})
    generation = max(e.generation for e in lines)
    append_evaluation(folder.evaluations, EvaluationLine(generation, problem, kid, "llm_mutation", (base.kernel_id,),
                                                         False, result, note=f"plan: {IMG} then {SCRIPT}"))
    memory = read_memory_file(folder.memory)
    lesson = MemoryEntry(problem, base.kernel_id, kid, 0.5, f"rationale with markup: {PAYLOAD}",
                         f"+BANNER = {json.dumps(PAYLOAD)}", generation, "regression", "llm_mutation")
    write_memory_file(folder.memory, MemoryFile((*memory.entries, lesson)))
    return kid


def rewind(source: RunFolder, dest: Path, generation: int) -> tuple[RunFolder, list[str]]:
    """A copy of a finished run as it stood after `generation`'s checkpoint, and the evaluation
    lines the run appended after it (whole lines, with their newline)."""
    shutil.copytree(source.root, dest)
    folder = RunFolder(dest)
    lines = folder.evaluations.read_text().splitlines(keepends=True)
    kept = [line for line in lines if json.loads(line)["generation"] <= generation]
    later = lines[len(kept):]
    assert lines[:len(kept)] == kept, "evaluations.jsonl is not in generation order"
    folder.evaluations.write_text("".join(kept))
    for gen, path in folder.checkpoint_files():
        if gen > generation:
            path.unlink()
    return folder, later
