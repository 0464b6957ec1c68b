"""The OpenAI-compatible contract: model ids, request bodies, the error shape, and the server's settings."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

LR_MODEL = "lookahead"
AR_MODEL = "target"


class ServeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_concurrent: int = Field(4, ge=1)
    queue_timeout_s: float = Field(30.0, ge=0)
    request_timeout_s: float = Field(600.0, gt=0)
    max_tokens_cap: int = Field(4096, ge=1)
    max_body_bytes: int = Field(1 << 20, ge=1)
    api_key: str | None = None


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    role: Literal["system", "user", "assistant"]
    content: str


class SamplingRequest(BaseModel):
    """The fields both routes share."""

    # strict: "stream": "yes" or "max_tokens": "12" are errors, not coerced; other OpenAI fields are ignored
    model_config = ConfigDict(extra="ignore", strict=True)

    model: str | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, gt=0)
    stream: bool = False
    n: int = Field(1, ge=1, le=1, description="one choice per request")


class ChatRequest(SamplingRequest):
    messages: list[Message] = Field(min_length=1)


class CompletionRequest(SamplingRequest):
    prompt: str = Field(min_length=1)


class APIError(Exception):
    """An error the client gets in OpenAI's shape, with its HTTP status."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", param: str | None = None):
        self.status, self.message, self.kind, self.param = status, message, kind, param

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}}
