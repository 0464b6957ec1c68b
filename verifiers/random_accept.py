"""Random acceptance, for ablations: how much does judging matter at all?"""

from __future__ import annotations

import random
from typing import Sequence

from lookahead_reasoning.verifiers.base import Verdict


class RandomVerifier:
    """Accepts each pair with probability `threshold` (the paper's ablation uses 0.5), seeded."""

    name = "random"

    def __init__(self, threshold: float = 0.5, seed: int | None = 0):
        self.threshold = threshold
        self.rng = random.Random(seed)

    def verify(self, context: str, pairs: Sequence[tuple[str, str]]) -> list[Verdict]:
        draws = [self.rng.random() for _ in pairs]
        return [Verdict(u < self.threshold, 1.0 - u, self.name) for u in draws]
