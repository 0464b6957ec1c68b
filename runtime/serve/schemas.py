"""The OpenAI-compatible contract: model ids, request bodies, the error shape, and the server's settings."""

from __future__ import annotations

from pathlib import Path

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

LR_MODEL = "lookahead"
AR_MODEL = "target"
MAX_STOP = 4  # stop strings per request, as OpenAI allows


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

    # strict: "stream": "yes" or "max_tokens": "12" are errors, not coerced; other OpenAI fields are ignored
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


class CompletionRequest(SamplingRequest):
    prompt: str = Field(min_length=1)


class APIError(Exception):
    """An error the client gets in OpenAI's shape, with its HTTP status."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", param: str | None = None):
        self.status, self.message, self.kind, self.param = status, message, kind, param

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}}
