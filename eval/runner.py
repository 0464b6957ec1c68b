"""`lookahead eval`: every problem, every method, the same servers and sampling settings.

Methods: `ar` (the target alone), `lr` (lookahead reasoning, sync engine), `lr-async`
(async engine), `lr-random` (the sync engine with the `random` verifier accepting half the
draft steps: the paper's ablation, which shows what the verifier keeps), `draft` (the draft
model alone: the accuracy floor). Per problem and sample the methods run one after another,
so AR and LR meet the same server load and their times compare side by side. With
`concurrency` > 1 several problems run at once (their methods still one after another):
answers are the same, times are under that load. Each finished (problem, method, sample) is
appended to results.jsonl at once; a rerun skips what is there.

`ar_finishes` keeps only the problems whose AR answer ends before the token cap (a problem
whose AR answer is cut runs no other method), and `keep` stops after that many such problems:
"the first 25 problems the target answers in under 512 tokens".
"""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

from lookahead_reasoning.eval.datasets import Problem
from lookahead_reasoning.eval.graders import Grade, grade
from lookahead_reasoning.eval.records import EvalRecord, ResultStore, pin_settings, refuse_unpinned
from lookahead_reasoning.eval.sandbox import SandboxUnavailable, require_sandbox
from lookahead_reasoning.programs.roles import SGLangStepModels, render_conversation, score_answer_on
from lookahead_reasoning.runtime.baseline import continue_baseline
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.servers.endpoints import Endpoints
from lookahead_reasoning.errors import LookaheadError, first_line, target_failed
from lookahead_reasoning.runtime.reasoner import LookaheadReasoner

METHOD_NAMES = ("ar", "lr", "lr-async", "lr-random", "draft")
RANDOM_ACCEPTANCE = 0.5  # lr-random's chance of keeping a draft step


@dataclass(frozen=True)
class MethodSpec:
    name: str
    kind: Literal["ar", "lr", "draft"]
    config: LookaheadConfig


def parse_methods(text: str, config: LookaheadConfig) -> list[MethodSpec]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in METHOD_NAMES]
    if unknown or not names:
        raise LookaheadError(f"unknown method(s) {', '.join(unknown) or '(none given)'}; known: {', '.join(METHOD_NAMES)}")
    specs = []
    for name in dict.fromkeys(names):
        if name == "lr-async":
            specs.append(MethodSpec(name, "lr", config.model_copy(update={"engine": "async"})))
        elif name == "lr-random":
            update = {"verifier": "random", "verifier_threshold": RANDOM_ACCEPTANCE}
            specs.append(MethodSpec(name, "lr", config.model_copy(update=update)))
        else:
            specs.append(MethodSpec(name, name, config))  # type: ignore[arg-type]
    return specs


def sample_config(config: LookaheadConfig, sample: int) -> LookaheadConfig:
    """Sample k of a sampled run uses seed + k, so samples differ and reruns repeat them."""
    sampled = config.draft_sampling.temperature > 0 or config.target_sampling.temperature > 0 or config.width > 1
    if not sampled:
        return config
    return config.model_copy(update={"seed": (config.seed or 0) + sample})


class MethodRunner:
    """Runs one method on one problem and returns its record (ungraded fields filled)."""

    def __init__(self, spec: MethodSpec, endpoints: Endpoints):
        self.spec = spec
        self.endpoints = endpoints
        self.reasoners: dict[int, LookaheadReasoner] = {}

    def reasoner(self, sample: int) -> LookaheadReasoner:
        config = sample_config(self.spec.config, sample)
        key = config.seed or 0
        if key not in self.reasoners:
            self.reasoners[key] = LookaheadReasoner(self.endpoints, config)
        return self.reasoners[key]

    def answer(self, problem: Problem, sample: int) -> dict:
        reasoner = self.reasoner(sample)
        connection, config = reasoner.connection, reasoner.config
        messages = [{"role": "user", "content": problem.message}]
        if self.spec.kind == "lr":
            prompt = self._render(connection.backends["target"], messages)
            result = reasoner.engine().continue_from(prompt)
            stats = result.stats
            return dict(
                text=result.text, wall_s=stats.wall_time_s, prompt_tokens=stats.prompt_tokens,
                output_tokens=stats.output_tokens, finish=stats.finish, rounds=stats.rounds,
                draft_steps_judged=stats.draft_steps_judged, draft_steps_accepted=stats.draft_steps_accepted,
                degraded=stats.degraded,
            )
        if self.spec.kind == "ar":
            models, backend = connection.models, connection.backends["target"]
        else:  # the draft model alone, with the target's sampling settings
            backend = connection.backends["draft"]
            models = SGLangStepModels(
                draft=backend, target=backend, delimiter=config.delimiter, max_step_tokens=config.max_step_tokens,
                draft_sampling=config.target_sampling.to_program(), target_sampling=config.target_sampling.to_program(),
            )
        prompt = self._render(backend, messages)
        base = continue_baseline(models, prompt, config)
        return dict(
            text=base.text, wall_s=base.wall_time_s, prompt_tokens=base.prompt_tokens,
            output_tokens=base.output_tokens, finish=base.finish,
        )

    @staticmethod
    def _render(backend, messages) -> str:
        try:
            return render_conversation(backend, messages)
        except Exception as error:
            raise target_failed(error) from None


def judge_scorer(backend) -> Callable:
    """MT-Bench's grader: the judge server scores an answer 1-10."""

    def score(question: str, answer: str, reference: str | None) -> float | None:
        return score_answer_on(backend, question, answer, reference).value

    return score


def safe_grade(problem: Problem, text: str, scorer, unsafe_no_sandbox: bool = False) -> Grade:
    """A grader that fails marks the answer wrong and says why; the run goes on (not without a sandbox)."""
    try:
        return grade(problem, text, scorer, unsafe_no_sandbox=unsafe_no_sandbox)
    except SandboxUnavailable:
        raise
    except Exception as error:
        return Grade(False if problem.grader != "none" else None, None, detail=f"grading failed: {first_line(error)}")


def run_eval(
    problems: list[Problem],
    methods: list[MethodSpec],
    endpoints: Endpoints,
    out: Path,
    settings: dict,
    samples: int = 1,
    progress: Callable[[EvalRecord | None, int, int], None] | None = None,
    grade_answers: bool = True,
    unsafe_no_sandbox: bool = False,
    concurrency: int = 1,
    ar_finishes: bool = False,
    keep: int | None = None,
) -> list[EvalRecord]:
    """Run what results.jsonl in `out` lacks; return every record of the problems kept and these methods.

    Without `grade_answers` (simulated servers write synthetic text) nothing is graded. Code answers
    run in bubblewrap; where it cannot run this refuses before any model runs, unless `unsafe_no_sandbox`.
    """
    if samples < 1:
        raise LookaheadError("--samples must be >= 1")
    if concurrency < 1:
        raise LookaheadError("--concurrency must be >= 1")
    if keep is not None and keep < 1:
        raise LookaheadError("--limit must be >= 1")
    if ar_finishes and methods[0].name != "ar":
        raise LookaheadError("--ar-finishes needs ar as the first method")
    if grade_answers and not unsafe_no_sandbox and any(p.grader == "code" for p in problems):
        require_sandbox()
    refuse_unpinned(out / "results.jsonl", out / "eval.json")
    pin_settings(out / "eval.json", {**settings, "methods": [m.name for m in methods]})
    store = ResultStore(out / "results.jsonl")
    done = store.load()
    lock = threading.Lock()
    if keep is not None and not ar_finishes:
        problems = problems[:keep]
    total = (keep or len(problems)) * samples * len(methods)
    runners = {m.name: MethodRunner(m, endpoints) for m in methods}
    scorer = None
    if grade_answers and any(p.grader == "judge-score" for p in problems):
        scorer = judge_scorer(runners[methods[0].name].reasoner(0).connection.backends["judge"])

    if progress:
        finished = sum((p.id, m.name, s) in done for p in problems for s in range(samples) for m in methods)
        progress(None, min(finished, total), total)

    def cut_by_ar(problem: Problem) -> bool:
        """Whether an AR answer to `problem` (any sample) hit the token cap."""
        return any(record.cut_at_cap for s in range(samples) if (record := done.get((problem.id, "ar", s))))

    def run_problem(problem: Problem) -> bool:
        """Every missing (sample, method) of one problem, in order; False when AR's answer was cut."""
        for sample in range(samples):
            for method in methods:
                with lock:
                    if ar_finishes and method.name != "ar" and cut_by_ar(problem):
                        return False
                    if (problem.id, method.name, sample) in done:
                        continue
                try:
                    fields = runners[method.name].answer(problem, sample)
                except LookaheadError as error:
                    raise LookaheadError(f"{problem.id} ({method.name}, sample {sample}): {error}") from None
                verdict = (safe_grade(problem, fields["text"], scorer, unsafe_no_sandbox) if grade_answers
                           else Grade(None, None, detail="not graded"))
                record = EvalRecord(
                    problem_id=problem.id, method=method.name, sample=sample, correct=verdict.correct,
                    score=verdict.score, extracted=verdict.extracted, reference=problem.reference,
                    grade_detail=verdict.detail, **fields,
                )
                with lock:
                    store.append(record)
                    done[record.key] = record
                    if progress:
                        progress(record, 1, total)
        return not (ar_finishes and cut_by_ar(problem))

    kept = run_problems(problems, run_problem, concurrency, keep if ar_finishes else None)
    wanted = {(p.id, m.name, s) for p in kept for m in methods for s in range(samples)}
    return [r for k, r in done.items() if k in wanted]


def run_problems(problems: list[Problem], run_problem: Callable[[Problem], bool], concurrency: int,
                 keep: int | None) -> list[Problem]:
    """Run problems in order, `concurrency` at a time; the first `keep` (all if None) that `run_problem` keeps.

    No problem starts once the kept ones and those in flight could make up `keep`; a failure stops
    new starts and is raised once the problems in flight have finished (their results are on disk).
    """
    outcomes: dict[str, bool] = {}
    pending = iter(problems)
    in_flight: dict[Future, Problem] = {}
    failure: BaseException | None = None

    def enough() -> bool:
        return keep is not None and sum(outcomes.values()) + len(in_flight) >= keep

    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="eval")
    try:
        while True:
            while failure is None and len(in_flight) < concurrency and not enough():
                problem = next(pending, None)
                if problem is None:
                    break
                in_flight[pool.submit(run_problem, problem)] = problem
            if not in_flight:
                break
            finished, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            for future in finished:
                problem = in_flight.pop(future)
                try:
                    outcomes[problem.id] = future.result()
                except Exception as error:  # raised below once the others finish
                    failure = failure or error
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # Ctrl-C leaves at once; results are on disk
    if failure is not None:
        raise failure
    kept = [p for p in problems if outcomes.get(p.id)]
    return kept[:keep] if keep is not None else kept
