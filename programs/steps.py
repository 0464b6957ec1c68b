"""Draft and target step programs (SGLang frontend functions)."""

from __future__ import annotations

import sglang as sgl

from lookahead_reasoning.programs.step_types import Sampling, read_step


def checked(state, name: str):
    """A variable and its meta_info, re-raising the error of a failed request."""
    error = state.error()
    if error is not None:
        raise error
    return state[name], state.get_meta_info(name)


def read_branches(branches, read) -> list:
    """`read` applied to every fork branch, then the branches joined.

    On Ctrl-C the branches are left alone: joining would wait for their requests in
    flight, which on a CPU can take minutes.
    """
    try:
        values = [read(branch) for branch in branches]
    except KeyboardInterrupt:
        raise
    except BaseException:
        branches.join()
        raise
    branches.join()
    return values


def _step_gen(name: str, delimiter: str, max_step_tokens: int, sampling: Sampling):
    return sgl.gen(
        name,
        max_tokens=max_step_tokens,
        stop=delimiter,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
    )


@sgl.function
def draft_steps(s, prefix, gamma, delimiter, max_step_tokens, sampling):
    """Up to `gamma` steps, one after another; stops early after an EOS or capped step."""
    s += prefix
    steps = []
    for i in range(gamma):
        s += _step_gen(f"step_{i}", delimiter, max_step_tokens, sampling)
        step = read_step(*checked(s, f"step_{i}"), delimiter)
        steps.append(step)
        if not step.complete:
            break
        s += delimiter
    s.set_var("steps", steps)


@sgl.function
def target_steps(s, prefix, continuations, delimiter, max_step_tokens, sampling, commit_prefix=True):
    """One target step after each of `prefix + continuation`, all in parallel.

    `max_step_tokens` is one cap for every branch, or a list with one cap per branch.

    With `commit_prefix` the fork commits `prefix` first, so the server prefills it
    once and every branch reuses it from the radix cache. The commit is one more
    sequential request; when the caller knows the prefix is already cached (it was
    written by a target branch of the previous round), it passes False and the
    branches start at once.
    """
    if commit_prefix:
        s += prefix
        s.sync()  # fork() commits the prefix only if it sees it already applied; without this it races
    caps = max_step_tokens if isinstance(max_step_tokens, list) else [max_step_tokens] * len(continuations)
    branches = s.fork(len(continuations))  # forking an empty state commits nothing
    for branch, continuation, cap in zip(branches, continuations, caps):
        branch += continuation if commit_prefix else prefix + continuation
        branch += _step_gen("step", delimiter, cap, sampling)
    s.set_var("steps", read_branches(branches, lambda b: read_step(*checked(b, "step"), delimiter)))


@sgl.function
def conversation_prefix(s, messages):
    """A list of {"role", "content"} messages in the server's chat template, up to the assistant's answer."""
    turns = {"system": sgl.system, "user": sgl.user, "assistant": sgl.assistant}
    for message in messages:
        s += turns[message["role"]](message["content"])
    s += sgl.assistant_begin()



@sgl.function
def sample_steps(s, prefixes, width, delimiter, max_step_tokens, sampling):
    """`width` sampled candidates for the next step after each of `prefixes`: one level of a draft
    tree, all in one fork. Nothing is committed first: every prefix extends text the draft server
    has just written or read (the run so far, the previous level's candidates), so it is mostly
    in the radix cache already, and the level costs one parallel wave of requests."""
    branches = s.fork(len(prefixes) * width)  # forking an empty state commits nothing
    for i, branch in enumerate(branches):
        branch += prefixes[i // width]
        branch += _step_gen("step", delimiter, max_step_tokens, sampling)
    steps = read_branches(branches, lambda b: read_step(*checked(b, "step"), delimiter))
    s.set_var("steps", [steps[i : i + width] for i in range(0, len(steps), width)])


@sgl.function
def free_generation(s, prefix, max_tokens, sampling):
    """Plain autoregressive continuation (the AR baseline): no step boundaries."""
    s += prefix
    s += sgl.gen("text", max_tokens=max_tokens, temperature=sampling.temperature, top_p=sampling.top_p)
    text, meta = checked(s, "text")
    s.set_var("output", read_step(text, meta, delimiter=None))
