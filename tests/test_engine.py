"""Round logic of the sync engine against scripted models (no server)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scripted import DELIM, ScriptedJudge, ScriptedModels

from lookahead_reasoning.programs.judge import JudgeAnswer, p_yes_from_top_logprobs
from lookahead_reasoning.programs.step_types import StepOutput, read_step
from lookahead_reasoning.runtime.acceptance import AcceptanceWalk
from lookahead_reasoning.runtime.answers import last_boxed
from lookahead_reasoning.runtime.baseline import run_baseline
from lookahead_reasoning.runtime.config import LookaheadConfig
from lookahead_reasoning.runtime.engine import AsyncEngine, SyncEngine
from lookahead_reasoning.errors import LookaheadError, ServerFailure
from lookahead_reasoning.runtime.results import RoleTokens
from lookahead_reasoning.runtime.stats import RunMetrics
from lookahead_reasoning.verifiers import ExactMatchVerifier, FastPathVerifier, LLMJudgeVerifier
from lookahead_reasoning.verifiers.base import Verdict

TARGET = ["we add 2 and 3", "that gives 5", "so the answer is \\boxed{5}"]


def engine(models, judge=None, **config):
    verifier = FastPathVerifier(judge or ScriptedJudge())
    return SyncEngine(LookaheadConfig(**config), models, verifier)


@pytest.mark.parametrize("latency, seconds", [(0.25, 0.25), (3, 3.0), (None, None), ("0.2", None), (-1.0, None),
                                              (float("nan"), None), (float("inf"), None), (True, None)])
def test_a_steps_server_time_is_read_only_where_it_is_a_duration(latency, seconds):
    meta = {"finish_reason": {"type": "length", "length": 4}, "completion_tokens": 4}
    step = read_step("a b c d", meta | ({} if latency is None else {"e2e_latency": latency}), DELIM)
    assert step.server_s == seconds


def test_all_steps_accepted_in_one_round():
    models = ScriptedModels(TARGET)
    result = engine(models, depth=4).answer("q")
    assert result.text == DELIM.join(TARGET)
    assert result.answer == "5"
    assert result.stats.rounds == 1
    assert [s.source for s in result.steps] == ["draft", "draft", "draft"]
    # the draft's third step ended on EOS and was accepted: no target step follows it
    assert result.stats.draft_steps_judged == 3 and result.stats.draft_steps_accepted == 3
    assert result.stats.finish == "eos"


def test_reject_at_position_k_keeps_prefix_then_target_step():
    draft = ["we add 2 and 3", "that gives 6", "so the answer is \\boxed{6}"]
    models = ScriptedModels(TARGET, draft)
    result = engine(models, depth=3).answer("q")
    first = result.round_log[0]
    assert first.accepted == 1
    assert [(s.source, s.text) for s in first.kept] == [("draft", TARGET[0] + DELIM), ("target", TARGET[1] + DELIM)]
    assert result.text == DELIM.join(TARGET)  # the target's steps win after the reject
    assert result.stats.acceptance_rate < 1.0


def test_equivalent_but_different_draft_step_is_kept_with_its_score():
    draft = ["we add 2 and 3", "which makes 5", "so the answer is \\boxed{5}"]
    judge = ScriptedJudge(accept_words={"makes"})
    result = engine(ScriptedModels(TARGET, draft), judge, depth=3).answer("q")
    assert result.steps[1].text == "which makes 5" + DELIM
    assert result.steps[1].source == "draft" and result.steps[1].verifier_score == 0.9
    assert judge.pairs_seen == [(TARGET[1] + DELIM, "which makes 5" + DELIM)]  # only the non-identical pair


def test_exact_match_fast_path_skips_the_judge():
    judge = ScriptedJudge()
    result = engine(ScriptedModels(TARGET), judge, depth=4).answer("q")
    assert judge.pairs_seen == []
    assert result.stats.judge.requests == 0
    assert all(j.method == "exact" for r in result.round_log for j in r.judged)


def test_eos_inside_a_draft_step_ends_drafting_and_the_run():
    draft = ["we add 2 and 3", "\\boxed{5}"]  # the draft stops (EOS) one step early
    result = engine(ScriptedModels(TARGET, draft), depth=4).answer("q")
    first = result.round_log[0]
    assert len(first.judged) == 2  # nothing is drafted after an EOS step
    assert first.accepted == 1  # the EOS draft step is not equivalent to a step that goes on
    assert result.text == DELIM.join(TARGET)
    assert result.stats.finish == "eos"


def test_length_capped_step_is_partial_and_continues():
    result = engine(ScriptedModels(TARGET), depth=2, max_step_tokens=2).answer("q")
    assert result.text == DELIM.join(TARGET)
    endings = [r.kept[-1].text for r in result.round_log]
    assert any(not t.endswith(DELIM) for t in endings[:-1])  # some round ended inside a step


class DraftsPastCappedSteps(ScriptedModels):
    """A draft that does not stop at a step the length cap cut: it writes a step after it that the
    judge accepts and that ends like the target's steps, so only the engine can keep it out."""

    JUNK = "junk that makes sense" + DELIM

    def draft(self, prefix, gamma, max_step_tokens=None):
        steps = super().draft(prefix, gamma, max_step_tokens)
        while steps and steps[-1].ending == "length" and len(steps) < gamma:
            steps.append(StepOutput(self.JUNK, "delimiter", completion_tokens=4))
        return steps


def test_capped_draft_step_is_never_followed_by_another_draft_step():
    models = DraftsPastCappedSteps(TARGET)
    judge = ScriptedJudge(accept_words={"makes"})
    result = engine(models, judge, depth=4, max_step_tokens=3).answer("q")
    judged = [j.draft for record in result.round_log for j in record.judged]
    assert any(not d.endswith(DELIM) for d in judged)  # capped draft steps were judged
    assert DraftsPastCappedSteps.JUNK not in judged and "junk" not in result.text  # what followed them was not
    assert result.text == DELIM.join(TARGET)


def test_empty_draft_falls_back_to_target_steps():
    models = ScriptedModels(TARGET, draft=[])
    result = engine(models, depth=3).answer("q")
    assert result.text == DELIM.join(TARGET)
    assert all(s.source == "target" for s in result.steps)
    assert result.stats.draft_steps_accepted == 0


def test_token_cap_stops_the_run_and_says_so():
    result = engine(ScriptedModels(TARGET), depth=1, max_tokens=4).answer("q")
    assert result.stats.finish == "max_tokens"
    assert result.stats.output_tokens >= 4


@pytest.mark.parametrize("engine_class", [SyncEngine, AsyncEngine])
def test_a_round_does_not_run_past_the_token_cap(engine_class):
    steps = [f"step {i} has five words" for i in range(12)]  # 5 tokens each
    config = LookaheadConfig(depth=6, max_tokens=12, max_step_tokens=20)
    result = engine_class(config, ScriptedModels(steps), FastPathVerifier(ScriptedJudge())).answer("q")
    assert result.stats.finish == "max_tokens"
    assert 12 <= result.stats.output_tokens < 12 + 5  # at most the step that reached the cap
    assert result.stats.rounds == 1 and len(result.steps) == 3


def test_failing_draft_server_degrades_to_target_only():
    models = ScriptedModels(TARGET, fail={"draft"})
    result = engine(models, depth=3).answer("q")
    assert result.text == DELIM.join(TARGET)
    assert models.calls["draft"] == 1  # drafting is switched off after the failure
    assert result.stats.degraded and "draft failed" in result.stats.degraded[0]


def test_failing_judge_rejects_and_keeps_the_target_step():
    draft = ["we add 2 and 3", "which makes 5", "so the answer is \\boxed{5}"]
    result = engine(ScriptedModels(TARGET, draft), ScriptedJudge(fail=True), depth=3).answer("q")
    assert result.text == DELIM.join(TARGET)
    assert "verifier failed" in result.stats.degraded[0]


def test_failing_target_server_is_an_error_not_an_answer():
    with pytest.raises(ServerFailure, match="target server failed"):
        engine(ScriptedModels(TARGET, fail={"target"})).answer("q")


def test_empty_question_is_rejected():
    with pytest.raises(LookaheadError, match="question is empty"):
        engine(ScriptedModels(TARGET)).answer("   ")


def test_baseline_matches_target_text():
    models = ScriptedModels(TARGET)
    base = run_baseline(models, "q", LookaheadConfig())
    assert base.text == DELIM.join(TARGET) and base.answer == "5" and base.finish == "eos"


def test_unusable_judge_answers_are_rejects():
    judge = LLMJudgeVerifier(backend=None, threshold=0.5)
    assert not judge.decide(JudgeAnswer("maybe", 0.9)).accept
    assert not judge.decide(JudgeAnswer("yes", None)).accept
    assert judge.decide(JudgeAnswer("yes", 0.9)).accept
    assert not judge.decide(JudgeAnswer("yes", 0.4)).accept


def test_p_yes_reads_masked_top_logprobs():
    import math

    top = [[math.log(0.6), 1, "y"], [math.log(0.2), 2, "yes"], [math.log(0.2), 3, "no"], [-3.4e38, 4, "!"]]
    assert p_yes_from_top_logprobs(top) == pytest.approx(0.8)
    assert p_yes_from_top_logprobs([[None, 1, None]]) is None
    assert p_yes_from_top_logprobs([]) is None


def test_last_boxed_handles_nested_braces():
    assert last_boxed("a \\boxed{1} then \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed("no box") is None


words = st.sampled_from(["add", "two", "three", "five", "so", "then", "x", "y"])
steps = st.lists(words, min_size=1, max_size=5).map(" ".join)


# --- async engine, tree drafting, adaptive depth --------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    target=st.lists(steps, min_size=1, max_size=6),
    draft=st.lists(steps, min_size=0, max_size=6),
    depth=st.integers(1, 5),
    cap=st.integers(1, 6),
    width=st.integers(1, 3),
    engine_class=st.sampled_from([SyncEngine, AsyncEngine]),
)
def test_every_engine_and_width_is_lossless_under_exact_verification(target, draft, depth, cap, width, engine_class):
    """Lossless property: accepting only identical steps must reproduce AR output exactly."""
    models = ScriptedModels(target, draft)
    config = LookaheadConfig(depth=depth, max_step_tokens=cap, max_tokens=10_000, width=width)
    result = engine_class(config, models, ExactMatchVerifier()).answer("q")
    assert result.text == run_baseline(models, "q", config).text
    assert result.stats.draft_steps_accepted <= result.stats.draft_steps_judged


def test_async_matches_sync_with_the_same_judge():
    draft = ["we add 2 and 3", "which makes 5", "so the answer is \\boxed{6}"]
    results = [
        cls(LookaheadConfig(depth=2), ScriptedModels(TARGET, draft), FastPathVerifier(ScriptedJudge({"makes"}))).answer("q")
        for cls in (SyncEngine, AsyncEngine)
    ]
    assert results[0].text == results[1].text == "we add 2 and 3\n\nwhich makes 5\n\nso the answer is \\boxed{5}"
    assert results[0].answer == results[1].answer == "5"


def test_async_pipeline_keeps_drafting_past_gamma_while_everything_is_accepted():
    script = TARGET * 2 + ["end \\boxed{1}"]
    models = ScriptedModels(script)
    result = AsyncEngine(LookaheadConfig(depth=2), models, FastPathVerifier(ScriptedJudge())).answer("q")
    assert result.text == DELIM.join(script)
    assert result.stats.rounds == 1  # γ bounds how far the draft runs ahead, not the round
    assert all(s.source == "draft" for s in result.steps)
    assert models.calls["draft"] == len(script)  # one request per step, none wasted


def test_async_windows_for_trees_keep_no_bonus_step():
    script = TARGET * 2 + ["end \\boxed{1}"]
    result = AsyncEngine(LookaheadConfig(depth=2, width=2), ScriptedModels(script), FastPathVerifier(ScriptedJudge())).answer("q")
    assert result.text == DELIM.join(script)
    full = [r for r in result.round_log if r.accepted == r.depth]
    assert full and all(r.kept[-1].source == "draft" for r in full)  # the next window was drafted without it
    assert all(r.first_candidates == r.accepted for r in result.round_log)  # the first candidates were accepted


def test_async_discards_the_speculative_window_on_a_reject():
    draft = ["we add 2 and 3", "that gives 6", "so the answer is \\boxed{6}", "x", "y"]
    models = ScriptedModels(TARGET + ["tail one", "tail two"], draft)
    result = AsyncEngine(LookaheadConfig(depth=2), models, FastPathVerifier(ScriptedJudge())).answer("q")
    assert result.text == DELIM.join(TARGET + ["tail one", "tail two"])
    assert models.calls["draft"] > len(result.round_log)  # some windows were drafted in vain and redrafted


def test_tree_first_accepted_candidate_wins():
    draft = ["we add 2 and 3", "that gives 6", "so the answer is \\boxed{5}"]
    judge = ScriptedJudge(accept_words={"v2"})  # only the third candidate at each position is accepted
    result = SyncEngine(LookaheadConfig(depth=2, width=3), ScriptedModels(TARGET, draft), FastPathVerifier(judge)).answer("q")
    first = result.round_log[0]
    kept = [s.text for s in first.kept]
    assert kept[0] == TARGET[0] + DELIM  # identical candidate: exact fast path
    assert kept[1] == "that gives 6 v2" + DELIM  # the accepted candidate at position 2
    assert first.accepted == 2
    assert first.first_candidates == 1  # off the first-candidate path (the next window's base) at position 2


def test_tree_drafting_samples_even_with_greedy_draft_settings():
    config = LookaheadConfig(width=2)
    assert config.tree_sampling.temperature == 0.8 and config.draft_sampling.temperature == 0.0  # chains stay greedy
    assert LookaheadConfig(width=2, draft_sampling={"temperature": 0.5}).tree_sampling.temperature == 0.5


def _record(depth, accepted, positions, draft_s=0.01, target_s=0.1, verify_s=0.01):
    from lookahead_reasoning.runtime.results import RoundRecord

    return RoundRecord(index=0, depth=depth, kind="drafting" if depth else "ar", judged=[], accepted=accepted,
                       positions=positions, kept=[],
                       finished=False, started=0.0, draft_s=draft_s, target_s=target_s, verify_s=verify_s, wall_s=0.2)


@pytest.mark.parametrize("engine_class", [SyncEngine, AsyncEngine])
@pytest.mark.parametrize("width", [1, 2])
def test_adaptive_engine_run_is_correct(engine_class, width):
    config = LookaheadConfig(depth=2, adaptive_depth=True, width=width)
    result = engine_class(config, ScriptedModels(TARGET * 3), FastPathVerifier(ScriptedJudge())).answer("q")
    assert result.text == DELIM.join(TARGET * 3)


@pytest.mark.parametrize("width", [1, 2])
def test_an_async_engine_can_run_twice(width):
    engine = AsyncEngine(LookaheadConfig(depth=2, width=width), ScriptedModels(TARGET), FastPathVerifier(ScriptedJudge()))
    assert engine.answer("q").text == engine.answer("q").text == DELIM.join(TARGET)


def test_tree_drafting_respects_the_node_budget():
    from lookahead_reasoning.runtime.tree import draft_tree

    models = ScriptedModels(TARGET * 3)
    full = draft_tree(models, "<prompt>", depth=3, width=3, cap=100, max_nodes=1000)
    assert len(full.nodes) == 3 + 9 + 27
    capped = draft_tree(models, "<prompt>", depth=3, width=3, cap=100, max_nodes=20)
    assert len(capped.nodes) <= 20 and max(n.depth for n in capped.nodes) == 3


# --- the acceptance rule and the run's metrics, on their own -----------------------------


def _step(text, ending="delimiter", tokens=1, **usage):
    return StepOutput(text + (DELIM if ending == "delimiter" else ""), ending, completion_tokens=tokens, **usage)


YES, NO = Verdict(True, 0.9, "scripted"), Verdict(False, 0.1, "scripted")


def test_acceptance_keeps_the_accepted_prefix_then_the_target_step_at_the_first_rejection():
    walk = AcceptanceWalk(round_index=3, budget=100)
    assert walk.decide(_step("t0"), _step("d1"), YES) and not walk.stopped
    assert not walk.decide(_step("t1"), _step("d2"), NO)
    assert [(k.source, k.text, k.verifier_score) for k in walk.kept] == [
        ("draft", "d1" + DELIM, 0.9), ("target", "t1" + DELIM, None)]
    assert (walk.accepted, walk.positions, walk.stopped) == (1, 2, True)
    assert all(k.round == 3 for k in walk.kept)


def test_acceptance_rejects_a_step_that_ends_unlike_the_target_step_whatever_the_verifier_says():
    walk = AcceptanceWalk(0, 100)
    assert not walk.decide(_step("x"), _step("x", "eos"), Verdict(True, 1.0, "exact"))
    assert [k.source for k in walk.kept] == ["target"] and walk.positions == 1


def test_acceptance_stops_after_a_step_that_did_not_end_on_the_delimiter():
    walk = AcceptanceWalk(0, 100)
    assert walk.decide(_step("a b", "length", 2), _step("a b", "length", 2), YES)
    assert walk.stopped and not walk.capped and not walk.rejected
    closed = AcceptanceWalk(0, 100)
    closed.close(None)  # a leaf without a target step after it
    assert closed.stopped and closed.kept == [] and closed.positions == 0


def test_acceptance_keeps_the_step_that_reaches_the_cap_whole_and_nothing_after_it():
    announced = []
    walk = AcceptanceWalk(0, budget=5, on_keep=announced.append)
    three = _step("a b c", tokens=3)
    walk.decide(three, three, YES)
    assert not walk.capped
    walk.decide(three, three, YES)  # 6 tokens >= 5: kept whole
    assert walk.capped and walk.stopped
    walk.accept(three, 0.9)  # the tree walk goes on past the cap: counted, not kept
    walk.reject(three)
    assert len(walk.kept) == 2 and announced == walk.kept
    assert (walk.accepted, walk.positions) == (3, 4)


def test_run_metrics_observe_requests_and_rounds():
    metrics = RunMetrics()
    metrics.count_tokens("draft", [_step("d", prompt_tokens=5, cached_tokens=4)])
    metrics.count_tokens("target", [_step("t", prompt_tokens=10), _step("t", prompt_tokens=12, cached_tokens=10)])
    metrics.count_tokens("target", [_step("t", prompt_tokens=14, cached_tokens=12)])
    metrics.count_tokens("judge", [Verdict(True, 0.9, "j", prompt_tokens=7, completion_tokens=1, cached_tokens=5)])
    metrics.observe_round(_record(2, 1, 2), [_step("", "eos", 0), _step("x y z", tokens=3)])
    assert metrics.output_tokens == 4  # an empty step still counts one token
    metrics.degraded("draft failed: gone")
    stats = metrics.finish("max_tokens")
    assert stats.prompt_tokens == 10  # the run's first target request: the bare prompt
    assert stats.target == RoleTokens(requests=3, prompt_tokens=36, completion_tokens=3, cached_tokens=22)
    assert stats.draft == RoleTokens(requests=1, prompt_tokens=5, completion_tokens=1, cached_tokens=4)
    assert stats.judge == RoleTokens(requests=1, prompt_tokens=7, completion_tokens=1, cached_tokens=5)
    assert (stats.rounds, stats.draft_steps_judged, stats.draft_steps_accepted, stats.acceptance_rate) == (1, 2, 1, 0.5)
    assert stats.target_branch_cache_ratio == 22 / 36
    assert stats.finish == "max_tokens" and stats.degraded == ["draft failed: gone"] and stats.wall_time_s >= 0
    assert RunMetrics().finish().acceptance_rate is None  # nothing judged: no rate


def test_engines_count_prompt_and_requests_per_role():
    judge = ScriptedJudge(accept_words={"makes"})
    draft = ["we add 2 and 3", "which makes 5", "so the answer is \\boxed{5}"]
    result = engine(ScriptedModels(TARGET, draft), judge, depth=3).answer("q")
    stats = result.stats
    # one round, each step a request: the draft's three steps; the target's root branch and its branches
    # after d1 and d2 (d3 ended on EOS: no bonus); the judge's one non-identical pair
    assert (stats.draft.requests, stats.target.requests, stats.judge.requests) == (3, 3, 1)
    assert stats.judge.prompt_tokens == 10 and stats.output_tokens == sum(len(t.split()) for t in TARGET)


class DraftFailsAfter(ScriptedModels):
    """The draft server answers `ok` requests, then fails."""

    def __init__(self, target, ok: int):
        super().__init__(target)
        self.ok = ok

    def draft(self, prefix, gamma, max_step_tokens=None):
        if self.calls["draft"] >= self.ok:
            self.fail.add("draft")
        return super().draft(prefix, gamma, max_step_tokens)


def test_a_draft_failing_inside_an_async_round_keeps_the_target_step_and_counts_no_rejection():
    result = AsyncEngine(LookaheadConfig(depth=3), DraftFailsAfter(TARGET, ok=1), FastPathVerifier(ScriptedJudge())).answer("q")
    assert result.text == DELIM.join(TARGET)
    first = result.round_log[0]
    assert [s.source for s in first.kept] == ["draft", "target"]  # d_1, then t_1: there is no d_2 to judge
    assert (first.accepted, first.positions) == (1, 1)
    assert "draft failed" in result.stats.degraded[0]


def test_adaptive_first_rounds_time_the_target_alone_then_a_fork_probe():
    """Rounds 1 and 2 run the target alone (the first prefills the prompt: not timed); round 3 forks its step
    once more (B(2)); the probe's branch is measured, never kept."""
    steps = [" ".join(f"w{i}x{k}" for k in range(16)) for i in range(4)]
    models = ScriptedModels(steps)
    config = LookaheadConfig(depth=2, adaptive_depth=True, max_step_tokens=32)
    result = SyncEngine(config, models, FastPathVerifier(ScriptedJudge())).answer("q")
    first, second, third = result.round_log[:3]
    assert (first.depth, first.branches, first.kind) == (0, 1, "ar")
    assert (second.depth, second.branches, second.kind) == (0, 1, "ar")
    assert (third.depth, third.branches, third.kind) == (0, 1, "probe")
    assert (third.target_tokens, third.target_tokens_all) == (16, 32)  # the 16-token step once more
    assert result.text == DELIM.join(steps)


@pytest.mark.parametrize("engine_class", [SyncEngine, AsyncEngine])
def test_while_ar_wins_the_engine_writes_several_steps_per_request(engine_class):
    """Branches cost linear time (B(n) = n): AR rounds write up to AR_STRETCH_STEPS steps in one request,
    cut back into the target's steps; a fork probe comes between stretches."""
    from lookahead_reasoning.runtime.adaptive.cost_model import CostModel
    from lookahead_reasoning.runtime.adaptive.depth import AdaptiveDepth

    steps = [" ".join(f"w{i}x{k}" for k in range(16)) for i in range(20)]
    costs = CostModel()
    costs.observe_target(1, 16 * 0.01, 16)  # a lone step: 0.01 s per token
    costs.observe_target(1, 16 * 0.01 * 1.25, 16, others=0.25)  # a quarter-step probe beside it: slope 1
    config = LookaheadConfig(depth=2, adaptive_depth=True, max_step_tokens=32, max_tokens=1000)
    policy = AdaptiveDepth(engine_class.mode, 2, 8, costs=costs)
    models = ScriptedModels(steps)
    result = engine_class(config, models, FastPathVerifier(ScriptedJudge()), policy=policy).answer("q")
    assert result.text == DELIM.join(steps) and result.stats.finish == "eos"
    assert [s.text for s in result.steps] == [s + DELIM for s in steps[:-1]] + [steps[-1]]
    # 8 steps, a whole stretch; sync: a fork probe after 13, beside a lone step just before it; async (W = 1
    # pipelines lone target steps): the drafted probe's turn came after 6, it comes right after the stretch
    assert result.round_log[0].kind == "stretch" and len(result.round_log[0].kept) == 8
    assert result.round_log[1].depth == (0 if engine_class is SyncEngine else 1)
    assert models.calls["generate"] >= 1
    assert result.stats.output_tokens == 16 * 20 and result.stats.rounds < 8


def test_an_ar_stretch_stops_at_the_deadline():
    """With at most 0.05 s left at 0.01 s per token, a stretch asks for at most 5 tokens, not 8 steps."""
    import time

    from lookahead_reasoning.errors import TimeLimitExceeded
    from lookahead_reasoning.runtime.adaptive.cost_model import CostModel
    from lookahead_reasoning.runtime.adaptive.depth import AdaptiveDepth

    steps = [" ".join(f"w{i}x{k}" for k in range(16)) for i in range(20)]
    costs = CostModel()
    costs.observe_target(1, 16 * 0.01, 16)
    costs.observe_target(1, 16 * 0.01 * 1.25, 16, others=0.25)
    config = LookaheadConfig(depth=2, adaptive_depth=True, max_step_tokens=32, max_tokens=1000)
    rounds = []
    engine = SyncEngine(config, ScriptedModels(steps), FastPathVerifier(ScriptedJudge()), on_round=rounds.append,
                        policy=AdaptiveDepth("sync", 2, 8, costs=costs), deadline=time.monotonic() + 0.05)
    try:
        engine.answer("q")
    except TimeLimitExceeded:
        pass
    assert rounds and 1 <= rounds[0].target_tokens <= 5
