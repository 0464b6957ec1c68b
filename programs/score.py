"""Scoring programs: a model answers with a number under a regex constraint.

`score_steps` is the SpecReason-style verifier (the target rates a draft step 0-9);
`score_answer` is the MT-Bench judge (1-10). Both fork over their items, with the
fixed instructions as the shared, cached prefix. The score is the expectation over
the constrained first token's top logprobs when they are usable, else the number
the model wrote.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import sglang as sgl

from lookahead_reasoning.programs.prompts import (
    ANSWER_SCORE_INSTRUCTIONS,
    ANSWER_SCORE_REGEX,
    STEP_SCORE_INSTRUCTIONS,
    STEP_SCORE_REGEX,
    answer_score_message,
    step_score_message,
)
from lookahead_reasoning.programs.steps import checked, read_branches

TOP_LOGPROBS = 12


@dataclass(frozen=True)
class Score:
    value: float | None  # None when the answer was not a number in range
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0


def expected_digit(top: list, low: int, high: int) -> float | None:
    """Probability-weighted mean of the digits among the top logprobs (entries: logprob, id, text)."""
    total = weighted = 0.0
    for entry in top or []:
        if len(entry) < 3 or entry[0] is None or entry[2] is None:
            continue
        text = str(entry[2]).strip()
        if not text.isdigit() or not low <= int(text) <= high or not math.isfinite(float(entry[0])):
            continue
        p = math.exp(float(entry[0]))
        total += p
        weighted += p * int(text)
    return weighted / total if total > 0 else None


def read_score(text: str, meta: dict, low: int, high: int, from_logprobs: bool) -> Score:
    written = text.strip()
    value = float(written) if written.isdigit() and low <= int(written) <= high else None
    if from_logprobs and value is not None:
        top = (meta.get("output_top_logprobs") or [None])[0]
        value = expected_digit(top, low, high) if top else value
    return Score(
        value=value, text=written, prompt_tokens=int(meta.get("prompt_tokens", 0)),
        completion_tokens=int(meta.get("completion_tokens", 0)), cached_tokens=int(meta.get("cached_tokens", 0)),
    )


def _scored_fork(s, instructions: str, messages: list[str], name: str, regex: str, max_tokens: int, logprobs: bool):
    s += sgl.system(instructions)
    s.sync()  # commit the shared instructions before forking (see target_steps)
    branches = s.fork(len(messages))
    for branch, message in zip(branches, messages):
        branch += sgl.user(message)
        branch += sgl.assistant_begin()
        branch += sgl.gen(
            name, max_tokens=max_tokens, regex=regex, temperature=0.0, return_logprob=logprobs,
            top_logprobs_num=TOP_LOGPROBS if logprobs else 0, return_text_in_logprobs=logprobs,
        )
    return branches


@sgl.function
def score_steps(s, context, steps):
    """Sets `scores`: one Score (0-9) per proposed step after `context`."""
    messages = [step_score_message(context, step) for step in steps]
    branches = _scored_fork(s, STEP_SCORE_INSTRUCTIONS, messages, "score", STEP_SCORE_REGEX, 2, True)
    s.set_var("scores", read_branches(branches, lambda b: read_score(*checked(b, "score"), 0, 9, True)))


@sgl.function
def score_answer(s, question, answer, reference=None):
    """Sets `score`: the judge's 1-10 score of `answer`."""
    message = answer_score_message(question, answer, reference)
    branches = _scored_fork(s, ANSWER_SCORE_INSTRUCTIONS, [message], "score", ANSWER_SCORE_REGEX, 3, False)
    (score,) = read_branches(branches, lambda b: read_score(*checked(b, "score"), 1, 10, False))
    s.set_var("score", score)
