"""Runs one request on the shared connection, lookahead reasoning or the target alone, and counts it."""

from __future__ import annotations

import logging
import uuid
from functools import partial
from typing import Any, Callable

from prometheus_client import CollectorRegistry, Counter, Histogram

from lookahead_reasoning.programs.backend import BackendError
from lookahead_reasoning.programs.roles import SGLangStepModels, render_conversation
from lookahead_reasoning.programs.step_types import StepOutput, split_steps
from lookahead_reasoning.runtime.baseline import continue_baseline
from lookahead_reasoning.runtime.config import LookaheadConfig, SamplingConfig
from lookahead_reasoning.runtime.servers.connection import Connection
from lookahead_reasoning.runtime.adaptive.depth import make_depth_policy
from lookahead_reasoning.runtime.engine import make_engine
from lookahead_reasoning.errors import Cancelled, LookaheadError, ServerFailure, TimeLimitExceeded
from lookahead_reasoning.runtime.results import LookaheadResult, RoundRecord
from lookahead_reasoning.runtime.serve.jobs import Job, Runner, client_closed, timed_out
from lookahead_reasoning.runtime.serve.schemas import AR_MODEL, APIError, SamplingRequest, ServeSettings
from lookahead_reasoning.runtime.serve.text import StopText
from lookahead_reasoning.verifiers.registry import resolve_threshold, verifier_model

log = logging.getLogger(__name__)


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
        self.config = _with_threshold(connection, config)
        self.settings = settings
        self.metrics = Metrics()
        self.runner = Runner(settings.max_concurrent, settings.queue_timeout_s, settings.request_timeout_s)
        # one depth policy and cost model for all requests: under load every request sees that branches
        # stopped being free, and backs off toward AR together; when load falls the probes see it
        self.policy = make_depth_policy(config, config.engine)

    def request_config(self, body: SamplingRequest) -> LookaheadConfig:
        """The server's config with the request's settings: token cap, sampling, seed."""
        given = {name: value for name in ("max_tokens", "max_completion_tokens")
                 if (value := getattr(body, name)) is not None}
        for param, value in given.items():  # each is checked; both given: the smaller one holds
            if value > self.settings.max_tokens_cap:
                raise APIError(400, f"{param} must be at most {self.settings.max_tokens_cap}", param=param)
        max_tokens = min(given.values(), default=min(self.config.max_tokens, self.settings.max_tokens_cap))
        update: dict[str, Any] = {"max_tokens": max_tokens}
        if body.seed is not None:
            update["seed"] = body.seed
        for role in ("draft_sampling", "target_sampling"):
            current: SamplingConfig = getattr(self.config, role)
            update[role] = SamplingConfig(
                temperature=current.temperature if body.temperature is None else body.temperature,
                top_p=current.top_p if body.top_p is None else body.top_p,
            )
        return LookaheadConfig(**{**self.config.model_dump(), **update})

    async def start(self, prompt: str | list[dict], config: LookaheadConfig, model: str, on_step=None,
                    stop: list[str] | None = None) -> Job:
        """Wait for a slot (429 when none frees in time), then run the request on the request pool."""
        return await self.runner.start(partial(self.answer, prompt, config, model, on_step, stop or []))

    def answer(self, prompt: str | list[dict], config: LookaheadConfig, model: str, on_step, stop: list[str],
            is_cancelled: Callable[[], bool], deadline: float) -> dict:
        """Blocking: render the prompt, run LR or AR, return text, finish reason, usage and statistics.

        `on_step(text)` gets the answer's text as it grows, never past a stop string. LR starts no
        round once `is_cancelled()`, once a stop string is seen, or past `deadline` (time.monotonic());
        AR's one request is aborted on the target's server when `is_cancelled` is set (`_run_ar`).
        """
        # a seeded run gets its own view of the backends: the seeds it sends depend on nothing else running
        backends = self.connection.seeded(config.seed) if config.seed is not None else None
        models = _Ledger(self.connection.step_models(config, backends))
        cut = StopText(stop)

        def kept(step) -> None:
            released = cut.feed(step if isinstance(step, str) else step.text)
            if released and on_step is not None:
                on_step(released)

        try:
            text_prompt = prompt if isinstance(prompt, str) else render_conversation(models.target_backend, prompt)
            if model == AR_MODEL:
                return self._finish(self._run_ar(text_prompt, config, kept, backends, is_cancelled), cut, on_step)
            rounds: list[RoundRecord] = []
            engine = make_engine(config, models, self.connection.verifier_for(config, backends), on_step=kept,
                                 on_round=rounds.append, deadline=deadline, policy=self.policy,
                                 is_cancelled=lambda: cut.hit or is_cancelled())
            try:
                result = engine.continue_from(text_prompt)
            except Cancelled:
                if not cut.hit:
                    raise
                out = _stopped_early(models, rounds)
                self._observe(out["lookahead"]["acceptance_rate"], rounds)
                return self._finish(out, cut, on_step)
        except (ServerFailure, BackendError) as error:
            if is_cancelled():  # e.g. the AR request aborted because its client left: nobody reads this
                raise client_closed() from None
            raise _downstream(error) from None
        except TimeLimitExceeded:
            raise timed_out(self.settings.request_timeout_s) from None
        except Cancelled:
            raise client_closed() from None
        self._observe(result.stats.acceptance_rate, result.round_log)
        if result.stats.degraded:
            log.warning("request degraded: %s", "; ".join(result.stats.degraded))
        return self._finish({
            "text": result.text,
            "finish_reason": "stop" if result.stats.finish == "eos" else "length",
            "usage": _usage(result.stats.prompt_tokens, result.stats.output_tokens),
            "lookahead": _statistics(result),
        }, cut, on_step)

    def _observe(self, acceptance_rate: float | None, rounds: list[RoundRecord]) -> None:
        self.metrics.acceptance.observe(acceptance_rate or 0.0)
        for record in rounds:
            self.metrics.steps_per_round.observe(len(record.kept))

    @staticmethod
    def _finish(out: dict, cut: StopText, on_step) -> dict:
        """The answer cut at a stop string (finish_reason "stop"); the held-back tail goes out when there was none."""
        tail = cut.flush()
        if tail and on_step is not None:
            on_step(tail)
        if cut.hit:
            return {**out, "text": cut.text, "finish_reason": "stop"}
        return out

    def _run_ar(self, prompt: str, config: LookaheadConfig, on_step, backends, is_cancelled) -> dict:
        """The target alone: one long request, which the engine's round boundary cannot stop. It carries
        a request id of its own, and cancelling the job (the client left, the deadline passed) aborts
        it on the target's server."""
        backends = backends or self.connection.backends
        rid = f"lookahead-{uuid.uuid4().hex}"
        target = backends["target"].with_request_id(rid)
        models = self.connection.step_models(config, {**backends, "target": target})
        if is_cancelled():  # the client left before the request went out
            raise client_closed()
        on_cancel = getattr(is_cancelled, "on_cancel", None)
        unregister = on_cancel(lambda: self._abort(target, rid)) if on_cancel else (lambda: None)
        try:
            result = continue_baseline(models, prompt, config)
        finally:
            unregister()  # a finished request has nothing to abort
        on_step(result.text)
        return {
            "text": result.text,
            "finish_reason": "stop" if result.finish == "eos" else "length",
            "usage": _usage(result.prompt_tokens, result.output_tokens),
            "lookahead": {"mode": "ar", "wall_time_s": result.wall_time_s},
        }

    @staticmethod
    def _abort(backend, rid: str) -> None:
        if not backend.abort(rid):
            log.info("the target server did not abort request %s (no /abort_request there?): it runs out", rid)


class _Ledger:
    """Step models that remember what each step they returned cost. A run that a stop string ends
    early stops with `Cancelled` and no statistics of its own: its usage is read from here."""

    def __init__(self, models: SGLangStepModels):
        self._models = models
        self.prompt_tokens: int | None = None  # the bare prompt: the shortest target request
        self.completion_tokens: dict[str, int] = {}  # step text -> its completion tokens

    def __getattr__(self, name: str):
        return getattr(self._models, name)

    def _note(self, outputs: list[StepOutput]) -> list[StepOutput]:
        for output in outputs:
            self.completion_tokens.setdefault(output.text, output.completion_tokens)
        return outputs

    def draft(self, *args, **kwargs) -> list[StepOutput]:
        return self._note(self._models.draft(*args, **kwargs))

    def sample(self, *args, **kwargs) -> list[list[StepOutput]]:
        groups = self._models.sample(*args, **kwargs)
        for group in groups:
            self._note(group)
        return groups

    def target(self, *args, **kwargs) -> list[StepOutput]:
        outputs = self._note(self._models.target(*args, **kwargs))
        self._prompt(outputs)
        return outputs

    def target_branch(self, *args, **kwargs) -> StepOutput:
        """A streamed round's branch; a step a round kept in two parts (a piece, then its rest) is not found here,
        and counts nothing in an early stop's usage."""
        outputs = self._note([self._models.target_branch(*args, **kwargs)])
        self._prompt(outputs)
        return outputs[0]

    def generate(self, *args, **kwargs) -> StepOutput:
        """An AR stretch: the engine cuts it into steps as here (split_steps), so the steps' costs match."""
        output = self._models.generate(*args, **kwargs)
        self._note(split_steps(output, self._models.delimiter))
        self._prompt([output])
        return output

    def _prompt(self, outputs: list[StepOutput]) -> None:
        shortest = min((o.prompt_tokens for o in outputs), default=None)
        if shortest is not None and (self.prompt_tokens is None or shortest < self.prompt_tokens):
            self.prompt_tokens = shortest


def _stopped_early(models: _Ledger, rounds: list[RoundRecord]) -> dict:
    """The answer of an LR run that a stop string ended: its rounds, and usage from the ledger
    (completion tokens of every kept step up to the one with the stop string, which counts whole)."""
    kept = [step for record in rounds for step in record.kept]
    tokens = sum(models.completion_tokens.get(step.text, 0) for step in kept)
    judged, accepted = sum(r.positions for r in rounds), sum(r.accepted for r in rounds)
    return {
        "text": "".join(step.text for step in kept),
        "finish_reason": "stop",
        "usage": _usage(models.prompt_tokens or 0, tokens),
        "lookahead": {
            "mode": "lookahead",
            "rounds": len(rounds),
            "acceptance_rate": accepted / judged if judged else None,
            "draft_steps_judged": judged,
            "draft_steps_accepted": accepted,
            "draft_steps_kept": sum(1 for x in kept if x.source == "draft"),
            "target_steps_kept": sum(1 for x in kept if x.source == "target"),
            "wall_time_s": sum(r.wall_s for r in rounds),
            "degraded": [],
            "cost_model": None,
            "stopped_early": True,
        },
    }


def _with_threshold(connection: Connection, config: LookaheadConfig) -> LookaheadConfig:
    """`config` with its verifier threshold resolved once, at start-up: a saved calibration is read
    now, so a calibration file that breaks or changes later cannot fail requests."""
    if config.verifier_threshold is not None:
        return config
    backends = connection.backends
    model = verifier_model(config.verifier, backends["judge"], backends["target"], config.embedding_model)
    try:
        threshold = resolve_threshold(config.verifier, None, model)
    except (ValueError, OSError) as error:
        raise LookaheadError(f"verifier {config.verifier}: {error}") from None
    return config.model_copy(update={"verifier_threshold": threshold})


def _downstream(error: Exception) -> APIError:
    """The client's error for a failed server: no URL, no response body (those go to the log)."""
    log.warning("downstream failure: %s", error)
    if "HTTP 400" in str(error):  # SGLang refused the input, e.g. longer than the context
        return APIError(400, "the target server refused the prompt (is it longer than the model's context?)",
                        param="messages")
    return APIError(503, "a downstream SGLang server failed; the server log has the details", "service_unavailable")


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
        "degraded": [note.split(": ", 1)[0] for note in s.degraded],  # what failed, without the error's URL
        "cost_model": s.cost_model.model_dump() if s.cost_model else None,
    }
