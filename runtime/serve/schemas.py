"""The OpenAI-compatible contract: model ids, request bodies, the error shape, and the server's settings."""

from __future__ import annotations

from pathlib import Path

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

LR_MODEL = "lookahead"
AR_MODEL = "target"
MAX_STOP = 4  # stop strings per request, as OpenAI allows

# OpenAI fields this server does not implement: each is a 400 naming it unless it holds a value that
# asks for nothing (what the predicate accepts); the text says which values are accepted
_NO_LIST = (lambda v: v is None or v == [], "null or []")
_NOTHING = (lambda v: v is None or v is False, "null or false")
UNSUPPORTED = {
    "logprobs": _NOTHING,
    "top_logprobs": (lambda v: v is None or (type(v) is int and v == 0), "null or 0"),
    "logit_bias": (lambda v: v is None or v == {}, "null or {}"),
    "tools": _NO_LIST,
    "functions": _NO_LIST,
    "tool_choice": (lambda v: v is None or v in ("none", "auto"), '"none", "auto" (without tools) or null'),
    "function_call": (lambda v: v is None or v in ("none", "auto"), '"none", "auto" (without functions) or null'),
    "response_format": (lambda v: v is None or (isinstance(v, dict) and v.get("type") == "text"),
                        '{"type": "text"} or null; "json_object" and "json_schema" are not implemented'),
    "echo": _NOTHING,
    "best_of": (lambda v: v is None or (type(v) is int and v == 1), "null or 1"),
    "suffix": (lambda v: v is None or v == "", 'null or ""'),
}


def _unsupported(value: Any, info: ValidationInfo) -> Any:
    harmless, accepted = UNSUPPORTED[info.field_name]
    if not harmless(value):
        raise ValueError(f"not supported by this server; omit it or send {accepted}")
    return value


def _unsupported_field(name: str) -> Any:
    return Field(None, description=f"not supported: only {UNSUPPORTED[name][1]}, else a 400 naming it")


class ServeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_concurrent: int = Field(4, ge=1)
    queue_timeout_s: float = Field(30.0, ge=0)
    request_timeout_s: float = Field(600.0, gt=0)
    max_tokens_cap: int = Field(4096, ge=1)
    max_body_bytes: int = Field(1 << 20, ge=1)
    api_key: str | None = None
    reasoning_parser: str | None = Field(None, description="SGLang reasoning parser name, e.g. deepseek-r1 or qwen3")
    endpoints_file: Path | None = Field(
        None, description="the endpoints file of `lookahead launch`: /health names the roles it is restarting")


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    # "developer" is OpenAI's newer name for "system"; it is rendered as a system message
    role: Literal["system", "developer", "user", "assistant"]
    # a string, or a list of text parts [{"type": "text", "text": "..."}], joined by spaces as SGLang does
    content: str

    @field_validator("role")
    @classmethod
    def _developer_is_system(cls, role: str) -> str:
        return "system" if role == "developer" else role

    @field_validator("content", mode="before")
    @classmethod
    def _text_parts(cls, content: Any) -> Any:
        if not isinstance(content, list):
            return content  # a string, or the wrong type that strict validation then refuses
        texts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict):
                raise ValueError(f'part {i} is not an object like {{"type": "text", "text": "..."}}')
            kind = part.get("type")
            if kind != "text":
                raise ValueError(f"part {i} has type {kind!r}; only text parts are supported")
            if not isinstance(part.get("text"), str):
                raise ValueError(f"part {i} (type 'text') needs a string 'text'")
            texts.append(part["text"])
        return " ".join(texts)


class SamplingRequest(BaseModel):
    """The fields both routes share."""

    # strict: "stream": "yes" or "max_tokens": "12" are errors, not coerced; the OpenAI fields in
    # UNSUPPORTED are 400s unless they ask for nothing; other OpenAI fields are ignored
    model_config = ConfigDict(extra="ignore", strict=True)

    model: str | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, gt=0)
    max_completion_tokens: int | None = Field(None, gt=0, description="OpenAI's newer max_tokens; the smaller wins")
    stop: list[str] = Field(default_factory=list, description="one string or up to 4; null is none")
    seed: int | None = None
    stream: bool = False
    n: int = Field(1, ge=1, le=1, description="one choice per request")
    logprobs: Any = _unsupported_field("logprobs")
    top_logprobs: Any = _unsupported_field("top_logprobs")
    logit_bias: Any = _unsupported_field("logit_bias")

    _shared_unsupported = field_validator("logprobs", "top_logprobs", "logit_bias")(_unsupported)

    @field_validator("stop", mode="before")
    @classmethod
    def _one_stop_or_none(cls, stop: Any) -> Any:
        return [] if stop is None else [stop] if isinstance(stop, str) else stop

    @field_validator("stop")
    @classmethod
    def _stops(cls, stops: list[str]) -> list[str]:
        if len(stops) > MAX_STOP:
            raise ValueError(f"at most {MAX_STOP} stop strings")
        if any(not s for s in stops):
            raise ValueError("a stop string must not be empty")
        return stops


class ChatRequest(SamplingRequest):
    messages: list[Message] = Field(min_length=1)
    separate_reasoning: bool = Field(True, description="SGLang's switch: false keeps a think section in content")
    tools: Any = _unsupported_field("tools")
    tool_choice: Any = _unsupported_field("tool_choice")
    functions: Any = _unsupported_field("functions")
    function_call: Any = _unsupported_field("function_call")
    response_format: Any = _unsupported_field("response_format")

    _chat_unsupported = field_validator(
        "tools", "tool_choice", "functions", "function_call", "response_format")(_unsupported)


class CompletionRequest(SamplingRequest):
    prompt: str = Field(min_length=1)
    echo: Any = _unsupported_field("echo")
    best_of: Any = _unsupported_field("best_of")
    suffix: Any = _unsupported_field("suffix")

    _completion_unsupported = field_validator("echo", "best_of", "suffix")(_unsupported)


class APIError(Exception):
    """An error the client gets in OpenAI's shape, with its HTTP status."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", param: str | None = None):
        self.status, self.message, self.kind, self.param = status, message, kind, param

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}}
