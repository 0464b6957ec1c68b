"""`lookahead eval`: every problem, every method, the same servers and sampling settings.

Methods: `ar` (the target alone), `lr` (lookahead reasoning, sync engine), `lr-async`
(async engine), `draft` (the draft model alone: the accuracy floor). Per problem and
sample the methods run one after another, so AR and LR meet the same server load and
their times compare side by side. Each finished (problem, method, sample) is appended
to results.jsonl at once; a rerun skips what is there.
"""

from __future__ import annotations

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
from lookahead_reasoning.runtime.endpoints import Endpoints
from lookahead_reasoning.errors import LookaheadError, first_line, target_failed
from lookahead_reasoning.runtime.reasoner import LookaheadReasoner

METHOD_NAMES = ("ar", "lr", "lr-async", "draft")


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

    def run(self, problem: Problem, sample: int) -> dict:
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
) -> list[EvalRecord]:
    """Run what results.jsonl in `out` lacks; return every record of these problems and methods.

    Without `grade_answers` (simulated servers write synthetic text) nothing is graded. Code answers
    run in bubblewrap; where it cannot run this refuses before any model runs, unless `unsafe_no_sandbox`.
    """
    if samples < 1:
        raise LookaheadError("--samples must be >= 1")
    if grade_answers and not unsafe_no_sandbox and any(p.grader == "code" for p in problems):
        require_sandbox()
    refuse_unpinned(out / "results.jsonl", out / "eval.json")
    pin_settings(out / "eval.json", {**settings, "methods": [m.name for m in methods]})
    store = ResultStore(out / "results.jsonl")
    done = store.load()
    todo = [
        (problem, sample, method)
        for problem in problems
        for sample in range(samples)
        for method in methods
        if (problem.id, method.name, sample) not in done
    ]
    total = len(problems) * samples * len(methods)
    if progress:
        progress(None, total - len(todo), total)
    runners = {m.name: MethodRunner(m, endpoints) for m in methods}
    scorer = None
    if grade_answers and any(p.grader == "judge-score" for p in problems):
        scorer = judge_scorer(runners[methods[0].name].reasoner(0).connection.backends["judge"])
    for problem, sample, method in todo:
        try:
            fields = runners[method.name].run(problem, sample)
        except LookaheadError as error:
            raise LookaheadError(f"{problem.id} ({method.name}, sample {sample}): {error}") from None
        verdict = (safe_grade(problem, fields["text"], scorer, unsafe_no_sandbox) if grade_answers
                   else Grade(None, None, detail="not graded"))
        record = EvalRecord(
            problem_id=problem.id, method=method.name, sample=sample, correct=verdict.correct, score=verdict.score,
            extracted=verdict.extracted, reference=problem.reference, grade_detail=verdict.detail, **fields,
        )
        store.append(record)
        done[record.key] = record
        if progress:
            progress(record, 1, total)
    wanted = {(p.id, m.name, s) for p in problems for m in methods for s in range(samples)}
    return [r for k, r in done.items() if k in wanted]
