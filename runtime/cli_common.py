"""Helpers the CLI's commands share: one-line validation errors, configs, endpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from pydantic import ValidationError
from rich.console import Console

from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.endpoints import Endpoints, default_endpoints_path, load_endpoints
from lookahead_reasoning.runtime.errors import LookaheadError

err = Console(stderr=True)


def validated(model, **values):
    """Build a pydantic model from user input; a validation error becomes one line."""
    try:
        return model(**values)
    except ValidationError as error:
        problem = error.errors()[0]
        where = ".".join(map(str, problem["loc"]))
        message = problem["msg"].removeprefix("Value error, ")
        raise LookaheadError(f"invalid {where + ': ' if where else 'value: '}{message}") from None


def make_config(**values) -> LookaheadConfig:
    return validated(LookaheadConfig, **values)


def depth_options(depth: str) -> dict:
    """`--depth N` or `--depth adaptive` (which starts at the default γ)."""
    if depth == "adaptive":
        return {"adaptive_depth": True}
    try:
        return {"depth": int(depth)}
    except ValueError:
        raise LookaheadError(f"depth must be a number or 'adaptive', got {depth!r}") from None


def endpoints_from(path: Optional[Path], draft_url, target_url, judge_url, chat_template) -> Endpoints:
    if draft_url or target_url or judge_url:
        if not (draft_url and target_url):
            raise LookaheadError("give --draft-url and --target-url (and optionally --judge-url), or --endpoints")
        try:
            return Endpoints.from_urls(draft_url, target_url, judge_url, chat_template)
        except ValidationError as error:
            raise LookaheadError(f"bad URL: {error.errors()[0]['msg']}") from None
    return load_endpoints(path or default_endpoints_path())


def floats_option(text: str, name: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise LookaheadError(f"--{name} takes comma-separated numbers, got {text!r}") from None
