"""Runs one request on the shared connection, lookahead reasoning or the target alone, and counts it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from lookahead_reasoning.programs.backend import BackendError
from lookahead_reasoning.programs.roles import render_conversation
from lookahead_reasoning.runtime.baseline import continue_baseline
from lookahead_reasoning.runtime.config import LookaheadConfig, SamplingConfig
from lookahead_reasoning.runtime.connection import Connection
from lookahead_reasoning.runtime.depth import make_depth_policy
from lookahead_reasoning.runtime.engine import make_engine
from lookahead_reasoning.runtime.errors import ServerFailure, TimeLimitExceeded, first_line
from lookahead_reasoning.runtime.results import LookaheadResult
from lookahead_reasoning.runtime.serve.schemas import AR_MODEL, APIError, SamplingRequest, ServeSettings


class Metrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        self.requests = Counter("lookahead_requests", "Requests by route and status", ["route", "status"],
                                registry=self.registry)
        self.latency = Histogram("lookahead_request_latency_seconds", "Request latency", ["route"],
                                 registry=self.registry, buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600))
        self.acceptance = Histogram("lookahead_acceptance_rate", "Acceptance rate per request",
                                    registry=self.registry, buckets=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0))
        self.steps_per_round = Histogram("lookahead_steps_per_round", "Kept steps per round",
                                         registry=self.registry, buckets=(1, 2, 3, 4, 5, 6, 8, 10, 16))


class LookaheadService:
    """Runs one request: concurrency slots, per-request config, engine or AR, result shaping."""

    def __init__(self, connection: Connection, config: LookaheadConfig, settings: ServeSettings):
        self.connection = connection
        self.config = config
        self.settings = settings
        self.metrics = Metrics()
        self.slots = asyncio.Semaphore(settings.max_concurrent)
        # one depth policy and cost model for all requests: under load every request sees that branches
        # stopped being free, and backs off toward AR together; when load falls the probes see it
        self.policy = make_depth_policy(config, config.engine)

    def request_config(self, body: SamplingRequest) -> LookaheadConfig:
        max_tokens = body.max_tokens or min(self.config.max_tokens, self.settings.max_tokens_cap)
        if max_tokens > self.settings.max_tokens_cap:
            raise APIError(400, f"max_tokens must be at most {self.settings.max_tokens_cap}", param="max_tokens")
        update: dict[str, Any] = {"max_tokens": max_tokens}
        for role in ("draft_sampling", "target_sampling"):
            current: SamplingConfig = getattr(self.config, role)
            update[role] = SamplingConfig(
                temperature=current.temperature if body.temperature is None else body.temperature,
                top_p=current.top_p if body.top_p is None else body.top_p,
            )
        return LookaheadConfig(**{**self.config.model_dump(), **update})

    def run(self, prompt: str | list[dict], config: LookaheadConfig, model: str, on_step=None) -> dict:
        """Blocking: render the prompt, run LR or AR, return text, finish reason, usage and statistics."""
        deadline = time.monotonic() + self.settings.request_timeout_s
        models = self.connection.step_models(config)
        try:
            text_prompt = prompt if isinstance(prompt, str) else render_conversation(self.connection.backends["target"], prompt)
            if model == AR_MODEL:
                return self._run_ar(models, text_prompt, config, on_step)
            engine = make_engine(config, models, self.connection.verifier_for(config), on_step=on_step,
                                 deadline=deadline, policy=self.policy)
            result = engine.continue_from(text_prompt)
        except (ServerFailure, BackendError) as error:
            raise _downstream(error) from None
        except TimeLimitExceeded:
            raise APIError(504, f"the request exceeded its time limit of {self.settings.request_timeout_s:g} s",
                           "timeout_error") from None
        self.metrics.acceptance.observe(result.stats.acceptance_rate or 0.0)
        for record in result.round_log:
            self.metrics.steps_per_round.observe(len(record.kept))
        return {
            "text": result.text,
            "finish_reason": "stop" if result.stats.finish == "eos" else "length",
            "usage": _usage(result.stats.prompt_tokens, result.stats.output_tokens),
            "lookahead": _statistics(result),
        }

    def _run_ar(self, models, prompt: str, config: LookaheadConfig, on_step) -> dict:
        result = continue_baseline(models, prompt, config)
        if on_step is not None:
            on_step(result.text)
        return {
            "text": result.text,
            "finish_reason": "stop" if result.finish == "eos" else "length",
            "usage": _usage(result.prompt_tokens, result.output_tokens),
            "lookahead": {"mode": "ar", "wall_time_s": result.wall_time_s},
        }


def _downstream(error: Exception) -> APIError:
    message = first_line(error)
    if "HTTP 400" in message:  # SGLang refused the input, e.g. longer than the context
        return APIError(400, f"the target server refused the prompt: {message}", param="messages")
    return APIError(503, f"a downstream SGLang server failed: {message}", "service_unavailable")


def _usage(prompt: int, completion: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _statistics(result: LookaheadResult) -> dict:
    s = result.stats
    return {
        "mode": "lookahead",
        "rounds": s.rounds,
        "acceptance_rate": s.acceptance_rate,
        "draft_steps_judged": s.draft_steps_judged,
        "draft_steps_accepted": s.draft_steps_accepted,
        "draft_steps_kept": sum(1 for x in result.steps if x.source == "draft"),
        "target_steps_kept": sum(1 for x in result.steps if x.source == "target"),
        "wall_time_s": s.wall_time_s,
        "degraded": s.degraded,
        "cost_model": s.cost_model.model_dump() if s.cost_model else None,
    }
