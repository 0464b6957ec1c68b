"""API fuzzing of `lookahead serve` with schemathesis, from its OpenAPI schema, over simulated servers.

The POST routes read their bodies themselves (to enforce the size, depth and integer limits before
parsing), so FastAPI's schema (`app.openapi()`) has no request bodies, and it declares every 200 as
JSON. The schema fuzzed here is that one completed with the documented contract
(docs/serving.md): the request bodies from the pydantic models that validate them (schemas.py), with
the values those models accept beyond their JSON schema (a single stop string, text parts as content,
the values that ask nothing of an unsupported OpenAI field), `model` one of the two served models,
`max_tokens` up to the cap; server-sent events as the other 200 of the POST routes; and OpenAI's
error shape as the answer of every other status ("Errors use OpenAI's shape on every path").

Each operation gets schema-valid cases (positive) and, where it takes a body, invalid ones
(negative: wrong types, values out of range, bytes that are not JSON). The checks: no 5xx, and every
response conforms to what the schema declares for it (its content type and body schema).
Derandomized, so a run is reproducible; bounded to stay under a minute on two cores.
"""

import copy

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import content_type_conformance, not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance
from test_serve import Frontend, make_sims, sim_endpoints

from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.serve import ServeSettings
from lookahead_reasoning.runtime.serve.schemas import AR_MODEL, LR_MODEL, MAX_STOP, ChatRequest, CompletionRequest

# Runs in its own pytest process (`.ci/run`'s second stage): in the default run it leaves state behind that
# stalls tests/test_serve_load.py after it (not yet diagnosed).
pytestmark = pytest.mark.slow

CAP = 200  # --max-tokens-cap: the simulated answers are about 30 tokens, so every cap is reached quickly
CHECKS = [not_a_server_error, content_type_conformance, response_schema_conformance]

# what an unsupported OpenAI field may hold without a 400 (schemas.UNSUPPORTED, as JSON Schema)
HARMLESS = {
    "logprobs": [None, False], "top_logprobs": [None, 0], "logit_bias": [None, {}], "tools": [None, []],
    "functions": [None, []], "tool_choice": [None, "none", "auto"], "function_call": [None, "none", "auto"],
    "response_format": [None, {"type": "text"}], "echo": [None, False], "best_of": [None, 1], "suffix": [None, ""],
}
EVENT = {"type": "object", "required": ["data"], "properties": {"data": {"type": "string", "minLength": 1}}}
ERROR = {
    "type": "object", "required": ["error"],
    "properties": {"error": {
        "type": "object", "required": ["message", "type", "param", "code"],
        "properties": {"message": {"type": "string", "minLength": 1}, "type": {"type": "string"},
                       "param": {"type": ["string", "null"]}, "code": {"type": "integer"}},
    }},
}


def _body_schema(model) -> dict:
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})
    props = schema["properties"]
    for name, values in HARMLESS.items():
        if name in props:
            props[name] = {"enum": values}
    props["model"] = {"enum": [LR_MODEL, AR_MODEL, None]}
    for name in ("max_tokens", "max_completion_tokens"):
        props[name] = {"anyOf": [{"type": "integer", "minimum": 1, "maximum": CAP}, {"type": "null"}]}
    stop = {"type": "string", "minLength": 1}
    props["stop"] = {"anyOf": [stop, {"type": "array", "items": stop, "maxItems": MAX_STOP}, {"type": "null"}]}
    if "messages" in props:
        message = defs["Message"]
        part = {"type": "object", "required": ["type", "text"],
                "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}
        message["properties"]["content"] = {"anyOf": [{"type": "string"}, {"type": "array", "items": part}]}
        props["messages"]["items"] = message
    return schema


def contract_schema(app) -> dict:
    """`app.openapi()` with the documented contract added (see the module docstring)."""
    schema = copy.deepcopy(app.openapi())
    bodies = {"/v1/chat/completions": ChatRequest, "/v1/completions": CompletionRequest}
    for path, item in schema["paths"].items():
        for operation in item.values():
            if path in bodies:
                operation["requestBody"] = {"required": True,
                                            "content": {"application/json": {"schema": _body_schema(bodies[path])}}}
                operation["responses"]["200"]["content"]["text/event-stream"] = {"schema": EVENT}
            if path != "/health":  # readiness answers 503 with its own shape, {"status": "degraded", "servers"}
                operation["responses"]["default"] = {"description": "an error",
                                                     "content": {"application/json": {"schema": ERROR}}}
    return schema


@pytest.fixture(scope="module")
def frontend():
    sims = make_sims()
    for s in sims.values():
        s.__enter__()
    try:
        config = LookaheadConfig(depth=2, max_tokens=CAP, request_timeout_s=10)
        with Frontend(sim_endpoints(sims), ServeSettings(max_tokens_cap=CAP, max_body_bytes=64 * 1024), config) as f:
            yield f
    finally:
        for s in sims.values():
            s.__exit__()


@pytest.fixture(scope="module")
def api(frontend):
    return schemathesis.openapi.from_dict(contract_schema(frontend.server.config.app))


def test_the_contract_schema_has_both_bodies(api):
    for path in ("/v1/chat/completions", "/v1/completions"):
        assert api[path]["POST"].body, path


@pytest.mark.parametrize("method, path, mode, examples", [
    ("GET", "/v1/models", GenerationMode.POSITIVE, 1),
    ("GET", "/health/live", GenerationMode.POSITIVE, 1),
    ("GET", "/health", GenerationMode.POSITIVE, 1),
    ("GET", "/metrics", GenerationMode.POSITIVE, 1),
    ("POST", "/v1/chat/completions", GenerationMode.POSITIVE, 60),
    ("POST", "/v1/chat/completions", GenerationMode.NEGATIVE, 100),
    ("POST", "/v1/completions", GenerationMode.POSITIVE, 30),
    ("POST", "/v1/completions", GenerationMode.NEGATIVE, 60),
])
def test_fuzz_the_api(api, frontend, method, path, mode, examples):
    operation = api[path][method]
    session = requests.Session()

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def fuzz(case):
        case.call_and_validate(base_url=frontend.url, session=session, checks=CHECKS, timeout=60)

    fuzz()
