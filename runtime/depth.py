"""How many steps to draft each round: a fixed γ, or γ chosen from what the run measures.

The adaptive policy keeps running estimates, across the runs of one engine, of α (per-position acceptance, with a
Beta(½, ½) prior and exponential forgetting so it follows a change of regime), of
c (draft time per drafted level / target time per round) and of the judge's cost j
(judge time / target time), and picks the γ that maximizes the engine's theoretical
speedup (runtime/theory.py). When no γ beats plain AR it drafts nothing, and every
`probe_every` such rounds it drafts one step to refresh the estimates.

The theory prices parallel width as free; a tree of width W has W^γ leaves, and
every node is a request. The policy therefore caps γ for trees so that W^γ stays
within `TREE_NODE_BUDGET` (W = 2: γ ≤ 4; W = 4: γ ≤ 2).
"""

from __future__ import annotations

from typing import Protocol

from lookahead_reasoning.runtime.theory import best_depth
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.results import RoundRecord


TREE_NODE_BUDGET = 16  # leaves; the drafting itself is capped by LookaheadConfig.max_tree_nodes


def depth_limit(max_depth: int, width: int) -> int:
    if width == 1:
        return max_depth
    limit = 1
    while width ** (limit + 1) <= TREE_NODE_BUDGET:
        limit += 1
    return min(max_depth, limit)


class DepthPolicy(Protocol):
    def next_depth(self) -> int: ...

    def peek_depth(self) -> int: ...

    def observe(self, record: RoundRecord, drafted_levels: int) -> None: ...


class FixedDepth:
    def __init__(self, depth: int):
        self.depth = depth

    def next_depth(self) -> int:
        return self.depth

    def peek_depth(self) -> int:
        return self.depth

    def observe(self, record: RoundRecord, drafted_levels: int) -> None:
        pass


class AdaptiveDepth:
    def __init__(
        self, mode: str, initial: int, max_depth: int, width: int = 1, forget: float = 0.9, probe_every: int = 6
    ):
        self.mode = mode
        self.width = width
        self.initial = initial
        self.max_depth = max_depth
        self.forget = forget
        self.probe_every = probe_every
        self.accepted = 0.0
        self.rejected = 0.0
        self.c: float | None = None
        self.judge = 0.0
        self.ar_rounds = 0

    @property
    def alpha(self) -> float:
        # a weak prior: a strong one drags α̂ toward ½ and the chosen γ too low when α is high
        return (self.accepted + 0.5) / (self.accepted + self.rejected + 1.0)

    def _choice(self) -> int:
        if self.c is None:
            return self.initial
        alpha = min(self.alpha, 0.999)
        return best_depth(self.mode, alpha, max(self.c, 1e-3), self.judge, self.max_depth, self.width)[0]

    def peek_depth(self) -> int:
        return self._choice() or 1

    def next_depth(self) -> int:
        depth = self._choice()
        if depth == 0:
            self.ar_rounds += 1
            if self.ar_rounds % self.probe_every == 0:
                return 1
        return depth

    def observe(self, record: RoundRecord, drafted_levels: int) -> None:
        if record.positions == 0:
            return
        self.accepted = self.forget * self.accepted + record.accepted
        self.rejected = self.forget * self.rejected + (record.positions - record.accepted)
        if drafted_levels and record.target_s > 0:
            c = record.draft_s / drafted_levels / record.target_s
            j = record.judge_s / record.target_s
            self.c = c if self.c is None else 0.7 * self.c + 0.3 * c
            self.judge = 0.7 * self.judge + 0.3 * j


def make_depth_policy(config: LookaheadConfig, mode: str) -> DepthPolicy:
    if config.adaptive_depth:
        limit = depth_limit(config.max_depth, config.width)
        return AdaptiveDepth(mode, min(config.depth, limit), limit, config.width)
    return FixedDepth(config.depth)
