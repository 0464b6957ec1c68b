"""`lookahead serve`'s OpenAI surface as real clients use it: stop strings, max_completion_tokens,
seed, content parts, the developer role, reasoning_content, and the types of the new fields.

Over simulated SGLang servers (eval/simserver.py) in threads of this process; the reasoning
split runs on a scripted engine whose output has a think section.
"""

from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from cli_invoke import invoke, one_line_error
from hypothesis import given, settings
from hypothesis import strategies as st
from test_serve import Frontend, events, make_sims, sim_endpoints

from lookahead_reasoning.errors import Cancelled, LookaheadError
from lookahead_reasoning.runtime.results import LookaheadResult, RunStats, StepRecord
from lookahead_reasoning.runtime.serve import ServeSettings
from lookahead_reasoning.runtime.serve import service as service_module
from lookahead_reasoning.runtime.serve.schemas import ChatRequest
from lookahead_reasoning.runtime.serve.text import StopText, ThinkSplit, check_reasoning_parser, split_reasoning

CHAT = "/v1/chat/completions"
QUESTION = [{"role": "user", "content": "What is two and three?"}]


@pytest.fixture(scope="module")
def sims():
    servers = make_sims(steps=12)  # enough rounds that stopping early shows
    for s in servers.values():
        s.__enter__()
    yield servers
    for s in servers.values():
        s.__exit__()


@pytest.fixture(scope="module")
def frontend(sims):
    with Frontend(sim_endpoints(sims), ServeSettings(max_concurrent=8, max_tokens_cap=1000)) as f:
        yield f


def chat(f: Frontend, **extra) -> requests.Response:
    return requests.post(f.url + CHAT, json={"messages": QUESTION, **extra}, timeout=60)


def content(res: requests.Response) -> str:
    assert res.status_code == 200, res.text
    return res.json()["choices"][0]["message"]["content"]


def streamed(f: Frontend, route: str = CHAT, **body) -> tuple[list[dict], dict]:
    """The content chunks of a stream, and its final chunk."""
    body = {"messages": QUESTION, **body} if route == CHAT else body
    with requests.post(f.url + route, json={**body, "stream": True}, stream=True, timeout=60) as res:
        assert res.status_code == 200
        got = events(res)
    assert got[-1] == "[DONE]"
    return got[1:-2], got[-2]


# --- stop strings: the text ---------------------------------------------------------------------


def stop_cut(text: str, stops: list[str]) -> str:
    """Where a server generating `text` character by character stops: at the first complete stop string."""
    for end in range(1, len(text) + 1):
        ending = [len(s) for s in stops if text[:end].endswith(s)]
        if ending:
            return text[:end - max(ending)]
    return text


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.text("ab\n", max_size=6), max_size=8),
       stops=st.lists(st.text("ab\n", min_size=1, max_size=4), min_size=1, max_size=4))
def test_stop_text_releases_the_cut_text_and_never_past_a_stop(pieces, stops):
    cut = StopText(stops)
    released = ""
    for piece in pieces:
        released += cut.feed(piece)
        assert stop_cut("".join(pieces), stops).startswith(released)  # never past (or into) a stop string
        assert not any(s in released for s in stops)
    released += cut.flush()
    whole = "".join(pieces)
    assert released == cut.text == stop_cut(whole, stops)
    assert cut.hit == any(s in whole for s in stops)


def test_stop_text_holds_back_only_as_much_as_the_longest_stop_needs():
    cut = StopText(["END", "x"])
    assert cut.feed("hello wor") == "hello w"  # "or" could begin "END": held back
    assert cut.feed("ld, EN") == "orld, "
    assert cut.feed("D and more") == "" and cut.hit and cut.text == "hello world, "
    assert cut.feed("later") == "" and cut.flush() == ""
    free = StopText([])
    assert free.feed("all of it") == "all of it" and not free.hit


# --- stop strings: the server -------------------------------------------------------------------


def test_stop_cuts_before_the_first_stop_string_and_finishes_with_stop(frontend):
    whole = content(chat(frontend))
    assert "end2." in whole and "s3-" in whole
    res = chat(frontend, stop="end2.")
    assert content(res) == whole[:whole.index("end2.")]
    assert res.json()["choices"][0]["finish_reason"] == "stop"
    # the earliest of several wins, whatever their order; one that never occurs changes nothing
    assert content(chat(frontend, stop=["s3-", "zzz", "end1."])) == whole[:whole.index("end1.")]
    assert content(chat(frontend, stop=["zzz"])) == whole
    # a stop string across two kept steps (a step ends with the delimiter, the next begins "s2-")
    assert content(chat(frontend, stop=".\n\ns2")) == whole[:whole.index(".\n\ns2")]


def test_a_stop_string_cancels_the_rounds_that_would_follow(frontend, sims):
    full = chat(frontend).json()
    before = requests.get(sims["target"].url + "/sim/stats").json()["requests"]
    stopped = chat(frontend, stop="end0.").json()
    target_requests = requests.get(sims["target"].url + "/sim/stats").json()["requests"] - before
    assert full["lookahead"]["rounds"] > 2
    assert stopped["lookahead"]["rounds"] == 1 and stopped["lookahead"]["stopped_early"]
    assert target_requests <= 4  # the first round's prefix commit and branches; no second round
    usage = stopped["usage"]
    assert 0 < usage["completion_tokens"] < full["usage"]["completion_tokens"]
    assert usage["prompt_tokens"] == full["usage"]["prompt_tokens"]


@pytest.mark.parametrize("stop", ["end2.", ".\n\ns2", ["w1-", "end0."]])
def test_streaming_never_sends_text_past_a_stop_string(frontend, stop):
    expected = content(chat(frontend, stop=stop))
    chunks, final = streamed(frontend, stop=stop)
    pieces = [c["choices"][0]["delta"].get("content", "") for c in chunks]
    assert "".join(pieces) == expected
    assert final["choices"][0]["finish_reason"] == "stop"


def test_streaming_without_a_stop_hit_sends_the_held_back_tail(frontend):
    whole = content(chat(frontend))
    chunks, final = streamed(frontend, stop=["zzzzzz"])
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == whole
    assert final["choices"][0]["finish_reason"] == "stop"  # EOS


def test_stop_on_the_ar_model_and_on_text_completions(frontend):
    whole = content(chat(frontend, model="target"))
    assert content(chat(frontend, model="target", stop="end1.")) == whole[:whole.index("end1.")]
    prompt = "<|im_start|>assistant\n"

    def complete(**extra) -> dict:
        return requests.post(frontend.url + "/v1/completions", json={"prompt": prompt, **extra}, timeout=60).json()

    whole = complete()["choices"][0]["text"]
    res = complete(stop=["end0."])["choices"][0]
    assert res["text"] == whole[:whole.index("end0.")] and res["finish_reason"] == "stop"
    chunks, _ = streamed(frontend, "/v1/completions", prompt=prompt, stop="end0.")
    assert "".join(c["choices"][0]["text"] for c in chunks) == res["text"]


# --- max_completion_tokens ----------------------------------------------------------------------


@pytest.mark.parametrize("limits", [{"max_completion_tokens": 8}, {"max_tokens": 1000, "max_completion_tokens": 8},
                                    {"max_tokens": 8, "max_completion_tokens": 1000}])
def test_max_completion_tokens_is_honoured_and_the_smaller_limit_wins(frontend, limits):
    for model in ("lookahead", "target"):
        body = chat(frontend, model=model, **limits).json()
        assert body["choices"][0]["finish_reason"] == "length"
        assert body == {**body, **{k: v for k, v in chat(frontend, model=model, max_tokens=8).json().items()
                                   if k in ("choices", "usage")}}  # exactly what max_tokens 8 gives
    assert body["usage"]["completion_tokens"] == 8  # AR stops at the limit (LR at the end of the round's step)


def test_max_completion_tokens_over_the_cap_is_a_400_naming_it(frontend):
    res = chat(frontend, max_completion_tokens=5000)
    assert res.status_code == 400 and res.json()["error"]["param"] == "max_completion_tokens"
    both = chat(frontend, max_tokens=8, max_completion_tokens=5000)  # each is checked, not only the smaller
    assert both.status_code == 400 and both.json()["error"]["param"] == "max_completion_tokens"
    assert chat(frontend, max_tokens=5000, max_completion_tokens=8).json()["error"]["param"] == "max_tokens"


# --- seed ---------------------------------------------------------------------------------------


def test_seed_reaches_the_servers_as_sampling_seed_when_sampling(frontend, sims):
    def last_sampling(role: str) -> dict:
        return requests.get(sims[role].url + "/sim/stats").json()["last_sampling"]

    assert chat(frontend, temperature=0.7, seed=7).status_code == 200
    assert isinstance(last_sampling("target").get("sampling_seed"), int)
    assert chat(frontend, temperature=0.7).status_code == 200
    assert "sampling_seed" not in last_sampling("target")  # no seed, none sent
    assert chat(frontend, seed=7).status_code == 200
    assert "sampling_seed" not in last_sampling("target")  # greedy: a seed changes nothing


def test_a_seed_gives_the_same_answer_alone_or_among_concurrent_requests(frontend):
    # the simulated draft writes words tagged with the sampling_seed it got: the text shows the seeds
    seeds = [1, 2, 3, 4, 1]

    def answer(seed: int) -> str:
        return content(chat(frontend, temperature=0.8, seed=seed))

    alone = [answer(seed) for seed in seeds]
    with ThreadPoolExecutor(len(seeds)) as pool:
        together = list(pool.map(answer, seeds))
    assert together == alone
    assert alone[0] == alone[4] and len(set(alone)) > 1  # the seed decides the answer, and seeds differ


# --- messages -----------------------------------------------------------------------------------


def prompt_tokens(f: Frontend, messages: list[dict]) -> int:
    res = requests.post(f.url + CHAT, json={"messages": messages, "max_tokens": 4}, timeout=60)
    assert res.status_code == 200, res.text
    return res.json()["usage"]["prompt_tokens"]


def test_text_parts_are_joined_and_developer_is_system(frontend):
    parts = [{"type": "text", "text": "What is"}, {"type": "text", "text": "two and three?"}]
    assert prompt_tokens(frontend, [{"role": "user", "content": parts}]) == prompt_tokens(frontend, QUESTION)
    system = prompt_tokens(frontend, [{"role": "system", "content": "Be brief."}, *QUESTION])
    assert prompt_tokens(frontend, [{"role": "developer", "content": "Be brief."}, *QUESTION]) == system
    assert system > prompt_tokens(frontend, QUESTION)
    parsed = ChatRequest.model_validate({"messages": [{"role": "developer", "content": parts}]})
    assert parsed.messages[0].model_dump() == {"role": "system", "content": "What is two and three?"}


def test_other_content_parts_are_a_400_naming_the_param(frontend):
    parts = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]
    res = requests.post(frontend.url + CHAT, json={"messages": [{"role": "user", "content": parts}]})
    assert res.status_code == 400, res.text
    error = res.json()["error"]
    assert error["param"] == "messages.0.content" and "image_url" in error["message"]
    assert error["type"] == "invalid_request_error"


# --- types of the new fields, and fields we do not know ----------------------------------------


@pytest.mark.parametrize("extra", [
    {"stop": 7},
    {"stop": [7]},
    {"stop": ["a", "b", "c", "d", "e"]},
    {"stop": [""]},
    {"stop": {"s": "x"}},
    {"seed": "7"},
    {"seed": 1.5},
    {"seed": True},
    {"max_completion_tokens": "9"},
    {"max_completion_tokens": 0},
    {"max_completion_tokens": 2.0},
    {"separate_reasoning": "no"},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
    {"messages": [{"role": "user", "content": ["plain string part"]}]},
    {"messages": [{"role": "user", "content": {"type": "text", "text": "q"}}]},
    {"messages": [{"role": "tool", "content": "q"}]},
])
def test_wrong_types_of_the_new_fields_are_400s(frontend, extra):
    res = requests.post(frontend.url + CHAT, json={"messages": QUESTION, **extra})
    assert res.status_code == 400, res.text
    error = res.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"] and error["param"]


def test_unknown_fields_stay_ignored(frontend):
    res = chat(frontend, presence_penalty=0.5, frequency_penalty=0.1, logprobs=False, user="me",
               response_format={"type": "text"}, stream_options={"include_usage": True}, metadata={"k": "v"},
               parallel_tool_calls=False, reasoning_effort="low", stop=None, seed=None)
    assert res.status_code == 200, res.text


@pytest.mark.parametrize("route, field, value", [
    (CHAT, "logprobs", True),
    (CHAT, "top_logprobs", 5),
    (CHAT, "tools", [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]),
    (CHAT, "tool_choice", "required"),
    (CHAT, "tool_choice", {"type": "function", "function": {"name": "add"}}),
    (CHAT, "functions", [{"name": "add", "parameters": {"type": "object"}}]),
    (CHAT, "function_call", {"name": "add"}),
    (CHAT, "response_format", {"type": "json_object"}),
    (CHAT, "response_format", {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}),
    (CHAT, "logit_bias", {"50256": -100}),
    ("/v1/completions", "logprobs", 1),
    ("/v1/completions", "echo", True),
    ("/v1/completions", "best_of", 3),
    ("/v1/completions", "suffix", "!"),
])
@pytest.mark.parametrize("stream", [False, True])
def test_unsupported_openai_fields_are_400s_naming_the_field(frontend, route, field, value, stream):
    body = {"messages": QUESTION} if route == CHAT else {"prompt": "What is two and three?"}
    res = requests.post(frontend.url + route, json={**body, field: value, "stream": stream}, timeout=60)
    assert res.status_code == 400, res.text
    error = res.json()["error"]
    assert error == {"message": error["message"], "type": "invalid_request_error", "param": field, "code": 400}
    assert error["message"].startswith(f"{field}: not supported")


@pytest.mark.parametrize("extra", [
    {"logprobs": False}, {"logprobs": None}, {"top_logprobs": 0}, {"tools": []}, {"tools": None},
    {"tool_choice": "none"}, {"tool_choice": "auto"}, {"functions": []}, {"function_call": "none"},
    {"response_format": {"type": "text"}}, {"response_format": None}, {"logit_bias": {}},
])
def test_unsupported_fields_that_ask_for_nothing_are_accepted(frontend, extra):
    res = chat(frontend, max_tokens=40, **extra)
    assert res.status_code == 200, res.text
    completion = requests.post(frontend.url + "/v1/completions", timeout=60, json={
        "prompt": "q", "max_tokens": 40, "echo": False, "best_of": 1, "suffix": None, "logprobs": None})
    assert completion.status_code == 200, completion.text


# --- reasoning_content --------------------------------------------------------------------------

THINKING = ["<think>We add two and three.\n\n", "That makes five.</think>\n\n", "The answer is 5."]


class ScriptedEngine:
    """make_engine's stand-in: announces the scripted steps one by one, stops when cancelled."""

    announced = 0

    def __init__(self, config, models, verifier, on_step=None, is_cancelled=None, **_):
        self.on_step, self.is_cancelled = on_step, is_cancelled

    def continue_from(self, prompt: str) -> LookaheadResult:
        steps = []
        for i, text in enumerate(THINKING):
            if self.is_cancelled():
                raise Cancelled("the run was cancelled")
            steps.append(StepRecord(text=text, source="target", round=i))
            ScriptedEngine.announced += 1
            self.on_step(steps[-1])
        stats = RunStats(rounds=len(steps), prompt_tokens=10, output_tokens=20)
        return LookaheadResult(text="".join(THINKING), answer=None, steps=steps, round_log=[], stats=stats)


@pytest.fixture(scope="module")
def scripted(sims):
    patch = pytest.MonkeyPatch()
    patch.setattr(service_module, "make_engine", ScriptedEngine)
    yield
    patch.undo()


@pytest.fixture(scope="module")
def thinking(sims, scripted):
    with Frontend(sim_endpoints(sims), ServeSettings(reasoning_parser="deepseek-r1")) as f:
        yield f


def test_reasoning_parser_splits_reasoning_content_from_content(thinking):
    res = chat(thinking)
    message = res.json()["choices"][0]["message"]
    assert message["reasoning_content"] == "We add two and three.\n\nThat makes five."
    assert message["content"].strip() == "The answer is 5."
    assert (message["reasoning_content"], message["content"]) == split_reasoning("deepseek-r1", "".join(THINKING))
    kept = chat(thinking, separate_reasoning=False).json()["choices"][0]["message"]  # SGLang's switch
    assert kept["content"] == "".join(THINKING) and "reasoning_content" not in kept
    text = requests.post(thinking.url + "/v1/completions", json={"prompt": "q"}).json()["choices"][0]["text"]
    assert text == "".join(THINKING)  # text completions are never split, as in SGLang


def test_streaming_sends_reasoning_content_then_content(thinking):
    chunks, final = streamed(thinking)
    deltas = [c["choices"][0]["delta"] for c in chunks]
    kinds = [next(iter(d)) for d in deltas]
    assert kinds == sorted(kinds, key=["reasoning_content", "content"].index)  # all reasoning first
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "We add two and three.\n\nThat makes five."
    assert "".join(d.get("content", "") for d in deltas).strip() == "The answer is 5."
    assert final["choices"][0]["finish_reason"] == "stop"


def test_a_stop_string_inside_the_think_section_cancels_the_rest(thinking):
    ScriptedEngine.announced = 0
    message = chat(thinking, stop="five").json()["choices"][0]["message"]
    assert message["reasoning_content"] == "We add two and three.\n\nThat makes " and message["content"] == ""
    assert ScriptedEngine.announced == 2  # the third step was never asked for


def test_without_the_option_the_think_section_stays_in_content(sims, scripted):
    with Frontend(sim_endpoints(sims), ServeSettings()) as f:
        message = chat(f).json()["choices"][0]["message"]
        assert message == {"role": "assistant", "content": "".join(THINKING)}
        chunks, _ = streamed(f)
        assert all(set(c["choices"][0]["delta"]) == {"content"} for c in chunks)


def test_qwen3_leaves_an_answer_without_a_think_section_as_content():
    assert split_reasoning("qwen3", "The answer is 5.") == (None, "The answer is 5.")
    assert split_reasoning("qwen3", "<think>hm</think>5") == ("hm", "5")
    split = ThinkSplit("qwen3")
    pieces = [split.feed(p) for p in ["<thi", "nk>h", "m</th", "ink>", "5"]] + [split.end()]
    assert "".join(r for r, _ in pieces) == "hm" and "".join(c for _, c in pieces) == "5"


def test_an_unknown_reasoning_parser_stops_serve_at_start_up(sims, capsys):
    with pytest.raises(LookaheadError, match="no-such-parser"):
        check_reasoning_parser("no-such-parser")
    outcome = invoke(capsys, "serve", "--reasoning-parser", "no-such-parser", "--draft-url", sims["draft"].url,
                     "--target-url", sims["target"].url, "--judge-url", sims["judge"].url, "--chat-template", "chatml")
    one_line_error(outcome, "no-such-parser")
