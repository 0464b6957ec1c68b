"""The verifier interface: is a draft step equivalent to the target's step?"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol, Sequence


@dataclass(frozen=True)
class Verdict:
    accept: bool
    score: float | None  # the verifier's confidence in "equivalent" (P(yes) for the LLM judge)
    method: str  # which verifier decided: "exact", "llm-judge", "unusable", ...
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0


class Verifier(Protocol):
    name: str

    def verify(self, context: str, pairs: Sequence[tuple[str, str]]) -> list[Verdict]:
        """One verdict per (target_step, draft_step) pair, in order.

        `context` is the text both steps follow. A verifier that cannot decide a pair
        rejects it: a rejected draft costs a little speed, an accepted wrong one costs
        the answer.
        """
        ...


_SPACE = re.compile(r"\s+")


def normalize_step(text: str) -> str:
    """Whitespace collapsed, case folded: the form the exact-match fast path compares."""
    return _SPACE.sub(" ", text).strip().casefold()


class ExactMatchVerifier:
    """Accepts a pair only when both steps are equal after normalization."""

    name = "exact"

    def verify(self, context: str, pairs: Sequence[tuple[str, str]]) -> list[Verdict]:
        return [_exact(t, d) or Verdict(False, 0.0, "exact") for t, d in pairs]


def _exact(target_step: str, draft_step: str) -> Verdict | None:
    if normalize_step(target_step) == normalize_step(draft_step):
        return Verdict(True, 1.0, "exact")
    return None


class FastPathVerifier:
    """Exact matches are accepted without a model call; the rest go to `inner`."""

    def __init__(self, inner: Verifier):
        self.inner = inner
        self.name = inner.name

    def verify(self, context: str, pairs: Sequence[tuple[str, str]]) -> list[Verdict]:
        return ask_for_the_rest(self.inner, context, pairs, [_exact(t, d) for t, d in pairs])


def ask_for_the_rest(
    inner: Verifier, context: str, pairs: Sequence[tuple[str, str]], verdicts: list[Verdict | None]
) -> list[Verdict]:
    """`verdicts` with each None filled by `inner`, asked once for all of those pairs; a wrong
    number of answers rejects them all."""
    pending = [i for i, v in enumerate(verdicts) if v is None]
    if pending:
        decided = inner.verify(context, [pairs[i] for i in pending])
        if len(decided) != len(pending):
            decided = [Verdict(False, None, "unusable")] * len(pending)
        for i, verdict in zip(pending, decided):
            verdicts[i] = verdict
    return verdicts
