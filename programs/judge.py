"""The judge program: "do these two steps mean the same?", answered yes or no.

The answer is constrained by a regex, so the model can only write `yes` or `no`.
P(yes) comes from the first answer token's top logprobs, which SGLang reports after
the constraint's mask: the mass of tokens that begin "yes" over the mass of all
allowed tokens. Judging is one batch of the pairs (a fork's branches, in one request); the fixed
instructions are the shared, cached prefix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sglang.lang.ir import SglSamplingParams

from lookahead_reasoning.programs.prompts import JUDGE_CHOICES, JUDGE_INSTRUCTIONS, JUDGE_REGEX, judge_message
from lookahead_reasoning.programs.steps import render_conversation

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


_PLACEHOLDER = "\x00"
_turns_by_template: dict[str, tuple[str, str]] = {}


def _turns(backend) -> tuple[str, str]:
    """The judge's prompt in the backend's chat template, before and after the user's message: the
    instructions as the system turn, the user turn, the assistant's turn begun. Rendered once per template
    by the frontend, so that each pair's prompt is what `sgl.system`, `sgl.user` and `sgl.assistant_begin`
    would write."""
    name = backend.chat_template.name
    if name not in _turns_by_template:
        text = render_conversation(backend, [{"role": "system", "content": JUDGE_INSTRUCTIONS},
                                             {"role": "user", "content": _PLACEHOLDER}])
        head, tail = text.split(_PLACEHOLDER)
        _turns_by_template[name] = head, tail
    return _turns_by_template[name]


def judge_pairs(backend, pairs, commit_instructions=True) -> list[JudgeAnswer]:
    """`pairs` is a list of (step_a, step_b); one JudgeAnswer each, all asked in one batch
    (`LookaheadEndpoint.generate_batch`); no request for no pairs.

    With `commit_instructions` the shared instructions are committed first (as a fork commits its
    prefix); once they are in the server's cache that request can be skipped.
    """
    if not pairs:
        return []
    head, tail = _turns(backend)
    if commit_instructions:
        backend.cache_prefix(head)
    params = SglSamplingParams(
        max_new_tokens=3, regex=JUDGE_REGEX, temperature=0.0, return_logprob=True,
        top_logprobs_num=TOP_LOGPROBS, return_text_in_logprobs=True,
    )
    requests = [backend.generation_request(head + judge_message(a, b) + tail, params) for a, b in pairs]
    return [read_answer(answer["text"], answer["meta_info"]) for answer in backend.generate_batch(requests)]
