"""Random acceptance, for ablations: how much does judging matter at all?"""

from __future__ import annotations

from typing import Sequence

from lookahead_reasoning.draws import unit
from lookahead_reasoning.verifiers.base import Verdict


class RandomVerifier:
    """Accepts each pair with probability `threshold` (the paper's ablation uses 0.5).

    A pair's draw is a hash of the seed, the context, the pair's position and its two steps: it
    depends on the pair alone, not on what was judged before, so a rerun, a resumed eval or another
    `--concurrency` accepts the same steps.
    """

    name = "random"

    def __init__(self, threshold: float = 0.5, seed: int | None = 0):
        self.threshold = threshold
        self.seed = seed or 0

    def verify(self, context: str, pairs: Sequence[tuple[str, str]]) -> list[Verdict]:
        draws = [unit(self.seed, context, i, *pair) for i, pair in enumerate(pairs)]
        return [Verdict(u < self.threshold, 1.0 - u, self.name) for u in draws]
