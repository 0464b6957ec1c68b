"""What the commands share: option definitions (each written once), one-line input errors, configs.

Nothing here imports SGLang: the CLI parses its arguments and reports input errors before
any command loads a program.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from pydantic import ValidationError
from rich.console import Console

from lookahead_reasoning.runtime.config import DEFAULT_VERIFIER, LookaheadConfig  # noqa: F401  (commands' default)
from lookahead_reasoning.runtime.servers.endpoints import Endpoints, default_endpoints_path, load_endpoints
from lookahead_reasoning.errors import LookaheadError
from lookahead_reasoning.errors import validated
from lookahead_reasoning.verifiers.registry import verifiers_help

err = Console(stderr=True)

VERIFIERS = verifiers_help()  # every verifier name, from the registry

EndpointsFile = Annotated[Optional[Path], typer.Option("--endpoints", help="endpoints file written by `lookahead launch`")]
DraftUrl = Annotated[Optional[str], typer.Option("--draft-url", help="draft SGLang server URL")]
TargetUrl = Annotated[Optional[str], typer.Option("--target-url", help="target SGLang server URL")]
JudgeUrl = Annotated[Optional[str], typer.Option("--judge-url", help="judge SGLang server URL (default: the target's)")]
ChatTemplate = Annotated[Optional[str], typer.Option("--chat-template", help="SGLang chat template name for --*-url servers")]
Depth = Annotated[str, typer.Option("--depth", help="γ: draft steps per round, or 'adaptive'")]
Width = Annotated[int, typer.Option("--width", help="W: draft candidates per position (tree drafting when > 1)")]
Engine = Annotated[str, typer.Option("--engine", help="sync, or async (drafting overlaps verification)")]
Fork = Annotated[str, typer.Option(
    "--fork", help="sync chain rounds: streamed (branches decided as they end; a round ends at its decision) or "
    "batched (one request per fork, the round waits for its longest branch)")]
MaxTokens = Annotated[int, typer.Option("--max-tokens", help="cap on an answer's tokens")]
MaxStepTokens = Annotated[int, typer.Option("--max-step-tokens", help="cap on one step's tokens")]
Verifier = Annotated[str, typer.Option("--verifier", help=VERIFIERS)]
Threshold = Annotated[
    Optional[float],
    typer.Option("--threshold", help="verifier threshold (default: calibrated, else the verifier's default)"),
]
Temperature = Annotated[float, typer.Option("--temperature", help="sampling temperature of draft and target")]
Timeout = Annotated[float, typer.Option("--timeout", help="seconds one server request may take")]
AsJson = Annotated[bool, typer.Option("--json", help="print one JSON object to stdout")]
Device = Annotated[str, typer.Option("--device", help="cpu, cuda or auto")]
ApiKey = Annotated[Optional[str], typer.Option("--api-key", envvar="LOOKAHEAD_API_KEY", help="bearer token")]
EmbeddingModel = Annotated[
    Optional[str], typer.Option("--embedding-model", help="sentence-transformers path (embedding verifiers)")
]


def make_config(**values) -> LookaheadConfig:
    return validated(LookaheadConfig, **values)


ADAPTIVE_FIRST_DEPTH = 2  # γ of the adaptive policy's first forks, before it knows what a fork costs


def depth_options(depth: str) -> dict:
    """`--depth N`, or `--depth adaptive`, whose first forks use a small γ: on hardware where
    branches are not free, the rounds that measure their cost are the ones that pay for it."""
    if depth == "adaptive":
        return {"adaptive_depth": True, "depth": ADAPTIVE_FIRST_DEPTH}
    try:
        return {"depth": int(depth)}
    except ValueError:
        raise LookaheadError(f"depth must be a number or 'adaptive', got {depth!r}") from None


def endpoints_from(path: Optional[Path], draft_url, target_url, judge_url, chat_template) -> Endpoints:
    """Servers from --*-url options, else from an endpoints file."""
    if draft_url or target_url or judge_url:
        if not (draft_url and target_url):
            raise LookaheadError("give --draft-url and --target-url (and optionally --judge-url), or --endpoints")
        try:
            return Endpoints.from_urls(draft_url, target_url, judge_url, chat_template)
        except ValidationError as error:
            raise LookaheadError(f"bad URL: {error.errors()[0]['msg']}") from None
    return load_endpoints(path or default_endpoints_path())


def number_list(text: str, name: str, kind: type = float, minimum: float | None = None) -> list:
    """A comma-separated list of numbers; anything else, or nothing, is a one-line error."""
    word = "whole numbers" if kind is int else "numbers"
    try:
        values = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise LookaheadError(f"--{name} takes comma-separated {word}, got {text!r}") from None
    if not values:
        raise LookaheadError(f"--{name} takes comma-separated {word}, got {text!r}")
    if minimum is not None and any(v < minimum for v in values):
        raise LookaheadError(f"--{name} needs numbers >= {minimum:g}, got {text!r}")
    return list(dict.fromkeys(values))
