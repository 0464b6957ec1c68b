"""The measured rates: tokens per second of the rounds that drafted against that of AR rounds.

The rounds have the last word over the model: where drafting rounds advance less than GAIN_TO_DRAFT times as
fast as AR rounds, the policy runs AR. Each kind's rate forgets per round of its own kind and ages by
STALE_FORGET per round of the other kind; a drafted round of an answer alone after the drafting rate aged
below STALE_RENEW renews it (the old rate counts at most STALE_WEIGHT of the new round's time). Why:
docs/method.md, "Engines, trees and adaptive depth".
"""

from __future__ import annotations

from lookahead_reasoning.runtime.adaptive.tuning import STALE_FORGET, STALE_RENEW, STALE_WEIGHT

KINDS = ("ar", "draft")


class MeasuredRates:
    """Forgetting totals of tokens and seconds of timed AR and drafting rounds; not thread-safe (the policy
    holds its lock)."""

    def __init__(self) -> None:
        self._totals: dict[str, tuple[float, float]] = {}  # kind -> (tokens, seconds)
        self._rounds: dict[str, int] = {}  # kind -> rounds timed in all
        self._draft_freshness = 1.0  # how much the drafting rate has aged since its last round (1: none)

    def rounds(self, kind: str) -> int:
        """Rounds of `kind` ("ar" or "draft") timed so far."""
        return self._rounds.get(kind, 0)

    def gain(self) -> float | None:
        """Drafting rounds' tokens per second over AR rounds' (None until each kind has two rounds)."""
        if any(self.rounds(kind) < 2 for kind in KINDS):
            return None
        (ar_tokens, ar_s), (tokens, seconds) = self._totals["ar"], self._totals["draft"]
        return (tokens / seconds) / (ar_tokens / ar_s)

    def add(self, kind: str, tokens: float, seconds: float, forget: float, answers: float) -> None:
        """A timed round of `kind` that counts `tokens` in `seconds`; `forget`: the per-answer discount of
        the past, `answers`: the answers sharing the policy."""
        held_tokens, held_s = self._totals.get(kind, (0.0, 0.0))
        weight = forget
        if kind == "draft" and answers <= 1 and self._draft_freshness < STALE_RENEW and held_s > 0:
            weight = min(forget, STALE_WEIGHT * seconds / held_s)
        self._totals[kind] = (weight * held_tokens + tokens, weight * held_s + seconds)
        self._rounds[kind] = self.rounds(kind) + 1
        stale = STALE_FORGET ** (1.0 / max(1.0, answers))  # per round of each answer
        other = "ar" if kind == "draft" else "draft"
        if other in self._totals:
            self._totals[other] = tuple(stale * value for value in self._totals[other])
        self._draft_freshness = 1.0 if kind == "draft" else self._draft_freshness * stale
