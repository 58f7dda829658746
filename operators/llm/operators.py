"""LLM variation operators: two-stage mutation, crossover, repair and the summarizer.

Mutation follows AccelOpt: a planner proposes one optimization of the parent (from the
kernel, its profile and the memory's lessons), then an implementer writes the whole kernel
from the plan; each mutation request gives `plans_per_parent` x `samples_per_plan` children,
each carrying the id of its plan (`Child.plan`, kept by its repairs).
Crossover shows two correct parents with their profiles and asks for one kernel combining
their distinct optimizations (one child per request). Repair sends a failed child back once
with its exact error. The summarizer writes the memory's rationale for a parent -> child pair
(a negative lesson for a regression).

Calls of one stage run concurrently (at most `llm.max_concurrency` at once), but everything
that decides *what* is asked happens first, in request order, on the calling thread: sample
numbers, cache look-ups and budget reservations. So concurrency never changes which reply goes
where, and a resumed run with the same seed asks the same questions and gets them from the
cache. A call that fails or a reply without usable code becomes a Child with `error` (and a
ledger line), never an exception.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..base import CROSSOVER, MUTATION, Child, Context, Operators, Parent, Request
from . import ledger as L
from . import prompts
from .budget import Budget, Reservation, Totals
from .cache import CACHE_DIR, CachedReply, ResponseCache, cache_key, prompt_hash
from .client import ChatCall, ChatClient, message_chars
from .extract import dialect_of, extract_kernel, extract_text
from .ledger import CallRecord, Ledger
from .settings import BudgetSettings, LLMSettings

MUTATION_OP = "llm_mutation"
CROSSOVER_OP = "llm_crossover"
REPAIR_OP = "llm_repair"

MAX_NOTE_CHARS = 500
MAX_PLAN_CHARS = 4000
MAX_RATIONALE_CHARS = 2500
CHARS_PER_TOKEN = 4          # for the budget's estimate of a prompt's size before it is sent

Parsed = tuple[Any, str, str]   # (value or None, outcome, error)


def parse_kernel(content: str, dialect: str = "legacy") -> Parsed:
    found = extract_kernel(content, dialect)
    if found is None:
        return None, "no_code", "reply has no usable kernel (no Python code defining kernel)"
    return found.source, "kernel", ""


def kernel_parser(source: str, ctx: Context) -> Callable[[str], Parsed]:
    """parse_kernel for replies that change `source`: imports a reply leaves out are added in
    the NKI dialect of `source` (of the problem's baseline when `source` imports none)."""
    return functools.partial(parse_kernel, dialect=dialect_of(source, dialect_of(ctx.baseline_source)))


def parse_plan(content: str) -> Parsed:
    text = extract_text(content, MAX_PLAN_CHARS)
    return (text, "plan", "") if text else (None, "empty", "empty plan")


def parse_rationale(content: str) -> Parsed:
    text = extract_text(content, MAX_RATIONALE_CHARS)
    return (text, "rationale", "") if text else (None, "empty", "empty rationale")


@dataclass(frozen=True)
class _Job:
    call: ChatCall
    parse: Callable[[str], Parsed]
    problem: str
    generation: int


@dataclass(frozen=True)
class _Done:
    value: Any            # what parse() made of the reply, or None
    error: str            # why value is None ("" otherwise)


class LLMOperators(Operators):
    """The Operators contract over an OpenAI-compatible endpoint, with cache, ledger and budget
    in `run_dir` (`llm_cache/`, `llm_calls.jsonl`)."""

    name = "llm"

    def __init__(self, settings: LLMSettings, budget: BudgetSettings, run_dir: str | Path, *,
                 client: ChatClient | None = None, environ: Mapping[str, str] | None = None) -> None:
        self.settings = settings
        run_dir = Path(run_dir)
        self.cache = ResponseCache(run_dir / CACHE_DIR)
        self.ledger = Ledger(run_dir / L.LEDGER_FILE, secrets=[settings.api_key(environ)])
        # Spending of earlier sessions of this run counts against the caps.
        self.budget = Budget(budget, spent=self.ledger.totals())
        self.client = client or ChatClient.from_settings(settings, environ)
        self._occurrences: dict[tuple[str, int], collections.Counter[str]] = {}
        self._pool: ThreadPoolExecutor | None = None
        # Several threads may call vary/repair at once (the asynchronous engine): deciding what
        # to send (sample numbers, cache look-ups, reservations) is done by one at a time.
        self._deciding = threading.Lock()

    # Protocol ------------------------------------------------------------------------------
    def children_per_request(self, kind: str, ctx: Context) -> int:
        """How many children `vary` returns for one request of this kind (when all calls work)."""
        if kind == MUTATION:
            return self.settings.plans_per_parent * self.settings.samples_per_plan
        return 1

    def vary(self, requests: Sequence[Request], ctx: Context) -> list[list[Child]]:
        out: list[list[Child]] = [[] for _ in requests]
        plan_jobs: list[tuple[int, str, _Job]] = []   # (request, plan id, planner call)
        cross_jobs: list[tuple[int, _Job]] = []
        for i, req in enumerate(requests):
            ids = tuple(p.id for p in req.parents)
            if req.kind == MUTATION and req.parents:
                messages = prompts.planner_messages(req.parents[0], ctx)
                for k in range(self.settings.plans_per_parent):
                    job = self._job("planner", messages, parse_plan, ctx)
                    plan_jobs.append((i, plan_id(req.parents[0], i, k), job))
            elif req.kind == CROSSOVER and len(req.parents) >= 2:
                a, b = req.parents[0], req.parents[1]
                cross_jobs.append((i, self._job("crossover", prompts.crossover_messages(a, b, ctx),
                                                kernel_parser(a.source, ctx), ctx)))
            else:
                op = CROSSOVER_OP if req.kind == CROSSOVER else MUTATION_OP
                why = f"cannot serve a {req.kind} request with {len(ids)} parent(s)"
                out[i].append(Child(None, op, ids, error=why))

        stage1 = self._run([job for _, _, job in plan_jobs] + [job for _, job in cross_jobs])
        plans, crossed = stage1[: len(plan_jobs)], stage1[len(plan_jobs):]

        impl_jobs: list[tuple[int, str, str, _Job]] = []   # (request, plan id, plan, implementer call)
        for (i, pid, _), done in zip(plan_jobs, plans):
            parent = requests[i].parents[0]
            if done.value is None:
                out[i].append(Child(None, MUTATION_OP, (parent.id,), error=f"planner: {done.error}", plan=pid))
                continue
            for _ in range(self.settings.samples_per_plan):
                impl_jobs.append((i, pid, done.value, self._job(
                    "implementer", prompts.implementer_messages(parent, done.value, ctx),
                    kernel_parser(parent.source, ctx), ctx)))
        implemented = self._run([job for *_, job in impl_jobs])

        for (i, pid, plan, _), done in zip(impl_jobs, implemented):
            parent = requests[i].parents[0]
            note = _short(plan)
            if done.value is None:
                out[i].append(Child(None, MUTATION_OP, (parent.id,), note, f"implementer: {done.error}", plan=pid))
            else:
                out[i].append(Child(done.value, MUTATION_OP, (parent.id,), note, plan=pid))
        for (i, _), done in zip(cross_jobs, crossed):
            a, b = requests[i].parents[0], requests[i].parents[1]
            note = f"crossover of {a.id[:12]} and {b.id[:12]}"
            if done.value is None:
                out[i].append(Child(None, CROSSOVER_OP, (a.id, b.id), note, f"crossover: {done.error}"))
            else:
                out[i].append(Child(done.value, CROSSOVER_OP, (a.id, b.id), note))
        return out

    def repair(self, failed: Sequence[tuple[Child, str]], ctx: Context) -> list[Child | None]:
        slots = [i for i, (child, _) in enumerate(failed) if child.source]
        jobs = [self._job("repair", prompts.repair_messages(failed[i][0].source or "", failed[i][1], ctx),
                          kernel_parser(failed[i][0].source or "", ctx), ctx) for i in slots]
        out: list[Child | None] = [None] * len(failed)
        for i, done in zip(slots, self._run(jobs)):
            child = failed[i][0]
            if done.value is not None:
                out[i] = Child(done.value, REPAIR_OP, child.parent_ids,
                               _short(f"repair of {child.operator} after: {failed[i][1]}"), plan=child.plan)
        return out

    def summarize(self, pairs: Sequence[tuple[Parent, Parent, float]], ctx: Context) -> list[str]:
        """A rationale per pair; "" where none could be had (call failed, cap reached): the
        engine should then not add that pair to the memory."""
        jobs = [self._job("summarizer", prompts.summarizer_messages(p, c, r, ctx), parse_rationale, ctx)
                for p, c, r in pairs]
        return [done.value or "" for done in self._run(jobs)]

    # Budget and lifecycle ------------------------------------------------------------------
    def stop_reason(self) -> str | None:
        """Which budget cap ends the run (the engine asks after each generation), or None."""
        return self.budget.stop_reason()

    def spent(self) -> dict[str, Any]:
        """Billed use so far, for checkpoints and reports."""
        return dataclasses.asdict(self.budget.spent)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self.client.close()

    def __enter__(self) -> "LLMOperators":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Calls ---------------------------------------------------------------------------------
    def _job(self, role: str, messages: list[dict[str, str]], parse: Callable[[str], Parsed],
             ctx: Context) -> _Job:
        call = ChatCall.for_role(self.settings.role(role), messages)
        return _Job(call, parse, ctx.problem, ctx.generation)

    def _sample(self, job: _Job) -> str:
        """The sample index of a request: its generation and how many identical requests this
        problem's generation has issued before it. Counts of the generation before stay, for the
        asynchronous engine's requests that finish after the next generation began."""
        slot = (job.problem, job.generation)
        if slot not in self._occurrences:
            for old in [k for k in self._occurrences if k[0] == job.problem and k[1] < job.generation - 1]:
                del self._occurrences[old]
            self._occurrences[slot] = collections.Counter()
        c = job.call
        base = cache_key(c.model, c.messages, c.params(), "")
        n = self._occurrences[slot][base]
        self._occurrences[slot][base] += 1
        return f"{job.generation}/{n}"

    def _estimate(self, call: ChatCall) -> tuple[int, float]:
        prompt = -(-message_chars(call.messages) // CHARS_PER_TOKEN)
        completion = call.completion_cap() or self.budget.expected_completion_tokens()
        return prompt + completion, self.settings.cost_usd(prompt, completion)

    def _run(self, jobs: Sequence[_Job]) -> list[_Done]:
        """Results of `jobs` in order; misses of the cache run concurrently."""
        results: list[_Done | None] = [None] * len(jobs)
        pending: dict[int, Any] = {}
        with self._deciding:
            self._decide(jobs, results, pending)
        for i, future in pending.items():
            results[i] = future.result()
        return [r if r is not None else _Done(None, "no result") for r in results]

    def _decide(self, jobs: Sequence[_Job], results: list[_Done | None], pending: dict[int, Any]) -> None:
        """Sample numbers, cache hits into `results`, and calls that fit the budget started
        into `pending` (index -> future)."""
        for i, job in enumerate(jobs):
            job = dataclasses.replace(job, call=dataclasses.replace(job.call, sample=self._sample(job)))
            c = job.call
            key = cache_key(c.model, c.messages, c.params(), c.sample)
            cached = self.cache.get(key)
            if cached is not None:
                results[i] = self._from_cache(job, key, cached)
                continue
            est_tokens, est_usd = self._estimate(c)
            reservation = self.budget.reserve(est_tokens, est_usd)
            if reservation is None:
                reason = self.budget.stop_reason() or "budget cap reached"
                self._record(job, key, L.NOT_SENT, error=reason)
                results[i] = _Done(None, f"not sent: {reason}")
                continue
            pending[i] = self._executor().submit(self._send, job, key, reservation)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.settings.max_concurrency,
                                            thread_name_prefix="llm-call")
        return self._pool

    def _send(self, job: _Job, key: str, reservation: Reservation) -> _Done:
        c = job.call
        used = Totals()
        try:
            result = self.client.complete(c)
            used = result.spent(self.settings)
        finally:
            self.budget.settle(reservation, used)
        if result.status != L.OK:   # a truncated reply was billed (`used`), and is never cached
            self._record(job, key, result.status, error=result.error, seconds=result.seconds,
                         attempts=result.attempts, retries=result.retries, used=used)
            return _Done(None, f"{result.status}: {result.error}")
        self.cache.put(key, CachedReply(result.content or "", result.prompt_tokens, result.completion_tokens,
                                        result.finish_reason, result.served_model, c.role))
        value, outcome, error = job.parse(result.content or "")
        remark = "; ".join(x for x in (error, result.error) if x)
        self._record(job, key, L.OK, outcome=outcome, error=remark, seconds=result.seconds,
                     attempts=result.attempts, retries=result.retries, used=used)
        return _Done(value, error)

    def _from_cache(self, job: _Job, key: str, cached: CachedReply) -> _Done:
        start = time.monotonic()
        value, outcome, error = job.parse(cached.content)
        self._record(job, key, L.OK, outcome=outcome, error=error, cached=True, seconds=time.monotonic() - start)
        return _Done(value, error)

    def _record(self, job: _Job, key: str, status: str, *, outcome: str = "", error: str = "",
                cached: bool = False, seconds: float = 0.0, attempts: int = 0, retries: Sequence[str] = (),
                used: Totals = Totals()) -> None:
        c = job.call
        self.ledger.append(CallRecord(
            role=c.role, model=c.model, prompt_hash=prompt_hash(c.messages), prompt_tokens=used.prompt_tokens,
            completion_tokens=used.completion_tokens, reasoning_tokens=used.reasoning_tokens,
            cost_usd=used.cost_usd, seconds=round(seconds, 4), status=status,
            cached=cached, outcome=outcome, error=error, attempts=attempts, retries=list(retries),
            problem=job.problem, generation=job.generation, sample=c.sample, cache_key=key))


def plan_id(parent: Parent, request: int, index: int) -> str:
    """The id of the `index`-th plan for `parent` in request `request` of one `vary` call."""
    return f"{parent.id}/{request}/{index}"


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_NOTE_CHARS else text[: MAX_NOTE_CHARS - 3] + "..."
