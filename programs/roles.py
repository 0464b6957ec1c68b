"""Plain-Python entry points to the programs: what the runtime calls.

Each method runs one program on one backend and returns plain data. Nothing here
decides what to run next; that is the runtime's job.
"""

from __future__ import annotations

from typing import Callable

from lookahead_reasoning.programs.backend import LookaheadEndpoint
from lookahead_reasoning.programs.prompts import question_message
from lookahead_reasoning.programs.score import Score, score_answer, score_steps
from lookahead_reasoning.programs.step_types import Sampling, StepOutput
from lookahead_reasoning.programs.steps import (
    draft_steps,
    free_generation,
    render_conversation,
    run_in_this_thread,
    sample_steps,
    target_steps,
    target_stream,
)


def render_question(backend: LookaheadEndpoint, question: str) -> str:
    """The question wrapped in the backend's chat template, up to the assistant's answer."""
    return render_conversation(backend, [{"role": "user", "content": question_message(question)}])


class SGLangStepModels:
    """Draft and target programs bound to their backends and step settings."""

    def __init__(
        self,
        draft: LookaheadEndpoint,
        target: LookaheadEndpoint,
        delimiter: str,
        max_step_tokens: int,
        draft_sampling: Sampling,
        target_sampling: Sampling,
        tree_sampling: Sampling | None = None,
    ):
        self.draft_backend = draft
        self.target_backend = target
        self.delimiter = delimiter
        self.max_step_tokens = max_step_tokens
        self.draft_sampling = draft_sampling
        self.target_sampling = target_sampling
        self.tree_sampling = tree_sampling or draft_sampling  # tree candidates (`sample`)

    def prompt(self, question: str) -> str:
        return render_question(self.target_backend, question)

    def draft(self, prefix: str, gamma: int, max_step_tokens: int | None = None) -> list[StepOutput]:
        state = run_in_this_thread(
            draft_steps,
            prefix=prefix,
            gamma=gamma,
            delimiter=self.delimiter,
            max_step_tokens=max_step_tokens or self.max_step_tokens,
            sampling=self.draft_sampling,
            backend=self.draft_backend,
        )
        return state.get_var("steps")

    def sample(self, prefixes: list[str], width: int, max_step_tokens: int | None = None) -> list[list[StepOutput]]:
        """`width` sampled next-step candidates after each prefix: one tree level, in one batch."""
        return sample_steps(
            self.draft_backend, list(prefixes), width, self.delimiter, max_step_tokens or self.max_step_tokens,
            self.tree_sampling,
        )

    def target(
        self, prefix: str, continuations: list[str], max_step_tokens: int | list[int] | None = None,
        commit_prefix: bool = True,
    ) -> list[StepOutput]:
        """The target's step after each continuation; `max_step_tokens`: one cap, or one per continuation."""
        return target_steps(
            self.target_backend, prefix, continuations, self.delimiter, max_step_tokens or self.max_step_tokens,
            self.target_sampling, commit_prefix=commit_prefix and len(continuations) > 1,
        )

    def target_branch(
        self, prefix: str, continuation: str, max_step_tokens: int, rid: str,
        on_progress: Callable[[str, int], None] | None = None,
    ) -> StepOutput:
        """The target's step after `prefix + continuation` as a streamed request of its own, with SGLang request
        id `rid` (so that `abort_target(rid)` can stop it; it then raises RequestAborted); `on_progress(text, tokens)`
        hears what it has written so far, until it ends. The prefix is expected in the radix cache."""
        return target_stream(
            self.target_backend.with_request_id(rid), prefix, continuation, self.delimiter, max_step_tokens,
            self.target_sampling, on_progress,
        )

    def commit_target(self, prefix: str) -> None:
        """Prefill `prefix` on the target's server (a fork's commit): the branches that follow find it cached, and
        a cache-aware router sends them to the replica that holds it."""
        self.target_backend.cache_prefix(prefix)

    def abort_target(self, rid: str) -> bool:
        """Stop the target request `rid` on its server; whether the server said yes."""
        return self.target_backend.abort(rid)

    def generate(self, prefix: str, max_tokens: int) -> StepOutput:
        state = run_in_this_thread(
            free_generation, prefix=prefix, max_tokens=max_tokens, sampling=self.target_sampling,
            backend=self.target_backend,
        )
        return state.get_var("output")


def score_steps_on(backend: LookaheadEndpoint, context: str, steps: list[str]) -> list[Score]:
    """The backend's model rates each proposed next step 0-9 (SpecReason-style verification)."""
    if not steps:
        return []
    return score_steps.run(context=context, steps=list(steps), backend=backend).get_var("scores")


def score_answer_on(backend: LookaheadEndpoint, question: str, answer: str, reference: str | None = None) -> Score:
    """The backend's model grades an answer 1-10 (MT-Bench)."""
    return score_answer.run(question=question, answer=answer, reference=reference, backend=backend).get_var("score")
