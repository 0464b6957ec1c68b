"""Run settings, validated by pydantic."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from lookahead_reasoning.programs.steps import Sampling


class SamplingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)

    def to_program(self) -> Sampling:
        return Sampling(temperature=self.temperature, top_p=self.top_p)


class LookaheadConfig(BaseModel):
    """Lookahead reasoning settings. The judge always decodes greedily under its yes/no constraint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    depth: int = Field(4, ge=1, description="γ: draft steps per round")
    delimiter: str = Field("\n\n", min_length=1, description="text that ends a step")
    max_step_tokens: int = Field(100, ge=1, description="cap on the tokens of one step")
    max_tokens: int = Field(1024, ge=1, description="cap on the tokens of the whole answer")
    draft_sampling: SamplingConfig = SamplingConfig()
    target_sampling: SamplingConfig = SamplingConfig()
    judge_threshold: float = Field(0.8, ge=0.0, le=1.0, description="accept when P(yes) >= this")
    seed: int | None = Field(None, description="sent as SGLang's sampling_seed when sampling (temperature > 0)")
    request_timeout_s: float = Field(300.0, gt=0.0, description="limit on one HTTP request to a server")
