"""SpecReason-style verification: the target rates the draft's step 0-9 from the reasoning so far.

It never sees its own version of the step, so it judges plausibility, not equivalence;
the paper's ablation shows it accepts almost everything (.97) and costs accuracy. The
score is the expected digit over the constrained first token, divided by 9; the
default threshold 7/9 is "a score of 7 or more".
"""

from __future__ import annotations

from typing import Sequence

from lookahead_reasoning.programs.roles import score_steps_on
from lookahead_reasoning.verifiers.base import Verdict

CONTEXT_CHARS = 4000  # the end of the reasoning so far that the scorer reads


class TargetScoreVerifier:
    name = "target-score"

    def __init__(self, backend, threshold: float = 7 / 9):
        self.backend = backend
        self.threshold = threshold

    def verify(self, context: str, pairs: Sequence[tuple[str, str]]) -> list[Verdict]:
        scores = score_steps_on(self.backend, context[-CONTEXT_CHARS:], [draft for _, draft in pairs])
        verdicts = []
        for score in scores:
            tokens = dict(prompt_tokens=score.prompt_tokens, completion_tokens=score.completion_tokens,
                          cached_tokens=score.cached_tokens)
            if score.value is None:
                verdicts.append(Verdict(False, None, "unusable", **tokens))
            else:
                value = score.value / 9
                verdicts.append(Verdict(value >= self.threshold, value, self.name, **tokens))
        return verdicts
