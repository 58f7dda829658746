"""`--preset accelopt`: AccelOpt's beam search (selection.survivors = "beam_per_plan") and its
memory presentation (lessons slow -> fast, in the planner's prompts only), run by the real engine
against the test LLM server (tests/llm_server.py) with the knob evaluator of tests/fakes.py.

The runs scale the beam down (B, N, K below) through --set; the preset's own values are checked
by the first test."""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from accelopt_evo.run import config as cfgmod
from accelopt_evo.runner import resume_run, start_run
from accelopt_evo.search.selection import beam_per_plan
from fitness.correctness.normalize import kernel_id
from operators.llm.prompts import LESSONS_HEADING, SUMMARIZER_LESSONS_HEADING

from fakes import KnobEvaluator
from llm_server import ChatRequest, _digest, change_one_knob, first_kernel, knob_responder, set_knob

B, N, K = 3, 4, 2          # beam, plans per beam kernel, samples per plan
GENS = 2
MARKER = re.compile(r"PLAN-[0-9a-f]{8}: (?P<what>[^.]*)\.")
LESSON = re.compile(r"LESSON-[0-9a-f]{8}")
VARIANT = re.compile(r"^VARIANT = .*\n", re.M)

pytestmark = pytest.mark.slow


@dataclass
class BeamScript:
    """Scripted replies that give every plan and sample a kernel of its own: a plan moves one
    knob ("set"), adds a knob that slows the kernel down ("slow": a regression for the memory) or
    breaks it ("break": every sample incorrect); its second sample also moves COMPUTE_N (which
    may make it faster, slower or incorrect). Records which plan each kernel came from."""

    broken_from: int = 99                              # every plan of these generations breaks
    plan_parent: dict[str, tuple[int, str]] = field(default_factory=dict)   # plan -> (gen, parent id)
    plan_of: dict[str, str] = field(default_factory=dict)                   # kernel id -> plan
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: ChatRequest) -> str:
        if request.role not in ("planner", "implementer"):
            return knob_responder(request)
        kernel = first_kernel(request.text) or ""
        choice = _digest(request.role, request.sample, request.text)
        generation = int(request.sample.split("/")[0])
        if request.role == "planner":
            return self._plan(kernel, choice, generation)
        return self._implement(kernel, choice, request)

    def _plan(self, kernel: str, choice: int, generation: int) -> str:
        marker = f"PLAN-{choice & 0xFFFFFFFF:08x}"
        what = ("break" if generation >= self.broken_from or choice % 7 == 0 else
                "slow" if choice % 5 == 0 else change_one_knob(kernel, choice >> 8)[1])
        with self.lock:
            self.plan_parent[marker] = (generation, kernel_id(kernel))
        return f"{marker}: {what}. Keep the masks."

    def _implement(self, kernel: str, choice: int, request: ChatRequest) -> str:
        found = MARKER.search(request.text.split("## The plan to implement")[1])
        marker, what = found.group(0).split(":")[0], found.group("what").split()
        source = VARIANT.sub("", kernel)
        if what[0] == "slow":
            source += f"\nSLOW_{marker[5:].upper()} = 1  # tune: 1, 2\n"
        elif what[0] == "set":                        # set NAME from A to B
            source = set_knob(source, what[1], int(what[-1]))[0]
        if request.sample.endswith("/1"):
            source = set_knob(source, "COMPUTE_N", (256, 512, 1024, 2048)[choice % 4])[0]
        if what[0] == "break":                        # COMPUTE_N above LOAD_N: incorrect
            source = set_knob(set_knob(source, "LOAD_N", 256)[0], "COMPUTE_N", 512)[0]
        source = f'VARIANT = "{choice & 0xFFFFFF:06x}"\n' + source
        with self.lock:
            self.plan_of[kernel_id(source)] = marker
        return f"Implemented.\n\n```python\n{source.rstrip()}\n```\n"


def make_cfg(out, url):
    """The accelopt preset with a smaller beam, GENS generations, silu at its tiny shape."""
    return cfgmod.resolve(preset="accelopt", sets=[
        f"run.out={json.dumps(str(out))}", f"run.gens={GENS}", "run.shape=tiny", "run.report=false",
        f"population.size={B}", f"llm.plans_per_parent={N}", f"llm.samples_per_plan={K}",
        "evaluation.seeds=[0]", "evaluation.heldout_seeds=0",
        f"llm.base_url={json.dumps(url)}", "llm.model=test-model", "llm.api_key_env=ACCELOPT_RUN_KEY"])


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("ACCELOPT_RUN_KEY", "sk-test")


def run(tmp_path, server):
    return start_run(make_cfg(tmp_path, server.url), "r", progress=False, log=lambda _m: None,
                     evaluator_factory=lambda _cfg, _folder: KnobEvaluator(backend="simulator"))


def checkpoint(folder, generation):
    return json.loads(folder.checkpoint_path(generation).read_text())


def speedups(folder, generation):
    """The valid kernels evaluated in `generation`, by id, with their speedups."""
    lines = [json.loads(line) for line in folder.evaluations.read_text().splitlines()]
    return {e["kernel_id"]: e["speedup"] for e in lines if e["generation"] == generation and e["status"] == "ok"}


def requests(server, role, generation=None):
    return [ex.request for ex in server.exchanges if ex.request.role == role
            and (generation is None or ex.request.sample.startswith(f"{generation}/"))]


def beams(folder):
    """The beam each generation expanded (the baseline's for generation 0) and the one it chose."""
    ck0 = checkpoint(folder, 0)
    before = [ck0["problems"]["silu"]["baseline_id"]]
    out = []
    for g in range(GENS + 1):
        after = [m["id"] for m in checkpoint(folder, g)["population"]["silu"]]
        out.append((g, before, after))
        before = after
    return out


# ---------------------------------------------------------------------------------------------
def test_the_preset_holds_accelopts_settings():
    cfg = cfgmod.resolve(preset="accelopt")
    assert cfg.selection.survivors == "beam_per_plan" and cfg.population.size == 6
    assert (cfg.llm.plans_per_parent, cfg.llm.samples_per_plan) == (12, 2)
    assert cfg.run.gens == 15            # generation 0 and 15 more: T = 16 iterations
    assert cfg.variation.crossover_prob == 0 and cfg.variation.repair_attempts == 0
    m = cfg.memory
    assert (m.capacity, m.per_generation, m.improve_threshold, m.regress_threshold, m.policy) == \
        (16, 8, 1.04, 1.15, "accelopt")
    assert cfgmod.resolve(preset="default").selection.survivors == "mu_plus_lambda"
    with pytest.raises(cfgmod.UserError, match="run.mode"):
        cfgmod.resolve(preset="accelopt", sets=["run.mode=async"])


def test_beam_per_plan_keeps_one_child_per_plan_and_parents_only_for_failed_plans():
    k = {name: SimpleNamespace(id=name, fitness=f) for name, f in
         [("p", 5.0), ("q", 0.5), ("a1", 1.0), ("a2", 2.0), ("b1", 3.0), ("c1", 0.1)]}
    plans = [(k["p"], [k["a1"], k["a2"]]), (k["p"], [k["b1"]]), (k["p"], []), (k["q"], []), (k["q"], [k["c1"]]),
             (k["p"], [])]
    # best sample per plan, by fitness; the parents of failed plans after all of them, once each
    assert [x.id for x in beam_per_plan(plans, 10)] == ["b1", "a2", "c1", "p", "q"]
    assert [x.id for x in beam_per_plan(plans, 2)] == ["b1", "a2"]   # p (5.0) is better, but a parent


def test_each_iteration_plans_b_x_n_samples_b_x_n_x_k_and_keeps_one_child_per_plan(tmp_path, make_server):
    script = BeamScript()
    server = make_server(script)
    folder = run(tmp_path, server).folder
    for g, before, after in beams(folder):
        assert len(before) == (1 if g == 0 else B)
        assert len(requests(server, "planner", g)) == len(before) * N                # B x N plans
        assert len(requests(server, "implementer", g)) == len(before) * N * K        # B x N x K samples
        assert Counter(parent for gen, parent in script.plan_parent.values() if gen == g) == \
            Counter({p: N for p in before})                                          # N per beam kernel
        # the next beam: one candidate per plan (its best valid sample, else its parent), best B
        valid = speedups(folder, g)
        plans = {plan for plan, (gen, _) in script.plan_parent.items() if gen == g}
        assert set(valid) <= set(script.plan_of) | set(before)
        best = {plan: max((s for kid, s in valid.items() if script.plan_of.get(kid) == plan), default=None)
                for plan in plans}
        ranked = sorted((s for s in best.values() if s is not None), reverse=True)
        children = [kid for kid in after if kid in valid and kid in script.plan_of]
        assert len({script.plan_of[kid] for kid in children}) == len(children)    # at most one per plan
        assert [valid[kid] for kid in children] == ranked[:len(children)]
        assert all(valid[kid] == best[script.plan_of[kid]] for kid in children)
        stand_ins = [kid for kid in after if kid not in children]
        failed = {parent for plan, (gen, parent) in script.plan_parent.items() if gen == g and best[plan] is None}
        assert set(stand_ins) <= failed and set(stand_ins) <= set(before)
        assert len(children) == min(B, len(ranked))
        assert len(after) == min(B, len(ranked) + len(failed))


def test_parents_of_plans_that_all_failed_stand_in(tmp_path, make_server):
    server = make_server(BeamScript(broken_from=1))
    folder = run(tmp_path, server).folder
    (_, _, gen0), (_, before, after), (_, before2, after2) = beams(folder)
    assert len(gen0) == B and not speedups(folder, 1)
    assert after == before and after2 == before2 == gen0       # the beam kept every lineage
    assert len(requests(server, "planner", 2)) == B * N


def test_lessons_reach_the_planner_only_and_regressions_read_as_what_worked(tmp_path, make_server):
    server = make_server(BeamScript())
    folder = run(tmp_path, server).folder
    entries = json.loads(folder.memory.read_text())["entries"]
    reversed_ = [e for e in entries if e["kind"] == "regression"]
    assert reversed_ and all(e.get("reversed") for e in reversed_)
    assert all(not e.get("reversed") for e in entries if e["kind"] == "improvement")
    for e in reversed_:   # the entry keeps its parent -> child diff: the child added the slow knob
        assert "\n+SLOW_" in e["diff"] and "\n-SLOW_" not in e["diff"]
    for role in ("implementer", "summarizer"):
        for r in requests(server, role):
            assert not LESSON.search(r.text), role
            assert LESSONS_HEADING not in r.text and SUMMARIZER_LESSONS_HEADING not in r.text, role
    summaries = requests(server, "summarizer")
    assert summaries and all("is faster than" in r.text and "is slower than" not in r.text for r in summaries)
    later = [r.text for r in requests(server, "planner") if not r.sample.startswith("0/")]
    assert later and all(LESSONS_HEADING in t for t in later)
    first = [e for e in reversed_ if e["generation"] < GENS]
    assert first, "no regression admitted early enough to be shown"
    for e in first:
        shown = f"what worked (made a silu kernel {1 / e['speedup']:.2f}x faster)"
        texts = [r.text for r in requests(server, "planner") if int(r.sample.split("/")[0]) > e["generation"]]
        assert texts and all(shown in t and LESSON.search(e["rationale"]).group(0) in t for t in texts)
    assert not any("what to avoid" in ex.request.text for ex in server.exchanges)


def test_a_resumed_beam_run_is_the_run_it_would_have_been(tmp_path, make_server):
    server = make_server(BeamScript())
    folder = run(tmp_path, server).folder
    before = checkpoint(folder, GENS)
    sent = len(server.exchanges)
    folder.checkpoint_path(GENS).unlink()
    resume_run(folder.root, None, progress=False, log=lambda _m: None,
               evaluator_factory=lambda _cfg, _folder: KnobEvaluator(backend="simulator"))
    assert len(server.exchanges) == sent, "the resumed generation sent requests"
    after = checkpoint(folder, GENS)
    for key in ("population", "hall_of_fame", "memory"):
        assert after[key] == before[key]
