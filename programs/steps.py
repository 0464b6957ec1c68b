"""Draft and target step programs: SGLang frontend functions, and batches where a fork's branches would
each be a request and a thread of their own (target branches, tree levels)."""

from __future__ import annotations

import sglang as sgl
from sglang.lang.ir import SglSamplingParams

from lookahead_reasoning.programs.step_types import Sampling, StepOutput, read_step


def run_in_this_thread(program, **arguments):
    """`program.run(...)` in the calling thread. By default the frontend starts a worker thread per run and
    hands it every expression through a queue, CPU that a busy client pays on every drafted request."""
    return program.run(**arguments, use_thread=False)


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


def _step_params(delimiter: str, max_step_tokens: int, sampling: Sampling) -> SglSamplingParams:
    """What `_step_gen` asks of the server, for a batch."""
    return SglSamplingParams(max_new_tokens=max_step_tokens, stop=delimiter, temperature=sampling.temperature,
                             top_p=sampling.top_p)


def _read_steps(answers: list[dict], delimiter: str) -> list[StepOutput]:
    return [read_step(answer["text"], answer["meta_info"], delimiter) for answer in answers]


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


def target_steps(backend, prefix, continuations, delimiter, max_step_tokens, sampling, commit_prefix=True):
    """One target step after each of `prefix + continuation`, all in one batch (the frontend's fork, at
    one request: `LookaheadEndpoint.generate_batch`).

    `max_step_tokens` is one cap for every branch, or a list with one cap per branch.

    With `commit_prefix` the prefix is committed first (as fork commits it), so the server prefills it
    once and every branch reuses it from the radix cache. The commit is one more sequential request;
    when the caller knows the prefix is already cached (it was written by a target branch of the previous
    round), it passes False and the branches start at once.
    """
    if commit_prefix:
        backend.cache_prefix(prefix)
    caps = max_step_tokens if isinstance(max_step_tokens, list) else [max_step_tokens] * len(continuations)
    requests = [backend.generation_request(prefix + continuation, _step_params(delimiter, cap, sampling))
                for continuation, cap in zip(continuations, caps)]
    return _read_steps(backend.generate_batch(requests), delimiter)


def target_stream(backend, prefix, continuation, delimiter, max_step_tokens, sampling, on_progress=None) -> StepOutput:
    """The target's step after `prefix + continuation` as one streamed request (`stream_generation`): with the
    backend's request id, the caller can abort it while it runs. `on_progress(text, tokens)` hears the text and
    the completion tokens written so far as they stream in, for every chunk but the last (the step itself). The
    prefix is not committed first: it is expected in the radix cache."""
    request = backend.generation_request(prefix + continuation, _step_params(delimiter, max_step_tokens, sampling))

    def progress(chunk: dict) -> None:
        meta = chunk.get("meta_info") or {}
        tokens, text = meta.get("completion_tokens"), chunk.get("text")
        if on_progress is not None and meta.get("finish_reason") is None and isinstance(tokens, int) \
                and isinstance(text, str):
            on_progress(text, tokens)

    [step] = _read_steps([backend.stream_generation(request, progress)], delimiter)
    return step


def continue_texts(backend, texts: list[str], max_new_tokens: int, ignore_eos: bool = True) -> list[StepOutput]:
    """A greedy continuation of `max_new_tokens` tokens after each text, all in one batch (one `/generate` with
    a list of texts where there are several, as a fork's branches go: `LookaheadEndpoint.generate_batch`).

    With `ignore_eos` every continuation writes exactly `max_new_tokens` tokens, whatever the model would
    say: the request shape that times a server (eval/server_probe.py). Nothing is committed first."""
    def params() -> SglSamplingParams:  # one each: `generation_request` may rewrite it
        return SglSamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, ignore_eos=ignore_eos)

    requests = [backend.generation_request(text, params()) for text in texts]
    return _read_steps(backend.generate_batch(requests), delimiter=None)


@sgl.function
def conversation_prefix(s, messages):
    """A list of {"role", "content"} messages in the server's chat template, up to the assistant's answer."""
    turns = {"system": sgl.system, "user": sgl.user, "assistant": sgl.assistant}
    for message in messages:
        s += turns[message["role"]](message["content"])
    s += sgl.assistant_begin()


def render_conversation(backend, messages: list[dict]) -> str:
    """OpenAI-style messages in the backend's chat template, up to the assistant's answer."""
    return run_in_this_thread(conversation_prefix, messages=messages, backend=backend).text()


def sample_steps(backend, prefixes, width, delimiter, max_step_tokens, sampling):
    """`width` sampled candidates for the next step after each of `prefixes`: one level of a draft
    tree, in one batch. Nothing is committed first: every prefix extends text the draft server
    has just written or read (the run so far, the previous level's candidates), so it is mostly
    in the radix cache already, and the level costs one parallel wave of requests."""
    requests = [backend.generation_request(prefix, _step_params(delimiter, max_step_tokens, sampling))
                for prefix in prefixes for _ in range(width)]
    steps = _read_steps(backend.generate_batch(requests), delimiter)
    return [steps[i : i + width] for i in range(0, len(steps), width)]


@sgl.function
def free_generation(s, prefix, max_tokens, sampling):
    """Plain autoregressive continuation (the AR baseline): no step boundaries."""
    s += prefix
    s += sgl.gen("text", max_tokens=max_tokens, temperature=sampling.temperature, top_p=sampling.top_p)
    text, meta = checked(s, "text")
    s.set_var("output", read_step(text, meta, delimiter=None))
