"""The LLM judge: a model asked "same meaning?" with a constrained yes/no answer."""

from __future__ import annotations

from typing import Sequence

from lookahead_reasoning.programs.judge import JudgeAnswer, judge_pairs
from lookahead_reasoning.verifiers.base import Verdict


class LLMJudgeVerifier:
    """Accepts when P(yes) >= threshold; anything unusable is a reject.

    The threshold is per judge model: small judges say "yes" too easily, and a
    calibrated threshold on P(yes) buys back precision.
    """

    name = "llm-judge"

    def __init__(self, backend, threshold: float = 0.8):
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"judge threshold must lie in [0, 1], got {threshold}")
        self.backend = backend
        self.threshold = threshold
        self._instructions_cached = False  # after the first call the server's radix cache holds them

    def verify(self, context: str, pairs: Sequence[tuple[str, str]]) -> list[Verdict]:
        answers = judge_pairs(self.backend, list(pairs), commit_instructions=not self._instructions_cached)
        self._instructions_cached = True
        return [self.decide(a) for a in answers]

    def decide(self, answer: JudgeAnswer) -> Verdict:
        tokens = dict(
            prompt_tokens=answer.prompt_tokens,
            completion_tokens=answer.completion_tokens,
            cached_tokens=answer.cached_tokens,
        )
        if answer.answer not in ("yes", "no") or answer.p_yes is None:
            return Verdict(False, answer.p_yes, "unusable", **tokens)
        return Verdict(answer.p_yes >= self.threshold, answer.p_yes, self.name, **tokens)
