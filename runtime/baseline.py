"""The AR baseline: the target alone, same prompt, same sampling, same token cap."""

from __future__ import annotations

import time

from lookahead_reasoning.runtime.answers import last_boxed
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.engine import StepModels, render_prompt
from lookahead_reasoning.errors import target_failed
from lookahead_reasoning.runtime.results import BaselineResult


def run_baseline(models: StepModels, question: str, config: LookaheadConfig) -> BaselineResult:
    return continue_baseline(models, render_prompt(models, question), config)


def continue_baseline(models: StepModels, prompt: str, config: LookaheadConfig) -> BaselineResult:
    """AR from a prompt already in the target's chat template."""
    started = time.perf_counter()
    try:
        output = models.generate(prompt, config.max_tokens)
    except Exception as error:
        raise target_failed(error) from None
    return BaselineResult(
        text=output.text,
        answer=last_boxed(output.text),
        wall_time_s=time.perf_counter() - started,
        prompt_tokens=output.prompt_tokens,
        output_tokens=output.completion_tokens,
        finish="eos" if output.ending == "eos" else "max_tokens",
    )
