"""The FastAPI app: routes, API-key check, error shapes, server-sent events, and `serve` that runs it under uvicorn."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
import uuid
from contextlib import asynccontextmanager
from typing import Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from prometheus_client import generate_latest
from pydantic import ValidationError
from starlette.background import BackgroundTask
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.servers.connection import Connection
from lookahead_reasoning.errors import LookaheadError, validation_message
from lookahead_reasoning.runtime.serve.body import read_json
from lookahead_reasoning.runtime.serve.health import Readiness
from lookahead_reasoning.runtime.serve.jobs import Job, timed_out
from lookahead_reasoning.runtime.serve.schemas import (
    AR_MODEL, LR_MODEL, APIError, ChatRequest, CompletionRequest, SamplingRequest, ServeSettings,
)
from lookahead_reasoning.runtime.serve.service import LookaheadService
from lookahead_reasoning.runtime.serve.text import ThinkSplit, check_reasoning_parser, split_reasoning

Kind = Literal["chat", "text"]
log = logging.getLogger(__name__)


def build_app(connection: Connection, config: LookaheadConfig, settings: ServeSettings) -> FastAPI:
    if settings.reasoning_parser:
        check_reasoning_parser(settings.reasoning_parser)  # an unknown name stops start-up; the import happens now
    service = LookaheadService(connection, config, settings)
    readiness = Readiness(connection, settings.endpoints_file)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        # the pools' threads are the app's: a process that starts and stops apps (tests, `bench load`)
        # would otherwise keep every stopped app's idle threads
        try:
            yield
        finally:
            service.runner.close()
            readiness.close()

    app = FastAPI(title="lookahead-reasoning", lifespan=lifespan)
    app.state.service = service
    if settings.api_key:
        app.add_middleware(RequireKey, key=settings.api_key)

    @app.exception_handler(APIError)
    async def api_error(request: Request, error: APIError):
        service.metrics.requests.labels(request.url.path, str(error.status)).inc()
        return JSONResponse(error.body(), error.status)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException):  # an unknown route, a wrong method
        body = APIError(error.status_code, str(error.detail)).body()
        return JSONResponse(body, error.status_code, headers=error.headers)

    @app.exception_handler(Exception)
    async def server_error(request: Request, error: Exception):
        # a bug of ours, never the client's input; Starlette re-raises it after this answer, so it is logged
        service.metrics.requests.labels(request.url.path, "500").inc()
        return JSONResponse(_internal_error().body(), 500)

    @app.get("/v1/models")
    async def models():
        now = int(time.time())
        return {"object": "list", "data": [
            {"id": m, "object": "model", "created": now, "owned_by": "lookahead-reasoning"} for m in (LR_MODEL, AR_MODEL)
        ]}

    @app.get("/health/live")
    async def live():
        """Liveness: this process answers. Needs no key and asks no downstream server."""
        return {"status": "ok"}

    @app.get("/health")
    async def health():
        """Readiness: the downstream servers answer."""
        status = await readiness.status()
        healthy = all(v == "ok" for v in status.values())
        return JSONResponse({"status": "ok" if healthy else "degraded", "servers": status}, 200 if healthy else 503)

    @app.get("/metrics", response_class=PlainTextResponse)  # the schema then says text/plain, as it is
    async def metrics():
        return PlainTextResponse(generate_latest(service.metrics.registry).decode(), media_type="text/plain; version=0.0.4")

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        return await _handle(service, request, ChatRequest, "chat")

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await _handle(service, request, CompletionRequest, "text")

    return app


class RequireKey:
    """401 without `Authorization: Bearer KEY` on every route but /health/live.

    Only OpenAI's form counts: the `Bearer` scheme (any case, as RFC 7235 allows) and the key; a
    bare key is refused. The key is compared in constant time, as SHA-256 digests, so neither
    its content nor its length shows in the time an answer takes. /docs, /redoc and
    /openapi.json need the key too; /health/live stays open for liveness probes. A plain ASGI
    middleware: it leaves `receive` alone, so a handler still sees its client disconnect.
    """

    def __init__(self, app: ASGIApp, key: str):
        self.app, self.digest = app, hashlib.sha256(key.encode()).digest()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in OPEN_PATHS and not self.authorized(scope):
            error = APIError(401, "invalid API key: send it as 'Authorization: Bearer KEY'", "authentication_error")
            await JSONResponse(error.body(), error.status, headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def authorized(self, scope: Scope) -> bool:
        scheme, _, given = Headers(scope=scope).get("authorization", "").strip().partition(" ")
        if scheme.lower() != "bearer":
            given = ""  # still compared below: a refusal takes the time an acceptance does
        digest = hashlib.sha256(given.strip().encode("latin-1")).digest()  # the header's own bytes
        return hmac.compare_digest(digest, self.digest) and scheme.lower() == "bearer"


OPEN_PATHS = frozenset({"/health/live"})  # with a key set, every other route needs it


def _internal_error() -> APIError:
    return APIError(500, "internal server error", "server_error")


async def _parse(request: Request, schema: type[SamplingRequest], max_bytes: int) -> tuple[SamplingRequest, str]:
    """The validated body and the model it asks for; APIError 400, 404 or 413 otherwise."""
    body = await read_json(request, max_bytes)
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
    body, model = await _parse(request, schema, service.settings.max_body_bytes)
    config = service.request_config(body)
    prompt: str | list[dict] = [m.model_dump() for m in body.messages] if kind == "chat" else body.prompt
    route = request.url.path
    response_id = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex
    # a think section becomes reasoning_content, as SGLang's server does with --reasoning-parser
    parser = service.settings.reasoning_parser if kind == "chat" and body.separate_reasoning else None
    if body.stream:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def on_step(step) -> None:
            text = step if isinstance(step, str) else step.text
            loop.call_soon_threadsafe(queue.put_nowait, ("step", text))

        job = await service.start(prompt, config, model, on_step, body.stop)
        # the job's end follows its steps in the queue: the worker posts both, steps first
        job.future.add_done_callback(lambda _: queue.put_nowait(("end", None)))
        return StreamingResponse(
            _stream(service, job, queue, model, kind, response_id, route, started, parser),
            media_type="text/event-stream",
            background=BackgroundTask(job.cancel),  # also when the stream never started
        )
    job = await service.start(prompt, config, model, stop=body.stop)
    try:
        out = await job.result(_disconnected(request))
    finally:
        job.cancel()  # nothing to stop when it is done; otherwise the client left or the deadline passed
    service.metrics.requests.labels(route, "200").inc()
    service.metrics.latency.labels(route).observe(time.perf_counter() - started)
    if kind == "chat":
        message = {"role": "assistant", "content": out["text"]}
        if parser:
            message["reasoning_content"], message["content"] = split_reasoning(parser, out["text"])
        choice = {"index": 0, "message": message, "finish_reason": out["finish_reason"]}
    else:
        choice = {"index": 0, "text": out["text"], "logprobs": None, "finish_reason": out["finish_reason"]}
    return {
        "id": response_id, "object": "chat.completion" if kind == "chat" else "text_completion",
        "created": int(time.time()), "model": model, "choices": [choice],
        "usage": out["usage"], "lookahead": out["lookahead"],
    }


async def _disconnected(request: Request) -> None:
    """Returns when the client has closed the connection (the body is read by now)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _stream(service: LookaheadService, job: Job, queue: asyncio.Queue, model, kind: Kind, response_id, route,
                  started, parser: str | None = None):
    """Server-sent events: a chunk per kept step as it is kept, a final chunk, then [DONE].

    With a reasoning parser, a chat stream's text goes out as `delta.reasoning_content` while
    it is in the think section, then as `delta.content`. When the client leaves, Starlette
    cancels this generator: its work is cancelled too.
    """
    created = int(time.time())
    obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
    split = ThinkSplit(parser) if parser else None

    def chunk(delta: dict, finish: str | None = None, extra: dict | None = None) -> str:
        if kind == "chat":
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": delta.get("content", ""), "logprobs": None, "finish_reason": finish}
        payload = {"id": response_id, "object": obj, "created": created, "model": model, "choices": [choice], **(extra or {})}
        return f"data: {json.dumps(payload)}\n\n"

    def deltas(reasoning: str, content: str):
        if reasoning:
            yield chunk({"reasoning_content": reasoning})
        if content:
            yield chunk({"content": content})

    status = "499"  # unless the stream ends
    try:
        yield chunk({"role": "assistant"})
        try:
            async for text in _steps(job, queue):
                for event in deltas(*split.feed(text)) if split else deltas("", text):
                    yield event
            out = job.future.result()
            if split:
                for event in deltas(*split.end()):
                    yield event
            yield chunk({}, out["finish_reason"], {"usage": out["usage"], "lookahead": out["lookahead"]})
            status = "200"
        except APIError as error:
            status = str(error.status)
            yield f"data: {json.dumps(error.body())}\n\n"
        except Exception:  # a bug of ours: the client gets the generic error, the log the traceback
            log.exception("a streaming request failed")
            status = "500"
            yield f"data: {json.dumps(_internal_error().body())}\n\n"
        yield "data: [DONE]\n\n"
    finally:
        job.cancel()
        service.metrics.requests.labels(route, status).inc()
        service.metrics.latency.labels(route).observe(time.perf_counter() - started)


async def _steps(job: Job, queue: asyncio.Queue):
    """The text of each kept step as it is kept, until the job ends; APIError 504 at the deadline."""
    while True:
        try:
            event, text = await asyncio.wait_for(queue.get(), timeout=job.remaining())
        except asyncio.TimeoutError:
            job.cancel()
            raise timed_out(job.limit_s) from None
        if event == "end":
            return
        yield text


def serve(connection: Connection, config: LookaheadConfig, settings: ServeSettings, host: str, port: int) -> None:
    import uvicorn

    if host not in ("127.0.0.1", "localhost", "::1") and not settings.api_key:
        raise LookaheadError("serving beyond loopback needs an API key (--api-key or LOOKAHEAD_API_KEY)")
    uvicorn.run(build_app(connection, config, settings), host=host, port=port, log_level="warning")
