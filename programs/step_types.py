"""What a generated step is, and how a finished `gen` call reads as one.

SGLang trims the stop string from the output; a step that ended on the delimiter gets
it re-appended here, so step texts concatenate back into the exact reasoning text.
This module does not import SGLang, so the runtime's data types load without it.
"""

from __future__ import annotations

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

    @property
    def complete(self) -> bool:
        """A step that ended on the delimiter; only such a step can be followed by another."""
        return self.ending == "delimiter"


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
    )
