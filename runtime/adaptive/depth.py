"""How many steps to draft each round: a fixed γ, or γ chosen from what the rounds measure.

`FixedDepth` drafts γ at width W every round. `AdaptiveDepth` (runtime/adaptive/) picks, each round, the γ
(0: plain AR) and W with the highest expected speedup under the costs it learns (cost_model.py: the
target alone, B(n) for forks, the draft's c and the verifier's j) and its acceptance estimate α̂, over AR as
it runs here. Around that plan it spaces the rounds that measure what the plan cannot see (probes and AR
checks), writes AR rounds as stretches of several steps, lets the measured rates of drafting and AR rounds
overrule the model, and rations drafting across the concurrent answers that share it. Each part states its
rule in its own module.
"""

from __future__ import annotations

import threading

from lookahead_reasoning.runtime.adaptive.client_cpu import ClientCpu
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.adaptive.cost_model import CostModel
from lookahead_reasoning.runtime.adaptive.adaptive import AdaptiveDepth
from lookahead_reasoning.runtime.adaptive.alpha import AcceptanceTally
from lookahead_reasoning.runtime.adaptive.planner import depth_limit
from lookahead_reasoning.runtime.adaptive.round_plan import DepthPolicy, RoundPlan
from lookahead_reasoning.runtime.adaptive.target_load import TargetLoad, Tracked
from lookahead_reasoning.runtime.results import CostEstimate, RoundRecord
from lookahead_reasoning.runtime.adaptive.round_rules import rule_of

__all__ = ["AcceptanceTally", "AdaptiveDepth", "DepthPolicy", "FixedDepth", "RoundPlan", "TargetLoad", "Tracked",
           "depth_limit", "make_depth_policy"]


class FixedDepth:
    def __init__(self, depth: int, width: int = 1):
        self.depth = depth
        self.width = width
        self.target_load = TargetLoad()
        self._in_flight = 0
        self._lock = threading.Lock()

    @property
    def answers(self) -> int:
        return max(1, self._in_flight)

    def answer_started(self) -> None:
        with self._lock:
            self._in_flight += 1

    def answer_finished(self) -> None:
        with self._lock:
            self._in_flight = max(0, self._in_flight - 1)

    def next_round(self, seconds_left: float | None = None, first: bool = False) -> RoundPlan:
        return RoundPlan(self.depth, self.width)

    def peek_round(self) -> RoundPlan:
        return RoundPlan(self.depth, self.width)

    def observe(self, record: RoundRecord) -> None:
        pass

    def cost_estimate(self) -> CostEstimate | None:
        return None


def make_depth_policy(config: LookaheadConfig, mode: str, costs: CostModel | None = None) -> DepthPolicy:
    """The policy `config` asks for; `costs` lets several engines share what one server set costs."""
    if config.adaptive_depth:
        return AdaptiveDepth(mode, min(config.depth, config.max_depth), config.max_depth, config.width, costs=costs,
                             max_nodes=config.max_tree_nodes, client_cpu=ClientCpu(),
                             rule=rule_of(mode, config.fork))
    return FixedDepth(config.depth, config.width)
