"""The judge program: "do these two steps mean the same?", answered yes or no.

The answer is constrained by a regex, so the model can only write `yes` or `no`.
P(yes) comes from the first answer token's top logprobs, which SGLang reports after
the constraint's mask: the mass of tokens that begin "yes" over the mass of all
allowed tokens. Judging is a fork over the pairs; the fixed instructions are the
shared, cached prefix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import sglang as sgl

from lookahead_reasoning.programs.prompts import JUDGE_CHOICES, JUDGE_INSTRUCTIONS, JUDGE_REGEX, judge_message
from lookahead_reasoning.programs.steps import checked, read_branches

TOP_LOGPROBS = 10


@dataclass(frozen=True)
class JudgeAnswer:
    answer: str  # what the model wrote: "yes" or "no" when the constraint held
    p_yes: float | None  # None when the logprobs gave no usable probability
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0


def p_yes_from_top_logprobs(top: list) -> float | None:
    """P(yes) among allowed first tokens; entries are (logprob, token_id, text)."""
    yes = no = 0.0
    for entry in top or []:
        if len(entry) < 3 or entry[2] is None or entry[0] is None:
            continue
        logprob, text = float(entry[0]), str(entry[2]).strip().lower()
        if not text or not math.isfinite(logprob):
            continue
        if JUDGE_CHOICES[0].startswith(text):
            yes += math.exp(logprob)
        elif JUDGE_CHOICES[1].startswith(text):
            no += math.exp(logprob)
    if yes + no <= 0.0:
        return None
    return yes / (yes + no)


def read_answer(text: str, meta: dict) -> JudgeAnswer:
    top = (meta.get("output_top_logprobs") or [None])[0]
    return JudgeAnswer(
        answer=text.strip(),
        p_yes=p_yes_from_top_logprobs(top),
        prompt_tokens=int(meta.get("prompt_tokens", 0)),
        completion_tokens=int(meta.get("completion_tokens", 0)),
        cached_tokens=int(meta.get("cached_tokens", 0)),
    )


@sgl.function
def judge(s, pairs, commit_instructions=True):
    """`pairs` is a list of (step_a, step_b); sets `answers`, one JudgeAnswer each.

    With `commit_instructions` the shared instructions are committed before the fork
    (see target_steps); once they are in the server's cache that request can be skipped.
    """
    if commit_instructions:
        s += sgl.system(JUDGE_INSTRUCTIONS)
        s.sync()
    branches = s.fork(len(pairs))
    for branch, (step_a, step_b) in zip(branches, pairs):
        if not commit_instructions:
            branch += sgl.system(JUDGE_INSTRUCTIONS)
        branch += sgl.user(judge_message(step_a, step_b))
        branch += sgl.assistant_begin()
        branch += sgl.gen(
            "answer",
            max_tokens=3,
            regex=JUDGE_REGEX,
            temperature=0.0,
            return_logprob=True,
            top_logprobs_num=TOP_LOGPROBS,
            return_text_in_logprobs=True,
        )
    s.set_var("answers", read_branches(branches, lambda b: read_answer(*checked(b, "answer"))))
