"""The programs against a real SGLang CPU server (scripted tiny Qwen2 models).

tiny writes "We add two and three\\n\\n" then "Hence \\boxed{5}" + EOS; tiny-draft
writes the same first step and "Thus \\boxed{6}" + EOS.
"""

import re

import pytest

from lookahead_reasoning.programs import LookaheadEndpoint, draft_steps, judge_pairs
from lookahead_reasoning.programs.step_types import Sampling
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.engine import SyncEngine
from lookahead_reasoning.runtime.reasoner import LookaheadReasoner
from lookahead_reasoning.verifiers import ExactMatchVerifier

pytestmark = pytest.mark.server

STEP_1 = "We add two and three\n\n"
QUESTION = "What is two and three?"


@pytest.fixture(scope="module")
def reasoner(tiny_endpoints):
    """The LLM judge alone decides what the fast path leaves, so the judge program runs on the real server."""
    return LookaheadReasoner(tiny_endpoints, LookaheadConfig(depth=3, max_tokens=64, verifier="llm-judge"))


def test_target_fork_branches_reuse_the_cached_prefix(reasoner):
    models = reasoner.connection.models
    prompt = models.prompt(QUESTION + " " + "Think carefully about every detail. " * 8)
    models.target_backend.request_log = []
    try:
        outputs = models.target(prompt, ["", STEP_1, STEP_1 + "Hence \\boxed{5}"])
        assert len(models.target_backend.request_log) == 2  # the prefix's commit, then the branches in one batch
    finally:
        models.target_backend.request_log = None
    assert len(outputs) == 3
    for out in outputs:
        assert out.prompt_tokens > 40
        assert out.cached_tokens > 0.8 * out.prompt_tokens  # the shared prefix was prefilled once


def test_a_branch_is_a_stream_with_a_request_id_that_the_server_aborts_keeping_what_it_wrote(reasoner):
    """Target branches (runtime/branches.py) are streamed requests with their own SGLang request id: the tokens
    come in as they are written, and `/abort_request` ends one at once, telling what it had written."""
    import threading
    import time

    from lookahead_reasoning.programs.backend import RequestAborted
    from lookahead_reasoning.programs.steps import _step_params

    models = reasoner.connection.models
    prompt = models.prompt(QUESTION)
    heard = []
    step = models.target_branch(prompt, "", 20, "lookahead-test-branch", lambda text, n: heard.append((text, n)))
    assert step.text == STEP_1
    assert len(heard) >= 2 and [n for _, n in heard] == sorted(n for _, n in heard)  # chunks as tokens were written
    assert all(STEP_1.startswith(text) for text, _ in heard)  # each the text so far

    rid, outcome, progress = "lookahead-test-abort", {}, []
    backend = models.target_backend.with_request_id(rid)

    def long_request():  # 3,000 tokens ignoring EOS and the delimiter: minutes on a CPU unless aborted
        request = backend.generation_request(prompt, _step_params("<never>", 3000, Sampling()))
        request["sampling_params"]["ignore_eos"] = True
        try:
            outcome["output"] = backend.stream_generation(
                request, lambda chunk: progress.append(chunk["meta_info"]["completion_tokens"]))
        except RequestAborted as error:
            outcome["aborted"] = error

    thread = threading.Thread(target=long_request)
    started = time.monotonic()
    thread.start()
    while not progress and time.monotonic() - started < 60:  # the server is writing it
        time.sleep(0.05)
    assert models.abort_target(rid)
    thread.join(timeout=60)
    assert not thread.is_alive() and "output" not in outcome
    assert outcome["aborted"].completion_tokens >= progress[0] > 0  # what it had written when it was stopped


def test_a_wholly_accepted_round_hands_its_running_bonus_branch_to_the_next_round(reasoner):
    """γ = 1, exact verifier: round 0 accepts the draft's first step and ends at once; its bonus branch (the
    target's step after it) goes on running as round 1's t_0, which the draft's "Thus \\boxed{6}" loses to."""
    conn = reasoner.connection
    config = LookaheadConfig(depth=1, max_tokens=64, fork="streamed", handoff_tokens=1)
    lr = SyncEngine(config, conn.models, ExactMatchVerifier()).answer(QUESTION)
    assert lr.text == reasoner.baseline(QUESTION).text == STEP_1 + "Hence \\boxed{5}"
    first, second = lr.round_log[:2]
    # the draft's first step accepted; the first token of the target's next step kept, its rest handed on
    assert first.accepted == 1 and [s.source for s in first.kept] == ["draft", "target"]
    assert "Hence \\boxed{5}".startswith(first.kept[1].text) and first.kept[1].text
    assert [span.fate for span in first.spans if span.role == "target"] == ["judged", "handed on"]
    [bonus] = [span for span in first.spans if span.fate == "handed on"]
    t0 = next(span for span in second.spans if span.role == "target" and span.label == "t0")
    assert t0.start == bonus.start  # the same request, not sent again
    assert second.judged[0].target == "Hence \\boxed{5}"  # judged as a whole step


def test_the_server_reports_its_own_time_for_each_request_and_rounds_record_it(reasoner):
    """SGLang's meta_info carries e2e_latency; the cost model fits it (cost_model.py), so a batched fork's record
    holds the longest branch's server time, a part of the round's time in the client. A streamed round's branches
    overlap its drafting: its record leaves the figure out."""
    models = reasoner.connection.models
    outputs = models.target(models.prompt(QUESTION), ["", STEP_1])
    assert all(out.server_s is not None and out.server_s > 0 for out in outputs)
    batched = LookaheadConfig(depth=3, max_tokens=64, fork="batched")
    rounds = SyncEngine(batched, models, ExactMatchVerifier()).answer(QUESTION).round_log
    assert rounds and all(0 < r.target_server_s <= r.target_s for r in rounds)
    assert all(r.target_server_s is None for r in reasoner.run(QUESTION).round_log)


def test_stop_string_is_trimmed_by_sglang_and_re_appended(reasoner, tiny_endpoints):
    backend = LookaheadEndpoint(tiny_endpoints.target.url, chat_template="chatml")
    prompt = reasoner.connection.models.prompt(QUESTION)
    state = draft_steps.run(
        prefix=prompt, gamma=1, delimiter="\n\n", max_step_tokens=20, sampling=Sampling(), backend=backend
    )
    raw = state["step_0"]
    assert raw == "We add two and three"  # SGLang trims the stop string
    assert state.get_meta_info("step_0")["finish_reason"] == {"type": "stop", "matched": "\n\n"}
    [step] = state.get_var("steps")
    assert step.text == STEP_1 and step.ending == "delimiter"


def test_eos_ends_a_step_and_the_run(reasoner):
    models = reasoner.connection.models
    prompt = models.prompt(QUESTION)
    steps = models.draft(prompt, gamma=4)
    assert [s.ending for s in steps] == ["delimiter", "eos"]  # drafting stops at EOS, before γ
    result = reasoner.run(QUESTION)
    assert result.stats.finish == "eos"
    assert result.steps[-1].text.endswith("}")


def test_length_cap_gives_a_partial_step(reasoner):
    [step] = reasoner.connection.models.target(reasoner.connection.models.prompt(QUESTION), [""], max_step_tokens=2)
    assert step.ending == "length" and step.completion_tokens == 2


def test_each_fork_branch_can_have_its_own_cap(reasoner):
    """A fork probe: the step, and beside it the same step's first tokens once more."""
    models = reasoner.connection.models
    step, probe = models.target(models.prompt(QUESTION), ["", ""], max_step_tokens=[20, 2])
    assert step.text == STEP_1 and step.ending == "delimiter"
    assert probe.ending == "length" and probe.completion_tokens == 2 and STEP_1.startswith(probe.text)


def test_judge_answers_only_yes_or_no(tiny_endpoints):
    backend = LookaheadEndpoint(tiny_endpoints.judge.url, chat_template="chatml")
    pairs = [
        ("48/2 = 24", "48*2 = 96"),
        ("We add two and three", "We add two and three"),
        ("Hence \\boxed{5}", "Thus \\boxed{6}"),
        ("", "a step with odd characters: {}[]\\\n\n"),
    ]
    answers = judge_pairs(backend, pairs)
    assert len(answers) == len(pairs)
    for a in answers:
        assert a.answer in ("yes", "no")
        assert a.p_yes is not None and 0.0 <= a.p_yes <= 1.0
        assert a.prompt_tokens > 0


def test_judge_instructions_are_cached_across_calls(tiny_endpoints):
    backend = LookaheadEndpoint(tiny_endpoints.judge.url, chat_template="chatml")
    judge_pairs(backend, [("a", "b")])
    [again] = judge_pairs(backend, [("c", "d")])
    assert again.cached_tokens > 0


def test_full_run_against_real_servers_keeps_a_consistent_trace(reasoner):
    result = reasoner.run(QUESTION)
    stats = result.stats
    assert result.text == "".join(s.text for s in result.steps)
    assert result.text.startswith(STEP_1)
    # tiny-draft's second step differs from tiny's, so the judge decides it. The judge is tiny: its head gives
    # every token it may answer ("y", "n", "no") the same logit, so P(yes) = 1/3, below the default threshold
    # 0.8: the draft's "Thus \\boxed{6}" is rejected and the target's own step is kept.
    assert [(s.source, s.text) for s in result.steps] == [("draft", STEP_1), ("target", "Hence \\boxed{5}")]
    assert result.answer == "5"
    [exact, judged] = result.round_log[0].judged
    assert exact.method == "exact" and exact.accept
    assert judged.draft == "Thus \\boxed{6}" and not judged.accept
    assert stats.judge.requests == 1 and (stats.draft_steps_judged, stats.draft_steps_accepted) == (2, 1)
    assert stats.draft.completion_tokens > 0 and stats.target.cached_tokens > 0
    assert stats.target_branch_cache_ratio > 0.5


def test_the_default_verifier_rejects_a_new_number_before_asking_the_judge(tiny_endpoints):
    """tiny-draft's "Thus \\boxed{6}" states a 6 that neither the target's step nor the prompt holds: the numbers
    gate of the default verifier (llm-judge+numbers) rejects it, and the judge's server is not asked."""
    result = LookaheadReasoner(tiny_endpoints, LookaheadConfig(depth=3, max_tokens=64)).run(QUESTION)
    [exact, gated] = result.round_log[0].judged
    assert exact.method == "exact" and (gated.method, gated.accept, gated.score) == ("numbers", False, None)
    assert result.answer == "5" and result.stats.judge.requests == 0


@pytest.mark.parametrize("fork", ["batched", "streamed"])
def test_exact_verification_reproduces_the_target_alone(reasoner, fork):
    """With only identical steps accepted, LR must write exactly what AR writes, here with partial steps too,
    whether a round's fork is one batch or its branches go one by one (streamed_fork.py)."""
    conn = reasoner.connection
    config = LookaheadConfig(depth=2, max_step_tokens=3, max_tokens=64, fork=fork)
    lr = SyncEngine(config, conn.models, ExactMatchVerifier()).answer(QUESTION)
    ar = reasoner.baseline(QUESTION)
    assert lr.text == ar.text == "We add two and three\n\nHence \\boxed{5}"


@pytest.mark.parametrize("engine", ["sync", "async"])
def test_async_and_tree_engines_on_the_real_server(reasoner, engine):
    from lookahead_reasoning.runtime.engine import make_engine

    conn = reasoner.connection
    config = LookaheadConfig(depth=2, width=2, engine=engine, seed=1, max_tokens=64)
    samples = conn.models.sample([conn.models.prompt(QUESTION)], 2)
    assert len(samples) == 1 and len(samples[0]) == 2  # two sampled candidates from one fork
    lr = make_engine(config, conn.models, ExactMatchVerifier()).answer(QUESTION)
    assert lr.text == reasoner.baseline(QUESTION).text


def test_composition_inside_a_larger_sglang_program(reasoner, tiny_endpoints):
    import sglang as sgl

    from lookahead_reasoning.programs import lookahead_turn

    @sgl.function
    def agent(s, question, reasoner):
        s += sgl.system("You are a careful assistant.")
        lookahead_turn(s, question, reasoner)
        s += sgl.user("Is the answer final? Reply yes or no.")
        s += sgl.assistant(sgl.gen("final", choices=["yes", "no"]))

    backend = LookaheadEndpoint(tiny_endpoints.target.url, chat_template="chatml")
    state = agent.run(question=QUESTION, reasoner=reasoner, backend=backend)
    assert state["reasoning"].startswith(STEP_1)
    assert state["lookahead"].stats.rounds >= 1
    assert state["final"] in ("yes", "no")
    assert state["reasoning"] in state.text()


def test_a_typed_gen_is_constrained_by_the_server(tiny_endpoints):
    import sglang as sgl

    @sgl.function
    def count(s):
        s += "Write a number: " + sgl.gen("n", dtype=int, max_tokens=6) + "\nYes or no? " + sgl.gen(
            "b", dtype=bool, max_tokens=8)

    state = count.run(backend=LookaheadEndpoint(tiny_endpoints.target.url, chat_template="chatml"))
    assert re.fullmatch(r"[-+]?[0-9]+", state["n"].strip()), state["n"]
    assert state["b"] in ("True", "False")
