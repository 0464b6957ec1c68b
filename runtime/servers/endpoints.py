"""Where the three roles are served: the endpoints file.

An endpoints file is JSON: {"draft": {"url": ..., "chat_template": ...}, "target": ...,
"judge": ..., "launcher_pid": ...}. Two roles may share a URL (one server, one
connection). A URL may be SGLang's router in front of several replicas of one model
(`lookahead launch --target-replicas N`); `workers` then lists them. `lookahead launch` writes it; `run` reads it; `stop` signals the launcher. Connecting to
the servers is `runtime/servers/connection.py`'s job; this module does not import SGLang.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from lookahead_reasoning.files import cache_dir, write_atomically
from lookahead_reasoning.errors import LookaheadError, validation_message

ROLES = ("draft", "target", "judge")


class ServerAddress(BaseModel):
    """Where one role is served (a URL and what the launcher knows of it); `LookaheadEndpoint` is the backend
    that talks to it."""

    model_config = ConfigDict(extra="forbid")

    url: str
    chat_template: str | None = None  # SGLang frontend template name; None: guessed from the model path
    model: str | None = None  # informational: what the server serves
    # informational: the SGLang servers behind a router at `url` (empty: `url` is the server itself)
    workers: list[str] = []
    # informational: the dtype of the CPU servers the launcher started (None: not chosen by it: a GPU, a router by URL)
    dtype: str | None = None

    @field_validator("url")
    @classmethod
    def _http(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"not an http(s) URL: {url!r}")
        return url.rstrip("/")


class Endpoints(BaseModel):
    model_config = ConfigDict(extra="forbid")

    draft: ServerAddress
    target: ServerAddress
    judge: ServerAddress
    launcher_pid: int | None = None
    launcher_started: int | None = None  # the launcher's start time (clock ticks since boot), checked by `stop`
    restarting: list[str] = []  # roles whose server the launcher is restarting (runs meanwhile degrade)

    @classmethod
    def from_urls(cls, draft: str, target: str, judge: str | None = None, chat_template: str | None = None):
        judge = judge or target
        return cls(**{r: ServerAddress(url=u, chat_template=chat_template) for r, u in zip(ROLES, (draft, target, judge))})


def default_endpoints_path() -> Path:
    base = os.environ.get("LOOKAHEAD_ENDPOINTS")
    if base:
        return Path(base)
    return cache_dir() / "endpoints.json"


def load_endpoints(path: Path) -> Endpoints:
    if not path.exists():
        raise LookaheadError(f"endpoints file {path} does not exist (start servers with `lookahead launch`)")
    try:
        return Endpoints.model_validate(json.loads(path.read_text()))
    except json.JSONDecodeError as error:
        raise LookaheadError(f"endpoints file {path} is not valid JSON: {error}") from None
    except ValidationError as error:
        raise LookaheadError(f"endpoints file {path} is malformed: {validation_message(error)}") from None


def save_endpoints(endpoints: Endpoints, path: Path) -> None:
    write_atomically(path, endpoints.model_dump_json(indent=2))
