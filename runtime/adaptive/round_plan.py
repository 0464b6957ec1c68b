"""What a depth policy answers each round, and the protocol the engines hold it to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from lookahead_reasoning.runtime.results import CostEstimate, RoundRecord
from lookahead_reasoning.runtime.adaptive.target_load import TargetLoad


@dataclass(frozen=True)
class RoundPlan:
    """What the next round does."""

    depth: int  # draft steps; 0: an AR round (the target alone)
    width: int = 1  # draft candidates per position
    probe_tokens: int = 0  # an AR round's fork probe: the cap of its short second branch (B(2))
    stretch_tokens: int = 0  # an AR round that writes several steps in one request: its token cap
    measuring: bool = False  # a drafted step (γ = 1) whose target writes only its own step: it prices the draft


class DepthPolicy(Protocol):
    target_load: TargetLoad  # where the engines report their target requests in flight
    answers: int  # the answers in flight that share the policy, at least one

    def answer_started(self) -> None: ...

    def answer_finished(self) -> None: ...

    def next_round(self, seconds_left: float | None = None, first: bool = False) -> RoundPlan: ...

    def peek_round(self) -> RoundPlan: ...

    def observe(self, record: RoundRecord) -> None: ...

    def cost_estimate(self) -> CostEstimate | None: ...
