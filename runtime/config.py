"""Run settings, validated by pydantic."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from lookahead_reasoning.programs.step_types import Sampling
from lookahead_reasoning.verifiers.registry import VERIFIER_NAMES


# The LLM judge behind the numbers gate: on the labelled step pairs' dev split at 0.8 it keeps the judge's
# recall (0.74) and raises its precision from 0.80 to 0.95 (docs/evaluation.md, "The verifier study").
DEFAULT_VERIFIER = "llm-judge+numbers"


class SamplingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)

    def to_program(self) -> Sampling:
        return Sampling(temperature=self.temperature, top_p=self.top_p)


class LookaheadConfig(BaseModel):
    """Lookahead reasoning settings. The judge always decodes greedily under its yes/no constraint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    depth: int = Field(4, ge=1, description="γ: draft steps per round (the first γ when adaptive)")
    adaptive_depth: bool = Field(False, description="choose γ each round from the measured α and c")
    max_depth: int = Field(8, ge=1, description="largest γ the adaptive policy may choose")
    width: int = Field(1, ge=1, description="W: draft candidates per position (tree drafting when > 1); "
                       "with adaptive_depth the largest W the policy may choose")
    max_tree_nodes: int = Field(32, ge=1, description="budget of draft nodes per round for W > 1 (W^γ grows fast)")
    engine: Literal["sync", "async"] = Field("sync", description="async overlaps drafting with verification")
    fork: Literal["batched", "streamed"] = Field(
        "streamed", description="sync chain rounds: streamed sends each branch as a streamed request, judges each "
        "draft step as soon as the target's step it is compared with ends, aborts branches that can no longer be "
        "kept and hands a wholly accepted window's bonus branch on to the next round (streamed_fork.py), while at "
        "most 8 answers share the engine's policy (beyond, a fork goes as one request: the client's CPU runs out "
        "first); batched sends the fork as one request, waits for its longest branch and judges every pair",
    )
    handoff_tokens: int = Field(
        32, ge=1, description="streamed sync rounds: a wholly accepted window keeps the first this many tokens of "
        "its bonus branch's step (the whole step if it is no longer) and hands the branch on (streamed_fork.py)")
    tree_temperature: float = Field(0.8, gt=0.0, description="draft temperature for W > 1 when draft sampling is greedy")
    delimiter: str = Field("\n\n", min_length=1, description="text that ends a step")
    max_step_tokens: int = Field(100, ge=1, description="cap on the tokens of one step")
    max_tokens: int = Field(1024, ge=1, description="cap on the tokens of the whole answer")
    draft_sampling: SamplingConfig = SamplingConfig()
    target_sampling: SamplingConfig = SamplingConfig()
    verifier: Literal[VERIFIER_NAMES] = Field(  # the registry's names (verifiers/registry.py)
        DEFAULT_VERIFIER, description="who decides that a draft step means the same as the target's; "
        "NAME+numbers, NAME+math, NAME+numbers+math: NAME behind the numbers gate, the math gate or both")
    verifier_threshold: float | None = Field(
        None, ge=0.0, le=1.0,
        description="accept when the verifier's score (P(yes) for the LLM judge) >= this; "
        "None: a saved calibration for this verifier and model, else the verifier's default",
    )
    embedding_model: str | None = Field(None, description="sentence-transformers path for the embedding verifiers")
    seed: int | None = Field(None, description="sent as SGLang's sampling_seed when sampling (temperature > 0)")
    request_timeout_s: float = Field(300.0, gt=0.0, description="limit on one HTTP request to a server")
    draft_timeout_s: float | None = Field(
        None, gt=0.0, description="limit on one request to the draft server; None: a quarter of request_timeout_s "
        "(a stalled draft then costs a slice of the deadline, and the run goes on with target steps)",
    )
    verifier_timeout_s: float | None = Field(
        None, gt=0.0, description="limit on one request to the judge server; None: a quarter of request_timeout_s",
    )

    def fields_without_effect(self) -> set[str]:
        """Settings that cannot change this configuration's answers, so a results folder's pin leaves them out:
        the request timeout (a limit, not a setting of the method), and the hand-off point where no round
        streams (a batched fork, the async engine, trees of a fixed W > 1)."""
        streams = self.engine == "sync" and self.fork == "streamed" and (self.width == 1 or self.adaptive_depth)
        return {"request_timeout_s"} | (set() if streams else {"handoff_tokens"})

    @property
    def tree_sampling(self) -> SamplingConfig:
        """How tree candidates are drafted: as the draft's steps, or at `tree_temperature` when the draft
        decodes greedily (W greedy samples would all be one). Chains keep the draft's own sampling."""
        if self.draft_sampling.temperature > 0.0:
            return self.draft_sampling
        return SamplingConfig(temperature=self.tree_temperature, top_p=self.draft_sampling.top_p)
