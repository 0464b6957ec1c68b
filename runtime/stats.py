"""A run's statistics, gathered by observing it (as vLLM's spec-decode metrics observe each step).

The engines report what happens and nothing else: every request's tokens per role
(`count_tokens`), every finished round (`observe_round`), every role worked around
(`degraded`). `finish()` derives the rest (rounds, wall time, acceptance rate, the
target's cache ratio) and gives the run's `RunStats`.
"""

from __future__ import annotations

import time
from typing import Iterable, Literal, Protocol

from lookahead_reasoning.runtime.acceptance import step_tokens
from lookahead_reasoning.runtime.results import RoleTokens, RoundRecord, RunStats

Role = Literal["draft", "target", "judge"]


class TokenUsage(Protocol):
    """A request's usage: a StepOutput, or a Verdict from a model."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int


class RunMetrics:
    """Observes one run; `finish()` returns its RunStats."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self._stats = RunStats()
        self._counted_target = False

    @property
    def output_tokens(self) -> int:
        """Tokens of the kept steps so far: what the run's token cap is measured against."""
        return self._stats.output_tokens

    def count_tokens(self, role: Role, step_outputs: Iterable[TokenUsage]) -> None:
        """One request per output: its prompt, completion and cached tokens go to `role`."""
        tokens: RoleTokens = getattr(self._stats, role)
        for output in step_outputs:
            if role == "target" and not self._counted_target:
                # the run's first target request is the root branch of its first round: the bare prompt
                self._stats.prompt_tokens = output.prompt_tokens
                self._counted_target = True
            tokens.add(output.prompt_tokens, output.completion_tokens, output.cached_tokens)

    def observe_round(self, record: RoundRecord, outputs: Iterable[TokenUsage]) -> None:
        """A finished round: its decided draft positions and the completion tokens of its kept steps (`outputs`)."""
        stats = self._stats
        stats.rounds += 1
        stats.draft_steps_judged += record.positions
        stats.draft_steps_accepted += record.accepted
        stats.output_tokens += sum(step_tokens(o) for o in outputs)

    def degraded(self, message: str) -> None:
        """A role failed and the run goes on without it."""
        self._stats.degraded.append(message)

    def finish(self, reason: Literal["eos", "max_tokens"] = "eos") -> RunStats:
        stats = self._stats.model_copy(deep=True)
        stats.finish = reason
        stats.wall_time_s = time.perf_counter() - self.started
        if stats.draft_steps_judged:
            stats.acceptance_rate = stats.draft_steps_accepted / stats.draft_steps_judged
        if stats.target.prompt_tokens:
            stats.target_branch_cache_ratio = stats.target.cached_tokens / stats.target.prompt_tokens
        return stats
