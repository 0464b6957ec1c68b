"""The simulated SGLang server: its protocol through SGLang's own RuntimeEndpoint, and
the real programs and engines running against it unchanged."""

import threading

import pytest
import requests
import sglang as sgl
from sglang.lang.backend.runtime_endpoint import RuntimeEndpoint

from lookahead_reasoning.eval.simserver import SimConfig
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.engine import AsyncEngine, SyncEngine
from lookahead_reasoning.errors import ServerFailure
from lookahead_reasoning.runtime.reasoner import LookaheadReasoner
from lookahead_reasoning.verifiers import ExactMatchVerifier

STEPS = 6


@pytest.fixture(scope="module")
def sims(sim_servers):
    with sim_servers(
        SimConfig(role="draft", decode_ms=0.5, steps=STEPS, step_tokens=6),
        SimConfig(role="target", decode_ms=2.0, steps=STEPS, step_tokens=6),
        SimConfig(role="judge", decode_ms=1.0, alpha=0.5, seed=7),
    ) as servers:
        yield servers


@pytest.fixture(autouse=True)
def healthy(sims):
    yield
    sims.heal()


def test_protocol_through_sglang_runtime_endpoint(sims):
    backend = RuntimeEndpoint(sims.target.url)
    assert backend.get_model_name() == "lookahead-sim-target"

    @sgl.function
    def program(s):
        s += "<|im_start|>assistant\n"
        s += sgl.gen("step", max_tokens=50, stop="\n\n")
        forks = s.fork(2)
        for f in forks:
            f += "\n\n"
            f += sgl.gen("next", max_tokens=3)
        forks.join()
        s += sgl.gen("pick", choices=["alpha", "beta"])

    state = program.run(backend=backend)
    assert state["step"].startswith("s0-t.")
    assert state.get_meta_info("step")["finish_reason"] == {"type": "stop", "matched": "\n\n"}
    metas = [m for m in state.get_var("next")]
    assert len(metas) == 2
    scores = state.get_meta_info("pick")["normalized_prompt_logprobs"]  # from the server's input_token_logprobs
    assert len(scores) == 2 and scores[0] != scores[1]
    assert state["pick"] == ("alpha", "beta")[scores.index(max(scores))]


def test_batched_text_commit_eos_and_cache(sims):
    url = sims.target.url
    requests.post(url + "/flush_cache")
    prompt = "<|im_start|>assistant\n"
    commit = requests.post(url + "/generate", json={"text": prompt, "sampling_params": {"max_new_tokens": 0}}).json()
    assert commit["text"] == "" and commit["meta_info"]["completion_tokens"] == 0
    batch = requests.post(
        url + "/generate",
        json={"text": [prompt, prompt + "x "], "sampling_params": {"max_new_tokens": 1000}},
    ).json()
    assert isinstance(batch, list) and len(batch) == 2
    whole = batch[0]
    assert whole["text"].count("\n\n") == STEPS - 1  # no stop string: the whole reasoning, then EOS
    assert whole["meta_info"]["finish_reason"] == {"type": "stop", "matched": 2}
    assert whole["meta_info"]["cached_tokens"] > 0
    # as SGLang: the token that completes a stop string is generated and counted, though the text drops it (left
    # out, a step that ends on the delimiter would read one token short in the cost fit)
    step = requests.post(url + "/generate", json={"text": prompt, "sampling_params": {"max_new_tokens": 50,
                                                                                       "stop": "\n\n"}}).json()
    assert step["meta_info"]["finish_reason"] == {"type": "stop", "matched": "\n\n"}
    assert len(step["text"].split()) == 6 and step["meta_info"]["completion_tokens"] == 6 + 1
    capped = requests.post(url + "/generate", json={"text": prompt, "sampling_params": {"max_new_tokens": 3}}).json()
    assert capped["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
    assert capped["meta_info"]["e2e_latency"] >= 3 * 0.002  # SGLang's server-side time: 3 ticks of 2 ms at least
    # as SGLang: the prompt's logprobs from `logprob_start_len` on (what `select` asks), none without it
    asked = {"text": prompt + "a b c", "sampling_params": {"max_new_tokens": 0}, "return_logprob": True}
    without = requests.post(url + "/generate", json=asked).json()["meta_info"]["input_token_logprobs"]
    started = requests.post(url + "/generate", json={**asked, "logprob_start_len": 2}).json()["meta_info"]
    assert without == [] and [entry[2] for entry in started["input_token_logprobs"]] == ["a ", "b ", "c"]


def test_judge_is_deterministic_and_answers_yes_or_no(sims):
    from lookahead_reasoning.programs import LookaheadEndpoint, judge_pairs

    backend = LookaheadEndpoint(sims.judge.url, chat_template="chatml")
    pairs = [(f"s{i}-t w", f"s{i}-d0 w") for i in range(40)]
    first, again = judge_pairs(backend, pairs), judge_pairs(backend, pairs)
    assert [a.answer for a in first] == [a.answer for a in again]
    assert {a.answer for a in first} == {"yes", "no"}
    assert 0.3 < sum(a.answer == "yes" for a in first) / len(first) < 0.7  # α = 0.5
    assert all(a.p_yes in (pytest.approx(0.95), pytest.approx(0.05)) for a in first)


def _first_step(url: str, question: str, answer: str = "", max_tokens: int = 50) -> str:
    prompt = f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n{answer}"
    body = {"text": prompt, "sampling_params": {"max_new_tokens": max_tokens, "stop": "\n\n"}}
    return requests.post(url + "/generate", json=body).json()["text"]


def test_the_judge_draws_each_problems_verdicts_afresh_whatever_came_before(sims):
    """The judge sees only the two steps: every word of a step names its problem, so that the problems of a benchmark
    do not all share one pattern of verdicts, and a step reads the same after any prefix, so that every
    method that judges it draws the same verdict."""
    from lookahead_reasoning.programs import LookaheadEndpoint, judge_pairs

    questions = [f"question {i}" for i in range(40)]
    pairs = [(_first_step(sims.target.url, q), _first_step(sims.draft.url, q)) for q in questions]
    verdicts = [a.answer for a in judge_pairs(LookaheadEndpoint(sims.judge.url, chat_template="chatml"), pairs)]
    assert 0.3 < verdicts.count("yes") / len(verdicts) < 0.7  # α = 0.5, one draw per problem
    target_first, draft_first = pairs[0]
    after_target = _first_step(sims.draft.url, questions[0], target_first + "\n\n")
    after_draft = _first_step(sims.draft.url, questions[0], draft_first + "\n\n")
    assert after_target == after_draft and after_target.startswith("s1-d0.")
    # the rest of a step cut in the middle (an AR stretch's token cap) names its problem too: one draw each
    heads = [_first_step(sims.target.url, q, max_tokens=3) for q in questions]
    rests = [(_first_step(sims.target.url, q, head), _first_step(sims.draft.url, q, head))
             for q, head in zip(questions, heads)]
    assert len(set(rests)) == len(questions) and not rests[0][0].startswith("s0-")
    verdicts = [a.answer for a in judge_pairs(LookaheadEndpoint(sims.judge.url, chat_template="chatml"), rests)]
    assert 0.2 < verdicts.count("yes") / len(verdicts) < 0.8  # one draw per problem, not one answer for all


@pytest.mark.parametrize("engine_class", [SyncEngine, AsyncEngine])
@pytest.mark.parametrize("width", [1, 2])
def test_engines_are_lossless_against_the_simulator(sims, engine_class, width):
    reasoner = LookaheadReasoner(sims.endpoints(), LookaheadConfig(depth=3, width=width, seed=3, max_tokens=500))
    conn = reasoner.connection
    result = engine_class(reasoner.config, conn.models, ExactMatchVerifier()).answer("q")
    assert result.text == reasoner.baseline("q").text
    assert result.stats.finish == "eos" and result.text.count("\n\n") == STEPS - 1


@pytest.mark.parametrize("engine", ["sync", "async"])
@pytest.mark.parametrize("width", [1, 2])
def test_engines_with_the_judge_keep_a_consistent_trace(sims, engine, width):
    config = LookaheadConfig(depth=2, width=width, engine=engine, seed=3, max_tokens=500)
    result = LookaheadReasoner(sims.endpoints(), config).run("q")
    assert result.stats.finish == "eos"
    assert result.text.count("\n\n") == STEPS - 1  # every position is filled exactly once
    for i, step in enumerate(result.steps):
        assert step.text.startswith(f"s{i}-")
        if step.source == "draft":
            assert step.verifier_score == pytest.approx(0.95)  # kept only on a yes
    assert 0 < result.stats.draft_steps_accepted <= result.stats.draft_steps_judged
    # every batched round's target time as the server saw it, within the client's (cost_model.py fits the
    # server's); streamed rounds (sync chains) overlap their drafting and leave it out
    streamed = engine == "sync" and width == 1
    assert all(r.target_server_s is None if streamed else 0 < r.target_server_s <= r.target_s
               for r in result.round_log)


def test_draft_steps_and_plain_generation_run_in_the_callers_thread(sims, monkeypatch):
    """No thread per program run (`run_in_this_thread`): the frontend's worker thread, and the hand-off of every
    expression to it, made a drafted request cost the client a fifth more CPU under load."""
    models = LookaheadReasoner(sims.endpoints(), LookaheadConfig(depth=2)).connection.models
    prefix = models.prompt("q")
    started = []
    original = threading.Thread.start

    def counted(thread):
        started.append(thread.name)
        original(thread)

    monkeypatch.setattr(threading.Thread, "start", counted)
    steps = models.draft(prefix, 2)
    text = models.generate(prefix, 5).text
    assert [s.text.split(".")[0] for s in steps] == ["s0-d0", "s1-d0"] and text.startswith("s0-t.")
    assert started == []


def test_a_failing_draft_server_degrades_to_the_target(sims):
    reasoner = LookaheadReasoner(sims.endpoints(), LookaheadConfig(depth=2, max_tokens=500))
    sims.draft.engine.state.fault = "fail"
    result = reasoner.run("q")
    assert result.text == reasoner.baseline("q").text
    assert "draft failed" in result.stats.degraded[0] and "500" in result.stats.degraded[0]


def test_a_stalled_judge_times_out_and_drafts_are_rejected(sims):
    reasoner = LookaheadReasoner(sims.endpoints(), LookaheadConfig(depth=2, max_tokens=500, request_timeout_s=1.0))
    sims.judge.engine.state.fault = "stall"
    result = reasoner.run("q")
    assert "verifier failed" in result.stats.degraded[0] and "did not answer" in result.stats.degraded[0]
    assert all(s.source == "target" or s.verifier_score == 1.0 for s in result.steps)  # only exact matches kept
    sims.judge.engine.state.fault = "ok"
    assert result.text == reasoner.baseline("q").text


@pytest.mark.parametrize("engine", ["sync", "async"])
def test_a_failing_target_is_an_error_not_an_answer(sims, engine):
    reasoner = LookaheadReasoner(sims.endpoints(), LookaheadConfig(depth=2, engine=engine))
    sims.target.engine.state.fault = "fail"
    with pytest.raises(ServerFailure, match="target server failed"):
        reasoner.run("q")


def test_bad_simulator_settings_are_rejected():
    with pytest.raises(ValueError):
        SimConfig(role="judge", alpha=1.5)
    with pytest.raises(ValueError):
        SimConfig(role="draft", decode_ms=0)
    with pytest.raises(ValueError):
        SimConfig(role="judge", alpha_schedule=[(3, 0.0)])


def test_the_cluster_factory_takes_settings_per_role(sim_servers):
    with sim_servers(target={"steps": 2, "step_tokens": 3}) as sims:
        assert sims.draft.engine.state.config == SimConfig(role="draft")
        assert sims.target.engine.state.config.steps == 2 and sims.target.engine.state.config.role == "target"
        assert sims.endpoints().judge.url == sims.judge.url and sims.endpoints().judge.chat_template == "chatml"
        assert requests.get(sims.judge.url + "/model_info").json()["model_path"] == "lookahead-sim-judge"
    with pytest.raises(AssertionError, match="a draft SimConfig given for the judge server"):
        with sim_servers(judge=SimConfig(role="draft")):
            pass


def test_a_benchmarks_simulated_servers_die_with_it():
    """The cluster's server processes go when the process that started them is killed (bench stopped by a
    signal): no orphans on the machine."""
    import os
    import subprocess
    import sys
    import time

    script = (
        "import os, signal\n"
        "from lookahead_reasoning.eval.simcluster import LatencyModel, SimCluster\n"
        "cluster = SimCluster(LatencyModel()).__enter__()\n"
        "print(' '.join(str(p.pid) for p in cluster.procs.values()), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 3, out.stderr

    def alive(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().split(") ")[-1][0] != "Z"
        except OSError:
            return False

    deadline = time.monotonic() + 15
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [p for p in pids if alive(p)]
    for pid in left:  # the test's own servers, by PID
        os.kill(pid, 9)
    assert not left


def test_the_prefix_cache_is_bounded_and_keeps_what_is_in_use():
    from lookahead_reasoning.eval.simserver import _Trie

    trie = _Trie(capacity=20)  # generations of 10 tokens
    in_use, old = ["q", "a", "b"], ["x", "y", "z"]
    trie.insert(old)
    trie.insert(in_use)
    for i in range(30):  # other prompts come and go; the one in use comes back now and then
        trie.insert([f"p{i}", "w", "v"])
        if i % 3 == 0 and trie.match(in_use) == 3:
            trie.insert(in_use)
    assert trie.match(in_use) == 3 and trie.match(old) == 0
    assert trie.match(["q", "a", "c"]) == 2  # a shared prefix still matches
    assert trie.nodes <= 10  # the current generation; the previous one held at most as many


def test_warming_a_prompt_also_pays_the_verifiers_first_call(sims):
    reasoner = LookaheadReasoner(sims.endpoints(), LookaheadConfig(depth=2, max_tokens=40))
    judge_requests = sims.judge.engine.state.requests
    reasoner.warm_prompt("How many?")
    assert sims.judge.engine.state.requests > judge_requests  # the judge was asked (its prefix, then the pair)
