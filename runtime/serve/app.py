"""The FastAPI app: routes, API-key check, server-sent events, and `serve` that runs it under uvicorn."""

from __future__ import annotations

import asyncio
import hmac
import json
import threading
import time
import uuid
from typing import Literal

import requests
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from prometheus_client import generate_latest
from pydantic import ValidationError
from starlette.background import BackgroundTask

from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.connection import Connection
from lookahead_reasoning.runtime.endpoints import ROLES
from lookahead_reasoning.runtime.errors import LookaheadError, first_line, validation_message
from lookahead_reasoning.runtime.serve.schemas import (
    AR_MODEL, LR_MODEL, APIError, ChatRequest, CompletionRequest, SamplingRequest, ServeSettings,
)
from lookahead_reasoning.runtime.serve.service import LookaheadService

Kind = Literal["chat", "text"]


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
                error = APIError(401, "invalid API key", "authentication_error")
                return JSONResponse(error.body(), error.status)
        return await call_next(request)

    @app.exception_handler(APIError)
    async def api_error(request: Request, error: APIError):
        service.metrics.requests.labels(request.url.path, str(error.status)).inc()
        return JSONResponse(error.body(), error.status)

    @app.get("/v1/models")
    async def models():
        now = int(time.time())
        return {"object": "list", "data": [
            {"id": m, "object": "model", "created": now, "owned_by": "lookahead-reasoning"} for m in (LR_MODEL, AR_MODEL)
        ]}

    @app.get("/health")
    async def health():
        status = await asyncio.to_thread(_check_servers, connection)
        healthy = all(v == "ok" for v in status.values())
        return JSONResponse({"status": "ok" if healthy else "degraded", "servers": status}, 200 if healthy else 503)

    @app.get("/metrics")
    async def metrics():
        return PlainTextResponse(generate_latest(service.metrics.registry).decode(), media_type="text/plain; version=0.0.4")

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        return await _handle(service, request, ChatRequest, "chat")

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await _handle(service, request, CompletionRequest, "text")

    return app


def _check_servers(connection: Connection) -> dict[str, str]:
    status = {}
    for role in ROLES:
        url = connection.backends[role].base_url
        try:
            ok = requests.get(url + "/health", timeout=5).status_code == 200
        except requests.RequestException:
            ok = False
        status[role] = "ok" if ok else f"unreachable: {url}"
    return status


async def _parse(request: Request, schema: type[SamplingRequest]) -> tuple[SamplingRequest, str]:
    """The validated body and the model it asks for; APIError 400 or 404 otherwise."""
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise APIError(400, "the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    try:
        parsed = schema.model_validate(body)
    except ValidationError as error:
        where = ".".join(map(str, error.errors()[0]["loc"]))
        raise APIError(400, validation_message(error), param=where or None) from None
    model = parsed.model or LR_MODEL
    if model not in (LR_MODEL, AR_MODEL):
        raise APIError(404, f"model {model!r} does not exist; use {LR_MODEL!r} or {AR_MODEL!r}", param="model")
    return parsed, model


async def _handle(service: LookaheadService, request: Request, schema: type[SamplingRequest], kind: Kind):
    started = time.perf_counter()
    body, model = await _parse(request, schema)
    config = service.request_config(body)
    prompt: str | list[dict] = [m.model_dump() for m in body.messages] if kind == "chat" else body.prompt
    try:
        await asyncio.wait_for(service.slots.acquire(), timeout=service.settings.queue_timeout_s)
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


def _once(action):
    done = threading.Lock()

    def run_once():
        if done.acquire(blocking=False):
            action()

    return run_once


async def _stream(service: LookaheadService, prompt, config, model, kind: Kind, response_id, route, started, release):
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

    threading.Thread(target=work, daemon=True).start()
    status = "200"
    try:
        yield chunk(None, first=True)
        while True:
            event, value = await queue.get()
            if event == "step":
                yield chunk(value)
            elif event == "done":
                yield chunk(None, value["finish_reason"], {"usage": value["usage"], "lookahead": value["lookahead"]})
                break
            else:
                status = str(value.status)
                yield f"data: {json.dumps(value.body())}\n\n"
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
