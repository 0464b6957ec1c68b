"""`lookahead serve`: an OpenAI-compatible frontend that answers with lookahead reasoning.

Routes: POST /v1/chat/completions and /v1/completions (OpenAI request and response
shapes, `stream: true` as server-sent events with one chunk per kept step), GET
/v1/models, GET /health (readiness: checks the three SGLang servers, cached for a
second), GET /health/live (liveness: no key, no downstream call), GET /metrics (Prometheus).

Honoured request fields: temperature, top_p, max_tokens and max_completion_tokens (the
smaller), stop (up to 4 strings: the answer ends before the first, streaming never sends
past it, and no new round starts once one is seen), seed (SGLang's sampling_seed, per
request), stream; messages may use the developer role (as system) and lists of text
parts. With a reasoning parser (SGLang's, by name) a chat answer's think section becomes
reasoning_content.

Two model ids are served: `lookahead` (lookahead reasoning) and `target` (the target
alone, plain AR, for comparisons behind the same server). Every response carries its
statistics in an extra `lookahead` field; `usage` counts real tokens.

Limits: at most `max_concurrent` requests run at once, on their own pool (probes have
another); the excess waits up to `queue_timeout_s` and is then refused with 429. A
request that runs past `request_timeout_s` ends with 504, LR or AR (no new round starts
after the deadline, and each server request has its own timeout, so nothing hangs; the
draft's and judge's are shorter, so a stalled one degrades the run instead). A client
that goes away cancels its work (an AR request is aborted on the target's server), and its
slot comes back once that work has stopped.
Bodies over `max_body_bytes` get 413; bodies nested too deep or with overlong integers
get 400. Each request gets its own engine and settings over shared, thread-safe
connections: requests never share state beyond the adaptive-depth estimates.

Errors use OpenAI's shape {"error": {"message", "type", "param", "code"}}, on every path:
400 for bad requests (malformed JSON, wrong types, empty messages, max_tokens out of
range, a prompt over the context limit), 401 for a wrong API key (only `Authorization:
Bearer KEY`, compared in constant time; when one is set, every route but /health/live needs
it, /docs and /openapi.json included), 404/405 for unknown routes,
413 for large bodies, 429 when busy, 503 when the target server is down, 504 past the
time limit, and 500 with a generic message only for a bug of ours. Messages never carry
internal URLs or downstream bodies (those are logged). If the draft or judge server
fails, the request still completes with target steps and `lookahead.degraded` says so.

Modules: `schemas` (the contract), `body` (reading a body within limits), `jobs` (slots,
deadline, cancellation), `health` (readiness), `text` (stop strings, reasoning split),
`service` (running a request), `app` (HTTP).
"""

from lookahead_reasoning.runtime.serve.app import build_app, serve
from lookahead_reasoning.runtime.serve.schemas import ServeSettings

__all__ = ["ServeSettings", "build_app", "serve"]
