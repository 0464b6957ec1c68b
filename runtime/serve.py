"""`lookahead serve`: an OpenAI-compatible frontend that answers with lookahead reasoning.

Routes: POST /v1/chat/completions and /v1/completions (OpenAI request and response
shapes, `stream: true` as server-sent events with one chunk per kept step), GET
/v1/models, GET /health (checks the three SGLang servers), GET /metrics (Prometheus).

Two model ids are served: `lookahead` (lookahead reasoning) and `target` (the target
alone, plain AR, for comparisons behind the same server). Every response carries its
statistics in an extra `lookahead` field; `usage` counts real tokens.

Limits: at most `max_concurrent` requests run at once; the excess waits up to
`queue_timeout_s` and is then refused with 429. A request that runs past
`request_timeout_s` ends with 504 (no new round starts after the deadline, and each
server request has its own timeout, so nothing hangs). Each request gets its own
engine and settings over shared, thread-safe connections: requests never share state
beyond the adaptive-depth estimates.

Errors use OpenAI's shape {"error": {"message", "type", "param", "code"}}: 400 for bad
requests (malformed JSON, wrong types, empty messages, max_tokens out of range, a
prompt over the context limit), 401 for a wrong API key (compared in constant time),
429 when busy, 503 when the target server is down, 504 past the time limit. If the
draft or judge server fails, the request still completes with target steps and
`lookahead.degraded` says so.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import threading
import time
import uuid
from typing import Any, Literal

import requests
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.background import BackgroundTask
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lookahead_reasoning.programs.backend import BackendError
from lookahead_reasoning.programs.roles import render_conversation
from lookahead_reasoning.runtime.baseline import continue_baseline
from lookahead_reasoning.runtime.config import LookaheadConfig, SamplingConfig
from lookahead_reasoning.runtime.connection import Connection
from lookahead_reasoning.runtime.endpoints import ROLES
from lookahead_reasoning.runtime.engine import make_engine
from lookahead_reasoning.runtime.errors import LookaheadError, ServerFailure, TimeLimitExceeded, first_line
from lookahead_reasoning.runtime.results import LookaheadResult

LR_MODEL = "lookahead"
AR_MODEL = "target"


class ServeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_concurrent: int = Field(4, ge=1)
    queue_timeout_s: float = Field(30.0, ge=0)
    request_timeout_s: float = Field(600.0, gt=0)
    max_tokens_cap: int = Field(4096, ge=1)
    api_key: str | None = None


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    role: Literal["system", "user", "assistant"]
    content: str


class _Sampling(BaseModel):
    # strict: "stream": "yes" or "max_tokens": "12" are errors, not coerced; other OpenAI fields are ignored
    model_config = ConfigDict(extra="ignore", strict=True)

    model: str | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, gt=0)
    stream: bool = False
    n: int = Field(1, ge=1, le=1, description="one choice per request")


class ChatRequest(_Sampling):
    messages: list[Message] = Field(min_length=1)


class CompletionRequest(_Sampling):
    prompt: str = Field(min_length=1)


class APIError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", param: str | None = None):
        self.status, self.message, self.kind, self.param = status, message, kind, param


def _error(status: int, message: str, kind: str, param: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": status}}, status)


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
    """Runs one request: validation, concurrency limit, engine or AR, result shaping."""

    def __init__(self, connection: Connection, config: LookaheadConfig, settings: ServeSettings):
        self.connection = connection
        self.config = config
        self.settings = settings
        self.metrics = Metrics()
        self.slots = asyncio.Semaphore(settings.max_concurrent)

    def request_config(self, body: _Sampling) -> LookaheadConfig:
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
            engine = make_engine(config, models, self.connection.verifier_for(config), on_step=on_step, deadline=deadline)
            result = engine.continue_from(text_prompt)
        except (ServerFailure, BackendError) as error:
            raise self._downstream(error) from None
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

    @staticmethod
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
    }


def build_app(connection: Connection, config: LookaheadConfig, settings: ServeSettings) -> FastAPI:
    service = LookaheadService(connection, config, settings)
    app = FastAPI(title="lookahead-reasoning")
    app.state.service = service

    @app.middleware("http")
    async def authorize(request: Request, call_next):
        key = settings.api_key
        if key and request.url.path.startswith("/v1/"):
            given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
            if not hmac.compare_digest(given.encode(), key.encode()):
                return _error(401, "invalid API key", "authentication_error")
        return await call_next(request)

    @app.exception_handler(APIError)
    async def api_error(request: Request, error: APIError):
        service.metrics.requests.labels(request.url.path, str(error.status)).inc()
        return _error(error.status, error.message, error.kind, error.param)

    @app.get("/v1/models")
    async def models():
        now = int(time.time())
        return {"object": "list", "data": [
            {"id": m, "object": "model", "created": now, "owned_by": "lookahead-reasoning"} for m in (LR_MODEL, AR_MODEL)
        ]}

    @app.get("/health")
    async def health():
        def check() -> dict[str, str]:
            status = {}
            for role in ROLES:
                url = connection.backends[role].base_url
                try:
                    ok = requests.get(url + "/health", timeout=5).status_code == 200
                except requests.RequestException:
                    ok = False
                status[role] = "ok" if ok else f"unreachable: {url}"
            return status

        status = await asyncio.to_thread(check)
        healthy = all(v == "ok" for v in status.values())
        return JSONResponse({"status": "ok" if healthy else "degraded", "servers": status}, 200 if healthy else 503)

    @app.get("/metrics")
    async def metrics():
        return PlainTextResponse(generate_latest(service.metrics.registry).decode(), media_type="text/plain; version=0.0.4")

    async def parse(request: Request, schema):
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise APIError(400, "the request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise APIError(400, "the request body must be a JSON object")
        try:
            parsed = schema.model_validate(body)
        except ValidationError as error:
            problem = error.errors()[0]
            where = ".".join(map(str, problem["loc"]))
            raise APIError(400, f"{where}: {problem['msg']}", param=where or None) from None
        model = parsed.model or LR_MODEL
        if model not in (LR_MODEL, AR_MODEL):
            raise APIError(404, f"model {model!r} does not exist; use {LR_MODEL!r} or {AR_MODEL!r}", param="model")
        return parsed, model

    async def handle(request: Request, schema, kind: Literal["chat", "text"]):
        started = time.perf_counter()
        body, model = await parse(request, schema)
        config = service.request_config(body)
        prompt: str | list[dict] = (
            [m.model_dump() for m in body.messages] if kind == "chat" else body.prompt
        )
        try:
            await asyncio.wait_for(service.slots.acquire(), timeout=settings.queue_timeout_s)
        except asyncio.TimeoutError:
            raise APIError(429, "too many concurrent requests; try again later", "rate_limit_error") from None
        route = request.url.path
        response_id = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex
        if body.stream:
            release = _once(service.slots.release)  # from the stream's end, or after the response if it never ran
            return StreamingResponse(
                _stream(service, prompt, config, model, kind, response_id, route, started, release),
                media_type="text/event-stream",
                background=BackgroundTask(release),
            )
        try:
            out = await asyncio.to_thread(service.run, prompt, config, model)
        finally:
            service.slots.release()
        service.metrics.requests.labels(route, "200").inc()
        service.metrics.latency.labels(route).observe(time.perf_counter() - started)
        choice = (
            {"index": 0, "message": {"role": "assistant", "content": out["text"]}, "finish_reason": out["finish_reason"]}
            if kind == "chat"
            else {"index": 0, "text": out["text"], "logprobs": None, "finish_reason": out["finish_reason"]}
        )
        return {
            "id": response_id, "object": "chat.completion" if kind == "chat" else "text_completion",
            "created": int(time.time()), "model": model, "choices": [choice],
            "usage": out["usage"], "lookahead": out["lookahead"],
        }

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        return await handle(request, ChatRequest, "chat")

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await handle(request, CompletionRequest, "text")

    return app


def _once(action):
    done = threading.Lock()

    def run_once():
        if done.acquire(blocking=False):
            action()

    return run_once


async def _stream(service: LookaheadService, prompt, config, model, kind, response_id, route, started, release):
    """Server-sent events: a chunk per kept step as it is kept, a final chunk, then [DONE]."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    created = int(time.time())
    obj = "chat.completion.chunk" if kind == "chat" else "text_completion"

    def chunk(delta_text: str | None, finish: str | None = None, extra: dict | None = None, first: bool = False) -> str:
        if kind == "chat":
            delta: dict = {"role": "assistant"} if first else {}
            if delta_text:
                delta["content"] = delta_text
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": delta_text or "", "logprobs": None, "finish_reason": finish}
        payload = {"id": response_id, "object": obj, "created": created, "model": model, "choices": [choice], **(extra or {})}
        return f"data: {json.dumps(payload)}\n\n"

    def on_step(step) -> None:
        text = step if isinstance(step, str) else step.text
        loop.call_soon_threadsafe(queue.put_nowait, ("step", text))

    def work() -> None:
        try:
            out = service.run(prompt, config, model, on_step=on_step)
            loop.call_soon_threadsafe(queue.put_nowait, ("done", out))
        except APIError as error:
            loop.call_soon_threadsafe(queue.put_nowait, ("error", error))
        except Exception as error:  # never leave the client waiting
            loop.call_soon_threadsafe(queue.put_nowait, ("error", APIError(500, first_line(error), "server_error")))

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    status = "200"
    try:
        yield chunk(None, first=True)
        while True:
            kind_, value = await queue.get()
            if kind_ == "step":
                yield chunk(value)
            elif kind_ == "done":
                yield chunk(None, value["finish_reason"], {"usage": value["usage"], "lookahead": value["lookahead"]})
                break
            else:
                status = str(value.status)
                error = {"error": {"message": value.message, "type": value.kind, "param": value.param, "code": value.status}}
                yield f"data: {json.dumps(error)}\n\n"
                break
        yield "data: [DONE]\n\n"
    finally:
        release()
        service.metrics.requests.labels(route, status).inc()
        service.metrics.latency.labels(route).observe(time.perf_counter() - started)


def serve(connection: Connection, config: LookaheadConfig, settings: ServeSettings, host: str, port: int) -> None:
    import uvicorn

    if host not in ("127.0.0.1", "localhost", "::1") and not settings.api_key:
        raise LookaheadError("serving beyond loopback needs an API key (--api-key or LOOKAHEAD_API_KEY)")
    uvicorn.run(build_app(connection, config, settings), host=host, port=port, log_level="warning")
