"""The synchronous lookahead engine: draft γ → target γ+1 branches → judge → accept.

Round r from prefix P:
  1. the draft writes d_1..d_m one after another (m ≤ γ; it stops early at EOS or
     the length cap, since nothing can follow such a step);
  2. the target writes t_k after P + d_1..d_k for every k whose prefix is made of
     complete steps, all in one fork;
  3. the verifier judges the pairs (t_{k-1}, d_k);
  4. the accepted prefix d_1..d_j is kept, then t_j, the target's own step after it
     (when that branch exists). Every round therefore keeps at least one step of
     target quality.

A draft step is accepted only if the verifier says so *and* it ended the same way as
the target's step (both on the delimiter, both on EOS, or both on the cap): a draft
that stops the reasoning where the target goes on is not equivalent.

Faults degrade toward the target: a failing draft server or verifier turns drafting
off for the rest of the run, and the run goes on with target steps only (the answer
stays correct, only slower). A failing target server ends the run with ServerFailure.
"""

from __future__ import annotations

import time
from typing import Callable, Protocol

from lookahead_reasoning.programs.steps import StepOutput
from lookahead_reasoning.runtime.answers import last_boxed
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.errors import LookaheadError, ServerFailure, first_line
from lookahead_reasoning.runtime.results import (
    JudgedDraft,
    LookaheadResult,
    RoundRecord,
    RunStats,
    StepRecord,
)
from lookahead_reasoning.verifiers.base import Verdict, Verifier


class StepModels(Protocol):
    """What the engine needs from the models (SGLangRoles, or a scripted stand-in)."""

    def prompt(self, question: str) -> str: ...

    def draft(self, prefix: str, gamma: int, max_step_tokens: int | None = None) -> list[StepOutput]: ...

    def target(self, prefix: str, continuations: list[str], max_step_tokens: int | None = None) -> list[StepOutput]: ...

    def generate(self, prefix: str, max_tokens: int) -> StepOutput: ...


def render_prompt(models: StepModels, question: str) -> str:
    if not question or not question.strip():
        raise LookaheadError("the question is empty")
    try:
        return models.prompt(question)
    except Exception as error:
        raise ServerFailure(f"the target server failed: {first_line(error)}") from None


class SyncEngine:
    def __init__(
        self,
        config: LookaheadConfig,
        models: StepModels,
        verifier: Verifier,
        on_round: Callable[[RoundRecord], None] | None = None,
    ):
        self.config = config
        self.models = models
        self.verifier = verifier
        self.on_round = on_round

    def run(self, question: str) -> LookaheadResult:
        return self.continue_from(render_prompt(self.models, question))

    def continue_from(self, prompt: str) -> LookaheadResult:
        """Reason on from `prompt` (already in the target's chat template) until EOS or the token cap."""
        started = time.perf_counter()
        stats = RunStats()
        steps: list[StepRecord] = []
        log: list[RoundRecord] = []
        text = ""
        drafting = True
        while True:
            remaining = self.config.max_tokens - stats.output_tokens
            record, drafting = self._round(len(log), prompt + text, remaining, stats, drafting)
            log.append(record)
            steps.extend(record.kept)
            text += "".join(s.text for s in record.kept)
            if self.on_round is not None:
                self.on_round(record)
            if record.finished:
                stats.finish = "eos"
                break
            if stats.output_tokens >= self.config.max_tokens:
                stats.finish = "max_tokens"
                break
        stats.rounds = len(log)
        stats.wall_time_s = time.perf_counter() - started
        if stats.draft_steps_judged:
            stats.acceptance_rate = stats.draft_steps_accepted / stats.draft_steps_judged
        if stats.target.prompt_tokens:
            stats.target_branch_cache_ratio = stats.target.cached_tokens / stats.target.prompt_tokens
        return LookaheadResult(text=text, answer=last_boxed(text), steps=steps, round_log=log, stats=stats)

    def _round(
        self, index: int, prefix: str, remaining: int, stats: RunStats, drafting: bool
    ) -> tuple[RoundRecord, bool]:
        cap = max(1, min(self.config.max_step_tokens, remaining))
        t0 = time.perf_counter()
        drafts: list[StepOutput] = []
        if drafting:
            try:
                drafts = self.models.draft(prefix, self.config.depth, cap)
            except Exception as error:
                drafting = False
                stats.degraded.append(f"draft failed, continuing with target steps only: {first_line(error)}")
        for d in drafts:
            stats.draft.add(d.prompt_tokens, d.completion_tokens, d.cached_tokens)
        t1 = time.perf_counter()

        continuations = [""]
        for d in drafts:
            if not d.complete:
                break
            continuations.append(continuations[-1] + d.text)
        try:
            targets = self.models.target(prefix, continuations, cap)
        except Exception as error:
            raise ServerFailure(f"the target server failed: {first_line(error)}") from None
        if len(targets) != len(continuations):
            raise ServerFailure(f"the target returned {len(targets)} steps for {len(continuations)} branches")
        for t in targets:
            stats.target.add(t.prompt_tokens, t.completion_tokens, t.cached_tokens)
        t2 = time.perf_counter()

        judged = min(len(drafts), len(targets))
        pairs = [(targets[k].text, drafts[k].text) for k in range(judged)]
        verdicts, drafting = self._verify(prefix, pairs, stats, drafting)
        t3 = time.perf_counter()

        accepted = 0
        while accepted < judged and verdicts[accepted].accept and drafts[accepted].ending == targets[accepted].ending:
            accepted += 1
        kept = [
            StepRecord(text=drafts[k].text, source="draft", judge_p_yes=verdicts[k].score, round=index)
            for k in range(accepted)
        ]
        kept_outputs = drafts[:accepted]
        if accepted < len(targets):
            kept.append(StepRecord(text=targets[accepted].text, source="target", round=index))
            kept_outputs.append(targets[accepted])
        stats.draft_steps_judged += judged
        stats.draft_steps_accepted += accepted
        stats.output_tokens += sum(max(1, s.completion_tokens) for s in kept_outputs)
        record = RoundRecord(
            index=index,
            judged=[
                JudgedDraft(draft=d.text, target=t, accept=v.accept, score=v.score, method=v.method)
                for d, (t, _), v in zip(drafts, pairs, verdicts)
            ],
            accepted=accepted,
            kept=kept,
            finished=kept_outputs[-1].ending == "eos",
            draft_s=t1 - t0,
            target_s=t2 - t1,
            judge_s=t3 - t2,
            wall_s=time.perf_counter() - t0,
        )
        return record, drafting

    def _verify(
        self, prefix: str, pairs: list[tuple[str, str]], stats: RunStats, drafting: bool
    ) -> tuple[list[Verdict], bool]:
        if not pairs:
            return [], drafting
        try:
            verdicts = self.verifier.verify(prefix, pairs)
            if len(verdicts) != len(pairs):
                raise ValueError(f"{len(verdicts)} verdicts for {len(pairs)} pairs")
        except Exception as error:
            stats.degraded.append(f"verifier failed, rejecting drafts from now on: {first_line(error)}")
            return [Verdict(False, None, "unusable")] * len(pairs), False
        for v in verdicts:
            if v.prompt_tokens:  # a model was asked
                stats.judge.add(v.prompt_tokens, v.completion_tokens, v.cached_tokens)
        return verdicts, drafting
