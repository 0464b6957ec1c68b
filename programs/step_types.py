"""What a generated step is, and how a finished `gen` call reads as one.

SGLang trims the stop string from the output; a step that ended on the delimiter gets
it re-appended here, so step texts concatenate back into the exact reasoning text.
This module does not import SGLang, so the runtime's data types load without it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Ending = Literal["delimiter", "eos", "length"]


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0
    top_p: float = 1.0


@dataclass(frozen=True)
class StepOutput:
    """One generated step. `text` includes the delimiter when `ending == "delimiter"`."""

    text: str
    ending: Ending
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    server_s: float | None = None  # the server's own time for the request (SGLang's e2e_latency), where it says

    @property
    def complete(self) -> bool:
        """A step that ended on the delimiter; only such a step can be followed by another."""
        return self.ending == "delimiter"


def split_steps(output: StepOutput, delimiter: str) -> list[StepOutput]:
    """Cut a generation of several steps (written without a stop at the delimiter) into steps.

    Every piece but the last ends on the delimiter; the last ends as the generation did (an
    empty last piece is dropped unless it carries the EOS). The completion tokens are shared
    out by the pieces' length in characters, at least one each, summing to the whole.
    """
    texts = [piece + delimiter for piece in output.text.split(delimiter)]
    texts[-1] = texts[-1][: -len(delimiter)]
    if not texts[-1] and len(texts) > 1 and output.ending != "eos":
        texts.pop()
    endings: list[Ending] = ["delimiter"] * (len(texts) - 1) + [
        "delimiter" if texts[-1].endswith(delimiter) else output.ending
    ]
    total, length = output.completion_tokens, max(1, len(output.text))
    bounds, seen = [0], 0
    for i, text in enumerate(texts[:-1], start=1):
        seen += len(text)
        bounds.append(min(total - (len(texts) - i), max(bounds[-1] + 1, round(total * seen / length))))
    bounds.append(total)
    return [
        StepOutput(text, ending, completion_tokens=max(0, bounds[i + 1] - bounds[i]))
        for i, (text, ending) in enumerate(zip(texts, endings))
    ]


def read_step(text: str, meta: dict, delimiter: str | None) -> StepOutput:
    """Turn a `gen` result and its `meta_info` into a step.

    finish_reason shapes from SGLang: {"type": "stop", "matched": "<string>"} for a stop
    string (ours, or the chat template's end-of-turn string), {"type": "stop",
    "matched": <token id>} for EOS or a stop token, {"type": "length", ...} for the cap.
    """
    reason = meta.get("finish_reason") or {}
    kind, matched = reason.get("type"), reason.get("matched")
    if kind == "stop" and delimiter is not None and matched == delimiter:
        ending, text = "delimiter", text + delimiter
    elif kind == "stop":
        ending = "eos"
    elif kind == "length":
        ending = "length"
    else:
        raise ValueError(f"unexpected finish_reason {reason!r}")
    return StepOutput(
        text=text,
        ending=ending,
        prompt_tokens=int(meta.get("prompt_tokens", 0)),
        completion_tokens=int(meta.get("completion_tokens", 0)),
        cached_tokens=int(meta.get("cached_tokens", 0)),
        server_s=_seconds(meta.get("e2e_latency")),
    )


def _seconds(value: object) -> float | None:
    """A server-reported duration, or None where it is missing or not a non-negative number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        return None
    return float(value)
