"""The acceptance rule of a round, shared by the sync/tree walk (tree.py) and the async pipeline (pipeline.py).

Walking a round's positions in order:

- a draft step is accepted only if the verifier accepts it *and* it ended the way the
  target's step at the same position did (both on the delimiter, both on EOS, or both on
  the cap): a draft that stops the reasoning where the target goes on is not equivalent;
- the accepted draft prefix is kept; at the first rejection the target's own step at that
  position is kept instead and the walk ends;
- nothing can follow a step that did not end on the delimiter: the walk ends there;
- a walk that ends without a rejection keeps the target's step after its end when there
  is one (the bonus step at a leaf, or the plain target step when nothing was drafted);
- the token cap: the step that reaches the run's remaining budget is kept whole (AR stops
  inside it) and nothing after it is kept, so a round never gives LR more tokens than AR.
"""

from __future__ import annotations

from typing import Callable

from lookahead_reasoning.programs.step_types import StepOutput
from lookahead_reasoning.runtime.results import StepRecord
from lookahead_reasoning.verifiers.base import Verdict


def step_tokens(step: StepOutput) -> int:
    """The tokens a kept step counts against the cap: an empty step still counts as one (its EOS), except the
    empty rest of a step whose every token a round before already kept (streamed_fork.py)."""
    if not step.text and step.ending == "length":
        return step.completion_tokens
    return max(1, step.completion_tokens)


def accepts(verdict: Verdict, draft: StepOutput, target: StepOutput) -> bool:
    """Whether `draft` replaces `target`, the target's step at the same position."""
    return verdict.accept and draft.ending == target.ending


class AcceptanceWalk:
    """One round's walk: fed position by position, it collects the kept steps.

    `accepted` counts the draft positions accepted by the walk and `rejected` whether a
    rejection ended it (their sum is the positions decided); steps past the token cap
    are still counted when the caller walks on, but are not kept.
    """

    def __init__(self, round_index: int, budget: int, on_keep: Callable[[StepRecord], None] | None = None):
        self.round_index = round_index
        self.budget = budget  # tokens left before the run's cap
        self.on_keep = on_keep  # called with every kept step as soon as it is kept (streaming)
        self.kept: list[StepRecord] = []
        self.outputs: list[StepOutput] = []
        self.accepted = 0
        self.rejected = False
        self.ended = False  # a rejection, a closed walk, or an accepted step that did not end on the delimiter
        self.capped = False  # a kept step reached the token cap: nothing more is kept

    @property
    def positions(self) -> int:
        """Draft positions decided: the accepted ones, plus the rejection that ended the walk."""
        return self.accepted + int(self.rejected)

    @property
    def stopped(self) -> bool:
        """Nothing more can be kept this round."""
        return self.ended or self.capped

    def decide(self, target: StepOutput, draft: StepOutput, verdict: Verdict) -> bool:
        """Apply the rule to one position's (target step, draft step) pair; True if the draft was accepted."""
        if accepts(verdict, draft, target):
            self.accept(draft, verdict.score)
            return True
        self.reject(target)
        return False

    def accept(self, draft: StepOutput, score: float | None) -> None:
        self.accepted += 1
        self._keep(draft, "draft", score)
        if not draft.complete:
            self.ended = True

    def reject(self, target: StepOutput) -> None:
        """No draft step is accepted at this position: the target's own step is kept and the walk ends."""
        self.rejected = True
        self._keep(target, "target")
        self.ended = True

    def close(self, target: StepOutput | None) -> None:
        """The walk ends without a rejection: keep the target's step after its end, if there is one."""
        if target is not None:
            self._keep(target, "target")
        self.ended = True

    def keep_piece(self, piece: StepOutput) -> None:
        """The start of the target's next step, written while the round was decided (streamed_fork.py): kept as
        target text; the next round judges the step's rest."""
        self._keep(piece, "target")

    def keep_targets(self, steps: list[StepOutput]) -> None:
        """An AR round that wrote several target steps in one request: all are kept, up to the token cap."""
        for step in steps:
            self._keep(step, "target")
        self.ended = True

    def _keep(self, step: StepOutput, source: str, score: float | None = None) -> None:
        if self.capped:
            return
        record = StepRecord(text=step.text, source=source, verifier_score=score, round=self.round_index)
        self.kept.append(record)
        self.outputs.append(step)
        self.budget -= step_tokens(step)
        self.capped = self.budget <= 0
        if self.on_keep is not None:
            self.on_keep(record)
