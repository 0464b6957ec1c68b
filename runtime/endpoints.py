"""Where the three roles are served, and connecting to them.

An endpoints file is JSON: {"draft": {"url": ..., "chat_template": ...}, "target": ...,
"judge": ..., "launcher_pid": ...}. Two roles may share a URL (one server, one
connection). `lookahead launch` writes it; `run` reads it; `stop` signals the launcher.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from lookahead_reasoning.programs.backend import BackendError, LookaheadEndpoint
from lookahead_reasoning.programs.roles import SGLangRoles
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.errors import LookaheadError
from lookahead_reasoning.verifiers.base import Verifier
from lookahead_reasoning.verifiers.registry import make_verifier

ROLES = ("draft", "target", "judge")


class Endpoint(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str
    chat_template: str | None = None  # SGLang frontend template name; None: guessed from the model path
    model: str | None = None  # informational: what the server serves

    @field_validator("url")
    @classmethod
    def _http(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"not an http(s) URL: {url!r}")
        return url.rstrip("/")


class Endpoints(BaseModel):
    model_config = ConfigDict(extra="forbid")

    draft: Endpoint
    target: Endpoint
    judge: Endpoint
    launcher_pid: int | None = None

    @classmethod
    def from_urls(cls, draft: str, target: str, judge: str | None = None, chat_template: str | None = None):
        judge = judge or target
        return cls(**{r: Endpoint(url=u, chat_template=chat_template) for r, u in zip(ROLES, (draft, target, judge))})


def default_endpoints_path() -> Path:
    base = os.environ.get("LOOKAHEAD_ENDPOINTS")
    if base:
        return Path(base)
    cache = os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
    return Path(cache) / "lookahead-reasoning" / "endpoints.json"


def load_endpoints(path: Path) -> Endpoints:
    if not path.exists():
        raise LookaheadError(f"endpoints file {path} does not exist (start servers with `lookahead launch`)")
    try:
        return Endpoints.model_validate(json.loads(path.read_text()))
    except json.JSONDecodeError as error:
        raise LookaheadError(f"endpoints file {path} is not valid JSON: {error}") from None
    except ValidationError as error:
        problem = error.errors()[0]
        where = ".".join(str(p) for p in problem["loc"])
        raise LookaheadError(f"endpoints file {path} is malformed at {where}: {problem['msg']}") from None


def save_endpoints(endpoints: Endpoints, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(endpoints.model_dump_json(indent=2))
    tmp.replace(path)


class Connection:
    """Backends for the three roles (shared where roles share a URL), programs and verifier.

    Backends are thread-safe and shared; `roles(config)` and `verifier_for(config)` are
    cheap, so a server can bind per-request settings (temperature, top_p) to them.
    """

    def __init__(self, endpoints: Endpoints, config: LookaheadConfig):
        backends: dict[tuple[str, str | None], LookaheadEndpoint] = {}
        self.backends: dict[str, LookaheadEndpoint] = {}
        for role in ROLES:
            spec: Endpoint = getattr(endpoints, role)
            key = (spec.url, spec.chat_template)
            if key not in backends:
                try:
                    backends[key] = LookaheadEndpoint(
                        spec.url,
                        chat_template=spec.chat_template,
                        timeout_s=config.request_timeout_s,
                        seed=config.seed,
                    )
                except BackendError as error:
                    raise LookaheadError(f"{role} server: {error}") from None
                except (KeyError, ValueError) as error:  # unknown chat template name
                    raise LookaheadError(f"{role} server: {error}") from None
            self.backends[role] = backends[key]
        self.models = self.roles(config)
        self.verifier = self.verifier_for(config)

    def roles(self, config: LookaheadConfig) -> SGLangRoles:
        """The programs bound to these backends with `config`'s step and sampling settings."""
        return SGLangRoles(
            draft=self.backends["draft"],
            target=self.backends["target"],
            delimiter=config.delimiter,
            max_step_tokens=config.max_step_tokens,
            draft_sampling=config.draft_sampling.to_program(),
            target_sampling=config.target_sampling.to_program(),
        )

    def verifier_for(self, config: LookaheadConfig) -> Verifier:
        try:
            return make_verifier(
                config.verifier, config.judge_threshold, judge_backend=self.backends["judge"],
                target_backend=self.backends["target"], embedding_model=config.embedding_model, seed=config.seed,
            )
        except (ValueError, OSError) as error:
            raise LookaheadError(f"verifier {config.verifier}: {error}") from None
